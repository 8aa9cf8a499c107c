"""A turn caught while its reply streams: what the tests of "not during a turn" share."""

import asyncio
import contextlib
from types import SimpleNamespace

from storyteller import turns
from storyteller.context import Action


@contextlib.asynccontextmanager
async def while_streaming(campaign_id, server, text="wait"):
    """Yield while a turn of ``campaign_id`` streams a slow reply from the fake ``server``; on leaving, let it
    finish at full speed and set ``.result`` on what was yielded (the turn's result)."""
    server.script("Slowly" + " on" * 30)
    server.chunk_delay(0.05)
    streaming = asyncio.Event()

    async def relay(_):
        streaming.set()

    turn = SimpleNamespace(result=None)
    task = asyncio.create_task(turns.play_turn(campaign_id, Action(mode="do", text=text), relay))
    try:
        await asyncio.wait_for(streaming.wait(), 10)
        yield turn
    finally:
        server.chunk_delay(0)
        turn.result = await task
