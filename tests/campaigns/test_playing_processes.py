"""A turn played in one process is seen by the others that share the database (issue 31): ``playing.anywhere``.

What a worker's background model calls give way to (tests/llm/test_priority_processes.py).
The other process is a real one (tests/elsewhere.py): it shares nothing
with the test but the database, as a second Daphne process would. The
turn-against-lore-change guard across processes is PostgreSQL's advisory
locks (tests/postgres/test_locks.py).
"""

import asyncio
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from campaigns import playing
from campaigns.models import Playing
from tests.elsewhere import Elsewhere, thread_connections_closed  # noqa: F401 - a fixture

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("thread_connections_closed")]

SHARED = {"STORYTELLER_SHARED_PLAYING": "1"}

# Plays a turn of the campaign named on its first line, until told to end it.
TURN = """
import asyncio
from campaigns import playing

campaign_id = int(heard())

async def main():
    async with playing.turn(campaign_id):
        said("playing")
        await asyncio.to_thread(heard)
    said("ended")

asyncio.run(main())
"""

@pytest.fixture
def shared(settings):
    settings.STORYTELLER_SHARED_PLAYING = True


def test_a_turn_in_another_process_is_seen_while_it_plays(shared, campaign):
    assert not playing.anywhere()
    other = Elsewhere(TURN, **SHARED)
    other.tell(campaign.pk)
    assert other.said() == "playing"
    try:
        assert playing.anywhere()
    finally:
        other.tell()
    assert other.said() == "ended"
    other.finish()
    assert not playing.anywhere()
    assert not Playing.objects.exists()


def test_a_process_killed_mid_turn_holds_up_nothing_after_its_lease(shared, campaign):
    other = Elsewhere(TURN, **SHARED)
    other.tell(campaign.pk)
    assert other.said() == "playing"
    other.kill()  # kill -9: its row stays behind
    assert playing.anywhere()
    # The lease ends (LEASE_SECONDS later; moved here rather than waited for).
    Playing.objects.update(until=timezone.now() - timedelta(seconds=1))
    assert not playing.anywhere()

    async def turn():
        async with playing.turn(campaign.pk):
            pass

    asyncio.run(turn())
    assert not Playing.objects.exists(), "the dead process's row was not cleared"


async def test_a_long_turn_renews_its_lease(shared, campaign, monkeypatch):
    monkeypatch.setattr(playing, "LEASE_SECONDS", 0.6)
    async with playing.turn(campaign.pk):
        await asyncio.sleep(1.5)  # two and a half leases
        held = await sync_to_async(Playing.objects.filter(until__gt=timezone.now()).exists)()
    assert held, "the turn's row lapsed while it played: other processes' model calls would go on"


def test_one_process_writes_nothing_down(campaign):
    """The default install (one process) keeps turns in memory only: no row, no read."""

    async def turn():
        async with playing.turn(campaign.pk):
            return playing.playing(campaign.pk)

    assert asyncio.run(turn())
    assert not Playing.objects.exists()
    assert not playing.anywhere()
