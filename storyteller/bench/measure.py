"""What every benchmark group shares: the story's sample words, a figure from samples, CPU timing, the table.

A figure is one measurement's median and 95th percentile in milliseconds,
beside what it was measured against and its target (docs/performance.md);
the command prints the figures as one table and writes them as JSON. Every
group runs on the throwaway database ``use_database`` points Django at.
"""

import contextlib
import os
import statistics
import time

from django.db import connections

from storyteller import vendors


REPLIES = [
    "The rain thickens as you cross the square; somewhere a shutter bangs against stone, and the smell of "
    "wet ash drifts from the chandler's yard. A woman in a grey shawl watches you from a doorway, then "
    "slips inside before you can call to her.",
    "Mara's cottage is colder than it should be. Her lamp-oil ledger lies open on the table, the last entry "
    "three nights old, written in a hand that wanders off the line as if she had been interrupted.",
    "The fisherman spits into the harbour. \"The lantern's not gone dark by itself,\" he says. \"Someone "
    "climbed the headland that night. I saw the light of them, going up, and none coming down.\"",
    "Wind claws at the headland path. Halfway up, you find a brass button pressed into the mud, stamped with "
    "an anchor and a crown, the kind the harbour master's men wear on their coats.",
]
ACTIONS = ["ask about the lantern", "search the cottage", "climb the headland path", "knock at the door"]


def use_database(path):
    """Point Django's connection at the SQLite file ``path`` (the bench's own, never the person's stories), or on
    PostgreSQL at the database of that name on the configured server (``throwaway_database`` made it)."""
    connections["default"].close()
    connections.databases["default"]["NAME"] = path if vendors.is_sqlite() else str(path)


@contextlib.contextmanager
def throwaway_database(folder):
    """Yield the bench's own database, removed afterwards: a SQLite file in ``folder``, or on PostgreSQL (issue 31)
    a new database on the configured server, next to the person's and never theirs."""
    if vendors.is_sqlite():
        yield folder / "bench.sqlite3"
        return
    import psycopg

    name = f"storyteller_bench_{os.getpid()}"
    params = connections["default"].get_connection_params()
    with psycopg.connect(**params, autocommit=True) as server:
        server.execute(f'DROP DATABASE IF EXISTS "{name}"')
        server.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        connections.close_all()
        with psycopg.connect(**params, autocommit=True) as server:
            server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def figure(name, size, samples, target):
    """Return one figure: the median and p95 of ``samples`` (seconds) in ms; ``size`` says what was measured against
    (e.g. "2,000 turns")."""
    ordered = sorted(samples)
    return {
        "name": name,
        "size": size,
        "samples": len(samples),
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000, 3),
        "target": target,
    }


def bench_user():
    """Return the bench's own person, who owns every generated campaign."""
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get_or_create(username="bench")[0]


def timed(name, size, call, arguments, target):
    """Return the figure of ``call`` on each of ``arguments`` in CPU time, the first three run once first."""
    for argument in arguments[:3]:  # warm the caches a turn's first read makes
        call(argument)
    samples = []
    for argument in arguments:
        started = time.process_time()
        call(argument)
        samples.append(time.process_time() - started)
    # Pure computation: CPU time is what it costs (wall time on a shared machine adds others' load).
    return figure(name, size, samples, f"{target} (CPU time)")


def table(results):
    """Yield the lines of the printed table: one line a figure, under a header."""
    yield f"{'measurement':<22}{'size':>14}{'samples':>9}{'median ms':>11}{'p95 ms':>9}  target"
    for row in results:
        yield (f"{row['name']:<22}{row['size']:>14}{row['samples']:>9}{row['median_ms']:>11.2f}"
               f"{row['p95_ms']:>9.2f}  {row['target']}")
