"""The play websocket, over a real ASGI websocket: auth, origin, streaming, escaping, stop."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from campaigns.models import Node
from storyteller.asgi import application
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


async def frames_until_body(communicator, timeout=10):
    """Collect frames until the play body (sent when a turn ends) arrives."""
    frames = []
    while True:
        frame = await communicator.receive_from(timeout=timeout)
        frames.append(frame)
        if 'id="play-body"' in frame:
            return frames


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
    frames = await frames_until_body(communicator)
    assert 'id="pending-reply"' in frames[0]
    chunks = [f for f in frames if 'id="pending-text"' in f and "beforeend" in f]
    assert len(chunks) >= 3
    node = await Node.objects.aget(depth=2)
    assert f'data-node-id="{node.pk}"' in frames[-1] and 'data-role="narrator"' in frames[-1]
    assert 'id="action-form"' in frames[-1], "the form is cleared after a committed turn"
    await communicator.disconnect()


async def test_model_output_is_escaped_chunk_by_chunk_and_in_the_story(campaign, owner, narrator_server):
    narrator_server.script(["The ", "<scr", "ipt>alert(1)</scr", "ipt>", " <b>bold</b>"])
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "<img src=x onerror=alert(2)>"})
    frames = await frames_until_body(communicator)
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
    frames = await frames_until_body(communicator)
    assert "Stopped. Nothing was saved." in frames[-1]
    assert await Node.objects.acount() == 1
    await communicator.disconnect()


async def test_a_second_action_while_one_is_streaming_is_refused(campaign, owner, narrator_server):
    narrator_server.chunk_delay(0.05)
    narrator_server.script(" word" * 40)
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "first"})
    await communicator.receive_from()
    await communicator.send_json_to({"mode": "do", "text": "second"})
    frames = await frames_until_body(communicator)
    assert "still being written" in frames[-1]
    await frames_until_body(communicator)  # the first turn completes
    assert await Node.objects.filter(role="player").acount() == 1
    await communicator.disconnect()


async def test_an_empty_action_is_refused_with_what_to_do(campaign, owner, narrator_server):
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "  "})
    frames = await frames_until_body(communicator)
    assert "Write what you do or say, or choose Continue." in frames[-1]
    assert narrator_server.bodies("/api/chat") == []
    await communicator.disconnect()


async def test_a_failed_turn_shows_the_error_inline(campaign, owner, narrator_server):
    narrator_server.not_found()
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "look"})
    frames = await frames_until_body(communicator)
    assert 'id="turn-error"' in frames[-1] and "ollama pull" in frames[-1]
    assert 'id="action-form"' not in frames[-1], "the person's text stays in the form"
    await communicator.disconnect()


async def test_retry_over_the_socket_replaces_the_shown_reply(campaign, owner, narrator_server):
    narrator_server.script("First telling.", "Second telling.")
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "look"})
    await frames_until_body(communicator)
    first = await Node.objects.aget(text="First telling.")
    await communicator.send_json_to({"action": "retry"})
    frames = await frames_until_body(communicator)
    assert f'id="node-{first.pk}" hx-swap-oob="delete"' in frames[0]
    assert "Second telling." in frames[-1] and "First telling." not in frames[-1]
    await communicator.disconnect()


async def test_another_tab_is_redrawn_after_a_turn(campaign, owner, narrator_server):
    narrator_server.script("Shared news.")
    one, _ = await connect(campaign, owner)
    two, _ = await connect(campaign, owner)
    await one.send_json_to({"mode": "do", "text": "look"})
    await frames_until_body(one)
    frames = await frames_until_body(two)
    assert "Shared news." in frames[-1]
    await one.disconnect()
    await two.disconnect()


async def test_an_undo_redraws_the_other_tabs_but_not_the_tab_that_made_it(campaign, owner, narrator_server):
    from django.urls import reverse

    one, _ = await connect(campaign, owner, tab="tab-one")
    two, _ = await connect(campaign, owner, tab="tab-two")
    await one.send_json_to({"mode": "do", "text": "look"})
    await frames_until_body(one)
    await frames_until_body(two)

    @sync_to_async
    def undo_from_tab_one():
        client = Client()
        client.force_login(owner)
        return client.post(reverse("undo", args=[campaign.pk]), HTTP_HX_REQUEST="true",
                           HTTP_X_STORYTELLER_TAB="tab-one")

    response = await undo_from_tab_one()
    assert response.status_code == 200
    frames = await frames_until_body(two)
    assert 'data-role="narrator"' not in frames[-1]
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
    frames = await frames_until_body(communicator)
    [notice] = [index for index, frame in enumerate(frames) if 'id="turn-notice"' in frame and "summarising" in frame]
    first_chunk = next(index for index, frame in enumerate(frames) if frame.startswith('<span id="pending-text"'))
    assert notice < first_chunk
    assert "summarising" not in frames[-1], "the committed story replaces the notice"
    await communicator.disconnect()
