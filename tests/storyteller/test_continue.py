"""Continue in place: the head's reply lengthened as a new version of itself, streamed onto its card; Stop keeps."""

import asyncio

import pytest
from asgiref.sync import sync_to_async

from campaigns import lineage
from campaigns.models import Campaign, Node
from storyteller import turns
from storyteller.steps import postturn
from tests.campaigns.test_lineage import act
from tests.storyteller.test_consumers import connect, frames_until_end, outcome_of
from tests.storyteller.test_turns_thinking import narrations

pytestmark = pytest.mark.django_db(transaction=True)

OLD = "The gate creaks open. Beyond it the courtyard"


async def played(campaign, text=OLD):
    await sync_to_async(act)(campaign, "open the gate", text)
    return await Node.objects.aget(depth=2)


async def shown(campaign):
    campaign = await Campaign.objects.aget(pk=campaign.pk)
    return await sync_to_async(lambda: list(lineage.path_of(campaign).nodes().values_list("text", flat=True)))()


async def test_continue_sends_the_reply_as_the_unfinished_last_message_and_saves_a_new_version(
        campaign, narrator_server):
    old = await played(campaign)
    narrator_server.script(" lies silent under the moon.")
    relayed = []

    async def relay(text):
        relayed.append(text)

    result = await turns.continue_reply(campaign.pk, relay)
    await result.post_turn
    body = narrations(narrator_server)[-1]
    assert body["messages"][-1] == {"role": "assistant", "content": OLD}, "the reply is the unfinished message"
    assert body["messages"][-2]["content"].endswith("The player's character acts: open the gate")
    node = await Node.objects.select_related("snapshot").aget(pk=result.node_id)
    assert node.text == OLD + " lies silent under the moon." and "".join(relayed) == " lies silent under the moon."
    assert node.depth == old.depth and node.pk != old.pk, "a new version, never an overwrite"
    assert (await Node.objects.aget(pk=old.pk)).text == OLD
    assert node.snapshot.report["continued"]["from"] == old.pk
    versions = await sync_to_async(lineage.versions)(campaign.pk, [node])
    assert versions[node.pk].count == 2 and versions[node.pk].previous == old.pk
    assert (await shown(campaign))[-1] == node.text


async def test_a_continuation_after_a_finished_sentence_gets_its_space(campaign, narrator_server):
    await played(campaign, "The gate creaks open.")
    narrator_server.script(["Rain", " falls."])
    result = await turns.continue_reply(campaign.pk, lambda text: asyncio.sleep(0))
    assert result.text == "The gate creaks open. Rain falls."
    await result.post_turn


async def test_stop_keeps_what_the_narrator_had_written(campaign, owner, narrator_server):
    old = await played(campaign)
    await postturn.settle()
    narrator_server.chunk_delay(0.05)
    narrator_server.script(" lies" + " silent" * 200)
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"action": "continue"})
    start = await communicator.receive_from()
    assert f'hx-swap-oob="outerHTML:#node-{old.pk}"' in start and OLD in start, "the reply's own card streams on"
    for _ in range(3):
        await communicator.receive_from()
    await communicator.send_json_to({"action": "stop"})
    frames = await frames_until_end(communicator)
    assert outcome_of(frames[-1]) == "committed" and "is kept, as a new version" in frames[-1]
    node = await Node.objects.exclude(pk=old.pk).aget(depth=2)
    assert node.text.startswith(OLD + " lies silent") and node.text.count("silent") < 200
    assert 'data-versions="2/2"' in frames[-1]
    await communicator.disconnect()


async def test_stopped_before_any_word_the_reply_comes_back_as_it_was(campaign, owner, narrator_server):
    old = await played(campaign)
    await postturn.settle()
    narrator_server.stall(5, path="/api/chat")
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"action": "continue"})
    await communicator.receive_from()
    await communicator.send_json_to({"action": "stop"})
    frames = await frames_until_end(communicator)
    assert outcome_of(frames[-1]) == "stopped" and "the reply is as it was" in frames[-1]
    assert f'id="node-{old.pk}"' in frames[-1] and 'hx-swap-oob="outerHTML:#pending-reply"' in frames[-1]
    assert await Node.objects.acount() == 3
    await communicator.disconnect()


async def test_there_is_nothing_to_continue_before_the_first_reply(campaign, narrator_server):
    with pytest.raises(turns.TurnFailed) as caught:
        await turns.continue_reply(campaign.pk, lambda text: asyncio.sleep(0))
    assert "no reply to continue yet" in str(caught.value)
    assert narrator_server.bodies("/api/chat") == []


async def test_a_reply_that_fills_the_window_is_refused_with_what_to_change(campaign, narrator_server):
    await Campaign.objects.filter(pk=campaign.pk).aupdate(context_token_budget=1200, max_output_tokens=100)
    await played(campaign, "word " * 1000)
    with pytest.raises(turns.TurnFailed) as caught:
        await turns.continue_reply(campaign.pk, lambda text: asyncio.sleep(0))
    assert "Raise context_token_budget" in str(caught.value) and "Nothing was changed" in str(caught.value)
    await postturn.settle()


async def test_an_openai_compatible_server_is_asked_to_go_on_from_the_last_message(fake_ollama):
    from storyteller.llm import ChatOptions, OpenAIClient
    from tests.llm.streams import collect

    client = OpenAIClient(fake_ollama.url, "qwen")
    await collect(client.stream_chat([{"role": "user", "content": "Go."},
                                      {"role": "assistant", "content": "The gate"}], ChatOptions()))
    [body] = fake_ollama.bodies("/v1/chat/completions")
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
