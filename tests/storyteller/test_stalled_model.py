"""One slow model call freezes nobody else (issue 10, point 3).

Every database call of every websocket and every sync view shares one thread
under ASGI (``database_sync_to_async``); a model call made on it stalls them
all. These tests stall one endpoint of the real fake server for 30 s and check
that everybody else keeps playing, over real websockets and the real ASGI app.
"""

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient, Client
from django.urls import reverse

from campaigns.models import Node
from memory import bank
from storyteller.asgi import application
from storyteller.llm.scripted import vector_for
from tests.conftest import make_campaign

pytestmark = pytest.mark.django_db(transaction=True)

SLOW_MODEL = "slow-embed"
STALL = 30  # far longer than any limit below: a test that waits for it has already failed
LIMIT = 1.0  # seconds: what another person may wait while one model call stalls


def _login(user):
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def _remembering_campaign(campaign):
    """Give ``campaign`` a memory with a vector from SLOW_MODEL, so its every turn embeds its query with it."""
    campaign.embed_model = SLOW_MODEL
    campaign.save(update_fields=["embed_model"])
    memory = bank.add_by_hand(campaign, "Aldric hid the silver key under the abbey's third flagstone.")
    bank.store_vectors(SLOW_MODEL, [(memory.pk, vector_for(memory.text))])


async def _socket(campaign, session):
    headers = [(b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"),
               (b"cookie", f"sessionid={session}".encode())]
    return WebsocketCommunicator(application, f"/ws/play/{campaign.pk}/", headers=headers)


async def _until(condition, timeout=5.0):
    deadline = time.perf_counter() + timeout
    while not condition():
        assert time.perf_counter() < deadline, "the stalled request never reached the model server"
        await asyncio.sleep(0.01)


async def _frames_until_end(communicator, timeout):
    frames = []
    while True:
        frames.append(await communicator.receive_from(timeout=timeout))
        if 'id="turn-outcome"' in frames[-1]:
            return frames


async def _other_person_plays(campaign, session):
    """Connect to ``campaign`` and play one turn; return (seconds to connect, seconds for the turn)."""
    started = time.perf_counter()
    other = await _socket(campaign, session)
    connected, _ = await other.connect(timeout=LIMIT)
    connect_seconds = time.perf_counter() - started
    assert connected
    started = time.perf_counter()
    await other.send_json_to({"mode": "do", "text": "look around"})
    frames = await _frames_until_end(other, timeout=LIMIT)
    turn_seconds = time.perf_counter() - started
    await other.disconnect()
    assert 'data-role="narrator"' in frames[-1]
    return connect_seconds, turn_seconds


@pytest.fixture
def stalled_embedding(narrator_server):
    narrator_server.stall(STALL, persistent=True, path="/api/embed", model=SLOW_MODEL)
    return narrator_server


async def _start_stalled_turn(campaign, session, server):
    stalled = await _socket(campaign, session)
    connected, _ = await stalled.connect()
    assert connected
    await stalled.send_json_to({"mode": "do", "text": "where is the silver key?"})
    await stalled.receive_from()  # the turn has started
    await _until(lambda: any((request.body or {}).get("model") == SLOW_MODEL for request in server.requests))
    return stalled


async def test_another_person_connects_and_plays_while_one_campaigns_embedding_stalls(
        campaign, owner, outsider, stalled_embedding):
    await sync_to_async(_remembering_campaign)(campaign)
    elsewhere = await sync_to_async(make_campaign)(outsider, title="Elsewhere")
    mine, theirs = await sync_to_async(_login)(owner), await sync_to_async(_login)(outsider)
    stalled = await _start_stalled_turn(campaign, mine, stalled_embedding)
    try:
        connect_seconds, turn_seconds = await _other_person_plays(elsewhere, theirs)
        assert connect_seconds < LIMIT and turn_seconds < LIMIT
        assert await Node.objects.filter(campaign=elsewhere).acount() == 3
    finally:
        await stalled.disconnect()


async def test_stop_ends_a_turn_whose_embedding_stalls_at_once(campaign, owner, stalled_embedding):
    await sync_to_async(_remembering_campaign)(campaign)
    stalled = await _start_stalled_turn(campaign, await sync_to_async(_login)(owner), stalled_embedding)
    try:
        started = time.perf_counter()
        await stalled.send_json_to({"action": "stop"})
        frames = await _frames_until_end(stalled, timeout=LIMIT)
        assert time.perf_counter() - started < LIMIT
        assert "Stopped. Nothing was saved." in frames[-1]
        assert await Node.objects.filter(campaign=campaign).acount() == 1
    finally:
        await stalled.disconnect()


def _knowledge_campaign(campaign):
    from knowledge.importer import embed_source
    from tests.knowledge.conftest import import_fixture

    embed_source(import_fixture(campaign, "canon.md"))


# Pages that ask the model server something: under ASGI a sync view runs on the very thread the
# websockets' database work shares, so its model call would freeze every socket until it returned.
PAGES = [
    ("test connection", "post", lambda campaign: reverse("test_connection"), "/api/tags", None),
    ("model settings", "get", lambda campaign: reverse("model_settings"), "/api/tags", None),
    ("choose a model", "post", lambda campaign: reverse("choose_model", args=[campaign.pk]), "/api/show", None),
    ("knowledge search", "get", lambda campaign: reverse("knowledge_search", args=[campaign.pk]) + "?q=silver+key",
     "/api/embed", _knowledge_campaign),
]


@pytest.mark.parametrize(("page", "method", "url", "endpoint", "setup"), PAGES, ids=[page[0] for page in PAGES])
async def test_a_page_waiting_for_the_model_server_freezes_no_websocket(
        page, method, url, endpoint, setup, campaign, owner, outsider, narrator_server):
    if setup:
        await sync_to_async(setup)(campaign)
    elsewhere = await sync_to_async(make_campaign)(outsider, title="Elsewhere")
    mine, theirs = await sync_to_async(_login)(owner), await sync_to_async(_login)(outsider)
    narrator_server.stall(STALL, persistent=True, path=endpoint)
    client = AsyncClient()
    client.cookies["sessionid"] = mine
    waiting = asyncio.create_task(getattr(client, method)(url(campaign)))
    try:
        await _until(lambda: any(request.path == endpoint for request in narrator_server.requests))
        connect_seconds, turn_seconds = await _other_person_plays(elsewhere, theirs)
        assert connect_seconds < LIMIT and turn_seconds < LIMIT
    finally:
        narrator_server.clear_failures()
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)

