"""Off-stage rounds after a played turn (seed 002 离场行动; WP4 scenario 6), through the real fake model server.

The Lantern Keep at 08:00 with Edrin (the player) in the Hall, Mara and
Aldric in the Corridor, Tobin and Ilse at the Forge, and three engagements
of characters away from him: Mara meets Tobin at the Forge (08:10), Aldric
checks his snares in the Tower (08:20), Tobin opens the Tavern (08:30).
Time is skipped to 09:00; then a turn is played.
"""

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from campaigns import lineage, storytime, worldfile
from campaigns.models import Campaign, ContextSnapshot, OffstageRun, Round, StateEvent
from campaigns.state import state_at
from storyteller import turns
from storyteller.context import Action
from storyteller.steps import away
from tests.campaigns.test_story_time import BELL, rules_document
from tests.conftest import as_author

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HTTP_HX_REQUEST": "true"}
MARA = "Mara went to the Forge and paid Tobin what she owed."
ALDRIC = "Aldric climbed to the Tower and checked his snares."
TOBIN = "Tobin opened the Tavern for the evening trade."


def answer(account, *, activity="busy", moves_to=""):
    return {"action": account, "moves_to": moves_to, "activity": activity, "account": account}


def keep_document():
    doc = rules_document(routines=[])
    for character in doc["characters"]:
        if character["name"] in ("Mara", "Aldric"):
            character["place"] = "Corridor"
    doc["characters"] += [{"name": "Tobin", "description": "the smith", "place": "Forge"},
                          {"name": "Ilse", "description": "the smith's apprentice", "place": "Forge"}]
    doc["engagements"] = [
        {"who": ["Mara", "Tobin"], "at": "08:10", "place": "Forge", "what": "settle Mara's debt"},
        {"who": ["Aldric"], "at": "08:20", "place": "Tower", "what": "check the snares"},
        {"who": ["Tobin"], "at": "08:30", "place": "Tavern", "what": "open the tavern"},
    ]
    return doc


@pytest.fixture
def keep(owner):
    campaign, findings = worldfile.create_campaign(owner, keep_document())
    assert [f for f in findings if f.severity == "error"] == [], findings
    storytime.skip(campaign, owner, {"reason": "the morning passes", "until_time": "09:00"})
    return campaign


async def play(campaign, text="wait in the hall"):
    async def relay(_):
        pass

    result = await turns.play_turn(campaign.pk, Action(mode="do", text=text), relay)
    await result.post_turn
    return result


def offstage_asks(server):
    return [body for body in server.bodies("/api/chat")
            if "format" in body and "account" in (body["format"].get("properties") or {})]


@sync_to_async
def head_state(campaign):
    campaign = Campaign.objects.get(pk=campaign.pk)
    return state_at(lineage.path_of(campaign), campaign)


@sync_to_async
def rounds_of(node_id):
    return list(Round.objects.filter(node_id=node_id).order_by("number"))


@sync_to_async
def perceivers(campaign, event_slot):
    return sorted(StateEvent.objects.filter(campaign=campaign, status="applied", payload__type="perception",
                                            payload__object=event_slot.split(":", 1)[1])
                  .values_list("payload__subject", flat=True))


async def test_nothing_runs_off_stage_without_a_played_turn(keep, narrator_server):
    assert narrator_server.bodies("/api/chat") == [], "creating the world and skipping time ask no model"
    assert not await Round.objects.filter(node__campaign=keep).aexists()
    assert not await OffstageRun.objects.filter(node__campaign=keep).aexists()


async def test_the_two_oldest_act_one_at_a_time_as_rounds_100_and_101_and_the_third_waits(keep, narrator_server):
    narrator_server.script("You wait by the fire.")
    narrator_server.script_json({"events": []}, answer(MARA, activity="paying her debt"), answer(ALDRIC))
    result = await play(keep)
    first, second = await rounds_of(result.node_id)
    assert [(r.number, r.kind, r.activated[0]["who"]) for r in (first, second)] == [
        (100, "offstage", "mara"), (101, "offstage", "aldric")]
    assert len(offstage_asks(narrator_server)) == 2
    # One at a time: Aldric's brief was composed after Mara's round was written, when she had left the Corridor.
    assert "With you: Mara" not in second.briefs["aldric"]["text"]
    assert "What calls you now: check the snares (at Tower)" in offstage_asks(narrator_server)[1]["messages"][-1][
        "content"]
    state = await head_state(keep)
    assert state.location_of("mara") == "forge", "an engagement with a place: she went there, ignoring exits"
    assert state.location_of("aldric") == "tower", "the Tower's way in is blocked: exits ignored"
    assert state.get("condition:mara").data["activity"] == "paying her debt"
    assert {r.subject for r in state.of_kind("offscene")} == {"engagement:settle-mara-s-debt",
                                                              "engagement:check-the-snares"}
    run = await OffstageRun.objects.aget(node_id=result.node_id)
    assert (run.status, run.played, run.waiting) == ("played", 2, 1)

    narrator_server.script("The fire crackles.")
    narrator_server.script_json({"events": []}, answer(TOBIN))
    later = await play(keep, "wait longer")
    [third] = await rounds_of(later.node_id)
    assert (third.number, third.activated[0]["who"]) == (100, "tobin"), "the third item stayed due for this turn"


async def test_only_the_participants_perceive_an_off_stage_round(keep, narrator_server):
    narrator_server.script("You wait by the fire.")
    narrator_server.script_json({"events": []}, answer(MARA), answer(ALDRIC))
    result = await play(keep)
    first, _ = await rounds_of(result.node_id)
    event = f"event:offstage-{result.node_id}-100"
    state = await head_state(keep)
    # Ilse was at the Forge too, but took no part: she perceived nothing; Edrin, the player, nothing either.
    assert set(first.resolution["perceived_by"]) == {"mara", "tobin"}
    assert await perceivers(keep, event) == ["Mara", "Tobin"]
    assert state.get(f"perception:offstage-{result.node_id}-100:ilse") is None


async def test_the_meanwhile_card_shows_the_accounts_once_and_they_never_reach_the_next_prompt(
        keep, narrator_server, client, owner):
    await sync_to_async(as_author)(keep)
    narrator_server.script("You wait by the fire.")
    narrator_server.script_json({"events": []}, answer(MARA), answer("I thought about my snares."))
    result = await play(keep)
    note = (await ContextSnapshot.objects.aget(node_id=result.node_id)).report["away_note"]
    assert note == {"lines": [MARA], "left_out": 0}, "Aldric's account is refused (first person, thoughts)"
    _, second = await rounds_of(result.node_id)
    assert "third person" in second.resolution["account_refused"]
    assert (await head_state(keep)).location_of("aldric") == "tower", "a refused account: the action still stands"
    await sync_to_async(client.force_login)(owner)
    card = (await sync_to_async(client.get)(reverse("meanwhile", args=[keep.pk]), **HTMX)).content.decode()
    assert "Meanwhile" in card and MARA in card and f"/replies/{result.node_id}/offstage/" in card

    narrator_server.script("The fire crackles.")
    narrator_server.script_json({"events": []}, answer(TOBIN))
    await play(keep, "wait longer")
    prompt = [b for b in narrator_server.bodies("/api/chat") if "format" not in b][-1]["messages"]
    assert all("paid Tobin" not in str(message["content"]) for message in prompt)
    card = (await sync_to_async(client.get)(reverse("meanwhile", args=[keep.pk]), **HTMX)).content.decode()
    assert MARA not in card and TOBIN in card, "the card is the new reply's"


async def test_a_failed_run_is_not_marked_and_waits_for_the_next_turn(keep, narrator_server):
    narrator_server.script("You wait by the fire.")
    narrator_server.script_json({"events": []}, answer(MARA), "not JSON {", "not JSON {")
    result = await play(keep)
    [only] = await rounds_of(result.node_id)
    assert only.activated[0]["who"] == "mara"
    run = await OffstageRun.objects.aget(node_id=result.node_id)
    assert run.status == "failed" and run.error.startswith("aldric:") and "waits" in run.error
    assert "engagement:check-the-snares" not in {r.subject for r in (await head_state(keep)).of_kind("offscene")}

    narrator_server.script("The fire crackles.")
    narrator_server.script_json({"events": []}, answer(ALDRIC), answer(TOBIN))
    later = await play(keep, "wait longer")
    assert [r.activated[0]["who"] for r in await rounds_of(later.node_id)] == ["aldric", "tobin"]


async def test_a_retry_of_the_failed_step_plays_what_the_reply_has_left_of_its_limits(keep, narrator_server):
    from storyteller.steps import postturn

    narrator_server.script("You wait by the fire.")
    narrator_server.script_json({"events": []}, answer(MARA), "not JSON {", "not JSON {")
    result = await play(keep)
    narrator_server.script_json(answer(ALDRIC), answer(TOBIN))
    await postturn.run(result.node_id)  # the Retry button
    assert [(r.number, r.activated[0]["who"]) for r in await rounds_of(result.node_id)] == [
        (100, "mara"), (101, "aldric")], "two a turn: Tobin still waits"
    run = await OffstageRun.objects.aget(node_id=result.node_id)
    assert (run.status, run.played, run.waiting, run.attempts) == ("played", 2, 1, 2)


async def test_off_stage_is_off_when_the_campaign_says_none_act(keep, narrator_server):
    await Campaign.objects.filter(pk=keep.pk).aupdate(offstage_per_turn=0)
    narrator_server.script("You wait by the fire.")
    result = await play(keep)
    assert await rounds_of(result.node_id) == [] and offstage_asks(narrator_server) == []
    assert (await OffstageRun.objects.aget(node_id=result.node_id)).status == "off"


def test_due_items_read_from_the_state_are_those_away_from_the_player_oldest_first(keep):
    state = state_at(lineage.path_of(keep), keep)
    due = away.due_at(state)
    assert [d.who for d in due] == ["mara", "aldric", "tobin"]
    assert due[0].participants == ("mara", "tobin") and due[0].place == "forge"
    assert away.due_at(away.read_due(lineage.path_of(keep), keep)) == due, "the step's partial read finds the same"


@pytest.fixture
def briefed(owner):
    """The keep with Mara's debt, Tobin's private hoard (a canary), an announced bell and a secret trigger."""
    doc = keep_document()
    doc["variables"] = [
        {"name": "debt", "type": "number", "range": [0, 100], "default": 0, "values": {"Mara": 40}},
        {"name": "hoard", "type": "number", "range": [0, 1000], "default": 0, "visibility": "private",
         "values": {"Tobin": 999}}]
    doc["triggers"] = [
        {**BELL, "announce": {"audience": "everyone", "text": "The great bell will toll at eight tonight",
                              "at": "2031-03-14T20:00"}},
        {"id": "flood", "when": {"type": "time", "after": "2031-03-15T06:00"},
         "effects": [{"type": "add_fact", "value": "The cellar floods."}], "beat": "SECRET-FLOOD-CANARY"}]
    campaign, findings = worldfile.create_campaign(owner, doc)
    assert [f for f in findings if f.severity == "error"] == [], findings
    storytime.skip(campaign, owner, {"reason": "the morning passes", "until_time": "09:00"})
    return campaign


async def test_a_brief_off_stage_holds_her_time_day_variables_and_announcements_and_no_one_elses_secrets(
        briefed, narrator_server):
    narrator_server.script("You wait by the fire.")
    narrator_server.script_json({"events": []}, answer(MARA), answer(ALDRIC))
    result = await play(briefed)
    first, _ = await rounds_of(result.node_id)
    brief = first.briefs["mara"]["text"]
    assert "Now: Friday 14 March 2031" in brief
    assert "settle Mara's debt" in brief, "what is due is in her day"
    assert "debt" in brief and "40" in brief, "her own variable"
    assert "The great bell will toll at eight tonight" in brief
    for canary in ("999", "hoard", "SECRET-FLOOD-CANARY", "cellar floods", "accurate"):
        assert canary not in brief, canary


async def test_a_retried_reply_plays_off_stage_on_its_own_line_and_each_version_keeps_its_card(keep, narrator_server):
    async def relay(_):
        pass

    narrator_server.script("You wait by the fire.", "RETRIED: you doze by the fire.")
    narrator_server.script_json({"events": []}, answer(MARA), answer(ALDRIC))
    first = await play(keep)
    narrator_server.script_json({"events": []}, answer("Mara went to the Forge at last."), answer(ALDRIC))
    retried = await turns.play_turn(keep.pk, None, relay, retry=True)
    await retried.post_turn
    assert [r.number for r in await rounds_of(retried.node_id)] == [100, 101], "the markers were the old line's"
    assert [r.number for r in await rounds_of(first.node_id)] == [100, 101], "the first version keeps its rounds"
    campaign = await Campaign.objects.aget(pk=keep.pk)
    assert (await sync_to_async(away.note_of)(campaign))["lines"][0] == "Mara went to the Forge at last."
    first_note = (await ContextSnapshot.objects.aget(node_id=first.node_id)).report["away_note"]
    assert first_note["lines"][0] == MARA
