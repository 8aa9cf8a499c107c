"""Imports run on a thread of their own: not the event loop's, not the one the database work shares (issue 10)."""

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from campaigns import importing

# The database thread closes stale connections around each call, which counts as database access.
pytestmark = pytest.mark.django_db(transaction=True)


async def test_an_import_runs_neither_on_the_event_loop_nor_on_the_database_thread():
    loop = threading.get_ident()
    views = await sync_to_async(threading.get_ident)()
    database = await database_sync_to_async(threading.get_ident)()
    imports = await importing.run(threading.get_ident)
    assert imports not in {loop, views, database}


async def test_the_database_thread_answers_while_an_import_runs():
    gate = threading.Event()
    running = asyncio.ensure_future(importing.run(gate.wait, 10))
    try:
        assert await asyncio.wait_for(database_sync_to_async(lambda: "answered")(), timeout=1) == "answered"
    finally:
        gate.set()
        await running


async def test_past_the_waiting_limit_an_import_is_refused_in_words():
    gate = threading.Event()
    waiting = [asyncio.ensure_future(importing.run(gate.wait, 10)) for _ in range(importing.MAX_WAITING)]
    await asyncio.sleep(0)
    try:
        assert importing.full()
        assert "nothing was done" in importing.BUSY and "try again" in importing.BUSY
    finally:
        gate.set()
        await asyncio.gather(*waiting)
    assert not importing.full()
