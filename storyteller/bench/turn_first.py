"""``turn_first``: from Send to the narrator's request and its first words, with a slow recorder on one slot."""

import asyncio
import time

from django.conf import settings

from .measure import figure
from .turn import generate_story, summarise_by_hand


def run(sizes, repeat):
    """From Send to the narrator's request and to its first words, with a slow recorder on a one-slot server.

    Through the real play websocket and the fake server with one slot
    (Ollama's OLLAMA_NUM_PARALLEL=1) whose structured calls think for 30 s:
    every turn is sent while the previous turn's recording holds the slot,
    and must take it at once. Beside it, the same figure with no background
    work, which is the turn's own preparation.
    """
    from asgiref.sync import async_to_sync

    from storyteller.llm.fake_server import FakeModelServer

    campaign = generate_story(10)
    summarise_by_hand(campaign)
    samples = min(repeat, 20)
    with FakeModelServer(slots=1) as server:
        overrides = {
            "STORYTELLER_LLM_URL": server.url,
            "STORYTELLER_LLM_URL_CONFIGURED": True,
            "STORYTELLER_LLM_API": "ollama",
        }
        saved = {name: getattr(settings, name) for name in overrides}
        for name, value in overrides.items():
            setattr(settings, name, value)
        try:
            busy, idle = async_to_sync(_turn_first_samples)(campaign, server, samples)
        finally:
            for name, value in saved.items():
                setattr(settings, name, value)
    return [
        figure("turn first: request", "slow recorder", busy["request"], "median < 100 ms from Send"),
        figure("  first words", "slow recorder", busy["words"], "median < 100 ms from Send"),
        figure("  request, idle", "no background", idle["request"], "the turn's own preparation"),
    ]


async def _turn_first_samples(campaign, server, samples):
    from channels.db import database_sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.contrib.auth import get_user_model
    from django.test import Client

    from storyteller.steps import postturn
    from storyteller.asgi import application

    @database_sync_to_async
    def cookie():
        client = Client()
        client.force_login(get_user_model().objects.get(username="bench"))
        return f"sessionid={client.cookies['sessionid'].value}".encode()

    headers = [(b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"), (b"cookie", await cookie())]
    communicator = WebsocketCommunicator(application, f"/ws/play/{campaign.pk}/", headers=headers)
    await communicator.connect()

    async def turn(index):
        words = f"Reply{index} follows."
        server.script(words)
        sent = time.perf_counter()
        await communicator.send_json_to({"mode": "do", "text": f"turn first {index}"})
        while 'id="turn-outcome"' not in await communicator.receive_from(timeout=60):
            pass
        request = next(r.at for r in server.requests if r.at > sent and r.path == "/api/chat" and r.body.get("stream"))
        first = next(c.at for c in server.chunks if c.at > sent and c.text.strip() == f"Reply{index}")
        return request - sent, first - sent

    def recordings():
        return [r for r in server.requests if "format" in (r.body or {})]

    figures = {"busy": {"request": [], "words": []}, "idle": {"request": [], "words": []}}
    for index in range(samples):  # no background work: each turn's recording is done before the next is sent
        await postturn.settle(campaign.pk)
        request, first = await turn(index)
        figures["idle"]["request"].append(request)
        figures["idle"]["words"].append(first)
    server.json_delay(30)
    last = time.perf_counter()
    await turn(samples)
    for index in range(samples + 1, 2 * samples + 1):
        for _ in range(3000):  # the worker's next recording call (the re-run, or the last turn's) is thinking
            if any(r.at > last for r in recordings()):
                break
            await asyncio.sleep(0.01)
        last = time.perf_counter()
        request, first = await turn(index)
        figures["busy"]["request"].append(request)
        figures["busy"]["words"].append(first)
    server.json_delay(0)
    await postturn.settle()
    await communicator.disconnect()
    return figures["busy"], figures["idle"]
