"""Impersonate: the narrator drafts the player's next move; nothing is sent or saved; the next turn shows the request."""

import asyncio

import pytest
from asgiref.sync import sync_to_async

from campaigns.models import Node, Persona
from storyteller import turns
from storyteller.context import Action
from tests.campaigns.test_lineage import act
from tests.storyteller.test_consumers import connect, frames_until_end, outcome_of
from tests.storyteller.test_turns_thinking import narrations

pytestmark = pytest.mark.django_db(transaction=True)


async def quiet(_):
    await asyncio.sleep(0)


async def test_a_draft_shares_the_narration_prompt_up_to_its_tail_and_saves_nothing(campaign, narrator_server):
    await sync_to_async(act)(campaign, "open the gate", "The gate creaks open.")
    narrator_server.script("I step into the courtyard and call out.")
    draft = await turns.draft_action(campaign.pk, quiet)
    assert draft == "I step into the courtyard and call out."
    assert await Node.objects.acount() == 3, "nothing was saved"
    drafted = narrations(narrator_server)[-1]
    assert "draft Aldric's next action or words" in drafted["messages"][-1]["content"]
    assert drafted["options"]["num_predict"] == turns.DRAFT_TOKENS

    narrator_server.script("Echoes answer.")
    result = await turns.play_turn(campaign.pk, Action(mode="do", text="I step into the courtyard and call out loud."),
                                   quiet)
    await result.post_turn
    played = narrations(narrator_server)[-1]
    assert played["messages"][:-1] == drafted["messages"][:-1], "the draft shared every message but the tail"
    node = await Node.objects.select_related("snapshot").aget(pk=result.node_id)
    [shown] = node.snapshot.report["drafts"]
    assert shown["draft"] == draft and shown["sent"] == "edited before it was sent"
    assert shown["shared_messages"] == len(played["messages"]) - 1

    narrator_server.script("Silence.")
    result = await turns.play_turn(campaign.pk, Action(mode="do", text="wait"), quiet)
    await result.post_turn
    node = await Node.objects.select_related("snapshot").aget(pk=result.node_id)
    assert "drafts" not in node.snapshot.report, "a draft belongs to the turn that follows it only"


async def test_the_draft_is_written_as_the_persona(campaign, owner, narrator_server):
    persona = await Persona.objects.acreate(owner=owner, name="Wren", description="A lamplighter with a limp.")
    campaign.persona = persona
    await campaign.asave()
    await turns.draft_action(campaign.pk, quiet)
    drafted = narrations(narrator_server)[-1]
    assert "draft Wren's next action" in drafted["messages"][-1]["content"]
    assert "A lamplighter with a limp." in drafted["messages"][0]["content"]


async def test_over_the_socket_the_draft_streams_for_the_box_and_stop_keeps_it(campaign, owner, narrator_server):
    narrator_server.chunk_delay(0.05)
    narrator_server.script("I" + " wait" * 100)
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"action": "impersonate"})
    start = await communicator.receive_from()
    assert 'id="draft-stream"' in start and "data-drafting" in start and "Drafting your next move" in start
    chunk = await communicator.receive_from()
    assert 'id="draft-stream" hx-swap-oob="beforeend"' in chunk
    await communicator.send_json_to({"action": "stop"})
    frames = await frames_until_end(communicator)
    assert outcome_of(frames[-1]) == "drafted" and "what was drafted is in the box" in frames[-1]
    assert await Node.objects.acount() == 1
    await communicator.disconnect()


async def test_a_draft_that_fails_says_why_and_the_socket_plays_on(campaign, owner, narrator_server):
    narrator_server.not_found()
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"action": "impersonate"})
    frames = await frames_until_end(communicator)
    assert outcome_of(frames[-1]) == "drafted" and "ollama pull" in frames[-1]
    narrator_server.script("The gate opens.")
    await communicator.send_json_to({"mode": "do", "text": "open the gate"})
    assert outcome_of((await frames_until_end(communicator))[-1]) == "committed"
    await communicator.disconnect()
