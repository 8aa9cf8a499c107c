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
"""

import asyncio
import contextlib
import threading
import time

from . import locks


class TurnInProgress(Exception):
    """A lorebook change was refused because a turn is being played; the message says what to do."""


REFUSED = ("A turn is being played in this campaign, and lorebooks do not change during a turn (every voice of it "
           "reads the same lore). Try again once the reply has finished; nothing was changed.")
BUSY = ("A lorebook of this campaign was still being changed, so the turn could not start. Send it again; "
        "nothing was sent or saved.")
# A turn waits this long for a lore change to end; one takes milliseconds.
WAIT_SECONDS = 10.0

_lock = threading.Lock()
_turns: dict[int, int] = {}
_changes: dict[int, int] = {}


def playing(campaign_id):
    """Return whether a turn of ``campaign_id`` is being played now, in this process or (PostgreSQL) another."""
    with _lock:
        if _turns.get(campaign_id):
            return True
    return locks.Held.anyone("turn", campaign_id, shared=True)


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
        yield
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
