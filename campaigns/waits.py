"""Every database statement is timed, and one that took a second or more is logged (issue 22).

SQLite has one write lock: a write waits for it, up to the busy timeout,
inside the statement that asks (``BEGIN IMMEDIATE`` for a transaction).
Long work holding the lock made other people's turns fail; this is how it
would show again, in the log, before anyone's turn fails: "the database
kept a BEGIN IMMEDIATE waiting 1.4 s (thread …)". ``longest`` is the
longest statement of this process so far, for the bench and the tests.
"""

import logging
import threading
import time

from django.db.backends.signals import connection_created

logger = logging.getLogger(__name__)

# Past this a statement is logged: a turn's own statements take milliseconds.
SLOW_SECONDS = 1.0
longest = 0.0


def _timed(execute, sql, params, many, context):
    global longest
    started = time.perf_counter()
    try:
        return execute(sql, params, many, context)
    finally:
        elapsed = time.perf_counter() - started
        longest = max(longest, elapsed)
        if elapsed >= SLOW_SECONDS:
            logger.warning("the database kept a %s waiting %.1f s (thread %s)", " ".join(str(sql).split()[:2]),
                           elapsed, threading.current_thread().name)


def _watch(sender, connection, **kwargs):
    if _timed not in connection.execute_wrappers:
        connection.execute_wrappers.append(_timed)


def install():
    """Time every statement of every database connection made from now on."""
    connection_created.connect(_watch, dispatch_uid="campaigns.waits")
