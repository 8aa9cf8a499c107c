"""Whether a campaign is playing a turn now, and what may not change meanwhile: its lorebooks.

Seed 002 实体知识: adding, changing or removing a lorebook is refused while
a turn is in progress (「回合进行中拒绝操作」), so every voice of one turn
reads the same lore. Every turn, a game master's or a single narrator's,
holds ``turn(campaign_id)`` from before its first read to after its commit
(the "Meanwhile" card asks ``playing`` too); a lore change holds
``lore_change(campaign_id)`` around its transaction. They exclude each
other: a change during a turn is refused at once, with the reason; a turn
that starts during a change waits for it (a change takes milliseconds,
never a model call).

The registry is this process's memory, as the default channel layer is. On
PostgreSQL (several processes) each turn also holds a shared advisory lock
and each change tries for the exclusive one (``locks.Held``), so a change in
one process is refused while a turn plays in another, and a turn waits for a
change made elsewhere; a process that dies lets go of its locks with its
connection.

Background model calls in other processes (a worker's post-turn steps) give
way to a turn played anywhere, of any campaign (``llm.priority``): when
processes share the work (``STORYTELLER_SHARED_PLAYING``) each turn also
holds a ``Playing`` row, which ``anywhere`` looks for. A row is a lease its
process renews, so one killed mid-turn holds up nothing past
``LEASE_SECONDS``. A row, not the advisory lock: it is the same on both
databases, and the worker's question is one indexed read.
"""

import asyncio
import contextlib
import threading
import time
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from . import locks


class TurnInProgress(Exception):
    """A lorebook change was refused because a turn is being played; the message says what to do."""


REFUSED = ("A turn is being played in this campaign, and lorebooks do not change during a turn (every voice of it "
           "reads the same lore). Try again once the reply has finished; nothing was changed.")
BUSY = ("A lorebook of this campaign was still being changed, so the turn could not start. Send it again; "
        "nothing was sent or saved.")
# A turn waits this long for a lore change to end; one takes milliseconds.
WAIT_SECONDS = 10.0
# A turn's shared row holds this long unless renewed (every third of it): a turn streams for seconds to a minute,
# and a process killed mid-turn must not keep other processes' model calls waiting much longer.
LEASE_SECONDS = 30.0

_lock = threading.Lock()
_turns: dict[int, int] = {}
_changes: dict[int, int] = {}


def playing(campaign_id):
    """Return whether a turn of ``campaign_id`` is being played now, in this process or (PostgreSQL) another."""
    with _lock:
        if _turns.get(campaign_id):
            return True
    return locks.Held.anyone("turn", campaign_id, shared=True)


def anywhere():
    """Return whether a turn of any campaign is being played in another process that shares the work.

    What a worker's background model calls give way to (``llm.priority``);
    always False for one process, whose turns ``llm.priority`` sees itself.
    """
    if not shared():
        return False
    from .models import Playing

    return Playing.objects.filter(until__gt=timezone.now()).exists()


def shared():
    """Return whether other processes share the work, so turns are also written down for them."""
    return getattr(settings, "STORYTELLER_SHARED_PLAYING", False)


@contextlib.asynccontextmanager
async def turn(campaign_id, *, wait=WAIT_SECONDS):
    """Play a turn of ``campaign_id`` inside this block: lorebook changes are refused until it ends.

    Waits for a lore change already under way; raises TurnInProgress (with
    ``BUSY``) if it has not ended within ``wait`` seconds.
    """
    deadline = time.monotonic() + wait
    while True:
        with _lock:
            if not _changes.get(campaign_id):
                _turns[campaign_id] = _turns.get(campaign_id, 0) + 1
                break
        if time.monotonic() >= deadline:
            raise TurnInProgress(BUSY)
        await asyncio.sleep(0.01)
    held = locks.Held("turn", campaign_id)
    try:
        while held.needed and not await asyncio.to_thread(held.acquire, shared=True):
            if time.monotonic() >= deadline:
                raise TurnInProgress(BUSY)  # a change in another process has not ended
            await asyncio.sleep(0.01)
        row = await sync_to_async(_enter)(campaign_id) if shared() else None
        try:
            with _renewing(row):
                yield
        finally:
            if row is not None:
                await sync_to_async(row.delete)()
    finally:
        held.release()  # a close, not a wait: done even when the turn is cancelled
        _release(_turns, campaign_id)


@contextlib.contextmanager
def lore_change(campaign_id):
    """Change ``campaign_id``'s lorebooks inside this block, or raise TurnInProgress while a turn plays."""
    with _lock:
        if _turns.get(campaign_id):
            raise TurnInProgress(REFUSED)
        _changes[campaign_id] = _changes.get(campaign_id, 0) + 1
    held = locks.Held("turn", campaign_id)
    try:
        if not held.acquire(shared=False):
            raise TurnInProgress(REFUSED)  # a turn plays in another process
        yield
    finally:
        held.release()
        _release(_changes, campaign_id)


def _release(counts, campaign_id):
    with _lock:
        counts[campaign_id] -= 1
        if not counts[campaign_id]:
            del counts[campaign_id]


def _enter(campaign_id):
    """Write (and commit) the turn's row for other processes' background work to see; return it."""
    from .models import Playing

    now = timezone.now()
    with transaction.atomic():  # one commit: each costs a sync of the database file on SQLite (bench "shared")
        Playing.objects.filter(until__lt=now).delete()  # left by a process that died mid-turn
        return Playing.objects.create(campaign_id=campaign_id, until=now + timedelta(seconds=LEASE_SECONDS))


@contextlib.contextmanager
def _renewing(row):
    """Renew ``row``'s lease from a thread of its own while the block runs (the turn's loop may be busy)."""
    if row is None:
        yield
        return
    stop = threading.Event()

    def renew():
        from .models import Playing

        try:
            while not stop.wait(LEASE_SECONDS / 3):
                Playing.objects.filter(pk=row.pk).update(until=timezone.now() + timedelta(seconds=LEASE_SECONDS))
        finally:
            connection.close()  # this thread's own connection

    threading.Thread(target=renew, name=f"playing-lease-{row.pk}", daemon=True).start()
    try:
        yield
    finally:
        stop.set()
