"""A scripted 30-turn story: a keyed entry fires on its key, sticks, cools down, and after an undo, a retry and a
switch of branch shows exactly the timers of the line it is on, read from the context snapshots."""

import pytest
from asgiref.sync import sync_to_async

from campaigns import story
from campaigns.models import Branch, Campaign, ContextSnapshot
from knowledge import importer, worldinfo
from storyteller import turns
from storyteller.context import Action

pytestmark = pytest.mark.django_db(transaction=True)

BOOK = {"entries": {
    "0": {"uid": 0, "key": ["bell"], "comment": "The bell", "content": "The abbey bell is cracked; it rings flat.",
          "sticky": 2, "cooldown": 3},
    "1": {"uid": 1, "key": ["fog"], "comment": "Fog", "content": "Fog rolls in from the marsh.",
          "probability": 50, "useProbability": True},
    "2": {"uid": 2, "constant": True, "comment": "The abbey", "content": "The abbey stands on a hill above a marsh."},
}}


def _book(campaign):
    importer.import_keyed(campaign, "abbey.json", worldinfo.read(BOOK, "Abbey"), "canon")


async def _turn(campaign, text, *, retry=False):
    result = await turns.play_turn(campaign.pk, Action(mode="do", text=text), _ignore, retry=retry)
    report = await ContextSnapshot.objects.filter(node_id=result.node_id).values_list("report", flat=True).aget()
    return report["lorebook"]


async def _ignore(text):
    return None


def _bell(lorebook):
    """Return how the bell entry stands in one turn's report: "key", "sticky", "cooling …" or None."""
    fired = next((entry for entry in lorebook["fired"] if entry["title"] == "The bell"), None)
    if fired is not None:
        return fired["how"] if fired["how"] != "sticky" else f"sticky since {fired['since']} until {fired['until']}"
    held = next((entry for entry in lorebook["held"] if entry["title"] == "The bell"), None)
    return held["why"] if held else None


async def test_keyed_timers_follow_the_line_through_undo_retry_and_a_branch_switch(campaign, narrator_server):
    await sync_to_async(_book)(campaign)
    seen = {}
    # Line A: turns 1-12, the bell named in turns 3, 7 and 9.
    for turn in range(1, 13):
        lorebook = await _turn(campaign, "I ring the bell." if turn in (3, 7, 9) else "I walk on.")
        assert lorebook["turn"] == turn
        seen[("A", turn)] = _bell(lorebook)
        assert any(entry["how"] == "constant" and entry["included"] for entry in lorebook["fired"])
    assert seen[("A", 3)] == "key"
    assert [seen[("A", t)] for t in (4, 5)] == ["sticky since 3 until 5"] * 2
    assert all("cooling down: it fired in turn 3 and may fire again from turn 9" == seen[("A", t)] for t in (6, 7, 8))
    assert seen[("A", 9)] == "key" and seen[("A", 11)] == "sticky since 9 until 11"
    assert seen[("A", 12)].startswith("cooling down: it fired in turn 9")
    line_a = (await Campaign.objects.aget(pk=campaign.pk)).head_branch_id

    # Undo four turns (back to after turn 8) and play another line: what fired in turn 9 on A never leaks here.
    for _ in range(4):
        await sync_to_async(story.undo)(campaign)
    lorebook = await _turn(campaign, "I sit in the cloister.")
    assert lorebook["turn"] == 9 and _bell(lorebook) is None and lorebook["timers"] == {}
    lorebook = await _turn(campaign, "The bell again?")
    assert (lorebook["turn"], _bell(lorebook)) == (10, "key") and lorebook["timers"]["abbey:0"] == 10
    for turn in (11, 12):
        assert _bell(await _turn(campaign, "I wait.")) == "sticky since 10 until 12"
    fogged = await _turn(campaign, "Fog, and the bell.")
    assert fogged["turn"] == 13 and _bell(fogged) == "cooling down: it fired in turn 10 and may fire again from turn 16"

    # A retry of turn 13 reads the same timers and rolls the same chance for the fog.
    again = await _turn(campaign, "", retry=True)
    assert again["turn"] == 13 and _bell(again) == _bell(fogged) and again["timers"] == fogged["timers"]
    assert again["seed"] == fogged["seed"]
    assert _fog(again) == _fog(fogged) and _fog(fogged)[1] is not None
    line_b = (await Campaign.objects.aget(pk=campaign.pk)).head_branch_id
    assert line_b != line_a

    # Switch back to line A (its tip: turn 12): turn 13 there counts from A's own firing in turn 9.
    await sync_to_async(story.switch_branch)(campaign, await Branch.objects.aget(pk=line_a))
    lorebook = await _turn(campaign, "Back at the gate.")
    assert lorebook["turn"] == 13
    assert _bell(lorebook) == "cooling down: it fired in turn 9 and may fire again from turn 15"
    assert lorebook["timers"] == {"abbey:0": 9}
    for turn in range(14, 25):
        lorebook = await _turn(campaign, "The bell!" if turn in (14, 15, 20, 21) else "On.")
        seen[("A", turn)] = _bell(lorebook)
    assert seen[("A", 14)].startswith("cooling down") and seen[("A", 15)] == "key"
    assert seen[("A", 16)] == "sticky since 15 until 17"
    assert seen[("A", 20)] == "cooling down: it fired in turn 15 and may fire again from turn 21"
    assert seen[("A", 21)] == "key" and seen[("A", 23)] == "sticky since 21 until 23"
    assert seen[("A", 24)].startswith("cooling down: it fired in turn 21")

    # Thirty turns played in all: 12 + 5 on line B + the retry + 12.
    played = await ContextSnapshot.objects.filter(node__campaign=campaign).acount()
    assert played == 30


def _fog(lorebook):
    """Return (fired, its roll) of the fog entry when its key was in view, else (None, None)."""
    for entry in lorebook["fired"]:
        if entry["title"] == "Fog":
            return True, entry.get("roll")
    for entry in lorebook["held"]:
        if entry["title"] == "Fog":
            return False, entry["why"]
    return None, None
