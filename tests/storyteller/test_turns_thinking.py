"""A reasoning model's thinking in a turn: kept beside the reply, never in it, history, the recorder or its tokens."""

import pytest

from campaigns.models import Node
from storyteller import context, turns
from storyteller.steps import postturn
from storyteller.context import Action
from tests.fake_ollama import Thought

pytestmark = pytest.mark.django_db(transaction=True)

THOUGHT = "They want the cellar. The key is narrator only: I must not mention the loose brick."
REPLY = "The cellar door is locked, and the lamp gutters."


async def play(campaign, text="open the cellar"):
    relayed, thought = [], []

    async def relay(chunk):
        relayed.append(chunk)

    async def think(chunk, taken_back=False):
        thought.append((chunk, taken_back))

    result = await turns.play_turn(campaign.pk, Action(mode="do", text=text), relay, think=think)
    await result.post_turn
    return result, "".join(relayed), thought


def narrations(server):
    return [body for body in server.bodies("/api/chat") if "format" not in body]


def structured(server):
    return [body for body in server.bodies("/api/chat") if "format" in body]


@pytest.mark.parametrize("form", ["field", "tags", "open"])
async def test_each_form_of_thinking_is_kept_beside_the_reply_and_out_of_history_and_recording(
        campaign, narrator_server, form):
    narrator_server.script(Thought(THOUGHT, REPLY, form=form))
    result, relayed, thought = await play(campaign)
    node = await Node.objects.select_related("snapshot").aget(pk=result.node_id)
    assert node.text == REPLY and node.thinking == THOUGHT
    assert node.tokens == context.node_tokens("narrator", "", REPLY), "the thinking is not counted in the reply"
    assert node.snapshot.report["usage"]["thinking_tokens"] > 0
    assert "".join(chunk for chunk, _ in thought).strip().startswith("They want") or form == "open"
    if form == "open":
        # The lone closing tag took back what had streamed as the reply: the page is told, and shows the rest.
        assert any(taken for _, taken in thought)
        assert relayed.endswith(REPLY)
    else:
        assert relayed.strip() == REPLY

    recorded = structured(narrator_server)
    assert recorded, "the recorder ran on the reply"
    for body in recorded:
        assert "loose brick" not in str(body["messages"]), "the recorder never reads the thinking"
        assert body["think"] is False, "a structured request asks the model not to think"

    narrator_server.script("The lamp steadies.")
    await play(campaign, "wait")
    last = narrations(narrator_server)[-1]
    assert REPLY in str(last["messages"]) and "loose brick" not in str(last["messages"]), "history has no thinking"


async def test_a_reply_that_is_only_thinking_fails_the_turn_with_that_reason(campaign, narrator_server):
    narrator_server.script(Thought(THOUGHT, "", form="tags"))
    with pytest.raises(turns.TurnFailed) as caught:
        await play(campaign)
    assert "only thought and wrote no reply" in str(caught.value) and "nothing was saved" in str(caught.value)
    assert await Node.objects.acount() == 1


async def test_thinking_cut_off_by_the_limit_says_the_limit(campaign, narrator_server):
    await campaign.__class__.objects.filter(pk=campaign.pk).aupdate(max_output_tokens=5)
    narrator_server.script(Thought(THOUGHT, REPLY, form="field"))
    with pytest.raises(turns.TurnFailed) as caught:
        await play(campaign)
    assert "until the 5-token limit cut it off" in str(caught.value)
    await postturn.settle()
