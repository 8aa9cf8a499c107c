"""Story time and world rules in played turns, through the real fake model server.

The routines' catch-up happens in a turn's commit with no request of its
own; an unannounced trigger's text reaches no prompt over twenty turns; the
judge decides free-text conditions after the recorder and asks nothing when
there is nothing to judge; the recorder says how long a turn took; a roll
made before an action is a fixed outcome for the reply and for its retry.
"""

import json
import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from campaigns import lineage, storytime, worldfile
from campaigns.models import Campaign, JudgeRun, StateEvent
from campaigns.state import state_at
from campaigns.state.time import rulebook
from storyteller import turns
from storyteller.context import Action
from storyteller.context import rules as rules_section
from tests.campaigns.test_story_time import HOUR, START, rules_document

pytestmark = pytest.mark.django_db(transaction=True)

CANARY = "CANARY-7F3A"


def ev(type, subject="", object="", value="", **extra):
    return {"type": type, "subject": subject, "object": object, "value": value, "narrator_only": False, **extra}


async def play(campaign, text="look around", *, retry=False):
    async def relay(_):
        pass

    result = await turns.play_turn(campaign.pk, Action(mode="do", text=text), relay, retry=retry)
    await result.post_turn
    return result


@sync_to_async
def now(campaign):
    campaign = Campaign.objects.get(pk=campaign.pk)
    return state_at(lineage.path_of(campaign), campaign)


@sync_to_async
def create(owner, **changes):
    campaign, _ = worldfile.create_campaign(owner, rules_document(**changes))
    return campaign


def chats(server):
    return server.bodies("/api/chat")


def narrations(server):
    return [body for body in chats(server) if "format" not in body]


def minds_call(body):
    """The recorder's second call (what the characters perceived), which follows every recording."""
    return "perceptions" in body.get("format", {}).get("properties", {})


async def test_a_played_turn_moves_mara_by_her_routine_in_its_commit_with_no_request_of_its_own(owner,
                                                                                              narrator_server):
    keep = await create(owner, clock={"time_zone": "Europe/Lisbon", "round_seconds": 60})
    await sync_to_async(storytime.correct)(keep, owner, ev("move", "Edrin", "Yard"))
    await sync_to_async(storytime.skip)(keep, owner, {"reason": "the morning passes", "until_time": "08:59"})
    assert chats(narrator_server) == [], "a skip and its catch-up ask no model"
    assert (await now(keep)).location_of("mara") == "hall"
    narrator_server.script("You watch the yard.")
    narrator_server.script_json({"events": []})
    result = await play(keep, "wait in the yard")
    state = await now(keep)
    assert state.location_of("mara") == "forge" and state.get("condition:mara").data["activity"] == "working"
    caught = await StateEvent.objects.aget(campaign=keep, payload__type="catch_up", node_id=result.node_id)
    assert caught.source == "engine", "written in the turn's commit, at its reply"
    bodies = chats(narrator_server)
    asked = [body for body in bodies if not minds_call(body)]
    assert len(asked) == 2 and len(narrations(narrator_server)) == 1, "the narrator and the recorder, nothing else"
    assert await JudgeRun.objects.filter(node_id=result.node_id, status="nothing").aexists()
    narrator_server.script("Mara is not here.")
    await play(keep, "look for Mara")
    prompt = narrations(narrator_server)[-1]["messages"][-1]["content"]
    assert "Now: Friday 14 March 2031, 09:00 in the morning." in prompt
    assert "Schedule: Mara went to Forge (working)." in prompt


async def test_an_unannounced_trigger_never_reaches_any_prompt_over_twenty_turns(owner, narrator_server):
    secret = {"id": "hidden-heir", "when": {"type": "time", "after": "2099-01-01T00:00"},
              "beat": f"{CANARY}: the heir reveals herself.",
              "effects": [{"type": "add_fact", "value": f"{CANARY} the heir is Mara."}]}
    judged = {"id": "secret-deal", "when": {"type": "judged", "text": "Edrin has promised to keep a secret"},
              "beat": f"{CANARY}: the deal is struck.", "cue": {"audience": "everyone", "text": f"{CANARY} cue"}}
    announced = {"id": "tide", "when": {"type": "time", "after": "2031-03-20T06:00"},
                 "announce": {"audience": "everyone", "text": "The spring tide floods the yard on the 20th",
                              "at": "2031-03-20T06:00"}, "beat": "The tide floods the yard."}
    keep = await create(owner, triggers=[rules_document()["triggers"][0], secret, judged, announced])
    for turn in range(20):
        narrator_server.script(f"Turn {turn}: the rain keeps on.")
        if turn % 5 == 4:
            await sync_to_async(storytime.skip)(keep, owner, {"reason": "hours pass", "by_minutes": 240})
        await play(keep, f"do thing {turn}")
    state = await now(keep)
    assert state.get("trigger:bell").value == "fired", "a secret trigger that fired is narrated after it fires"
    assert state.get("trigger:hidden-heir").value == "dormant"
    everything = json.dumps([request.body for request in narrator_server.requests])
    assert CANARY not in everything, "no unannounced, unfired trigger's text in any request"
    assert "hidden-heir" not in everything and "secret-deal" in everything, "the judge asks by id"
    judge_prompts = [b for b in chats(narrator_server) if "judgments" in json.dumps(b.get("format", {}))]
    assert judge_prompts and all("Edrin has promised to keep a secret" in json.dumps(b) for b in judge_prompts)
    assert all("Edrin has promised to keep a secret" not in json.dumps(b) for b in narrations(narrator_server))
    assert any("Announced to everyone: The spring tide floods the yard on the 20th" in b["messages"][-1]["content"]
               for b in narrations(narrator_server)), "an announced trigger shows the narrator its audience"
    assert any("Pending beat: The bell tolls eight times across the Keep." in b["messages"][-1]["content"]
               for b in narrations(narrator_server))


async def test_the_judge_decides_a_free_text_condition_after_the_recorder_and_the_trigger_fires(owner,
                                                                                             narrator_server):
    judged = {"id": "confession", "when": {"type": "judged", "text": "Mara has admitted what is in the vault"},
              "beat": "Mara's secret is out.", "effects": [{"type": "add_fact", "value": "Mara confessed."}]}
    keep = await create(owner, triggers=[judged])
    narrator_server.script("Mara sighs: the vault holds her father's letters.")
    narrator_server.script_json({"events": []}, {"judgments": [{"id": "confession", "holds": True}]})
    result = await play(keep, "ask Mara about the vault")
    [judge_body] = [b for b in chats(narrator_server) if "judgments" in json.dumps(b.get("format", {}))]
    prompt = judge_body["messages"][-1]["content"]
    assert "- confession: Mara has admitted what is in the vault" in prompt and "Mara confessed" not in prompt
    run = await JudgeRun.objects.aget(node_id=result.node_id)
    assert run.status == "applied"
    state = await now(keep)
    assert state.get("judgment:confession").data["holds"] is True
    assert state.get("trigger:confession").value == "fired" and state.find_fact("Mara confessed.") is not None


async def test_a_judge_that_answers_nonsense_fails_in_words_and_the_turn_stands(owner, narrator_server):
    judged = {"id": "confession", "when": {"type": "judged", "text": "Mara has confessed"}, "beat": "Out."}
    keep = await create(owner, triggers=[judged])
    narrator_server.script("Mara says nothing.")
    narrator_server.script_json({"events": []}, {"verdict": "yes"}, {"verdict": "yes"})  # asked once more
    result = await play(keep)
    run = await JudgeRun.objects.aget(node_id=result.node_id)
    assert run.status == "failed" and run.error
    assert (await now(keep)).get("trigger:confession").value == "dormant"


async def test_the_recorder_says_how_long_the_turn_took(owner, narrator_server):
    keep = await create(owner)
    narrator_server.script("You sleep for an hour by the fire.")
    narrator_server.script_json({"events": [{"type": "elapse", "data": {"seconds": 3600}}]})
    await play(keep, "nap")
    assert rulebook.now_of(await now(keep)) == START + HOUR


async def test_a_roll_before_an_action_is_a_fixed_outcome_for_the_reply_and_for_its_retry(owner, narrator_server):
    keep = await create(owner)
    rolled = await sync_to_async(storytime.correct)(
        keep, owner, ev("roll", "Edrin", data={"check": "lockpick", "reason": "the iron door"}))
    line = rolled.payload["data"]["result"]
    narrator_server.script("The lock...", "Again, the lock...")
    narrator_server.script_json({"events": []}, {"events": []})
    await play(keep, "pick the lock")
    await play(keep, retry=True)
    first, retried = [body["messages"][-1]["content"] for body in narrations(narrator_server)]
    for prompt in (first, retried):
        assert rules_section.ROLLS in prompt and f"lockpick 2d6: {line['dice'][0]}, {line['dice'][1]}" in prompt
    assert len(rulebook.rolls_of(await now(keep))) == 1, "the retry rolled nothing"


def test_a_real_clock_tells_the_narrator_of_an_absence_of_five_minutes_or_more(owner):
    doc = rules_document(clock={"time_zone": "UTC", "mode": "real"})
    del doc["starting_time"]
    campaign, _ = worldfile.create_campaign(owner, doc)
    path = lineage.path_of(campaign)
    state = state_at(path, campaign)
    at = rulebook.now_of(state)
    campaign.last_played_at = timezone.now()
    seen = int(campaign.last_played_at.timestamp() * 1000)
    state = state_at(path, campaign)
    six = rules_section.narrator_lines(campaign, path, state, wall_ms=max(seen, at) + 6 * 60_000)
    assert any("The player was away for 6 minutes" in line for line in six)
    four = rules_section.narrator_lines(campaign, path, state, wall_ms=max(seen, at) + 4 * 60_000)
    assert not any("away" in line for line in four)


async def test_the_recorder_is_offered_the_rules_its_line_uses_and_told_what_they_hold(owner, narrator_server):
    keep = await create(owner)
    narrator_server.script("Mara counts her debts.")
    narrator_server.script_json({"events": [{"type": "variable_change", "subject": "Mara", "object": "debt",
                                             "data": {"by": 20, "reason": "a bad bargain"}}]})
    await play(keep, "ask Mara about money")
    [body] = [b for b in chats(narrator_server) if "format" in b and not minds_call(b)]
    offered = {v["properties"]["type"]["const"] for v in body["format"]["properties"]["events"]["items"]["anyOf"]}
    assert {"elapse", "engagement", "intent_add", "variable_change", "roll"} <= offered
    assert "beat_addressed" not in offered, "no beat is pending"
    prompt = body["messages"][-1]["content"]
    assert "Story time at the start of the turn: Friday 14 March 2031, 08:00 in the morning" in prompt
    assert "- lockpick — Pick a lock: a lock in the way" in prompt and "debt: number" in prompt
    assert "- roll: who" in body["messages"][-1]["content"]
    assert rulebook.variable_value(await now(keep), "mara", "debt") == 20


async def test_the_demo_as_shipped_rings_its_midnight_bell_in_played_turns_and_the_narrator_hears_it(
        owner, narrator_server):
    from storyteller.management.commands.seed_demo import DEMO_WORLD

    demo, _ = await sync_to_async(worldfile.create_campaign)(owner, json.loads(DEMO_WORLD.read_text()))
    await sync_to_async(storytime.skip)(demo, owner, {"reason": "the evening wears on", "until_time": "23:59"})
    for turn in range(3):
        narrator_server.script(f"The wind rattles the shutters ({turn}).")
        await play(demo, "wait for midnight")
    state = await now(demo)
    assert rulebook.clock_of(state).describe() == "Saturday 29 October 1892, 00:00 at night"
    assert (state.get("trigger:midnight-bell").value, state.get("trigger:midnight-bell").data["fires"]) == ("fired", 1)
    assert rulebook.values_of(state)[("world", "unease")] == 4
    assert not await StateEvent.objects.filter(campaign=demo, status="rejected").aexists()
    narrator_server.script("A single toll carries over the roofs.")
    await play(demo, "listen")
    prompt = narrations(narrator_server)[-1]["messages"][-1]["content"]
    assert "Pending beat: The cracked chapel bell tolls once at midnight" in prompt
