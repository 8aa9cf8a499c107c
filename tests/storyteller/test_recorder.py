"""The recorder after a turn, through the real fake model server: events in, failures recorded, the turn untouched."""

import pytest
from asgiref.sync import sync_to_async

from campaigns import lineage, story
from campaigns.models import Campaign, CanonRule, Node, RecorderRun, StateEvent
from campaigns.state import correct, state_at
from storyteller import turns
from storyteller.context import Action
from storyteller.steps import postturn, recorder

pytestmark = pytest.mark.django_db(transaction=True)

WORLD = {"events": [
    {"type": "introduce", "subject": "Mara", "object": "character", "value": "an archivist", "narrator_only": False},
    {"type": "introduce", "subject": "Crooked Lantern Tavern", "object": "place", "value": "", "narrator_only": False},
    {"type": "scene", "subject": "", "object": "Crooked Lantern Tavern", "value": "Rain on the windows.",
     "narrator_only": False},
    {"type": "arrive", "subject": "Mara", "object": "", "value": "", "narrator_only": False},
]}


async def play(campaign, text="look around", *, retry=False):
    """Play a turn and wait for its post-turn work, as the tests need a settled state."""
    async def relay(_):
        pass

    result = await turns.play_turn(campaign.pk, Action(mode="do", text=text), relay, retry=retry)
    await result.post_turn
    return result


def narration(server):
    return [body for body in server.bodies("/api/chat") if "format" not in body]


def recordings(server):
    """The state recorder's requests (the minds step's second call has a schema of its own)."""
    return [body for body in server.bodies("/api/chat")
            if "format" in body and "perceptions" not in body["format"].get("properties", {})]


@sync_to_async
def current_state(campaign):
    campaign = Campaign.objects.get(pk=campaign.pk)
    return state_at(lineage.path_of(campaign), campaign)


@sync_to_async
def run_of(node_id):
    return RecorderRun.objects.filter(node_id=node_id).first()


async def test_a_turn_is_recorded_after_commit_with_the_schema_and_the_turn(campaign, narrator_server):
    narrator_server.script("Mara waits in the Crooked Lantern Tavern.")
    narrator_server.script_json(WORLD)
    result = await play(campaign, "enter the tavern")
    [body] = recordings(narrator_server)
    # A line with no agendas, variables, checks or beats is offered elapsed time alone of the rules' types.
    assert body["format"] == recorder.schema_for({"elapse"}) and body["stream"] is False
    prompt = body["messages"][-1]["content"]
    assert "Player (do): enter the tavern" in prompt and "Narrator: Mara waits" in prompt
    run = await run_of(result.node_id)
    assert (run.status, run.attempts) == ("applied", 1)
    now = await current_state(campaign)
    assert now.location_of("mara") == "crooked-lantern-tavern"
    assert await StateEvent.objects.filter(status="applied", source="recorder").exclude(
        payload__type="observe").acount() == 4
    assert await StateEvent.objects.filter(payload__type="observe").acount() == 1, "Mara looked around the tavern"


async def test_a_reply_saying_mara_is_dead_changes_nothing_until_an_event_is_validated(campaign, narrator_server):
    narrator_server.script("Mara waits.", "Mara is dead. Mara is dead, I tell you.")
    narrator_server.script_json(WORLD, {"events": []})
    await play(campaign)
    before = (await current_state(campaign)).slots
    await play(campaign, "check on Mara")
    after = await current_state(campaign)
    # Only story time moved (the turn took its 30 seconds).
    assert {k: v for k, v in after.slots.items() if k != "clock"} == {k: v for k, v in before.items() if k != "clock"}
    assert after.find_fact("Mara is dead.") is None
    assert "mara" in after.present()


async def test_a_recorder_that_cannot_reach_the_server_leaves_the_turn_intact_and_can_be_retried(
    campaign, narrator_server
):
    narrator_server.script("The gate opens.")
    async def relay(_):
        pass

    result = await turns.play_turn(campaign.pk, Action(mode="do", text="open the gate"), relay)
    narrator_server.refuse()  # before the worker's first request
    await result.post_turn
    run = await run_of(result.node_id)
    assert run.status == "failed" and "not running" in run.error
    node = await Node.objects.aget(pk=result.node_id)
    assert node.text == "The gate opens."
    assert (await Campaign.objects.aget(pk=campaign.pk)).head_depth == 2
    assert await StateEvent.objects.exclude(source="engine").acount() == 0

    narrator_server.resume()
    narrator_server.script_json(WORLD)
    await postturn.schedule(campaign.pk, result.node_id)
    run = await run_of(result.node_id)
    assert (run.status, run.attempts, run.error) == ("applied", 2, "")
    assert (await current_state(campaign)).location_of("mara") == "crooked-lantern-tavern"


async def test_a_recorder_that_times_out_is_recorded_as_failed(campaign, narrator_server, settings):
    settings.STORYTELLER_RECORDER_TIMEOUT = 0.3
    narrator_server.script("The gate opens.")

    async def relay(_):
        pass

    result = await turns.play_turn(campaign.pk, Action(mode="do", text="open the gate"), relay)
    narrator_server.stall(2)
    await result.post_turn
    run = await run_of(result.node_id)
    assert run.status == "failed" and "did not finish recording within 0.3 s" in run.error
    assert await Node.objects.filter(pk=result.node_id).aexists()


@pytest.mark.parametrize("reply,error", [
    ("Sure! Mara arrives.", "not JSON"),
    ({"changes": []}, "lacks \"events\""),
])
async def test_invalid_json_or_the_wrong_shape_fails_the_recording_not_the_turn(
    campaign, narrator_server, reply, error
):
    narrator_server.script("Mara arrives.", "The rain goes on.")
    narrator_server.script_json(reply, reply)  # the reply, and the same again when asked once more
    result = await play(campaign)
    run = await run_of(result.node_id)
    assert run.status == "failed" and error in run.error
    assert await StateEvent.objects.exclude(source="engine").acount() == 0
    # The next turn plays on the last applied state, and is recorded itself.
    narrator_server.script_json(WORLD)
    second = await play(campaign, "wait")
    assert (await run_of(second.node_id)).status == "applied"


async def test_an_answer_cut_off_mid_string_fails_in_plain_words_without_the_decoders_message(
        campaign, narrator_server):
    narrator_server.script("Mara arrives.")
    cut_off = '{"events": [{"type": "scene", "subject": "The turn to record", "object": "The'
    narrator_server.script_json(cut_off, cut_off)  # the answer, and the same again when asked once more
    result = await play(campaign)
    run = await run_of(result.node_id)
    assert run.status == "failed"
    assert run.error == (f"The model {narrator_server.models[0]} answered twice without the JSON that was asked for "
                         "(the reply is not JSON), so nothing was used. Retry, or choose a larger narrator model.")
    for raw in ("Unterminated", "character", "column", "events", "The turn to record"):
        assert raw not in run.error, "the decoder's message and the raw answer stay in the log"


async def test_an_abandoned_branchs_facts_never_reach_a_later_prompt(campaign, narrator_server):
    narrator_server.script("The ledger burns.", "You walk to the well.")
    narrator_server.script_json({"events": [
        {"type": "add_fact", "subject": "", "object": "", "value": "ABANDONED-FACT: the ledger is ash.",
         "narrator_only": False},
    ]})
    await play(campaign, "burn the ledger")
    assert (await current_state(campaign)).find_fact("ABANDONED-FACT: the ledger is ash.")
    await sync_to_async(story.undo)(campaign)
    await play(campaign, "walk to the well")
    prompt = " ".join(m["content"] for m in narration(narrator_server)[-1]["messages"])
    assert "ABANDONED-FACT" not in prompt
    assert (await current_state(campaign)).find_fact("ABANDONED-FACT: the ledger is ash.") is None


async def test_narrator_only_facts_are_framed_as_such_with_the_rule_in_the_system_block(
    campaign, narrator_server, owner
):
    narrator_server.script("Mara smiles.", "Mara pours the tea.")
    narrator_server.script_json(WORLD)
    await play(campaign)
    await sync_to_async(correct)(campaign, owner, {"type": "add_fact", "subject": "Mara",
                                                   "value": "Mara poisoned Edrin.", "narrator_only": True})
    await play(campaign, "ask Mara about Edrin")
    messages = narration(narrator_server)[-1]["messages"]
    assert "- [narrator only] Mara poisoned Edrin. [correction]" in messages[-1]["content"]
    system = messages[0]["content"]
    assert "[narrator only]" in system and "must not be told it" in system and "must not act on it" in system


async def test_accepted_state_outranks_stale_initial_canon_and_the_prompt_says_so(campaign, narrator_server):
    await CanonRule.objects.acreate(campaign=campaign, text="The north gate is open.", scope="initial")
    narrator_server.script("The north gate collapses.", "Dust settles.")
    narrator_server.script_json({"events": [
        {"type": "add_fact", "subject": "", "object": "The north gate is open.",
         "value": "The north gate has collapsed.", "narrator_only": False},
    ]})
    await play(campaign, "watch the gate")
    await play(campaign, "walk to the north gate")
    messages = narration(narrator_server)[-1]["messages"]
    system, tail = messages[0]["content"], messages[-1]["content"]
    assert "As the story began" in system and "The north gate is open." in system
    assert "Campaign canon (Level 1" in system and "Magic cannot resurrect the dead." in system
    assert "The north gate has collapsed." in tail
    assert "Initial canon that no longer holds on this line (the current state wins):" in tail
    assert '"The north gate is open." no longer holds. The current state: The north gate has collapsed.' in tail


async def test_one_worker_per_campaign_runs_queued_replies_in_commit_order(campaign, narrator_server):
    from tests.campaigns.test_lineage import act

    await sync_to_async(act)(campaign, "one", "One.")
    first = await Node.objects.filter(role="narrator").alatest("depth")
    await sync_to_async(act)(campaign, "two", "Two.")
    second = await Node.objects.filter(role="narrator").alatest("depth")
    worker = postturn.schedule(campaign.pk, first.pk)
    assert postturn.schedule(campaign.pk, second.pk) is worker, "a second reply joins the running worker"
    await worker
    assert [(await run_of(n.pk)).status for n in (first, second)] == ["applied", "applied"]
    prompts = [body["messages"][-1]["content"] for body in recordings(narrator_server)]
    assert "Narrator: One." in prompts[0] and "Narrator: Two." in prompts[1]


@sync_to_async
def _refuse_state_writes(refuse):
    from django.db import connection

    with connection.cursor() as cursor:
        if refuse:
            # The recorder's writes only: the turn's own round of story time is committed with the turn.
            cursor.execute("CREATE TRIGGER refuse_state BEFORE INSERT ON campaigns_staterecord "
                           "WHEN (SELECT source FROM campaigns_stateevent WHERE id = NEW.event_id) = 'recorder' "
                           "BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END")
        else:
            cursor.execute("DROP TRIGGER refuse_state")


async def test_a_failed_write_is_rolled_back_and_the_failure_recorded_after_it(campaign, narrator_server):
    narrator_server.script("Mara arrives.")
    narrator_server.script_json(WORLD, WORLD)
    await _refuse_state_writes(True)
    try:
        result = await play(campaign)
    finally:
        await _refuse_state_writes(False)
    run = await run_of(result.node_id)
    assert run.status == "failed" and "disk I/O error" in run.error and "nothing was written" in run.error
    assert await StateEvent.objects.exclude(source="engine").acount() == 0, (
        "the events of the failed write were rolled back with it")
    assert await Node.objects.filter(pk=result.node_id).aexists()
    await postturn.schedule(campaign.pk, result.node_id)
    assert (await run_of(result.node_id)).status == "applied"
