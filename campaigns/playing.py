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

The registry is this process's memory, as the default channel layer is.
When several processes share the work (``STORYTELLER_SHARED_PLAYING``: Daphne
processes behind one proxy, task workers), each turn and each change also
holds a ``Playing`` row, so a change on one process is refused during a
turn on another, and a worker's background model calls give way to a turn
played anywhere (``anywhere``, for ``llm.priority``). A row is a lease its
process renews, so one killed mid-turn blocks nothing past ``LEASE_SECONDS``.
Written first, then the other kind looked for: of two processes that start
at once, the later one always sees the earlier one's row.
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


class TurnInProgress(Exception):
    """A lorebook change was refused because a turn is being played; the message says what to do."""


REFUSED = ("A turn is being played in this campaign, and lorebooks do not change during a turn (every voice of it "
           "reads the same lore). Try again once the reply has finished; nothing was changed.")
BUSY = ("A lorebook of this campaign was still being changed, so the turn could not start. Send it again; "
        "nothing was sent or saved.")
# A turn waits this long for a lore change to end; one takes milliseconds.
WAIT_SECONDS = 10.0
# A shared row holds this long unless renewed (every third of it): a turn streams for seconds to a minute, and a
# process killed mid-turn must not keep the campaign's lore, or the workers' model calls, waiting much longer.
LEASE_SECONDS = 30.0

_lock = threading.Lock()
_turns: dict[int, int] = {}
_changes: dict[int, int] = {}


def playing(campaign_id):
    """Return whether a turn of ``campaign_id`` is being played now (in any process, when they share the work)."""
    with _lock:
        if _turns.get(campaign_id):
            return True
    return shared() and _held(campaign_id, _kind().TURN)


def anywhere():
    """Return whether a turn of any campaign is being played in another process that shares the work.

    What a worker's background model calls give way to (``llm.priority``);
    always False for one process, whose turns ``llm.priority`` sees itself.
    """
    if not shared():
        return False
    from .models import Playing

    return Playing.objects.filter(kind=Playing.Kind.TURN, until__gt=timezone.now()).exists()


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
    row = None
    try:
        while shared() and row is None:
            row = await sync_to_async(_enter)(campaign_id, _kind().TURN, _kind().LORE)
            if row is None:
                if time.monotonic() >= deadline:
                    raise TurnInProgress(BUSY)
                await asyncio.sleep(0.05)
        with _renewing(row):
            yield
    finally:
        if row is not None:
            await sync_to_async(_leave)(row)
        _release(_turns, campaign_id)


@contextlib.contextmanager
def lore_change(campaign_id):
    """Change ``campaign_id``'s lorebooks inside this block, or raise TurnInProgress while a turn plays."""
    with _lock:
        if _turns.get(campaign_id):
            raise TurnInProgress(REFUSED)
        _changes[campaign_id] = _changes.get(campaign_id, 0) + 1
    row = None
    try:
        if shared():
            row = _enter(campaign_id, _kind().LORE, _kind().TURN)
            if row is None:
                raise TurnInProgress(REFUSED)
        with _renewing(row):
            yield
    finally:
        if row is not None:
            _leave(row)
        _release(_changes, campaign_id)


def _release(counts, campaign_id):
    with _lock:
        counts[campaign_id] -= 1
        if not counts[campaign_id]:
            del counts[campaign_id]


def shared():
    """Return whether other processes share the work, so turns and changes are also written down for them."""
    return getattr(settings, "STORYTELLER_SHARED_PLAYING", False)


def _kind():
    from .models import Playing

    return Playing.Kind


def _held(campaign_id, kind):
    from .models import Playing

    return Playing.objects.filter(campaign_id=campaign_id, kind=kind, until__gt=timezone.now()).exists()


def _enter(campaign_id, kind, against):
    """Write (and commit) a ``kind`` row for ``campaign_id``; return it, or None, writing nothing, while a live
    ``against`` row exists."""
    from .models import Playing

    now = timezone.now()
    with transaction.atomic():  # one commit: each costs a sync of the database file on SQLite (bench "shared")
        Playing.objects.filter(until__lt=now).delete()  # left by a process that died mid-turn
        row = Playing.objects.create(campaign_id=campaign_id, kind=kind,
                                     until=now + timedelta(seconds=LEASE_SECONDS))
    if Playing.objects.filter(campaign_id=campaign_id, kind=against, until__gt=now).exists():
        row.delete()
        return None
    return row


def _leave(row):
    row.delete()


@contextlib.contextmanager
def _renewing(row):
    """Renew ``row``'s lease from a thread of its own while the block runs (a turn's loop, or a long import, may
    not come back to it in time)."""
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

    thread = threading.Thread(target=renew, name=f"playing-lease-{row.pk}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
