"""The player's turn comes first: background model calls wait for turns, give way when one starts, and run again.

The calls here are plain coroutines standing in for a model call (the real
clients are exercised through the fake server in tests/storyteller/test_postturn.py
and with the real built-in model in tests/llm/test_builtin.py).
"""

import asyncio

import pytest

from storyteller.llm import priority


class Model:
    """A stand-in model call: counts attempts, takes ``seconds``, and ``letting_go`` seconds to stop when cancelled."""

    def __init__(self, seconds=0.2, letting_go=0.0):
        self.seconds, self.letting_go = seconds, letting_go
        self.started, self.cancelled, self.finished = 0, 0, 0

    async def answer(self):
        self.started += 1
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            await asyncio.sleep(self.letting_go)
            raise
        self.finished += 1
        return f"answer {self.started}"


async def in_background(model, what="the recording"):
    with priority.background(what):
        return await priority.call(model.answer)


async def until(condition, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the condition never held"
        await asyncio.sleep(0.005)


async def test_a_turn_cancels_the_background_call_in_flight_which_is_made_again_once_the_turn_ends():
    model = Model(seconds=0.3)
    work = asyncio.create_task(in_background(model))
    await until(lambda: model.started == 1)

    async with priority.turn():
        await asyncio.sleep(0.4)  # longer than the call would have taken
        assert (model.started, model.cancelled, model.finished) == (1, 1, 0)
        assert not work.done(), "the background work waits for the turn, it does not fail"

    assert await work == "answer 2"
    assert (model.started, model.finished) == (2, 1)


async def test_a_background_call_waits_while_a_turn_plays():
    model = Model(seconds=0.01)
    async with priority.turn():
        work = asyncio.create_task(in_background(model))
        await asyncio.sleep(0.1)
        assert model.started == 0
    assert await work == "answer 1"


async def test_every_turn_must_end_before_background_work_goes_on():
    model = Model(seconds=0.01)
    first, second = priority.turn(), priority.turn()
    await first.__aenter__()
    await second.__aenter__()
    work = asyncio.create_task(in_background(model))
    await first.__aexit__(None, None, None)
    await asyncio.sleep(0.05)
    assert model.started == 0, "another turn still plays"
    await second.__aexit__(None, None, None)
    assert await work == "answer 1"


async def test_outside_background_work_the_same_call_runs_at_once_even_during_a_turn():
    model = Model(seconds=0.01)
    async with priority.turn():
        # The summary a turn itself needs is made with the same call, and must not wait for its own turn.
        assert await priority.call(model.answer) == "answer 1"


async def test_a_turn_says_what_it_waits_for_when_background_work_is_slow_to_let_go():
    model = Model(seconds=5, letting_go=0.5)
    work = asyncio.create_task(in_background(model, "the recording"))
    await until(lambda: model.started == 1)
    notices = []

    async def notify(message):
        notices.append(message)

    async with priority.turn(notify):
        assert model.cancelled == 1
        assert notices == ["Waiting for the recording to pause before your turn starts…"]
    work.cancel()
    with pytest.raises(asyncio.CancelledError):
        await work


async def test_a_turn_that_finds_no_background_work_says_nothing():
    notices = []

    async def notify(message):
        notices.append(message)

    async with priority.turn(notify):
        pass
    assert notices == []


async def test_cancelling_the_background_work_itself_still_cancels_it():
    model = Model(seconds=5)
    work = asyncio.create_task(in_background(model))
    await until(lambda: model.started == 1)
    work.cancel()
    with pytest.raises(asyncio.CancelledError):
        await work
    await asyncio.sleep(0.05)
    assert model.started == 1, "a cancelled worker is not a turn: nothing is made again"


async def test_a_failing_background_call_fails_as_it_would_without_the_turn_rule():
    async def broken():
        raise ValueError("server said no")

    with priority.background("the recording"), pytest.raises(ValueError, match="server said no"):
        await priority.call(broken)


async def test_playing_counts_the_turns_of_the_loop_for_the_status_line():
    loop = asyncio.get_running_loop()
    assert priority.playing(loop) == 0
    async with priority.turn():
        assert priority.playing(loop) == 1
    assert priority.playing(loop) == 0
