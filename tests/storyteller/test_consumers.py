"""The play websocket, over a real ASGI websocket: auth, origin, streaming, escaping, stop."""

import asyncio
import re

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from campaigns import lineage
from campaigns.models import Node
from storyteller.asgi import application
from storyteller.steps import compaction, postturn
from tests.campaigns.test_lineage import act
from tests.storyteller.test_context_checkpoints import long_story

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://127.0.0.1:8000")


@sync_to_async
def session_cookie(user):
    client = Client()
    client.force_login(user)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


async def connect(campaign, user=None, origin=ORIGIN, tab=""):
    headers = [(b"host", b"127.0.0.1:8000"), origin]
    if user is not None:
        headers.append(await session_cookie(user))
    query = f"?tab={tab}" if tab else ""
    communicator = WebsocketCommunicator(application, f"/ws/play/{campaign.pk}/{query}", headers=headers)
    connected, _ = await communicator.connect()
    return communicator, connected


async def frames_until_end(communicator, timeout=10):
    """Collect frames until the end of a turn (or of a refused message) arrives: it always carries the outcome."""
    frames = []
    while True:
        frame = await communicator.receive_from(timeout=timeout)
        frames.append(frame)
        if 'id="turn-outcome"' in frame:
            return frames


def outcome_of(frame):
    return re.search(r'data-outcome="(\w+)"', frame).group(1)


async def refresh_frame(communicator, timeout=10):
    """Return the frame that asks another tab to read the story again (over HTTP)."""
    frame = await communicator.receive_from(timeout=timeout)
    assert 'id="story-refresh"' in frame and 'hx-trigger="load"' in frame, frame
    return frame


async def test_an_anonymous_socket_is_refused(campaign):
    communicator, connected = await connect(campaign)
    assert not connected
    await communicator.disconnect()


async def test_another_users_campaign_socket_is_refused(campaign, outsider):
    communicator, connected = await connect(campaign, outsider)
    assert not connected
    await communicator.disconnect()


async def test_a_socket_from_another_origin_is_refused(campaign, owner):
    communicator, connected = await connect(campaign, owner, origin=(b"origin", b"http://evil.example"))
    assert not connected
    await communicator.disconnect()


async def test_a_turn_streams_chunks_then_the_committed_story(campaign, owner, narrator_server):
    narrator_server.script("The courtyard is silent.")
    communicator, connected = await connect(campaign, owner)
    assert connected
    await communicator.send_json_to({"mode": "do", "text": "open the gate", "direction": "", "HEADERS": {}})
    frames = await frames_until_end(communicator)
    assert 'id="pending-reply"' in frames[0]
    chunks = [f for f in frames if 'id="pending-text"' in f and "beforeend" in f]
    assert len(chunks) >= 3
    player, node = [n async for n in Node.objects.filter(depth__in=[1, 2]).order_by("depth")]
    assert f'data-node-id="{node.pk}"' in frames[-1] and 'data-role="narrator"' in frames[-1]
    assert f'id="node-{player.pk}"' in frames[-1] and 'hx-swap-oob="outerHTML:#pending-player"' in frames[-1]
    assert 'hx-swap-oob="outerHTML:#pending-reply"' in frames[-1]
    assert outcome_of(frames[-1]) == "committed"
    assert not any('id="action-form"' in frame for frame in frames), "the form is never swapped: typed text stays"
    assert not any('id="play-body"' in frame for frame in frames), "only what changed is sent, never the story"
    await communicator.disconnect()


async def test_the_next_action_is_taken_as_soon_as_the_last_reply_has_ended_on_the_page(
        campaign, owner, narrator_server, monkeypatch):
    from channels.layers import InMemoryChannelLayer

    # The end of a turn re-enables Send on the page; whatever the turn still does after it (telling other tabs
    # the story moved, slow when the event loop is busy with the post-turn work) must not refuse the next action.
    slow_send = InMemoryChannelLayer.group_send

    async def group_send(self, group, message):
        await asyncio.sleep(0.5)
        await slow_send(self, group, message)

    monkeypatch.setattr(InMemoryChannelLayer, "group_send", group_send)
    narrator_server.script("The courtyard is silent.", "The gate creaks open.")
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "listen"})
    assert outcome_of((await frames_until_end(communicator))[-1]) == "committed"
    await communicator.send_json_to({"mode": "do", "text": "open the gate"})
    frames = await frames_until_end(communicator)
    assert outcome_of(frames[-1]) == "committed", frames[-1]
    await communicator.disconnect()


async def test_model_output_is_escaped_chunk_by_chunk_and_in_the_story(campaign, owner, narrator_server):
    narrator_server.script(["The ", "<scr", "ipt>alert(1)</scr", "ipt>", " <b>bold</b>"])
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "<img src=x onerror=alert(2)>"})
    frames = await frames_until_end(communicator)
    everything = "".join(frames)
    assert "<script" not in everything and "<b>" not in everything and "<img" not in everything
    assert "&lt;scr" in everything
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in frames[-1]
    await communicator.disconnect()


async def test_stop_cancels_the_reply_and_saves_nothing(campaign, owner, narrator_server):
    narrator_server.chunk_delay(0.05)
    narrator_server.script(" word" * 200)
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "wait"})
    await communicator.receive_from()  # the turn has started
    await communicator.receive_from()  # and the first words arrived
    await communicator.send_json_to({"action": "stop"})
    frames = await frames_until_end(communicator)
    assert "Stopped. Nothing was saved." in frames[-1] and outcome_of(frames[-1]) == "stopped"
    assert 'id="pending-reply" hx-swap-oob="delete"' in frames[-1]
    assert await Node.objects.acount() == 1
    await communicator.disconnect()


async def test_a_second_action_while_one_is_streaming_is_refused(campaign, owner, narrator_server):
    narrator_server.chunk_delay(0.05)
    narrator_server.script(" word" * 40)
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "first"})
    await communicator.receive_from()
    await communicator.send_json_to({"mode": "do", "text": "second"})
    frames = await frames_until_end(communicator)
    assert "still being written" in frames[-1] and outcome_of(frames[-1]) == "refused"
    assert 'id="pending-reply"' not in frames[-1], "the refusal leaves the reply being written alone"
    frames = await frames_until_end(communicator)  # the first turn completes
    assert outcome_of(frames[-1]) == "committed"
    assert await Node.objects.filter(role="player").acount() == 1
    await communicator.disconnect()


async def test_an_empty_action_is_refused_with_what_to_do(campaign, owner, narrator_server):
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "  "})
    frames = await frames_until_end(communicator)
    assert "Write what you do or say, or choose Continue." in frames[-1]
    assert narrator_server.bodies("/api/chat") == []
    await communicator.disconnect()


async def test_a_failed_turn_shows_the_error_inline(campaign, owner, narrator_server):
    narrator_server.not_found()
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "look"})
    frames = await frames_until_end(communicator)
    assert 'id="turn-error"' in frames[-1] and "ollama pull" in frames[-1]
    assert outcome_of(frames[-1]) == "failed", "the page gives the person's text back"
    assert 'id="send-button" type="submit" hx-swap-oob="true">Send<' in frames[-1]
    assert 'id="action-form"' not in frames[-1], "the person's text stays in the form"
    await communicator.disconnect()


async def test_retry_over_the_socket_replaces_the_shown_reply(campaign, owner, narrator_server):
    narrator_server.script("First telling.", "Second telling.")
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "look"})
    await frames_until_end(communicator)
    first = await Node.objects.aget(text="First telling.")
    await communicator.send_json_to({"action": "retry"})
    frames = await frames_until_end(communicator)
    assert f'id="node-{first.pk}" hx-swap-oob="delete"' in frames[0]
    assert "Second telling." in frames[-1] and "First telling." not in frames[-1]
    assert 'data-versions="2/2"' in frames[-1], "the new reply shows it is the second of two versions"
    await communicator.disconnect()


async def test_a_failed_retry_puts_the_reply_it_was_to_replace_back(campaign, owner, narrator_server):
    narrator_server.script("First telling.")
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "look"})
    await frames_until_end(communicator)
    first = await Node.objects.aget(text="First telling.")
    await postturn.settle()  # the recorder's own requests must not meet the failure meant for the retry
    narrator_server.not_found()
    await communicator.send_json_to({"action": "retry"})
    frames = await frames_until_end(communicator)
    assert f'id="node-{first.pk}" hx-swap-oob="delete"' in frames[0]
    assert f'id="node-{first.pk}"' in frames[-1] and 'hx-swap-oob="outerHTML:#pending-reply"' in frames[-1]
    assert "First telling." in frames[-1] and "ollama pull" in frames[-1]
    await communicator.disconnect()


async def test_another_tab_is_redrawn_after_a_turn(campaign, owner, narrator_server):
    narrator_server.script("Shared news.")
    one, _ = await connect(campaign, owner)
    two, _ = await connect(campaign, owner)
    await one.send_json_to({"mode": "do", "text": "look"})
    await frames_until_end(one)
    frame = await refresh_frame(two)
    assert "Shared news." not in frame, "the other tab reads the story over HTTP, not in a frame"
    assert await one.receive_nothing(timeout=0.3), "the tab that played has the new nodes already"
    await one.disconnect()
    await two.disconnect()


async def test_an_undo_redraws_the_other_tabs_but_not_the_tab_that_made_it(campaign, owner, narrator_server):
    from django.urls import reverse

    one, _ = await connect(campaign, owner, tab="tab-one")
    two, _ = await connect(campaign, owner, tab="tab-two")
    await one.send_json_to({"mode": "do", "text": "look"})
    await frames_until_end(one)
    await refresh_frame(two)

    @sync_to_async
    def undo_from_tab_one():
        client = Client()
        client.force_login(owner)
        return client.post(reverse("undo", args=[campaign.pk]), HTTP_HX_REQUEST="true",
                           HTTP_X_STORYTELLER_TAB="tab-one")

    response = await undo_from_tab_one()
    assert response.status_code == 200 and 'data-role="narrator"' not in response.content.decode()
    await refresh_frame(two)
    assert await one.receive_nothing(timeout=0.3), "the tab that undid already has its page from the response"
    await one.disconnect()
    await two.disconnect()


async def test_a_turn_that_must_summarise_first_says_so_before_the_reply_starts(campaign, owner, narrator_server):
    await sync_to_async(long_story)(campaign)
    narrator_server.script_json({"summary": "Aldric walked thirty turns through grass and rain.", "events": [],
                                 "memory": "Aldric walked on."})
    narrator_server.script("The rain stops.")
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "look around"})
    frames = await frames_until_end(communicator)
    [notice] = [index for index, frame in enumerate(frames) if 'id="turn-notice"' in frame and "summarising" in frame]
    first_chunk = next(index for index, frame in enumerate(frames) if frame.startswith('<span id="pending-text"'))
    assert notice < first_chunk
    assert "summarising" not in frames[-1], "the committed story replaces the notice"
    await communicator.disconnect()


async def test_an_action_over_the_limit_is_refused_with_the_limit_named_never_cut(campaign, owner, narrator_server):
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "x" * 100_000})
    frames = await frames_until_end(communicator)
    assert "Your action is 100,000 characters long; the limit is 4,000." in frames[-1]
    assert "Write what you do" not in frames[-1], "text was given: the error says what is wrong with it"
    assert outcome_of(frames[-1]) == "refused"
    await communicator.send_json_to({"mode": "do", "text": "look", "direction": "d" * 1001})
    frames = await frames_until_end(communicator)
    assert "The direction is 1,001 characters long; the limit is 1,000." in frames[-1]
    assert narrator_server.bodies("/api/chat") == [] and await Node.objects.acount() == 1
    await communicator.disconnect()


async def test_an_action_of_exactly_the_limit_is_played(campaign, owner, narrator_server):
    narrator_server.script("You said a lot.")
    campaign.context_token_budget = 16384
    await campaign.asave()
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "é" * 4000})
    frames = await frames_until_end(communicator)
    assert outcome_of(frames[-1]) == "committed", frames[-1]
    assert await Node.objects.filter(role="player", text="é" * 4000).aexists()
    await communicator.disconnect()


async def test_a_lone_surrogate_is_refused_in_words_and_the_socket_plays_on(campaign, owner, narrator_server):
    narrator_server.script("The bell rings.")
    communicator, _ = await connect(campaign, owner)
    # What a browser's JSON.stringify writes for a string holding half of a surrogate pair.
    await communicator.send_to(text_data='{"mode": "do", "text": "ring the bell \\ud83d now", "direction": ""}')
    frames = await frames_until_end(communicator)
    assert "not valid Unicode text" in frames[-1] and "position 15" in frames[-1]
    assert outcome_of(frames[-1]) == "refused"
    await communicator.send_to(text_data='{"mode": "do", "text": "ring", "direction": "\\udc00"}')
    frames = await frames_until_end(communicator)
    assert "The direction holds a broken character" in frames[-1]
    assert narrator_server.bodies("/api/chat") == []
    await communicator.send_json_to({"mode": "do", "text": "ring the bell \U0001F514 now"})
    frames = await frames_until_end(communicator)
    assert outcome_of(frames[-1]) == "committed" and "The bell rings." in frames[-1]
    await communicator.disconnect()


@pytest.mark.parametrize("message", [
    "not json at all",
    "[1, 2, 3]",
    '"a string"',
    "42",
    '{"mode": ["do"], "text": "look"}',
    '{"mode": "do", "text": {"nested": true}}',
    '{"action": null}',
    "[" * 100_000 + "]" * 100_000,
    '{"mode": "do", "text": "look", "n": 1' + "0" * 5000 + "}",
    b"\x00\x01binary",
])
async def test_a_malformed_message_gets_an_error_fragment_not_a_closed_socket(campaign, owner, narrator_server,
                                                                              message):
    narrator_server.script("Still here.")
    communicator, _ = await connect(campaign, owner)
    if isinstance(message, bytes):
        await communicator.send_to(bytes_data=message)
    else:
        await communicator.send_to(text_data=message)
    frames = await frames_until_end(communicator)
    assert "could not read that message" in frames[-1] and outcome_of(frames[-1]) == "refused"
    await communicator.send_json_to({"mode": "do", "text": "look"})
    frames = await frames_until_end(communicator)
    assert outcome_of(frames[-1]) == "committed" and "Still here." in frames[-1]
    await communicator.disconnect()


async def test_an_unknown_request_is_refused_without_echoing_it(campaign, owner, narrator_server):
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"action": "<b>" + "x" * 100_000})
    frames = await frames_until_end(communicator)
    assert "does not know that request" in frames[-1] and len(frames[-1]) < 2_000
    await communicator.disconnect()


async def test_an_unexpected_error_in_the_turn_ends_it_on_the_page_in_words(campaign, owner, narrator_server):
    """The campaign disappears while its reply is written (deleted in the admin): the commit cannot find its line."""
    narrator_server.chunk_delay(0.05)
    narrator_server.script(" word" * 40)
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "wait"})
    await communicator.receive_from()  # the turn has started
    await communicator.receive_from()  # and the first words arrived
    await sync_to_async(campaign.delete)()
    frames = await frames_until_end(communicator)
    end = frames[-1]
    assert "The turn failed unexpectedly" in end and outcome_of(end) == "failed"
    assert 'id="pending-reply" hx-swap-oob="delete"' in end and 'id="pending-player" hx-swap-oob="delete"' in end
    assert '>Send</button>' in end, "the send button is back: the page is not left writing"
    assert 'id="story-refresh"' in end, "the page reads the story again to show what was saved"
    await communicator.disconnect()


async def test_a_60_turn_story_of_4000_token_replies_still_updates_the_page(campaign, owner, narrator_server):
    """Each frame carries what changed, so none grows with the story (daphne refuses frames over 1 MiB)."""
    long_reply = "The lantern swings over the flooded road. " * 500  # about 4,000 tokens

    @sync_to_async
    def fifty_nine_turns():
        campaign.context_token_budget = 32768
        campaign.max_output_tokens = 4096
        campaign.save()
        for turn in range(59):
            act(campaign, f"walk on {turn}", f"Passage {turn}. {long_reply}")
        compaction.write_by_hand(campaign, "Aldric walked fifty-eight stretches of flooded road.")
        return sum(len(node.text) for node in lineage.path_of(campaign).nodes())

    story_size = await fifty_nine_turns()
    assert story_size > 1_200_000  # more than daphne's 1 MiB frame limit
    chunks = [long_reply[i:i + 2_000] for i in range(0, len(long_reply), 2_000)]
    narrator_server.script(chunks, chunks)
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "walk on 59"})
    frames = await frames_until_end(communicator, timeout=60)
    assert outcome_of(frames[-1]) == "committed"
    reply = await Node.objects.aget(depth=120, role="narrator")
    assert f'data-node-id="{reply.pk}"' in frames[-1]
    await communicator.send_json_to({"action": "retry"})
    frames += await frames_until_end(communicator, timeout=60)
    assert outcome_of(frames[-1]) == "committed"
    biggest = max(len(frame.encode()) for frame in frames)
    assert biggest < len(long_reply) + 16_000, f"a frame of {biggest:,} bytes: more than the new nodes"
    await communicator.disconnect()


async def test_a_reply_over_a_mebibyte_ends_its_turn_with_a_frame_daphne_accepts(campaign, owner, narrator_server):
    # Daphne refuses frames over 1 MiB: a reply this long once left the page stuck with the reply saved (issue 22).
    # 4,000 characters a token: 200 tokens (the campaign's limit) escape to more than a mebibyte of HTML.
    chunks = [("The tide rolls in & out <again>. " * 125)[:4000] for _ in range(300)]
    reply = "".join(chunks)
    narrator_server.script(chunks)
    communicator, connected = await connect(campaign, owner)
    assert connected
    await communicator.send_json_to({"mode": "do", "text": "wait for the tide"})
    frames = await frames_until_end(communicator, timeout=60)
    end = frames[-1]
    assert outcome_of(end) == "committed"
    assert len(end.encode()) < 1024 * 1024 and 'id="story-refresh"' in end, len(end.encode())
    assert all(len(frame.encode()) < 1024 * 1024 for frame in frames)
    await communicator.disconnect()
    saved = await sync_to_async(lambda: Node.objects.filter(campaign=campaign, role=Node.Role.NARRATOR).get().text)()
    assert len(saved) >= 800_000 and reply.startswith(saved)  # saved whole, up to the campaign's token limit
