"""The player's turn comes first: background model calls give way to it.

One model often serves both a turn and the work after it — the built-in
narrator's one process, a model server with one slot — so a recording that
holds it would leave the person watching a blinking cursor. A turn plays
inside ``turn()``; post-turn work runs inside ``background(what)``, and each
of its model calls goes through ``call()``. Such a call waits while any turn
plays, is cancelled when one starts (an HTTP client closes its connection,
which stops the server's generation; the built-in narrator's process is told
to stop and does, between tokens), and is made again from the start once no
turn is playing. The same
``call()`` outside ``background`` (the summary a turn itself needs) runs at
once, so the step's code need not know who asked.

A turn in another process (a worker's post-turn work, with the turn on a
Daphne process) is out of this loop's sight: ``background(what,
elsewhere=...)`` names an async question — is a turn playing anywhere
else? — which each call asks before it starts and every ``POLL_SECONDS``
while it runs, giving way the same way when the answer is yes.

When the turn has to wait — for a cancelled call to let go of the model, for
the built-in narrator to finish something else — ``waiting_for()`` tells the
person what for, through the ``notify`` the turn was given.
"""

import asyncio
import contextlib
import contextvars
import weakref
from dataclasses import dataclass, field

# A cancelled HTTP call lets go at once and the built-in narrator within a
# token (~30 ms on two cores); only past this does the wait deserve a word.
SAY_AFTER = 0.15
# How often a background call asks whether a turn plays in another process: the longest the other process's turn
# shares the model with it. One indexed read of a handful of rows (bench "processes").
POLL_SECONDS = 0.25

_doing: contextvars.ContextVar[str | None] = contextvars.ContextVar("background_work", default=None)
_notify: contextvars.ContextVar[object] = contextvars.ContextVar("turn_notify", default=None)
_elsewhere: contextvars.ContextVar[object] = contextvars.ContextVar("turns_elsewhere", default=None)


@dataclass
class _Traffic:
    """One event loop's turns and background calls."""

    playing: int = 0
    clear: asyncio.Event = field(default_factory=asyncio.Event)  # set while no turn plays
    calls: dict = field(default_factory=dict)  # background call task -> what it is part of
    yielded: set = field(default_factory=set)  # the calls a turn cancelled

    def __post_init__(self):
        self.clear.set()


_traffic_of: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Traffic]" = weakref.WeakKeyDictionary()


def _traffic(loop=None):
    loop = loop or asyncio.get_running_loop()
    traffic = _traffic_of.get(loop)
    if traffic is None:
        traffic = _traffic_of[loop] = _Traffic()
    return traffic


@contextlib.asynccontextmanager
async def turn(notify=None):
    """Play a turn inside this block: background model calls stop now and wait until it ends.

    ``notify(message)``, if given, is awaited when the turn has to wait for
    something first, with what it waits for.
    """
    traffic = _traffic()
    traffic.playing += 1
    traffic.clear.clear()
    said = _notify.set(notify)
    try:
        stopping = [task for task in traffic.calls if not task.done()]
        for task in stopping:
            traffic.yielded.add(task)
            task.cancel()
        if stopping:
            _, pending = await asyncio.wait(stopping, timeout=SAY_AFTER)
            if pending:
                what = sorted({traffic.calls.get(task, "background work") for task in pending})
                await waiting_for(f"{' and '.join(what)} to pause")
                await asyncio.wait(pending)
        yield
    finally:
        _notify.reset(said)
        traffic.playing -= 1
        if not traffic.playing:
            traffic.clear.set()


@contextlib.contextmanager
def background(what, *, elsewhere=None):
    """Run the block's model calls as background work that gives way to turns; ``what`` names it ("the recording").

    ``elsewhere``, if given, is awaited to ask whether a turn plays in another
    process; the calls give way to those turns too.
    """
    token, other = _doing.set(what), _elsewhere.set(elsewhere)
    try:
        yield
    finally:
        _elsewhere.reset(other)
        _doing.reset(token)


async def call(make):
    """Return ``await make()``; in background work, give way to every turn (see the module docstring).

    ``make`` is called again for each attempt, so put a timeout inside it:
    the time spent waiting for turns is not the call's.
    """
    what = _doing.get()
    if what is None:
        return await make()
    traffic, elsewhere = _traffic(), _elsewhere.get()
    while True:
        await traffic.clear.wait()
        if elsewhere is not None and await elsewhere():
            await asyncio.sleep(POLL_SECONDS)
            continue
        attempt = asyncio.ensure_future(make())
        traffic.calls[attempt] = what
        watch = asyncio.ensure_future(_watch(elsewhere, attempt, traffic)) if elsewhere is not None else None
        try:
            return await attempt
        except asyncio.CancelledError:
            if attempt not in traffic.yielded or asyncio.current_task().cancelling():
                raise
        finally:
            if watch is not None:
                watch.cancel()
            traffic.calls.pop(attempt, None)
            traffic.yielded.discard(attempt)


async def _watch(elsewhere, attempt, traffic):
    """Cancel ``attempt`` as a turn's would be once ``elsewhere`` says a turn plays in another process."""
    while not attempt.done():
        await asyncio.sleep(POLL_SECONDS)
        if not attempt.done() and await elsewhere():
            traffic.yielded.add(attempt)
            attempt.cancel()
            return


async def waiting_for(what):
    """Tell the person whose turn is playing what it waits for ("the built-in narrator to finish …")."""
    notify = _notify.get()
    if notify is not None:
        await notify(f"Waiting for {what} before your turn starts…")


def playing(loop):
    """Return how many turns are playing in ``loop`` (any thread may ask)."""
    traffic = _traffic_of.get(loop)
    return traffic.playing if traffic is not None else 0
