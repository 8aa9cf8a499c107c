"""Compaction in played turns, through the real fake model server (seed 001 "Required gates"; issue 4 item 6).

A turn past the high watermark summarises first, with no transaction open
across the model call; a failure fails the turn with what to do and writes
nothing; the summariser sees only the active line; the post-turn step compacts
ahead of need; between rotations each prompt begins with the previous one.
"""

import pytest
from asgiref.sync import sync_to_async

from campaigns import lineage, story
from campaigns.models import Campaign, ContextSnapshot, Node
from memory import checkpoints
from memory.models import Checkpoint, CheckpointRun
from storyteller import context, tokens, turns
from storyteller.context import Action, budget
from storyteller.steps import compaction
from tests.campaigns.test_lineage import act
from tests.conftest import make_campaign

from .test_context_checkpoints import long_story

pytestmark = pytest.mark.django_db(transaction=True)


def summary_reply(text):
    """A structured reply every post-turn step can read: the summariser's, the recorder's and the memory writer's."""
    return {"summary": text, "events": [], "memory": "Aldric walked on."}


def summary_requests(server):
    return [body for body in server.bodies("/api/chat")
            if "summary" in (body.get("format") or {}).get("properties", {})]


def narration(server):
    return [body for body in server.bodies("/api/chat") if "format" not in body]


def sent_text(body):
    return "\n".join(message["content"] for message in body["messages"])


async def play(campaign, text="look around", *, retry=False, settle=True):
    async def relay(_):
        pass

    result = await turns.play_turn(campaign.pk, Action(mode="do", text=text), relay, retry=retry)
    if settle:
        await result.post_turn
    return result


@sync_to_async
def written():
    return (Node.objects.count(), Checkpoint.objects.count(), ContextSnapshot.objects.count(),
            tuple(Campaign.objects.values_list("head_branch_id", "head_depth")))


@sync_to_async
def report_of(node_id):
    return ContextSnapshot.objects.get(node_id=node_id).report


async def test_a_turn_past_the_watermark_summarises_before_the_narrator_is_asked(campaign, narrator_server):
    await sync_to_async(long_story)(campaign)
    narrator_server.script_json(summary_reply("SUMMARY-ONE: Aldric walked thirty turns through grass and rain."))
    narrator_server.requests.clear()
    result = await play(campaign, settle=False)
    bodies = narrator_server.bodies("/api/chat")
    assert "summary" in bodies[0]["format"]["properties"], "the summary is asked for first"
    [prompt] = narration(narrator_server)
    assert "SUMMARY-ONE" in prompt["messages"][1]["content"]
    report = await report_of(result.node_id)
    start, end = report["history"]["covered"]
    assert report["checkpoint"]["source_end"] == end and report["history"]["verbatim"][0] == end + 1
    await result.post_turn


async def test_a_failed_compaction_fails_the_turn_clearly_and_writes_nothing(campaign, narrator_server):
    await sync_to_async(long_story)(campaign)
    before = await written()
    narrator_server.requests.clear()
    narrator_server.script_json({"summary": ""}, {"summary": ""})  # an empty summary, and again when asked once more
    with pytest.raises(turns.TurnFailed) as caught:
        await play(campaign)
    message = str(caught.value)
    assert "must be summarised" in message and "answered twice without the JSON that was asked for" in message
    assert "summary is 0 characters long" in message
    assert "context_token_budget" in message and "Nothing was sent or saved" in message
    assert await written() == before
    assert not narration(narrator_server), "the narrator is never asked"


async def test_a_summariser_that_is_down_fails_the_turn_and_moves_no_head(campaign, narrator_server):
    await sync_to_async(long_story)(campaign)
    before = await written()
    narrator_server.not_found(persistent=True)
    with pytest.raises(turns.TurnFailed) as caught:
        await play(campaign)
    narrator_server.clear_failures()
    assert "summariser failed" in str(caught.value)
    assert await written() == before


async def test_a_500_node_story_is_first_compacted_in_bounded_rolling_chunks(owner, narrator_server):
    campaign = await sync_to_async(make_campaign)(owner)
    await sync_to_async(long_story)(campaign, turns=250)
    narrator_server.script_json(*[summary_reply(f"ROLLING-{n}: the story so far, part {n}.") for n in range(1, 40)])
    narrator_server.requests.clear()
    result = await play(campaign, settle=False)
    requests = summary_requests(narrator_server)
    assert len(requests) >= 3, "a long first load goes in several chunks"
    for number, body in enumerate(requests, start=1):
        sent = sum(tokens.count(m["content"]) + budget.MESSAGE_OVERHEAD for m in body["messages"])
        assert sent + body["options"]["num_predict"] <= campaign.context_token_budget
        if number > 1:
            assert f"ROLLING-{number - 1}:" in body["messages"][1]["content"]  # each chunk continues the last
    [stored] = await sync_to_async(list)(Checkpoint.objects.all())
    assert stored.text.startswith(f"ROLLING-{len(requests)}:")  # only the final summary is kept
    assert stored.source_end >= 480
    [prompt] = narration(narrator_server)
    assert f"ROLLING-{len(requests)}:" in sent_text(prompt)
    assert "ROLLING-1:" not in sent_text(prompt)
    await result.post_turn


async def test_incremental_compaction_summarises_the_previous_summary_and_only_the_new_passages(
        campaign, narrator_server):
    await sync_to_async(long_story)(campaign)
    narrator_server.script_json(summary_reply("FIRST-SUMMARY of the walk."))
    await play(campaign)
    first = await Checkpoint.objects.aget()
    await sync_to_async(long_story)(campaign, turns=20)
    narrator_server.script_json(summary_reply("SECOND-SUMMARY of the longer walk."))
    narrator_server.requests.clear()
    result = await play(campaign)
    [request, *_] = summary_requests(narrator_server)
    user = request["messages"][1]["content"]
    assert user.startswith(f"Summary of the story so far (depths 0–{first.source_end}):\nFIRST-SUMMARY")
    assert f"(depths {first.source_end + 1}–" in user
    assert campaign.opening not in user, "what the previous summary covers is not sent again"
    report = await report_of(result.node_id)
    assert report["checkpoint"]["source_end"] > first.source_end
    assert "SECOND-SUMMARY" in sent_text(narration(narrator_server)[-1])
    assert "FIRST-SUMMARY" not in sent_text(narration(narrator_server)[-1]), "summaries are never nested"


async def test_a_canary_only_on_a_sibling_line_never_reaches_a_summary_request_or_a_prompt(campaign, narrator_server):
    @sync_to_async
    def story_with_a_sibling():
        long_story(campaign, turns=10)
        act(campaign, "read the forbidden grimoire", "SIBLING-CANARY whispers from the pages.")
        long_story(campaign, turns=5)
        for _ in range(6):
            story.undo(campaign)
        long_story(campaign, turns=30)

    await story_with_a_sibling()
    narrator_server.script_json(*[summary_reply(f"Summary {n}.") for n in range(10)])
    narrator_server.requests.clear()
    await play(campaign)
    await play(campaign)
    assert summary_requests(narrator_server)
    for body in narrator_server.bodies("/api/chat"):
        assert "SIBLING-CANARY" not in sent_text(body)
        assert "grimoire" not in sent_text(body)


async def test_a_retry_never_shows_the_replaced_reply_to_the_summariser_or_the_narrator(campaign, narrator_server):
    @sync_to_async
    def story_ending_in_a_canary():
        long_story(campaign)
        act(campaign, "open the door", "REPLACED-CANARY waits behind the door.")

    await story_ending_in_a_canary()
    narrator_server.script_json(*[summary_reply(f"Summary {n}.") for n in range(10)])
    narrator_server.requests.clear()
    result = await play(campaign, retry=True)
    assert summary_requests(narrator_server), "the retry compacted first"
    for body in narrator_server.bodies("/api/chat"):
        assert "REPLACED-CANARY" not in sent_text(body)
    node = await Node.objects.aget(pk=result.node_id)
    # The retry's own checkpoint sits before the replaced reply, so it serves both lines.
    stored = await Checkpoint.objects.order_by("-id").afirst()
    assert stored.depth < node.depth - 1


async def test_the_post_turn_step_compacts_ahead_of_need_so_the_next_turn_does_not_wait(campaign, narrator_server):
    @sync_to_async
    def story_near_the_mark():
        act(campaign, "begin", "The road begins.")
        ctx = context.build(campaign, lineage.path_of(campaign), Action(mode="continue"))
        room = ctx.report["budget"]["branch_allowance"]
        while True:
            ctx = context.build(campaign, lineage.path_of(campaign), Action(mode="continue"))
            if ctx.report["budget"]["branch_tokens"] > (budget.EARLY_WATERMARK - 0.04) * room:
                return
            act(campaign, "walk on", "The grass is wet and the rain keeps falling. " * 6)

    await story_near_the_mark()
    narrator_server.script(" ".join(["More rain falls on the long road."] * 12))
    narrator_server.script_json(*[summary_reply(f"AHEAD-{n}: the walk so far.") for n in range(10)])
    narrator_server.requests.clear()
    result = await play(campaign)
    paths_before_chat = summary_requests(narrator_server)
    assert paths_before_chat, "the step summarised after the reply"
    run = await CheckpointRun.objects.aget(node_id=result.node_id)
    assert run.status == CheckpointRun.Status.WRITTEN
    narrator_server.requests.clear()
    await play(campaign, settle=False)
    assert "format" not in narrator_server.bodies("/api/chat")[0], "the next turn went straight to the narrator"


async def test_a_failed_post_turn_checkpoint_is_recorded_and_leaves_the_turn_alone(campaign, narrator_server):
    @sync_to_async
    def story_near_the_mark():
        act(campaign, "begin", "The road begins.")
        room = context.build(campaign, lineage.path_of(campaign), Action(mode="continue")).report["budget"][
            "branch_allowance"]
        while context.build(campaign, lineage.path_of(campaign), Action(mode="continue")).report["budget"][
                "branch_tokens"] <= (budget.EARLY_WATERMARK - 0.04) * room:
            act(campaign, "walk on", "The grass is wet and the rain keeps falling. " * 6)

    await story_near_the_mark()
    narrator_server.script(" ".join(["More rain falls on the long road."] * 12))
    # Every structured request gets an empty summary: the recorder's, two memory blocks' and the summary's, each
    # asked once more.
    narrator_server.script_json(*[{"summary": ""}] * 6)
    result = await play(campaign)
    run = await CheckpointRun.objects.aget(node_id=result.node_id)
    assert run.status == CheckpointRun.Status.FAILED and "summary is 0 characters long" in run.error
    node = await Node.objects.aget(pk=result.node_id)
    assert node.text.startswith("More rain falls")
    assert not await Checkpoint.objects.aexists()
    # Run again (the worker's retry), it tries again; once done, running it again does nothing.
    narrator_server.script_json(summary_reply("RETRIED: the walk so far."))
    assert await compaction.checkpoint(result.node_id) == CheckpointRun.Status.WRITTEN
    run = await CheckpointRun.objects.aget(node_id=result.node_id)
    assert run.attempts == 2 and not run.error
    assert await compaction.checkpoint(result.node_id) is None


async def test_between_rotations_every_prompt_begins_with_the_previous_one_over_200_turns(owner, narrator_server):
    campaign = await sync_to_async(make_campaign)(owner, context_token_budget=2048, max_output_tokens=120)
    narrator_server.script(*[f"Turn {n}: the rain keeps falling on the long road north. " * 3 for n in range(200)])
    narrator_server.script_json(*[summary_reply(f"SUMMARY-{n}: the road so far.") for n in range(1000)])
    prompts, used = [], []
    for turn in range(200):
        result = await play(campaign, f"walk on, step {turn}")
        prompts.append(narration(narrator_server)[-1]["messages"])
        used.append((await report_of(result.node_id))["checkpoint"])
    rotations = breaks = 0
    for number in range(1, 200):
        previous, current = prompts[number - 1], prompts[number]
        same = (used[number - 1] or {}).get("id") == (used[number] or {}).get("id")
        if not same:
            rotations += 1
        head_of_previous = _rendered(previous[:-1])  # up to the end of its history section
        if not _rendered(current).startswith(head_of_previous):
            breaks += 1
            assert not same, f"turn {number} broke the cache without a checkpoint rotation"
    assert 2 <= rotations <= 40, rotations
    assert breaks <= rotations


def _rendered(messages):
    return "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages)


@pytest.fixture(autouse=True)
def _quick_timeouts(settings):
    settings.STORYTELLER_CHECKPOINT_TIMEOUT = 20



async def test_a_new_line_is_never_seeded_from_the_abandoned_lines_summary(campaign, narrator_server):
    await sync_to_async(long_story)(campaign)
    narrator_server.script_json(summary_reply("LINE-A-SUMMARY of the first road."))
    await play(campaign)
    first = await Checkpoint.objects.aget()

    @sync_to_async
    def diverge_before_it():
        campaign.refresh_from_db()
        while campaign.head_depth > first.depth - 4:
            story.undo(campaign)
        long_story(campaign, turns=30)

    await diverge_before_it()
    narrator_server.script_json(*[summary_reply(f"LINE-B-SUMMARY {n}.") for n in range(10)])
    narrator_server.requests.clear()
    await play(campaign)
    requests = summary_requests(narrator_server)
    assert requests and not requests[0]["messages"][1]["content"].startswith("Summary of the story so far")
    for body in narrator_server.bodies("/api/chat"):
        assert "LINE-A-SUMMARY" not in sent_text(body)
    assert await Checkpoint.objects.filter(pk=first.pk).aexists()  # kept for the line it belongs to


async def test_after_every_checkpoint_is_deleted_the_next_turn_that_needs_one_rebuilds_it(campaign, narrator_server):
    await sync_to_async(long_story)(campaign)
    narrator_server.script_json(summary_reply("BEFORE-DELETION."))
    await play(campaign)
    nodes_before = await sync_to_async(lambda: list(Node.objects.values_list("id", "text")))()
    assert await sync_to_async(checkpoints.delete_all)(campaign.pk) == 1
    assert await sync_to_async(lambda: list(Node.objects.values_list("id", "text")))() == nodes_before
    narrator_server.script_json(summary_reply("AFTER-DELETION."))
    narrator_server.requests.clear()
    await play(campaign)
    assert summary_requests(narrator_server)
    assert "AFTER-DELETION." in sent_text(narration(narrator_server)[-1])
    assert await Node.objects.acount() == len(nodes_before) + 2  # the whole history is still stored


@pytest.mark.parametrize("failure", ["stall", "malformed"])
async def test_a_stalled_or_malformed_summary_fails_the_turn_and_writes_nothing(campaign, narrator_server, settings,
                                                                                failure):
    await sync_to_async(long_story)(campaign)
    before = await written()
    if failure == "stall":
        settings.STORYTELLER_CHECKPOINT_TIMEOUT = 0.5
        narrator_server.stall(3)
    else:
        narrator_server.script_json("this is not JSON {", "this is not JSON {")  # asked once more
    with pytest.raises(turns.TurnFailed) as caught:
        await play(campaign)
    assert "Nothing was sent or saved" in str(caught.value)
    assert await written() == before
    assert not narration(narrator_server)
