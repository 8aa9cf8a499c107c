"""The locks that keep one campaign's story in order, on either database, across processes (issue 31).

On SQLite every transaction is IMMEDIATE (settings): it takes the database's
one write lock at its first statement, so a turn's commit reads the head,
writes its nodes and moves the head with nothing in between, and a second
commit waits and then finds the head moved (``story.StoryMovedOn``). The
write lock is the file's, so it holds across processes too.

PostgreSQL runs transactions side by side (READ COMMITTED), so the same
order has to be asked for:

* ``story(campaign_id)``, first in every transaction that reads the head to
  move it or to write beside it, locks the campaign's row (SELECT … FOR
  UPDATE) until the commit: a second such transaction of the same campaign
  waits there, in any process, and reads the first one's commit after it.
  Other campaigns never wait. On SQLite it does nothing: the transaction
  already holds more.
* ``Held(name, campaign_id)`` is a lock held for longer than a transaction
  (a turn while its model writes, a lore change, a campaign's post-turn
  work): a PostgreSQL advisory lock on a connection of its own, so it is
  released when its holder ends or its process dies (a kill -9 included),
  never left behind. Shared holders (turns) exclude an exclusive one (a lore
  change) and each other not. On SQLite there is one process, and the
  in-process registries that call this (``playing``) are the whole truth:
  it holds nothing there.
"""

import contextlib
import threading

from django.db import connection, transaction

from storyteller import vendors

from .models import Campaign

# Advisory lock keys are two 32-bit integers: the kind of lock, and the campaign.
KINDS = {"turn": 1, "postturn": 2}


def story(campaign_id):
    """Inside a transaction: keep the campaign's head to this transaction until it commits (see the module)."""
    if not connection.in_atomic_block:
        raise transaction.TransactionManagementError("locks.story() holds until a commit: call it inside atomic().")
    if vendors.is_postgres():
        list(Campaign.objects.select_for_update().filter(pk=campaign_id).values_list("pk"))


class Held:
    """A cross-process lock on (``name``, ``campaign_id``), held on a PostgreSQL connection of its own.

    ``acquire(shared=…)`` tries once and returns whether it got the lock; ``release()`` lets it go (and closes
    the connection). Both are blocking database calls: call them off the event loop. Without PostgreSQL,
    ``acquire`` always succeeds and nothing is held.
    """

    def __init__(self, name, campaign_id):
        self.key = (KINDS[name], int(campaign_id))
        self.shared = False
        self._connection = None

    def acquire(self, *, shared=False):
        if not vendors.is_postgres():
            return True
        self._connection = self._connection or _connect()
        function = "pg_try_advisory_lock_shared" if shared else "pg_try_advisory_lock"
        with self._connection.cursor() as cursor:
            cursor.execute(f"SELECT {function}(%s, %s)", self.key)
            got = cursor.fetchone()[0]
        if got:
            self.shared = shared
        else:
            self.release()
        return got

    def release(self):
        held, self._connection = self._connection, None
        if held is None:
            return
        import psycopg

        # Unlocked before the close returns: the server ends a closed session's locks a moment later. A
        # connection already broken holds nothing any more.
        with contextlib.suppress(psycopg.Error):
            held.execute("SELECT pg_advisory_unlock_all()")
        held.close()

    @property
    def needed(self):
        """Whether this lock means anything here: only PostgreSQL has several processes to keep apart."""
        return vendors.is_postgres()

    @classmethod
    def anyone(cls, name, campaign_id, *, shared):
        """Return whether any process holds (``name``, ``campaign_id``) now, shared or exclusively (PostgreSQL)."""
        if not vendors.is_postgres():
            return False
        sql = ("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = "
               "(SELECT oid FROM pg_database WHERE datname = current_database()) AND classid = %s AND objid = %s"
               " AND objsubid = 2 AND mode = %s)")
        params = (KINDS[name], int(campaign_id), "ShareLock" if shared else "ExclusiveLock")
        # On the process's own watcher connection, not Django's: it answers from async code too (a page's
        # consumer), and no transaction of the caller's can hide another process's lock from it.
        import psycopg

        global _watcher
        with _watcher_lock:
            for attempt in (1, 2):
                try:
                    _watcher = _watcher if _watcher is not None and not _watcher.closed else _connect()
                    return _watcher.execute(sql, params).fetchone()[0]
                except psycopg.Error:  # a watcher the server dropped: open it again, once
                    if _watcher is not None:
                        _watcher.close()
                    _watcher = None
                    if attempt == 2:
                        raise


_connect_lock = threading.Lock()
_watcher = None  # the connection ``Held.anyone`` asks on, opened on first use
_watcher_lock = threading.Lock()


def _connect():
    """Open a connection of the default database's settings that no Django code shares (autocommit)."""
    with _connect_lock:
        params = connection.get_connection_params()
    import psycopg

    return psycopg.connect(**params, autocommit=True)
