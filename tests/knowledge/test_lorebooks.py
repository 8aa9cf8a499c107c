"""Lorebooks (seed 002 实体知识, D10; WP4 scenario 7): entries with keys that outlive re-indexing, lore by
knowledge, no removal while known, no change during a turn, and their pages."""

import asyncio
import html

import pytest
from asgiref.sync import sync_to_async
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from campaigns import lineage, playing, state
from knowledge import chunking, importer, lorebooks
from knowledge.models import LoreEntry, Passage, Source
from tests.campaigns.test_lineage import act, retry

HTMX = {"HTTP_HX_REQUEST": "true"}
# Imports run on their own thread with its own database connection, which sees only committed rows.
pytestmark = pytest.mark.django_db(transaction=True)

BOOK = """# Old Tales

A preface that belongs to no entry.

## The Flood {#flood}

The sea rose over the lower town in the year of the black moon, and the abbey bell rang for three days.

## Places

### Harbour

Ships from the south tie up at the harbour wall; the harbour master keeps a ledger of every hull.

### The Abbey {scope=everyone}

Everyone knows the abbey stands on the hill above the town.

## Secrets {#vault-secret}

Under the third flagstone of the abbey lies a silver key.
"""


def import_book(campaign, text=BOOK, name="tales.md", **flags):
    return importer.import_source(campaign, name, text.encode(), "reference", lorebook=True, **flags)


def know(campaign, owner, who, entry):
    event = state.correct(campaign, owner, {"type": "know", "subject": who, "object": entry,
                                            "data": {"kind": "lore", "how": "read"}})
    assert event.status == "applied", event.reason


def introduce(campaign, owner, *names):
    for name in names:
        assert state.correct(campaign, owner, {"type": "introduce", "subject": name, "object": "character"}
                             ).status == "applied"


def test_a_lorebooks_entries_are_its_headings_keyed_by_their_id_or_heading_path():
    parsed = lorebooks.parse(BOOK)
    assert [(e.entry, e.title, e.heading_path, e.scope) for e in parsed] == [
        ("flood", "The Flood", "The Flood", ""),
        ("places/harbour", "Harbour", "Places › Harbour", ""),
        ("places/the-abbey", "The Abbey", "Places › The Abbey", "everyone"),
        ("vault-secret", "Secrets", "Secrets", ""),
    ]
    assert parsed[0].text.startswith("The sea rose over the lower town")
    assert "preface" not in " ".join(e.text for e in parsed), "the text before the first entry is nobody's"


@pytest.mark.parametrize("text, reason", [
    ("Just a paragraph of lore.\n", "a lorebook needs a heading for each entry"),
    ("## Flood\n\nwater\n\n## Flood\n\nmore water\n", "both give the id 'flood'; give one of them its own id"),
    ("## Flood {#a colour=blue}\n\nwater\n", "has 'colour=blue' in its {…}"),
])
def test_a_file_that_cannot_be_a_lorebook_is_refused_with_what_to_change(text, reason):
    with pytest.raises(lorebooks.LoreRefused) as refused:
        lorebooks.parse(text)
    assert reason in str(refused.value)


def test_importing_a_lorebook_writes_its_entries_with_the_source_or_nothing(campaign):
    source = import_book(campaign)
    assert source.lorebook and source.lore_book == "old-tales"
    assert list(source.lore_entries.values_list("key", flat=True)) == [
        "old-tales:flood", "old-tales:places/harbour", "old-tales:places/the-abbey", "old-tales:vault-secret"]
    second = import_book(campaign, BOOK.replace("preface", "foreword"), name="again.md")
    assert second.lore_book == "old-tales-2", "a second book of the same title gets its own key"
    with pytest.raises(importer.ImportRefused) as refused:
        import_book(campaign, "## A\n\nx\n\n## A\n\ny\n", name="twice.md")
    assert "twice.md cannot be a lorebook" in str(refused.value) and "Nothing was imported" in str(refused.value)
    with pytest.raises(importer.ImportRefused) as plain:
        import_book(campaign, "The flood came.\n", name="notes.txt")
    assert "a lorebook is Markdown with a heading for each entry" in str(plain.value)
    assert Source.objects.count() == 2


def test_entry_keys_and_the_knowledge_naming_them_survive_rebuild_index_however_the_passages_are_recut(
        campaign, owner, monkeypatch):
    source = import_book(campaign)
    introduce(campaign, owner, "Mara")
    know(campaign, owner, "Mara", "old-tales:flood")
    keys = list(source.lore_entries.values_list("key", flat=True))
    passages = Passage.objects.filter(source=source).count()
    monkeypatch.setattr(chunking, "MIN_TOKENS", 5)  # headings now close passages: more, smaller ones
    importer.recut_source(source)
    assert Passage.objects.filter(source=source).count() > passages, "the passages were cut differently"
    assert list(source.lore_entries.values_list("key", flat=True)) == keys
    campaign.refresh_from_db()
    known = lorebooks.lore_for(campaign, lineage.path_of(campaign), "mara", "the flood of the black moon")
    assert [entry.key for entry in known.recalled] == ["old-tales:flood"]


def test_a_character_recalls_only_the_lore_she_knows_or_everyone_knows_and_her_brief_lists_titles(campaign, owner):
    import_book(campaign)
    introduce(campaign, owner, "Mara", "Brom")
    know(campaign, owner, "Mara", "old-tales:flood")
    campaign.refresh_from_db()
    path = lineage.path_of(campaign)
    mara = lorebooks.lore_for(campaign, path, "mara", "the silver key under the abbey flagstone")
    assert mara.titles == ["The Flood", "The Abbey"]
    recalled = [e.key for e in mara.recalled]
    assert recalled[0] == "old-tales:places/the-abbey"
    assert "old-tales:vault-secret" not in recalled, "never the secret she does not know, however well it matches"
    brom = lorebooks.lore_for(campaign, path, "brom", "the year the sea rose")
    assert brom.titles == ["The Abbey"] and brom.recalled == []
    Source.objects.update(enabled=False)
    assert lorebooks.lore_for(campaign, path, "mara", "the sea").titles == [], "a disabled book is nobody's"


def test_a_lorebook_still_known_on_any_line_cannot_be_removed_or_unmade_and_the_refusal_names_who(campaign, owner):
    source = import_book(campaign)
    introduce(campaign, owner, "Mara")
    act(campaign, "ask Mara about the flood", "She tells you of the black moon.")
    know(campaign, owner, "Mara", "old-tales:flood")
    retry(campaign, "She shrugs.")  # the line the head is on no longer holds the knowledge; the old line does
    campaign.refresh_from_db()
    head = lineage.path_of(campaign)
    assert state.state_at(head, campaign).get("knows:mara:lore:old-tales:flood") is None
    assert lorebooks.lore_for(campaign, head, "mara", "the flood").titles == ["The Abbey"], "not on this line"
    with pytest.raises(lorebooks.LoreRefused) as refused:
        lorebooks.delete_source(source)
    assert str(refused.value).startswith("“Old Tales” cannot be removed: characters' knowledge still names its "
                                         "entries (Mara knows old-tales:flood)")
    assert Source.objects.filter(pk=source.pk).exists() and LoreEntry.objects.count() == 4


def test_a_lorebook_nobody_knows_is_removed_with_its_entries(campaign, owner):
    source = import_book(campaign)
    introduce(campaign, owner, "Mara")
    know(campaign, owner, "Mara", "old-tales:flood")
    assert state.correct(campaign, owner, {"type": "unknow", "subject": "Mara", "object": "old-tales:flood",
                                           "data": {"kind": "lore"}}).status == "applied"
    lorebooks.delete_source(source)
    assert not Source.objects.exists() and not LoreEntry.objects.exists()


async def test_no_lorebook_changes_while_a_turn_is_played_and_a_turn_waits_for_a_change(campaign, owner):
    source = await sync_to_async(import_book)(campaign)
    async with playing.turn(campaign.pk):
        assert playing.playing(campaign.pk)
        with pytest.raises(playing.TurnInProgress) as refused:
            await sync_to_async(import_book)(campaign, BOOK, name="more.md")
        assert str(refused.value) == playing.REFUSED
        with pytest.raises(playing.TurnInProgress):
            await sync_to_async(lorebooks.delete_source)(source)
        plain = await sync_to_async(importer.import_source)(campaign, "notes.md", b"# Notes\n\nrain", "reference")
        assert not plain.lorebook, "a source that is not a lorebook may come and go"
    assert not playing.playing(campaign.pk)
    assert await Source.objects.filter(lorebook=True).acount() == 1

    started = asyncio.Event()
    with playing.lore_change(campaign.pk):
        turn = asyncio.ensure_future(_turn(campaign.pk, started))
        await asyncio.sleep(0.05)
        assert not started.is_set(), "the turn waits for the change to end"
    await asyncio.wait_for(turn, 2)
    assert started.is_set()


async def _turn(campaign_id, started):
    async with playing.turn(campaign_id):
        started.set()


# --- pages ---------------------------------------------------------------------------------------------------------


def test_the_source_page_lists_the_entries_with_their_keys_and_who_knows_each_and_its_fragment(client_of, campaign,
                                                                                                 owner):
    source = import_book(campaign)
    introduce(campaign, owner, "Mara", "Brom <b>the Bold</b>")
    know(campaign, owner, "Mara", "old-tales:flood")
    know(campaign, owner, "Brom <b>the Bold</b>", "old-tales:flood")
    page = client_of.get(source.get_absolute_url()).content.decode()
    assert "<html" in page and 'id="lore-entries"' in page
    assert '<tr data-lore="old-tales:flood">' in page and "Brom &lt;b&gt;the Bold&lt;/b&gt;, Mara" in page
    assert "<code>old-tales:places/the-abbey</code>" in page and "everyone" in page
    fragment = client_of.get(source.get_absolute_url(), **HTMX).content.decode()
    assert fragment.lstrip().startswith('<section class="card" id="lore-entries"') and "<html" not in fragment


def test_a_source_becomes_a_lorebook_on_its_settings_form_and_cannot_stop_being_one_while_known(client_of, campaign,
                                                                                               owner):
    source = importer.import_source(campaign, "tales.md", BOOK.encode(), "reference")
    url = reverse("knowledge_source_update", args=[campaign.pk, source.pk])
    made = client_of.post(url, {"classification": "reference", "enabled": "on", "lorebook": "on",
                                "lore_scope": "everyone"}, **HTMX)
    assert made.status_code == 200 and "Saved." in made.content.decode()
    source.refresh_from_db()
    assert source.lorebook and source.lore_scope == "everyone" and source.lore_entries.count() == 4
    introduce(campaign, owner, "Mara")
    know(campaign, owner, "Mara", "old-tales:vault-secret")
    refused = client_of.post(url, {"classification": "reference", "enabled": "on"}, **HTMX)
    assert refused.status_code == 400
    assert "“Old Tales” cannot be unmade: characters' knowledge still names its entries (Mara knows " \
           "old-tales:vault-secret)" in html.unescape(refused.content.decode())
    source.refresh_from_db()
    assert source.lorebook and source.lore_entries.count() == 4
    page = client_of.post(url, {"classification": "reference", "lorebook": "on"})
    assert page.status_code == 400 and "cannot be disabled" in page.content.decode()


def test_deleting_a_known_lorebook_is_refused_in_words_on_the_page(client_of, campaign, owner):
    source = import_book(campaign)
    introduce(campaign, owner, "Mara")
    know(campaign, owner, "Mara", "old-tales:flood")
    url = reverse("knowledge_source_delete", args=[campaign.pk, source.pk])
    fragment = client_of.post(url, **HTMX)
    assert fragment.status_code == 409
    text = html.unescape(fragment.content.decode())
    assert text.lstrip().startswith('<section class="card" id="source-removal"')
    assert "cannot be removed: characters' knowledge still names its entries (Mara knows old-tales:flood)" in text
    assert client_of.post(url).status_code == 409 and Source.objects.filter(pk=source.pk).exists()


def test_uploading_a_lorebook_on_the_knowledge_page(client_of, campaign):
    files = [SimpleUploadedFile("tales.md", BOOK.encode())]
    response = client_of.post(reverse("knowledge_upload", args=[campaign.pk]),
                              {"classification": "reference", "files": files, "lorebook": "on",
                               "lore_scope": "listed"})
    assert response.status_code == 200
    assert "It is a lorebook of 4 entries, keys “old-tales:…”." in response.content.decode()
    assert "lorebook <code>old-tales</code>" in client_of.get(reverse("knowledge", args=[campaign.pk])).content.decode()


def test_the_world_files_lore_is_listed_on_the_knowledge_page_with_who_knows_it(client_of, owner):
    from campaigns import worldfile
    from tests.campaigns.test_lore import lore_keep

    keep, _ = worldfile.create_campaign(owner, lore_keep())
    page = client_of.get(reverse("knowledge", args=[keep.pk])).content.decode()
    assert 'id="world-lore"' in page
    assert '<tr data-lore="world:keep-history"><td><code>world:keep-history</code></td><td>The founding of the ' \
           'Keep</td><td>Mara</td></tr>' in page
    assert '<tr data-lore="world:tides"><td><code>world:tides</code></td><td>Tides</td><td>everyone</td></tr>' in page


def test_wrong_methods_and_another_persons_lorebook(client, client_of, campaign, outsider):
    source = import_book(campaign)
    assert client_of.post(source.get_absolute_url()).status_code == 405
    assert client_of.get(reverse("knowledge_source_delete", args=[campaign.pk, source.pk])).status_code == 405
    client.force_login(outsider)
    assert client.get(source.get_absolute_url()).status_code == 404
    assert client.get(source.get_absolute_url(), **HTMX).status_code == 404
    assert client.post(reverse("knowledge_source_delete", args=[campaign.pk, source.pk])).status_code == 404
    assert Source.objects.filter(pk=source.pk).exists()


def test_a_bundle_carries_a_lorebook_and_its_entries_come_back_with_their_keys(campaign, owner):
    import json

    from storyteller import bundle

    import_book(campaign)
    exported = bundle.export_campaign(campaign)
    copy = bundle.import_bundle(owner, json.dumps(exported).encode())
    source = Source.objects.get(campaign=copy)
    assert (source.lorebook, source.lore_book) == (True, "old-tales")
    assert list(source.lore_entries.values_list("key", flat=True)) == list(
        LoreEntry.objects.filter(campaign=campaign).values_list("key", flat=True))
    row = exported["sections"]["knowledge"]["sources"][0]
    row["lore_book"] = "world"
    exported["checksum"] = bundle.checksum(exported["sections"])
    with pytest.raises(bundle.BundleRefused) as refused:
        bundle.import_bundle(owner, json.dumps(exported).encode())
    assert "sources row 1 (lore_book): 'world' is not a lorebook's key" in str(refused.value)
