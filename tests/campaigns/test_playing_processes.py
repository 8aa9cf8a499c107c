"""A turn and a lorebook change exclude each other across processes that share the database (issue 31).

The other process is a real one (tests/elsewhere.py): it shares nothing
with the test but the database, as a second Daphne process would.
"""

import asyncio
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from campaigns import playing
from campaigns.models import Playing
from tests.elsewhere import Elsewhere

pytestmark = pytest.mark.django_db(transaction=True)

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

# Changes the campaign's lorebooks (holds the change) until told to end it.
CHANGE = """
from campaigns import playing

campaign_id = int(heard())
with playing.lore_change(campaign_id):
    said("changing")
    heard()
said("ended")
"""


@pytest.fixture
def shared(settings):
    settings.STORYTELLER_SHARED_PLAYING = True


def test_a_lore_change_is_refused_while_another_process_plays_a_turn(shared, campaign):
    other = Elsewhere(TURN, **SHARED)
    other.tell(campaign.pk)
    assert other.said() == "playing"
    try:
        assert playing.playing(campaign.pk)
        with pytest.raises(playing.TurnInProgress, match="A turn is being played"), playing.lore_change(campaign.pk):
            pytest.fail("the change ran during the other process's turn")
        assert not Playing.objects.filter(kind=Playing.Kind.LORE).exists(), "the refused change left its row"
    finally:
        other.tell()
    assert other.said() == "ended"
    other.finish()
    assert not playing.playing(campaign.pk)
    with playing.lore_change(campaign.pk):  # the turn has ended: the change goes ahead
        pass
    assert not Playing.objects.exists()


async def test_a_turn_waits_for_another_process_s_lore_change_then_plays(shared, campaign):
    other = Elsewhere(CHANGE, **SHARED)
    other.tell(campaign.pk)
    assert await asyncio.to_thread(other.said) == "changing"
    played = asyncio.Event()

    async def turn():
        async with playing.turn(campaign.pk):
            played.set()

    task = asyncio.create_task(turn())
    await asyncio.sleep(0.5)
    assert not played.is_set(), "the turn started during the other process's lore change"
    other.tell()
    await asyncio.wait_for(task, 10)
    assert played.is_set()
    await asyncio.to_thread(other.finish)


async def test_a_turn_gives_up_in_words_when_another_process_s_change_does_not_end(shared, campaign):
    other = Elsewhere(CHANGE, **SHARED)
    other.tell(campaign.pk)
    assert await asyncio.to_thread(other.said) == "changing"
    try:
        with pytest.raises(playing.TurnInProgress, match="Send it again; nothing was sent or saved"):
            async with playing.turn(campaign.pk, wait=0.3):
                pytest.fail("the turn played during the change")
        assert not await sync_to_async(Playing.objects.filter(kind=Playing.Kind.TURN).exists)()
    finally:
        other.tell()
    await asyncio.to_thread(other.finish)


def test_a_process_killed_mid_turn_blocks_changes_only_until_its_lease_ends(shared, campaign):
    other = Elsewhere(TURN, **SHARED)
    other.tell(campaign.pk)
    assert other.said() == "playing"
    other.kill()  # kill -9: its row stays behind
    with pytest.raises(playing.TurnInProgress), playing.lore_change(campaign.pk):
        pass
    # The lease ends (LEASE_SECONDS later; moved here rather than waited for).
    Playing.objects.filter(kind=Playing.Kind.TURN).update(until=timezone.now() - timedelta(seconds=1))
    with playing.lore_change(campaign.pk):
        pass
    assert not Playing.objects.exists(), "the dead process's row was not cleared"


async def test_a_long_turn_renews_its_lease(shared, campaign, monkeypatch):
    monkeypatch.setattr(playing, "LEASE_SECONDS", 0.6)
    async with playing.turn(campaign.pk):
        await asyncio.sleep(1.5)  # two and a half leases
        held = await sync_to_async(Playing.objects.filter(kind=Playing.Kind.TURN, until__gt=timezone.now()).exists)()
    assert held, "the turn's row lapsed while it played: another process would change its lore"


def test_one_process_writes_nothing_down(campaign):
    """The default install (one process) keeps turns and changes in memory only: no row, no read."""

    async def turn():
        async with playing.turn(campaign.pk):
            return playing.playing(campaign.pk)

    assert asyncio.run(turn())
    with playing.lore_change(campaign.pk):
        pass
    assert not Playing.objects.exists()
    assert not playing.anywhere()
