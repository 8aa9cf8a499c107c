"""One turn end to end through the real fake model server: stream, commit, fail cleanly."""

import asyncio

import pytest
from asgiref.sync import sync_to_async

from campaigns import lineage, story
from campaigns.models import Campaign, ContextSnapshot, Node
from storyteller import turns
from storyteller.context import Action
from tests.campaigns.test_lineage import act

pytestmark = pytest.mark.django_db(transaction=True)


async def play(campaign, action=None, *, retry=False):
    received = []

    async def relay(text):
        received.append(text)

    result = await turns.play_turn(campaign.pk, action or Action(mode="do", text="open the gate"), relay, retry=retry)
    return result, received


def narration(server):
    """Return the bodies of the narration requests, leaving out the recorder's structured ones."""
    return [body for body in server.bodies("/api/chat") if "format" not in body]


async def count_nodes():
    return await Node.objects.acount()


async def test_a_turn_streams_the_reply_and_commits_action_reply_and_snapshot(campaign, narrator_server):
    narrator_server.script("The gate swings open onto a silent courtyard.")
    result, received = await play(campaign)
    assert "".join(received) == "The gate swings open onto a silent courtyard."
    assert len(received) > 3, "the reply arrives chunk by chunk"
    node = await Node.objects.select_related("snapshot").aget(pk=result.node_id)
    assert node.text == "The gate swings open onto a silent courtyard."
    assert node.depth == 2 and node.role == "narrator"
    assert node.snapshot.prompt_eval_count is not None and node.snapshot.eval_count is not None
    assert node.snapshot.report["usage"]["eval_count"] == node.snapshot.eval_count
    assert node.snapshot.model == "qwen2.5:3b-instruct" and node.snapshot.api == "ollama"
    player = await Node.objects.aget(depth=1)
    assert (player.mode, player.text) == ("do", "open the gate")


async def test_the_model_receives_the_built_prompt_and_the_campaign_settings(campaign, narrator_server):
    await play(campaign, Action(mode="say", text="Hello?"))
    body = narration(narrator_server)[-1]
    assert body["messages"][0]["role"] == "system"
    assert "Magic cannot resurrect the dead." in body["messages"][0]["content"]
    assert body["messages"][-1]["content"] == 'The player\'s character says: "Hello?"'
    assert body["options"]["num_ctx"] == campaign.context_token_budget
    assert body["options"]["num_predict"] == campaign.max_output_tokens
    assert body["stream"] is True


async def test_a_mid_stream_error_saves_nothing_and_says_what_happened(campaign, narrator_server):
    narrator_server.fail_mid_stream(after_chunks=2, message="CUDA out of memory")
    with pytest.raises(turns.TurnFailed) as caught:
        await play(campaign)
    assert "CUDA out of memory" in str(caught.value) and "Nothing was saved" in str(caught.value)
    assert await count_nodes() == 1
    refreshed = await Campaign.objects.aget(pk=campaign.pk)
    assert refreshed.head_depth == 0


async def test_a_missing_model_names_the_pull_command(campaign, narrator_server):
    narrator_server.not_found()
    with pytest.raises(turns.TurnFailed) as caught:
        await play(campaign)
    assert "ollama pull qwen2.5:3b-instruct" in str(caught.value)
    assert await count_nodes() == 1


async def test_a_configured_server_that_is_down_fails_clearly_instead_of_switching_narrators(
    campaign, narrator_server
):
    narrator_server.refuse()
    with pytest.raises(turns.TurnFailed) as caught:
        await play(campaign)
    assert "not running" in str(caught.value) and narrator_server.url in str(caught.value)
    assert await count_nodes() == 1


async def test_an_empty_reply_is_not_saved(campaign, narrator_server):
    narrator_server.script("   ")
    with pytest.raises(turns.TurnFailed, match="empty reply"):
        await play(campaign)
    assert await count_nodes() == 1


async def test_a_reply_cut_off_at_the_limit_is_saved_with_a_notice(campaign, narrator_server):
    await sync_to_async(Campaign.objects.filter(pk=campaign.pk).update)(max_output_tokens=3)
    narrator_server.script("one two three four five six")
    result, _ = await play(campaign)
    assert "cut off" in result.notice
    node = await Node.objects.select_related("snapshot").aget(pk=result.node_id)
    assert node.snapshot.done_reason == "length"


async def test_cancelling_a_turn_stops_the_model_and_saves_nothing(campaign, narrator_server):
    narrator_server.chunk_delay(0.05)
    narrator_server.script(" word" * 200)
    task = asyncio.create_task(play(campaign))
    while len(narrator_server.chunks) < 3:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):
        if narrator_server.cancelled:
            break
        await asyncio.sleep(0.02)
    assert narrator_server.cancelled == 1, "closing the stream must close the connection"
    assert await count_nodes() == 1


async def test_two_concurrent_turns_one_wins_and_the_other_is_told_the_story_moved_on(campaign, narrator_server):
    narrator_server.chunk_delay(0.02)
    narrator_server.script("First tab's reply is here.", "Second tab's reply is here.")
    results = await asyncio.gather(
        play(campaign, Action(mode="do", text="tab one")),
        play(campaign, Action(mode="do", text="tab two")),
        return_exceptions=True,
    )
    failures = [r for r in results if isinstance(r, Exception)]
    assert len(failures) == 1
    assert isinstance(failures[0], turns.TurnFailed) and "moved on" in str(failures[0])
    assert await count_nodes() == 3
    refreshed = await Campaign.objects.aget(pk=campaign.pk)
    assert refreshed.head_depth == 2
    integrity = await sync_to_async(_integrity)()
    assert integrity == "ok"


def _integrity():
    from django.db import connection

    from storyteller import vendors

    if vendors.is_postgres():
        return "ok"  # no file to check: the database's own write-ahead log keeps it whole
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA integrity_check")
        return cursor.fetchone()[0]


async def test_retry_sends_the_same_action_without_the_replaced_reply_and_keeps_both(campaign, narrator_server):
    narrator_server.script("REPLACED-REPLY the first telling.", "The second telling.")
    await play(campaign, Action(mode="do", text="open the gate"))
    result, _ = await play(campaign, retry=True)
    body = narration(narrator_server)[-1]
    prompt = " ".join(m["content"] for m in body["messages"])
    assert "REPLACED-REPLY" not in prompt
    assert body["messages"][-1]["content"] == "The player's character acts: open the gate"
    assert await Node.objects.filter(role="narrator", depth=2).acount() == 2
    assert await ContextSnapshot.objects.acount() == 2
    new = await Node.objects.aget(pk=result.node_id)
    assert new.text == "The second telling."


async def test_an_undone_line_never_reaches_the_narrator_again(campaign, narrator_server):
    await sync_to_async(act)(campaign, "read the grimoire", "ABANDONED-CANARY glows.")
    await sync_to_async(story.undo)(campaign)
    await play(campaign, Action(mode="do", text="walk to the well"))
    prompt = " ".join(m["content"] for m in narration(narrator_server)[-1]["messages"])
    assert "ABANDONED-CANARY" not in prompt and "grimoire" not in prompt


async def test_overflow_fails_the_turn_before_anything_is_sent(campaign, narrator_server):
    await sync_to_async(Campaign.objects.filter(pk=campaign.pk).update)(context_token_budget=700, max_output_tokens=300)
    with pytest.raises(turns.TurnFailed, match="context_token_budget"):
        await play(campaign, Action(mode="do", text="shout " * 300))
    assert narrator_server.bodies("/api/chat") == []
    assert await count_nodes() == 1


async def test_path_after_commit_is_the_played_line(campaign, narrator_server):
    await play(campaign)
    refreshed = await Campaign.objects.aget(pk=campaign.pk)
    nodes = await sync_to_async(lambda: [n.depth for n in lineage.path_of(refreshed).nodes()])()
    assert nodes == [0, 1, 2]
