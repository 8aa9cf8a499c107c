"""Characters' minds in what the narrator reads: the protagonist's false beliefs, the character view (issue 14)."""

import json

import pytest
from asgiref.sync import sync_to_async

from campaigns import lineage, worldfile
from campaigns.models import Node
from campaigns.state import PROTAGONIST, state_at
from campaigns.state.minds import whereabouts
from campaigns.state.world import world
from memory import checkpoints
from memory.models import RecallUse
from storyteller import scripting
from storyteller.context import Action, build, prefix_hash
from storyteller.llm.scripted import vector_for
from tests.campaigns.test_minds import KITCHEN
from tests.storyteller.test_recorder import play
from tests.storyteller.test_whereabouts import HOUSE, does, move
from tests.conftest import as_author


def house(owner, **fields):
    campaign, findings = worldfile.create_campaign(owner, worldfile.read(HOUSE.read_bytes()), **fields)
    assert not [f for f in findings if f.severity == "error"]
    return campaign


def script(campaign, *turns):
    lines = [json.dumps({"action": {"mode": "do", "text": f"turn {n}"}, "reply": f"Turn {n}.", "events": events})
             for n, events in enumerate(turns, 1)]
    results = scripting.append(campaign, scripting.read("\n".join(lines)))
    assert all(r["status"] == "applied" for r in results), results
    campaign.refresh_from_db()
    return campaign


def state_section(campaign, text="I look around."):
    ctx = build(campaign, lineage.path_of(campaign), Action(mode="do", text=text))
    return next(s for s in ctx.sections if s.key == "state")


def test_the_protagonists_false_belief_is_a_narrator_only_line_with_the_truth(owner):
    campaign = script(house(owner), [move("Edrin", "Room")], [move("Edrin", "Hall")],
                      [does("Anne", ("take", "marble"), ("put", "marble", "box"))])
    section = state_section(campaign)
    assert "- [narrator only] Edrin believes the marble is in the basket; it is in the box. [state]" in section.text
    [line] = [c for c in section.components if c["kind"] == "whereabouts"]
    assert line["narrator_only"] and line["included"]


def test_a_true_belief_says_nothing_and_an_unknown_one_says_so(owner):
    campaign = script(house(owner), [move("Edrin", "Room")])
    assert "believes" not in state_section(campaign).text
    campaign = script(campaign, [move("Edrin", "Hall")],
                      [does("Anne", ("take", "marble"), ("put", "marble", "box"), ("close", "box"))],
                      [move("Edrin", "Room")])
    assert ("- [narrator only] Edrin does not know where the marble is (it is not where Edrin last saw it); "
            "it is in the box. [state]") in state_section(campaign).text


def test_the_character_view_carries_where_the_character_believes_things_are(owner):
    campaign = script(house(owner), [move("Sally", "Hall")],
                      [does("Anne", ("take", "marble"), ("put", "marble", "box"))], [move("Sally", "Room")])
    path = lineage.path_of(campaign)
    minds = whereabouts.minds_at(path, campaign)
    view = world.character_view(state_at(path, campaign), "anne", minds)
    assert view["believes"]["marble"] == "box"
    assert view["believes_about"]["sally"]["marble"] == "box"
    assert world.character_view(state_at(path, campaign), PROTAGONIST)["believes"] == {}


# The events section (WP3 scenario 14): evoked, and folded out of the verbatim story.


HID = {"type": "event", "object": "hid-key", "value": "Mara hid the iron key in the teapot.",
       "data": {"importance": 3, "tags": ["secret"], "participants": ["Mara"], "location": "Kitchen",
                "items": ["iron key", "teapot"]}}
STEW = {"type": "event", "object": "stew", "value": "Mara stirred the stew on the black stove.",
        "data": {"importance": 1, "participants": ["Mara"], "location": "Kitchen"}}


def kitchen(owner):
    campaign, _ = worldfile.create_campaign(owner, worldfile.read(KITCHEN.read_bytes()))
    return campaign


def summarise_through(campaign, end):
    campaign.refresh_from_db()
    path = lineage.path_of(campaign)
    return checkpoints.write(path, end, "Summary: Edrin read in the pantry while Mara worked.", prefix_hash(campaign))


def events_section(campaign, text):
    ctx = build(campaign, lineage.path_of(campaign), Action(mode="do", text=text))
    return next((s for s in ctx.sections if s.key == "events"), None), ctx


def test_an_evoked_event_appears_only_once_its_turn_is_covered_by_the_summary(owner):
    campaign = script(kitchen(owner), [HID, STEW], [], [])
    asking = "Is anything inside the teapot?"
    section, ctx = events_section(campaign, asking)
    assert section is None and ctx.report["events"]["note"] == "no summary covers any turn yet"
    summarise_through(campaign, 2)
    section, ctx = events_section(campaign, asking)
    assert section is not None
    assert "- Mara hid the iron key in the teapot." in section.text
    assert "stew" not in section.text, "only what the words call up"
    keys = [s.key for s in ctx.sections]
    assert keys.index("events") < keys.index("state") < keys.index("player_input")
    assert ctx.report["events"]["used"][0]["slot"] == "event:hid-key"


def test_an_event_still_in_the_verbatim_story_is_never_repeated(owner):
    campaign = script(kitchen(owner), [], [HID], [])
    summarise_through(campaign, 2)  # turn 1 is folded; the hiding, at turn 2 (depth 4), is still verbatim
    section, ctx = events_section(campaign, "Did Mara go near the teapot?")
    assert section is None
    assert "Mara hid the iron key" in ctx.messages[-2]["content"] or any(
        "Turn 2." in m["content"] for m in ctx.messages), "turn 2 is still in the history"


def test_the_narrator_is_told_which_evoked_events_the_protagonist_does_not_know(owner):
    secret = {**HID, "narrator_only": True}
    campaign = script(kitchen(owner), [secret], [], [])
    summarise_through(campaign, 2)
    section, _ = events_section(campaign, "Where is the iron key?")
    assert "- [narrator only] Mara hid the iron key in the teapot." in section.text


# Played turns: the events query joins the turn's one embedding request, and what was given counts a recall.


def _embedded_kitchen(owner):
    from memory import recall_index

    campaign = script(kitchen(owner), [HID], [], [])
    summarise_through(campaign, 2)
    pending = list(recall_index.needing_vectors(campaign.pk, "nomic-embed-text").values_list("id", "text"))
    recall_index.store_vectors(campaign.pk, "nomic-embed-text", [(pk, vector_for(text)) for pk, text in pending])
    return campaign


@pytest.mark.django_db(transaction=True)
async def test_a_played_turn_embeds_the_events_query_with_the_others_and_counts_what_it_gave(owner,
                                                                                           narrator_server):
    campaign = await sync_to_async(_embedded_kitchen)(owner)
    narrator_server.script("The teapot is cold.")
    result = await play(campaign, "Is anything inside the teapot?")
    embeds = [body for body in narrator_server.bodies("/api/embed")
              if any(text.startswith("search_query:") for text in body["input"])]
    assert len(embeds) == 1, "one embedding request for every query the turn needs"
    assert embeds[0]["input"][-1] == "search_query: Is anything inside the teapot?"
    node = await Node.objects.select_related("snapshot").aget(pk=result.node_id)
    report = node.snapshot.report["events"]
    assert report["semantic"]["used"] and [entry["slot"] for entry in report["used"]] == ["event:hid-key"]
    [use] = [u async for u in RecallUse.objects.filter(campaign=campaign)]
    assert (use.owner, use.slot, use.branch_id, use.depth) == ("", "event:hid-key", node.branch_id, node.depth)


@pytest.mark.django_db(transaction=True)
async def test_the_inspector_shows_the_events_given_and_why(owner, narrator_server):
    from django.test import AsyncClient
    from django.urls import reverse

    campaign = await sync_to_async(_embedded_kitchen)(owner)
    await sync_to_async(as_author)(campaign)
    narrator_server.script("The teapot is cold.")
    result = await play(campaign, "Is anything inside the teapot?")
    client = AsyncClient()
    await client.aforce_login(owner)
    page = (await client.get(reverse("inspector", args=[campaign.pk, result.node_id]))).content.decode()
    assert 'id="section-events"' in page and 'id="events-used"' in page
    assert '<tr data-slot="event:hid-key">' in page and "meaning compared with nomic-embed-text" in page
