"""The minds panel and "What does Mara remember now?": see and correct minds in the browser (issue 14)."""

import json

import pytest
from django.urls import reverse

from campaigns import worldfile
from campaigns.models import StateRecord
from memory.models import RecallItem
from storyteller import scripting
from tests.campaigns.test_minds import KITCHEN
from tests.conftest import make_campaign
from tests.storyteller.test_whereabouts import HOUSE, does, move
from tests.conftest import as_author

HTMX = {"HTTP_HX_REQUEST": "true"}


def ev(type, subject="", object="", value="", **extra):
    return {"type": type, "subject": subject, "object": object, "value": value, **extra}


SCENE = [
    ev("event", object="hid-key", value="Mara hid the iron key in the teapot.",
       data={"importance": 3, "tags": ["secret", "key"], "participants": ["Mara"], "location": "Kitchen",
             "items": ["iron key", "teapot"]}),
    ev("perception", "Mara", "hid-key", "I hid the key in the teapot.", data={"accuracy": "accurate"}),
    ev("perception", "Edrin", "hid-key", "Someone hid something in the kitchen.",
       data={"mode": "heard", "accuracy": "partial", "gist": "A noise from the kitchen."}),
]


def played(owner, path, *turns):
    """Return a campaign from the world file at ``path`` after ``turns``, in the author's view: the minds panel's
    and the recall page's tools, every character's beliefs beside the truth, are the author's."""
    campaign, _ = worldfile.create_campaign(owner, worldfile.read(path.read_bytes()))
    as_author(campaign)
    lines = [json.dumps({"action": {"mode": "do", "text": f"turn {n}"}, "reply": f"Turn {n}.", "events": events})
             for n, events in enumerate(turns, 1)]
    results = scripting.append(campaign, scripting.read("\n".join(lines)))
    assert all(r["status"] == "applied" for r in results), results
    campaign.refresh_from_db()
    return campaign


@pytest.fixture
def sally_anne(owner):
    return played(owner, HOUSE, [move("Sally", "Hall")], [does("Anne", ("take", "marble"), ("put", "marble", "box"))])


def test_the_panel_marks_beliefs_that_differ_from_the_truth(client_of, sally_anne):
    page = client_of.get(reverse("minds_panel", args=[sally_anne.pk]), **HTMX).content.decode()
    assert page.startswith('<aside id="minds-panel"')
    sally = page.split('data-character="sally"')[1].split("</details>")[0]
    assert '<li data-item="marble" class="secret" data-wrong="true"><strong>marble</strong>: believes in the basket' \
        in sally and "truly in the box" in sally
    anne = page.split('data-character="anne"')[1].split("</details>")[0]
    assert "<strong>marble</strong>: believes in the box</li>" in anne
    assert reverse("remember", args=[sally_anne.pk, "sally"]) in page


def test_the_panel_is_a_page_without_htmx_and_refuses_the_wrong_method_and_other_people(client_of, sally_anne,
                                                                                        outsider, client):
    url = reverse("minds_panel", args=[sally_anne.pk])
    page = client_of.get(url).content.decode()
    assert "<h1>" in page and 'id="minds-panel"' in page
    assert client_of.post(url).status_code == 405
    client.force_login(outsider)
    assert client.get(url, **HTMX).status_code == 404
    assert client.post(reverse("minds_correct", args=[sally_anne.pk]), {"type": "event", "value": "x"}).status_code \
        == 404


def test_a_person_records_and_corrects_perceptions_through_the_panel(client_of, owner):
    campaign = played(owner, KITCHEN, SCENE)
    url = reverse("minds_correct", args=[campaign.pk])
    page = client_of.post(url, {"type": "perception", "subject": "Aldric", "object": "hid-key",
                                "value": "Mara hid a knife.", "mode": "told", "accuracy": "wrong"}, **HTMX)
    assert "Corrected." in page.content.decode()
    record = StateRecord.objects.get(slot="perception:hid-key:aldric")
    assert record.event.source == "correction" and record.event.author == owner
    assert RecallItem.objects.filter(slot="perception:hid-key:aldric").exists(), "the index follows at once"
    refused = client_of.post(url, {"type": "perception", "subject": "Aldric", "object": "hid-key",
                                   "value": "I saw her.", "mode": "witnessed"}, **HTMX).content.decode()
    assert "Nothing was changed: Aldric already has a perception" in refused
    sealed = client_of.post(url, {"type": "event", "object": "hid-key", "value": "Mara hid a knife."},
                            **HTMX).content.decode()
    assert "Nothing was changed: events are sealed" in sealed
    assert client_of.get(url).status_code == 405


def test_a_person_retracts_an_erroneous_event_and_it_is_no_longer_recalled(client_of, owner):
    campaign = played(owner, KITCHEN, SCENE)
    client_of.post(reverse("minds_correct", args=[campaign.pk]), {"type": "retract", "object": "event:hid-key"},
                   **HTMX)
    [retraction] = StateRecord.objects.filter(slot="event:hid-key", retracted=True)
    assert retraction.event.source == "correction"
    assert RecallItem.objects.get(slot="event:hid-key", depth=retraction.depth).retracted


def test_a_list_field_is_typed_as_names_with_commas(client_of, owner):
    campaign = played(owner, KITCHEN, [])
    client_of.post(reverse("minds_correct", args=[campaign.pk]),
                   {"type": "event", "value": "Mara and Aldric argued.", "participants": "Mara, Aldric",
                    "importance": "2"}, **HTMX)
    assert StateRecord.objects.get(kind="event").data["participants"] == ["mara", "aldric"]


def test_rebuilding_the_recall_index_changes_nothing_remembered(client_of, owner):
    campaign = played(owner, KITCHEN, SCENE)
    before = sorted(RecallItem.objects.filter(campaign=campaign).values_list("slot", "owner", "text"))
    page = client_of.post(reverse("minds_rebuild", args=[campaign.pk]), {"vectors": "on"}, **HTMX).content.decode()
    assert "rebuilt from the records: 3 rows" in page
    assert sorted(RecallItem.objects.filter(campaign=campaign).values_list("slot", "owner", "text")) == before


@pytest.mark.django_db(transaction=True)
def test_what_two_characters_remember_of_the_same_moment_differs(client_of, owner):
    campaign = played(owner, KITCHEN, SCENE)
    mara = client_of.get(reverse("remember", args=[campaign.pk, "mara"]), {"q": "teapot"}).content.decode()
    edrin = client_of.get(reverse("remember", args=[campaign.pk, "Edrin"]), {"q": "teapot"}).content.decode()
    aldric = client_of.get(reverse("remember", args=[campaign.pk, "aldric"]), {"q": "teapot"}).content.decode()
    assert "What does Mara remember now?" in mara and "I hid the key in the teapot." in mara
    assert "Someone hid something in the kitchen." not in mara
    assert "Someone hid something in the kitchen." in edrin and "I hid the key" not in edrin
    assert 'id="nothing-remembered"' in aldric
    assert '<table class="grid small" id="recall-scores">' in mara and 'data-slot="perception:hid-key:mara"' in mara
    assert "fading by story time" in mara, "a world file starts the story clock"
    assert "accuracy (for checking only; never given to Mara)" in mara


@pytest.mark.django_db(transaction=True)
def test_the_page_shows_her_beliefs_about_where_things_are_beside_the_truth(client_of, owner):
    campaign = played(owner, HOUSE, [move("Sally", "Hall")], [does("Anne", ("take", "marble"), ("put", "marble", "box"))],
                      [move("Sally", "Room")])
    page = client_of.get(reverse("remember", args=[campaign.pk, "sally"])).content.decode()
    assert '<tr data-item="marble"><td>marble</td><td>in the box</td><td>in the box</td></tr>' in page
    anne = client_of.get(reverse("remember", args=[campaign.pk, "anne"])).content.decode()
    assert 'data-about="sally"' in anne


@pytest.mark.django_db(transaction=True)
def test_the_page_fragment_the_other_user_and_no_such_character(client_of, owner, outsider, client):
    campaign = played(owner, KITCHEN, SCENE)
    url = reverse("remember", args=[campaign.pk, "mara"])
    fragment = client_of.get(url, {"q": "teapot"}, **HTMX).content.decode()
    assert fragment.lstrip().startswith('<section id="remember-results"')
    assert client_of.get(reverse("remember", args=[campaign.pk, "teapot"])).status_code == 404
    assert client_of.get(reverse("remember", args=[campaign.pk, "nobody"])).status_code == 404
    assert client_of.post(url).status_code == 405
    client.force_login(outsider)
    assert client.get(url).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_model_written_wording_is_escaped_on_the_page(client_of, owner):
    campaign = played(owner, KITCHEN, [*SCENE[:1], ev("perception", "Mara", "hid-key",
                                                      "<script>alert('teapot')</script>")])
    page = client_of.get(reverse("remember", args=[campaign.pk, "mara"]), {"q": "teapot"}).content.decode()
    assert "<script>alert" not in page and "&lt;script&gt;alert" in page


@pytest.mark.django_db(transaction=True)
def test_a_configured_reranker_is_used_and_its_failure_falls_back_saying_why(client_of, owner, fake_ollama):
    campaign = played(owner, KITCHEN, SCENE)
    campaign.reranker_url = fake_ollama.url
    campaign.save()
    url = reverse("remember", args=[campaign.pk, "mara"])
    page = client_of.get(url, {"q": "teapot"}).content.decode()
    assert "rerank: used" in page
    assert fake_ollama.bodies("/rerank")[0]["query"] == "teapot"
    fake_ollama.fail_request("/rerank", 500, "model not loaded")
    page = client_of.get(url, {"q": "teapot"}).content.decode()
    assert "rerank: the reranker failed (" in page and "answered HTTP 500" in page and "fused scores only" in page
    assert "I hid the key in the teapot." in page


def test_a_campaign_without_a_world_has_no_beliefs_yet(client_of, owner):
    campaign = as_author(make_campaign(owner))
    page = client_of.get(reverse("minds_panel", args=[campaign.pk]), **HTMX).content.decode()
    assert "Nobody is placed anywhere yet" in page


def test_in_the_players_view_the_panel_and_the_page_hold_the_players_own_beliefs_only(client_of, sally_anne):
    sally_anne.author_view = False
    sally_anne.save()
    page = client_of.get(reverse("minds_panel", args=[sally_anne.pk]), **HTMX).content.decode()
    assert "What you believe" in page and "truly" not in page and "Record or correct" not in page
    assert client_of.get(reverse("remember", args=[sally_anne.pk, "sally"])).status_code == 403
    own = client_of.get(reverse("remember", args=[sally_anne.pk, "protagonist"])).content.decode()
    assert "the truth" not in own and "recall-scores" not in own and "accuracy" not in own


def _edit(client, campaign, **changes):
    data = {"title": campaign.title, "genre": "mystery", "protagonist": campaign.protagonist,
            "point_of_view": "second", "prose_length": "medium", "dialogue_density": "medium",
            "descriptive_richness": "medium", "violence_level": "low", "context_token_budget": 4096,
            "max_output_tokens": 200, "temperature": 0.8, "memory_flaky": "on", "memory_verify": "on",
            "canon-TOTAL_FORMS": "0", "canon-INITIAL_FORMS": "0", **changes}
    return client.post(reverse("campaign_edit", args=[campaign.pk]), data)


def test_the_campaign_form_sets_what_characters_remember_and_refuses_what_cannot_be(client_of, owner):
    from campaigns.models import Campaign

    campaign = played(owner, KITCHEN, [])
    assert _edit(client_of, campaign, memory_recall=3, memory_diversity=0.5, memory_associate=0,
                 reranker_url="http://127.0.0.1:8012").status_code == 302
    saved = Campaign.objects.get(pk=campaign.pk)
    assert (saved.memory_recall, saved.memory_diversity, saved.memory_associate, saved.reranker_url) == (
        3, 0.5, 0, "http://127.0.0.1:8012")
    assert saved.memory_flaky and saved.memory_verify and saved.memory_over_retrieve == 4
    page = _edit(client_of, campaign, memory_recall=61, memory_diversity=1.5).content.decode()
    assert "Ensure this value is less than or equal to 60." in page and "less than or equal to 1.0" in page
    assert Campaign.objects.get(pk=campaign.pk).memory_recall == 3


def test_a_correction_from_the_page_returns_to_it_and_a_strange_return_address_is_ignored(client_of, owner):
    campaign = played(owner, KITCHEN, SCENE)
    url = reverse("minds_correct", args=[campaign.pk])
    response = client_of.post(url, {"type": "perception_edit", "subject": "mara", "object": "hid-key",
                                    "value": "I tucked the key away.", "who": "mara"})
    assert response.status_code == 302
    assert response["Location"] == reverse("remember", args=[campaign.pk, "mara"]) + "?corrected=1"
    odd = client_of.post(url, {"type": "belief", "subject": "mara", "value": "All is well.", "who": "../admin/"})
    assert odd.status_code == 200 and "Corrected." in odd.content.decode()


def test_the_admin_lists_events_perceptions_beliefs_and_the_minds_runs(admin_client, owner):
    played(owner, KITCHEN, [*SCENE, ev("belief", "Edrin", "secret", "Mara hides things.",
                                       data={"supports": ["hid-key"]})])
    events = admin_client.get(reverse("admin:campaigns_eventrecord_changelist"), {"q": "teapot"}).content.decode()
    assert "Mara hid the iron key in the teapot." in events and "perception:" not in events
    perceptions = admin_client.get(reverse("admin:campaigns_perceptionrecord_changelist")).content.decode()
    assert "Someone hid something in the kitchen." in perceptions and "partial" in perceptions
    assert "accuracy (checking only)" in perceptions.lower()
    beliefs = admin_client.get(reverse("admin:campaigns_beliefrecord_changelist")).content.decode()
    assert "Mara hides things." in beliefs and "perception:hid-key:protagonist" in beliefs
    for name in ("memory_mindsrun", "memory_recallitem"):
        assert admin_client.get(reverse(f"admin:{name}_changelist")).status_code == 200
