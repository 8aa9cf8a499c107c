"""Run imports on a thread of their own: never on the event loop, never on the thread the database work shares.

Under ASGI every sync view and every ``database_sync_to_async`` call runs on
one shared thread, so an import there (parsing a bundle, cutting a megabyte
of knowledge, embedding it) froze every other person's play until it ended.
Imports of campaign bundles and knowledge files, rebuilding a knowledge
index, and exporting a bundle (seconds for a long story) run here instead:
one at a time on one worker thread, with its own database connection,
closed after each. SQLite's write lock is taken only for each import's one
short write transaction, so turns commit between.

A handful may wait their turn; past that the next is refused in words
rather than queued behind minutes of work.
"""

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor

from django.db import connections

MAX_WAITING = 4
BUSY = (f"{MAX_WAITING} imports or exports are already running or waiting, so nothing was done; "
        "try again in a minute.")

_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="storyteller-import")
_pending = 0


def full():
    """Return whether an import asked for now would be refused (check and ``run`` with no await between)."""
    return _pending >= MAX_WAITING


async def run(function, *args):
    """Run ``function(*args)`` on the import thread; return what it returns, raise what it raises."""
    global _pending
    _pending += 1
    try:
        return await asyncio.get_running_loop().run_in_executor(_worker, functools.partial(_call, function, *args))
    finally:
        _pending -= 1


def _call(function, *args):
    try:
        return function(*args)
    finally:
        connections.close_all()  # this thread's own: nothing stays open between imports
