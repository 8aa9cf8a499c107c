"""``shared``: what sharing turns between processes costs (issue 31): the guard's rows, the poll, the pause.

With ``STORYTELLER_SHARED_PLAYING`` each turn writes a ``campaigns.Playing``
row and a worker's background model calls ask for live turn rows (``campaigns.playing``, ``llm.priority``). Measured here: a
turn's guard in one process (memory only, today's path) and with the rows,
the question a background call asks every ``POLL_SECONDS``, and — with a
real second process playing the turns — how long a worker's call goes on
after a turn started elsewhere (what the turn shares the model server for).
"""

import asyncio
import os
import random
import subprocess
import sys
import time

from django.conf import settings
from django.db import connections

from campaigns import playing
from storyteller.llm import priority

from .measure import figure
from .turn import generate_story

PAUSES = 10

# Plays a turn each time it is told to, and says when it started (the wall clock: the bench reads it in its process).
_TURNS = """
import asyncio, os, sys, time
import django
django.setup()
from django.db import connections
connections.databases["default"]["NAME"] = os.environ["BENCH_DATABASE"]
from campaigns import playing

async def main():
    campaign_id = int(os.environ["BENCH_CAMPAIGN"])
    while sys.stdin.readline().strip() == "turn":
        async with playing.turn(campaign_id):
            print(time.time(), flush=True)
            await asyncio.to_thread(sys.stdin.readline)
        print("ended", flush=True)

asyncio.run(main())
"""


def run(sizes, repeat):
    """The guard per turn, one process and shared; the poll; a worker's call going on after a turn elsewhere."""
    campaign = generate_story(20)
    rows = []
    for shared in (False, True):
        settings.STORYTELLER_SHARED_PLAYING = shared
        samples = [_timed_turn(campaign.pk) for _ in range(repeat)]
        rows.append(figure(f"turn guard, {'shared rows' if shared else 'one process'}", "enter + leave", samples,
                           "two commits: < 15 ms on SQLite" if shared else "unchanged: memory only"))
    settings.STORYTELLER_SHARED_PLAYING = True
    try:
        rows.append(figure("turn elsewhere? (the poll)", f"every {priority.POLL_SECONDS} s per call",
                           [_timed(playing.anywhere) for _ in range(repeat)], "< 1 ms"))
        rows.append(figure("worker call goes on after a turn elsewhere", "second process", _pauses(campaign.pk),
                           f"<= {priority.POLL_SECONDS * 1000:.0f} ms + a read"))
    finally:
        settings.STORYTELLER_SHARED_PLAYING = False
    return rows


def _timed(function):
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def _timed_turn(campaign_id):
    async def turn():
        started = time.perf_counter()
        async with playing.turn(campaign_id):
            pass
        return time.perf_counter() - started

    return asyncio.run(turn())


def _pauses(campaign_id):
    """Return, per turn a second process plays, the seconds from its start to this process's call giving way."""
    child = subprocess.Popen(
        [sys.executable, "-c", _TURNS], cwd=settings.BASE_DIR, text=True, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "storyteller.settings", "STORYTELLER_SHARED_PLAYING": "1",
             "BENCH_DATABASE": str(connections["default"].settings_dict["NAME"]), "BENCH_CAMPAIGN": str(campaign_id)})
    try:
        return asyncio.run(_pause_samples(child))
    finally:
        child.stdin.close()
        child.wait(30)


async def _pause_samples(child):
    from storyteller.steps import postturn

    samples, gave_way, rng = [], [], random.Random(31)

    async def model_call():
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            gave_way.append(time.time())
            raise
        return "done"

    for _ in range(PAUSES):
        gave_way.clear()

        async def background():
            with priority.background("the bench", elsewhere=postturn.turns_elsewhere()):
                return await priority.call(model_call)

        work = asyncio.create_task(background())
        # The call is under way; the turn starts at a random point of its poll's period, as a person's would.
        await asyncio.sleep(0.3 + rng.uniform(0, priority.POLL_SECONDS))
        child.stdin.write("turn\n")
        child.stdin.flush()
        started = float(await asyncio.to_thread(child.stdout.readline))
        while not gave_way:
            await asyncio.sleep(0.005)
        samples.append(gave_way[0] - started)
        child.stdin.write("\n")
        child.stdin.flush()
        await asyncio.to_thread(child.stdout.readline)  # "ended"
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
    return samples
