"""A turn played in one process pauses the background model calls running in another (issue 31).

Here the test is the worker: its post-turn work asks ``postturn.turns_elsewhere()``
as the steps do; the turn is played by a real other process
(tests/elsewhere.py) on the same database. The calls are stand-ins, as in
test_priority.py.
"""

import asyncio
import time

import pytest

from storyteller.llm import priority
from storyteller.steps import postturn
from tests.campaigns.test_playing_processes import SHARED, TURN
from tests.elsewhere import Elsewhere, thread_connections_closed  # noqa: F401 - a fixture
from tests.llm.test_priority import Model, until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("thread_connections_closed")]


async def in_background(model):
    with priority.background("the recording", elsewhere=postturn.turns_elsewhere()):
        return await priority.call(model.answer)


@pytest.fixture
def shared(settings):
    settings.STORYTELLER_SHARED_PLAYING = True


async def test_a_turn_in_another_process_cancels_the_call_in_flight_which_is_made_again_after_it(shared, campaign):
    model = Model(seconds=60.0)  # longer than the other process takes to start: it ends only by giving way
    work = asyncio.create_task(in_background(model))
    await until(lambda: model.started == 1)
    other = Elsewhere(TURN, **SHARED)
    other.tell(campaign.pk)
    assert await asyncio.to_thread(other.said) == "playing"
    began = time.monotonic()
    await until(lambda: model.cancelled == 1, timeout=2 * priority.POLL_SECONDS + 1)
    paused_after = time.monotonic() - began
    model.seconds = 0.05  # the call made again answers at once
    await asyncio.sleep(0.6)
    assert model.started == 1, "the call was made again while the other process's turn played"
    assert not work.done()
    other.tell()
    await asyncio.to_thread(other.finish)
    assert await asyncio.wait_for(work, 10) == "answer 2"
    assert (model.started, model.cancelled, model.finished) == (2, 1, 1)
    assert paused_after < 2 * priority.POLL_SECONDS + 0.5


async def test_a_background_call_does_not_start_while_another_process_plays_a_turn(shared, campaign):
    other = Elsewhere(TURN, **SHARED)
    other.tell(campaign.pk)
    assert await asyncio.to_thread(other.said) == "playing"
    model = Model(seconds=0.05)
    work = asyncio.create_task(in_background(model))
    await asyncio.sleep(0.8)
    assert model.started == 0, "the call started during the other process's turn"
    other.tell()
    await asyncio.to_thread(other.finish)
    assert await asyncio.wait_for(work, 10) == "answer 1"


def test_one_process_asks_nothing_elsewhere():
    """Off by default: one process's turns are seen in its own loop, and no call reads the database."""
    assert postturn.turns_elsewhere() is None
