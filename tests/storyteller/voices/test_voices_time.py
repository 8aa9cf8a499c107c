"""A game master's turn on the story clock and with world rules (issue 15 with story time, issue 13).

Each round is timed (what the game master said, or round_seconds,
lengthened to its journeys) and the turn's clock moves by their sum in the
turn's one commit; the dice the game master calls for are rolled at the
commit, seeded by the player's node, so a retry rolls the same; a brief
holds the time, the character's own variables (never another's private
ones) and the triggers announced to it, never a secret trigger.
"""

import json

import pytest
from asgiref.sync import sync_to_async

from campaigns import lineage, worldfile
from campaigns.models import Campaign, Node, Round, StateRecord
from campaigns.state import state_at
from campaigns.state.time import calendar, rulebook
from tests.storyteller.voices.test_played import actor, gm, play, says, scene_document
from tests.conftest import as_author

pytestmark = pytest.mark.django_db(transaction=True)

START = calendar.parse_instant("2031-03-14T08:00", now_ms=0, tz="UTC")
LOCKPICK = {"key": "lockpick", "name": "Pick a lock", "use_text": "a lock in the way", "definition": {
    "dice": "2d6", "bands": [{"label": "fail", "outcome": "the lock holds", "min": 2, "max": 6},
                             {"label": "partial", "outcome": "it gives, slowly", "min": 7, "max": 9},
                             {"label": "success", "outcome": "it clicks open", "min": 10, "max": 12}]}}


def timed_document():
    document = scene_document()
    document["starting_time"] = "2031-03-14T08:00"
    document["clock"] = {"time_zone": "UTC", "round_seconds": 30}
    document["dice"] = [LOCKPICK]
    document["variables"] = [
        {"name": "plan", "type": "text", "applies_to": ["character"], "visibility": "private", "default": "",
         "values": {"Aldric": "CANARY-ALDRIC-VAR steal the iron key", "Mara": "MARA-VAR keep the key hidden"}},
        {"name": "apron", "type": "text", "applies_to": ["character"], "visibility": "public", "default": "",
         "values": {"Mara": "flour-dusted"}}]
    document["triggers"] = [
        {"id": "flood", "when": {"type": "time", "after": "2031-03-20T08:00"},
         "beat": "CANARY-TRIGGER the river floods the cellar"},
        {"id": "bell", "when": {"type": "time", "after": "2031-03-14T20:00"}, "beat": "The bell tolls eight.",
         "announce": {"audience": ["Mara"], "text": "The chapel bell rings at eight tonight",
                      "at": "2031-03-14T20:00"}}]
    return document


@sync_to_async
def timed_game(owner):
    campaign, findings = worldfile.create_campaign(owner, worldfile.read(json.dumps(timed_document()).encode()),
                                                   game_master=True)
    assert [f for f in findings if f.severity == "error"] == []
    return campaign


@sync_to_async
def rounds_of(node_id):
    return list(Round.objects.filter(node_id=node_id).order_by("number").values(
        "number", "started_ms", "elapsed_seconds", "briefs"))


@sync_to_async
def clock_at_head(campaign):
    campaign = Campaign.objects.get(pk=campaign.pk)
    return rulebook.clock_of(state_at(lineage.path_of(campaign), campaign)).at


async def test_each_round_is_timed_lengthened_to_its_journeys_and_the_turn_moves_the_clock_by_their_sum(
        owner, narrator_server):
    campaign = await timed_game(owner)
    await sync_to_async(as_author)(campaign)
    narrator_server.script_gm(
        {**gm(narrate=False), "resolve_round": {"actors": [], "elapsed_seconds": 120}},
        {**gm(actors=[actor("Mara", "Hall")]), "resolve_round": {"actors": [actor("Mara", "Hall")],
                                                                   "elapsed_seconds": 5}})
    result, _ = await play(campaign)
    first, second = await rounds_of(result.node_id)
    assert (first["started_ms"], first["elapsed_seconds"]) == (START, 120)
    assert (second["started_ms"], second["elapsed_seconds"]) == (START + 120_000, 10), "lengthened to the journey"
    assert await clock_at_head(campaign) == START + 130_000

    @sync_to_async
    def play_page():
        from django.test import Client
        from django.urls import reverse

        client = Client()
        client.force_login(owner)
        return client.get(reverse("play", args=[campaign.pk])).content.decode()

    html = await play_page()
    assert 'data-round-head="1">Round 1 <span class="muted" data-round-time>at 08:00</span>' in html
    assert 'data-round-head="2">Round 2 <span class="muted" data-round-time>at 08:02</span>' in html


async def test_the_dice_the_game_master_calls_for_are_rolled_at_the_commit_and_a_retry_rolls_the_same(
        owner, narrator_server):
    campaign = await timed_game(owner)
    roll = {"check": "lockpick", "who": "Edrin", "reason": "the back door"}
    narrator_server.script_gm({**gm(), "rolls": [roll]}, {**gm(), "rolls": [roll]})
    first, _ = await play(campaign, "I pick the lock of the back door")

    @sync_to_async
    def rolled(node_id):
        node = Node.objects.get(pk=node_id)
        return list(StateRecord.objects.filter(campaign_id=node.campaign_id, kind="roll", branch_id=node.branch_id,
                                               depth=node.depth).values_list("value", "data"))

    [(value, data)] = await rolled(first.node_id)
    assert data["reason"] == "the back door" and data["who"] == "protagonist"
    again, _ = await play(campaign, retry=True)
    assert again.node_id != first.node_id
    [(value_again, data_again)] = await rolled(again.node_id)
    assert (value_again, data_again["dice"]) == (value, data["dice"]), "a retry rolls the same dice"


async def test_a_brief_holds_the_time_its_own_variables_and_what_is_announced_to_it_never_a_secret(
        owner, narrator_server):
    campaign = await timed_game(owner)
    narrator_server.script_gm(gm([("Mara", "she answers"), ("Aldric", "he listens")]))
    narrator_server.script_characters(says("Yes."), says("No."))
    result, _ = await play(campaign)
    [one] = await rounds_of(result.node_id)
    mara, aldric = one["briefs"]["mara"]["text"], one["briefs"]["aldric"]["text"]
    assert "Now: Friday 14 March 2031, 08:00" in mara
    assert "MARA-VAR keep the key hidden" in mara and "CANARY-ALDRIC-VAR" not in mara
    assert "CANARY-ALDRIC-VAR steal the iron key" in aldric and "MARA-VAR" not in aldric
    assert "flour-dusted" in aldric, "the public variables of those present"
    assert "The chapel bell rings at eight tonight" in mara and "chapel bell" not in aldric, "its audience only"
    for text in (mara, aldric):
        assert "CANARY-TRIGGER" not in text and "river floods" not in text
