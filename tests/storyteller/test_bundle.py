"""Campaign export and import: a faithful round trip, and nothing half-imported from a bad bundle (seed 003 §51-3)."""

import json

import pytest
from django.utils import timezone

from campaigns import lineage, state, story
from campaigns.models import Branch, Campaign, CanonRule, ContextSnapshot, Node, RecorderRun, SavePoint, StateEvent
from knowledge.importer import embed_source
from knowledge.models import Passage, Source
from memory import bank, checkpoints
from memory.models import Checkpoint, Memory, MemoryVector
from storyteller import bundle, context
from storyteller.context import Action
from storyteller.steps import compaction
from tests.campaigns.test_lineage import act
from tests.imports import finished_import
from tests.knowledge.conftest import import_fixture


@pytest.fixture
def rich(campaign, narrator_server):
    """A campaign with branches, a save point, canon, knowledge in every class, and knowledge in its prompts."""
    canon = import_fixture(campaign, "canon.md", always_include=True)
    reference = import_fixture(campaign, "reference.md", hidden=True, notes="ships only")
    inspiration = import_fixture(campaign, "inspiration.md")
    inspiration.enabled = False
    inspiration.save()
    for source in (canon, reference, inspiration):
        embed_source(source)
    act(campaign, "open the gate", "The gate creaks open.")
    node = Node.objects.get(campaign=campaign, depth=2)
    events = state.apply_events(node, [{"type": "introduce", "subject": "Mara", "object": "character"},
                                       {"type": "add_fact", "value": "The eastern bridge is down."},
                                       {"type": "move", "subject": "Mara", "object": "Nowhere Land"}],
                                source="recorder", model="fake")
    assert [event.status for event in events][:2] == ["applied", "applied"]
    story.create_save_point(campaign, "at the gate")
    campaign.refresh_from_db()
    kept = bank.add_by_hand(campaign, "Mara hid the amber sundial in the cracked teapot.")
    bank.set_flags(kept, pinned=True)
    bank.store_vectors("nomic-embed-text", [(kept.pk, [0.5] * 64)])
    bank.record_use([kept.pk])
    ctx = context.build(campaign, lineage.path_of(campaign), Action(mode="do", text="warp drives between stars"))
    act(campaign, "warp drives between stars", "No such ships exist here.")
    ContextSnapshot.objects.filter(node__depth=4).update(report=ctx.report)
    campaign.refresh_from_db()
    story.undo(campaign)
    act(campaign, "walk to the ferry", "The ferry rope creaks.")
    return campaign


def normalised(data):
    sections = json.loads(json.dumps(data["sections"]))
    sections["campaigns"]["campaign"]["title"] = bundle.IMPORTED.sub("", sections["campaigns"]["campaign"]["title"])
    for source in sections["knowledge"]["sources"]:
        source.pop("id")
    for snapshot in sections["campaigns"]["snapshots"]:
        knowledge = snapshot["report"].get("knowledge")
        if knowledge:  # the only ids a report carries: renumbered on import, checked separately
            snapshot["report"] = json.loads(json.dumps(snapshot["report"]).replace('"source": ', '"s": '))
            knowledge = snapshot["report"]["knowledge"]
            knowledge.pop("sources")
            for entry in [*knowledge["used"], *knowledge["standing"], *(c for s in snapshot["report"]["sections"]
                                                                          for c in s["components"])]:
                entry.pop("s", None)
                if entry.get("type") == "knowledge_passage":
                    entry.pop("id", None)
            for item in [*knowledge["dropped"], *snapshot["report"]["dropped"]]:
                item.pop("s", None)
                item.pop("passage", None)
    return sections


def test_export_then_import_restores_tree_state_canon_and_sources(rich, owner, narrator_server):
    exported = bundle.export_campaign(rich)
    data = bundle.dumps(rich)
    original_passages = list(Passage.objects.filter(campaign=rich).order_by("source_id", "index")
                             .values_list("heading_path", "text", "tokens", "content_hash"))
    Campaign.objects.filter(pk=rich.pk).delete()  # as on a fresh install
    narrator_server.requests.clear()

    restored = bundle.import_bundle(owner, data)

    assert restored.title == f"The Silver Key (imported {timezone.localdate():%Y-%m-%d})"
    again = bundle.export_campaign(restored)
    assert normalised(again) == normalised(exported)
    assert lineage.path_of(restored).nodes().count() == 5
    assert Branch.objects.filter(campaign=restored).count() == 2
    assert SavePoint.objects.get(campaign=restored).name == "at the gate"
    gate = Node.objects.get(campaign=restored, depth=2)
    facts = state.state_at(lineage.path_at(restored.pk, gate.branch_id, 2), restored)
    assert facts.find_fact("The eastern bridge is down.")
    assert set(StateEvent.objects.filter(campaign=restored).values_list("status", flat=True)) == {"applied", "rejected"}
    assert RecorderRun.objects.get(node=gate).status == "applied"
    memory = Memory.objects.get(campaign=restored)
    assert (memory.text, memory.pinned, memory.use_count, memory.depth) == (
        "Mara hid the amber sundial in the cracked teapot.", True, 1, 2)
    assert lineage.path_of(restored).contains(memory.branch_id, memory.depth)
    passages = list(Passage.objects.filter(campaign=restored).order_by("source_id", "index")
                    .values_list("heading_path", "text", "tokens", "content_hash"))
    assert passages == original_passages
    flags = {s.filename: (s.classification, s.enabled, s.hidden, s.always_include, s.notes)
             for s in Source.objects.filter(campaign=restored)}
    assert flags == {"canon.md": ("canon", True, False, True, ""), "reference.md": ("reference", True, True, False,
                                                                                     "ships only"),
                     "inspiration.md": ("inspiration", False, False, False, "")}


def test_a_typed_summary_moves_with_the_campaign_and_is_usable_there_and_a_broken_one_stays_behind(rich, owner):
    typed = compaction.write_by_hand(rich, "Edrin opened the gate; Mara hid the sundial in the teapot.")
    broken = checkpoints.write(lineage.path_of(rich), 1, "A summary of a story that was changed under it.",
                               context.prefix_hash(rich))
    Checkpoint.objects.filter(pk=broken.pk).update(source_hash="0" * 64)
    data = bundle.dumps(rich)
    Campaign.objects.filter(pk=rich.pk).delete()

    restored = bundle.import_bundle(owner, data)

    [carried] = Checkpoint.objects.filter(campaign=restored)
    assert (carried.text, carried.origin, carried.source_end) == (typed.text, "person", typed.source_end)
    assert checkpoints.eligible_checkpoint(lineage.path_of(restored), context.prefix_hash(restored)) == carried


def test_vectors_are_left_out_of_the_bundle_and_rebuilt_after_import(rich, owner, narrator_server):
    data = bundle.dumps(rich)
    assert b"embedding" not in data and b"search_document" not in data
    narrator_server.requests.clear()
    restored = bundle.import_bundle(owner, data)
    assert narrator_server.bodies("/api/embed"), "vectors are rebuilt from the model server"
    assert not Passage.objects.filter(campaign=restored, embedding__isnull=True).exists()
    memory = Memory.objects.get(campaign=restored)
    assert not MemoryVector.objects.filter(memory=memory).exists(), \
        "a memory's vector is not carried; the memory step re-embeds it"
    assert set(Source.objects.filter(campaign=restored).values_list("semantic_state", flat=True)) == {"ready"}


def test_restored_prompt_reports_point_at_the_restored_sources(rich, owner):
    restored = bundle.import_bundle(owner, bundle.dumps(rich, zipped=True))
    (snapshot,) = [s for s in ContextSnapshot.objects.filter(node__campaign=restored) if "knowledge" in s.report]
    reference = Source.objects.get(campaign=restored, filename="reference.md")
    assert reference.pk in snapshot.report["knowledge"]["sources"]
    (entry,) = [e for e in snapshot.report["knowledge"]["used"] if e["filename"] == "reference.md"]
    assert entry["source"] == reference.pk
    assert entry["id"] == reference.passages.get(index=entry["chunk"]).pk
    assert "fold space" in json.dumps(snapshot.report), "the text the prompt was given is kept"


def test_a_zipped_bundle_imports_like_a_plain_one(rich, owner):
    restored = bundle.import_bundle(owner, bundle.dumps(rich, zipped=True))
    assert restored.title == bundle.marked(rich.title) and restored.head_depth == rich.head_depth


def test_an_imported_campaign_is_marked_once_however_often_it_moves(rich, owner):
    again = bundle.import_bundle(owner, bundle.dumps(bundle.import_bundle(owner, bundle.dumps(rich))))
    assert again.title == f"{rich.title} (imported {timezone.localdate():%Y-%m-%d})"
    assert bundle.marked("x" * 200).endswith(")") and len(bundle.marked("x" * 200)) == 200


def counts():
    return (Campaign.objects.count(), Node.objects.count(), Source.objects.count(), Passage.objects.count())


def test_a_tampered_bundle_is_refused_and_nothing_is_written(rich, owner):
    data = bundle.export_campaign(rich)
    data["sections"]["campaigns"]["nodes"][1]["text"] = "The gate was never there."
    before = counts()
    with pytest.raises(bundle.BundleRefused, match="checksum does not match"):
        bundle.import_bundle(owner, json.dumps(data).encode())
    assert counts() == before


def test_an_inconsistent_bundle_with_a_valid_checksum_is_refused_whole(rich, owner):
    data = bundle.export_campaign(rich)
    data["sections"]["campaigns"]["snapshots"][0]["node"] = 999  # points nowhere
    data["checksum"] = bundle.checksum(data["sections"])
    before = counts()
    with pytest.raises(bundle.BundleRefused, match="row 1000 of the bundle's nodes, which does not exist"):
        bundle.import_bundle(owner, json.dumps(data).encode())
    assert counts() == before


def test_a_source_whose_text_does_not_match_its_hash_is_refused(rich, owner):
    data = bundle.export_campaign(rich)
    data["sections"]["knowledge"]["sources"][0]["text"] += "Dragons are real."
    data["checksum"] = bundle.checksum(data["sections"])
    before = counts()
    with pytest.raises(bundle.BundleRefused, match="does not match its SHA-256"):
        bundle.import_bundle(owner, json.dumps(data).encode())
    assert counts() == before


@pytest.mark.parametrize("data, message", [
    (b"\x00\x01garbage", "not valid JSON"),
    (b'{"format": "something-else"}', "not a Storyteller campaign bundle"),
    (b'{"format": "storyteller-campaign", "version": 99}', "version 99"),
    (b"PK\x03\x04broken", "zip is damaged"),
])
def test_malformed_bundles_are_refused_clearly(owner, data, message):
    with pytest.raises(bundle.BundleRefused, match=message):
        bundle.import_bundle(owner, data)
    assert Campaign.objects.count() == 0


@pytest.mark.django_db(transaction=True)  # the import thread's own connection sees only committed rows
def test_export_downloads_and_import_creates_a_new_campaign(client, owner, rich):
    client.force_login(owner)
    response = client.get(f"/campaigns/{rich.pk}/export/?zip=1")
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    assert 'filename="the-silver-key.storyteller.zip"' in response["Content-Disposition"]
    from django.core.files.uploadedfile import SimpleUploadedFile

    imported = client.post("/campaigns/import/", {"bundle": SimpleUploadedFile("b.zip", response.content)})
    assert imported.status_code == 302 and imported["Location"].startswith("/imports/")
    assert finished_import(client, imported["Location"]).startswith("/campaigns/")
    assert Campaign.objects.filter(owner=owner).count() == 2
    refused = client.post("/campaigns/import/", {"bundle": SimpleUploadedFile("b.json", b"{}")})
    assert refused.status_code == 400 and "not a Storyteller campaign bundle" in refused.content.decode()
    assert client.get("/campaigns/import/").status_code == 405


def test_the_campaign_list_offers_both_exports(client, owner, campaign):
    client.force_login(owner)
    page = client.get("/").content.decode()
    assert f'href="/campaigns/{campaign.pk}/export/" download data-action="export-json"' in page
    assert f'href="/campaigns/{campaign.pk}/export/?zip=1" download data-action="export-zip"' in page
    assert "Up to 64.0\xa0MB" in page


def test_another_persons_campaign_cannot_be_exported(client, outsider, campaign):
    client.force_login(outsider)
    assert client.get(f"/campaigns/{campaign.pk}/export/").status_code == 404


def test_a_superseded_initial_canon_rule_is_still_superseded_after_import(campaign, owner):
    rule = CanonRule.objects.create(campaign=campaign, text="The north gate is open.", scope="initial")
    act(campaign, "close the gate", "The gate slams shut.")
    node = Node.objects.get(campaign=campaign, depth=2)
    [event] = state.apply_events(node, [{"type": "add_fact", "value": "The north gate is closed."}], source="recorder")
    assert event.status == "applied"
    assert state.state_at(lineage.path_of(campaign), campaign).superseded(rule.pk)

    restored = bundle.import_bundle(owner, bundle.dumps(campaign))

    carried = CanonRule.objects.get(campaign=restored, text=rule.text)
    assert carried.pk != rule.pk
    assert state.state_at(lineage.path_of(restored), restored).superseded(carried.pk)


def test_a_version_1_bundle_still_imports_and_finds_its_superseded_rule_by_text(campaign, owner):
    CanonRule.objects.create(campaign=campaign, text="The north gate is open.", scope="initial")
    act(campaign, "close the gate", "The gate slams shut.")
    node = Node.objects.get(campaign=campaign, depth=2)
    state.apply_events(node, [{"type": "add_fact", "value": "The north gate is closed."}], source="recorder")
    data = bundle.export_campaign(campaign)
    data["version"] = 1
    for record in data["sections"]["campaigns"]["state_records"]:
        record.pop("canon_rule")
    data["checksum"] = bundle.checksum(data["sections"])

    restored = bundle.import_bundle(owner, json.dumps(data).encode())

    carried = CanonRule.objects.get(campaign=restored, text="The north gate is open.")
    assert state.state_at(lineage.path_of(restored), restored).superseded(carried.pk)
