"""Large imports written in short transactions, invisible until whole (issue 22, point 1).

SQLite has one write lock for everyone: a world file of thousands of places
or a bundle of a long story written in one transaction held it for a minute,
and everyone else's turns failed on "database is locked". An import instead
creates its campaign ``staged`` (``Campaign.objects`` never shows it: no
page, socket, list or command), then writes its rows with ``in_batches``:
each batch its own transaction, sized to stay well under ``BATCH_SECONDS``,
with a pause after it so another person's write waiting on the busy timeout
gets the lock. ``publish`` makes the campaign appear in one last short
transaction; ``discard`` removes a half-written one in batches too, and
``sweep`` removes those an import that died (a restart) left behind.

``Writes`` keeps what the batches cost: the longest transaction is the
figure the bench reports.
"""

import gc
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from storyteller import vendors

# No transaction of an import may hold the lock longer than this (issue 22). Batches aim at an eighth of it:
# on two cores shared with other work (load average 7) a 50 ms batch was once descheduled to 271 ms.
BATCH_SECONDS = 0.2
TARGET_SECONDS = BATCH_SECONDS / 8
# After each batch the lock is left free at least as long as the batch held it, with jitter, so a writer that
# SQLite's busy handler makes retry every 100 ms does not keep arriving while the lock is held.
PAUSE_JITTER = 0.01
FIRST_BATCH = 50
MOST_PER_BATCH = 2_000
# Rows one batch of a discard deletes.
DELETE_BATCH = 500
# A staged campaign older than this belongs to no running import (one takes seconds to minutes).
ABANDONED_AFTER = timedelta(hours=1)


@dataclass
class Writes:
    """What an import's batches cost: how many, the rows, and the longest transaction (seconds): on the wall
    clock (how long it held the lock) and in the thread's own work (the same, less the time the machine gave to
    other processes: on two busy cores the wall time of one batch stretches fourfold)."""

    batches: int = 0
    rows: int = 0
    longest: float = 0.0
    longest_work: float = 0.0
    seconds: float = 0.0
    last: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, rows, seconds, work=0.0):
        with self._lock:
            self.batches += 1
            self.rows += rows
            self.longest = max(self.longest, seconds)
            self.longest_work = max(self.longest_work, work)
            self.last = seconds
            self.seconds += seconds


def transact(write, writes=None, rows=1):
    """Run ``write()`` in one transaction, timed into ``writes``, then leave the lock free a while; return what it
    returns.

    SQLite copies the write-ahead log into the database (a checkpoint) on
    the commit that passes a thousand pages, inside that commit: here the
    import checkpoints after its own commit instead, once the lock is free,
    so neither its transactions nor another person's next commit pay for
    the pages it wrote.
    """
    # Only outside any transaction of the caller's (a test's own): a checkpoint cannot run inside one.
    sqlite = vendors.is_sqlite() and not connection.in_atomic_block
    if sqlite:
        _pragma("PRAGMA wal_autocheckpoint = 0")
    started, working = time.perf_counter(), time.thread_time()
    try:
        with transaction.atomic():
            result = write()
    finally:
        elapsed, work = time.perf_counter() - started, time.thread_time() - working
        if sqlite:
            _pragma("PRAGMA wal_checkpoint(PASSIVE)")
            _pragma(f"PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT_PAGES}")
    if writes is not None:
        writes.add(rows, elapsed, work)
    time.sleep(elapsed + random.uniform(0, PAUSE_JITTER))
    return result


# SQLite's default: the log is copied into the database once it holds this many pages.
AUTOCHECKPOINT_PAGES = 1000


def _pragma(statement):
    with connection.cursor() as cursor:
        cursor.execute(statement)


def in_batches(items, write, *, writes=None, progress=None):
    """Call ``write(batch)`` for consecutive batches of ``items``, each in a transaction of its own.

    A batch grows while transactions stay short and shrinks when one takes
    longer than TARGET_SECONDS. ``progress(rows)`` is told how many each wrote.
    """
    items = list(items)
    # What the import holds (a bundle's checked rows: millions of objects) is frozen out of the garbage
    # collector's sight while it writes: a full collection over it took a second, inside a transaction.
    gc.freeze()
    try:
        _batches(items, write, writes, progress)
    finally:
        gc.unfreeze()


def _batches(items, write, writes, progress):
    writes = writes if writes is not None else Writes()
    size, done = FIRST_BATCH, 0
    while done < len(items):
        batch = items[done:done + size]
        transact(lambda: write(batch), writes, len(batch))
        done += len(batch)
        if progress is not None:
            progress(len(batch))
        held = writes.last
        if held > TARGET_SECONDS:
            size = max(1, size // 2)
        elif held < TARGET_SECONDS / 3:
            size = min(MOST_PER_BATCH, size * 2)


def publish(campaign, **fields):
    """Make a staged campaign appear, with any last ``fields``, in one short transaction."""
    from .models import Campaign

    Campaign.every.filter(pk=campaign.pk).update(staged=False, **fields)
    campaign.refresh_from_db()
    return campaign


def discard(campaign_id, writes=None):
    """Delete a staged campaign and everything written under it: its state rows (by far the most) in batches,
    then the rest with the campaign."""
    from .models import Campaign, StateEvent, StateRecord

    for model in (StateRecord, StateEvent):
        table = model._meta.db_table
        while True:
            def chunk():
                with connection.cursor() as cursor:
                    cursor.execute(f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE campaign_id = %s "
                                   f"LIMIT {DELETE_BATCH})", [campaign_id])
                    return cursor.rowcount
            if not transact(chunk, writes, DELETE_BATCH):
                break
    transact(lambda: Campaign.every.filter(pk=campaign_id).delete(), writes)


def sweep():
    """Discard the staged campaigns no running import is writing (left by one a restart cut short)."""
    from .models import Campaign

    for pk in Campaign.every.filter(staged=True, created_at__lt=timezone.now() - ABANDONED_AFTER).values_list(
            "pk", flat=True):
        discard(pk)
