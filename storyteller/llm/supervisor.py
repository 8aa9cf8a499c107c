"""The built-in narrator's process, watched from the web process: started on first use, never a danger to the app.

The web process never loads llama.cpp (issue 21): a fault in native code
would end every person's play at once. ``start()`` runs ONE child
(``python -m storyteller.llm.builtin_child``) for the whole app and talks to
it over its stdin and stdout, one JSON object a line (that module's
docstring has the protocol); ``call()`` sends one request and returns a
``Call`` whose messages arrive in the event loop that asked, whichever loop
that is.

When the child dies (a segfault, an abort, the kernel's OOM killer,
``kill -9``), every request in flight ends with ``DIED`` in words, its last
lines of stderr go to the app's log, and the next request starts a fresh
child; after ``DEATHS`` deaths within ``WITHIN`` seconds it is not started
again until the person asks (``allow_restart()``: the model settings page,
Retry) or the app restarts. The child's stderr is a log file in the data
folder, kept to about ``LOG_BYTES``.

The child dies with the app: it asks the kernel to kill it when the thread
that started it ends, which is why one long-lived thread starts every child
(a worker thread of an event loop ends with its loop), and it exits when its
stdin closes; the app ends it itself at exit.
"""

import asyncio
import atexit
import collections
import concurrent.futures
import itertools
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from django.conf import settings

from . import preparing
from .base import NarratorError

logger = logging.getLogger(__name__)

DIED = "The built-in narrator stopped unexpectedly; Retry, or send again, starts it afresh."
REFUSED = ("The built-in narrator stopped unexpectedly {deaths} times within a minute, so the app does not start it "
           "again on its own. Connect Ollama to play now, or start the built-in narrator again with Retry or on the "
           "model settings page.")
DEATHS = 3
WITHIN = 60.0

# A cancelled generation lets go within a token (~15 ms here) or, mid-prompt, at the next matrix product; one
# that has not answered in this time is stuck in native code, and the child is ended.
STOP_GRACE = 2.0

# The child's stderr (llama.cpp's own lines, Python tracebacks) is kept to about this much, one older file beside.
LOG_BYTES = 1024 * 1024
TAIL_LINES = 20

CLOSING = ("done", "json", "cancelled", "error")

_lock = threading.Lock()
_child = None
_deaths = collections.deque()
_ids = itertools.count(1)


class Call:
    """One request to the child: its messages, delivered in the event loop that asked."""

    def __init__(self, child, request_id, loop):
        self.child = child
        self.id = request_id
        self.loop = loop
        self.queue = asyncio.Queue()
        self.started = False  # the child gave it the model
        self.closed = False  # its closing message has been read
        self.sent_at = time.perf_counter()
        self.ended_at = None

    def deliver(self, message):
        """Hand ``message`` to the asking loop (from the thread that reads the child)."""
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, message)
        except RuntimeError:  # that loop has closed: nobody is listening
            pass

    async def next(self):
        """Return the next message; an "error" one is raised as a NarratorError in its words."""
        message = await self.queue.get()
        if any(key in message for key in CLOSING):
            self.closed = True
            self.ended_at = time.perf_counter()
        if "error" in message:
            raise NarratorError(message["error"])
        return message

    async def close(self):
        """End the request if it has not ended, and return once the child has let go of the model."""
        if self.closed:
            return
        self.child.send({"op": "cancel", "id": self.id})
        try:
            await asyncio.wait_for(self._drain(), STOP_GRACE)
        except TimeoutError:
            logger.error("The built-in narrator did not stop within %.0f s of being asked; ending its process.",
                         STOP_GRACE)
            self.child.kill()
            await self._drain()

    async def _drain(self):
        while not self.closed:
            try:
                await self.next()
            except NarratorError:
                pass

    def boundary_ms(self, message):
        """Return the time the pipe added to this request: from sending it to reading ``message``, less the child's own."""
        return (self.ended_at - self.sent_at) * 1000 - message.get("ms", 0.0)


class _Child:
    def __init__(self, process, log, log_start):
        self.process = process
        self.log = log
        self.log_start = log_start
        self.calls = {}
        self.lock = threading.Lock()  # calls, exited
        self.write_lock = threading.Lock()
        self.ready = threading.Event()  # the model is loaded, or the child is gone
        self.facts = None  # what the child said when its model was loaded
        self.failed = None  # why it could not load its model, in words
        self.exited = False
        self.stopping = False  # ended on purpose, not a death
        self.started_at = time.monotonic()

    def send(self, message):
        line = json.dumps(message, ensure_ascii=False) + "\n"
        with self.write_lock:
            try:
                self.process.stdin.write(line)
                self.process.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass  # it has died: the thread that reads it ends every call

    def kill(self):
        try:
            self.process.kill()
        except ProcessLookupError:
            pass


def start():
    """Return the running child, starting one if none runs; raise NarratorError when it cannot or may not run."""
    global _child
    with _lock:
        if _child is not None:
            return _child
        build = preparing.state()
        if build.state != "ready":
            raise NarratorError(build.message)
        now = time.monotonic()
        while _deaths and now - _deaths[0] > WITHIN:
            _deaths.popleft()
        if len(_deaths) >= DEATHS:
            raise NarratorError(REFUSED.format(deaths=len(_deaths)))
        _child = _spawn()
        return _child


async def call(op, **payload):
    """Send the child one request (``op`` "chat" or "json", see builtin_child) and return its Call."""
    child = _child if _child is not None else await asyncio.to_thread(start)
    call = Call(child, next(_ids), asyncio.get_running_loop())
    with child.lock:
        if child.exited:
            call.deliver({"id": call.id, "error": child.failed or DIED})
        else:
            child.calls[call.id] = call
    child.send({"id": call.id, "op": op, **payload})
    return call


def running():
    """Return the child if one runs (without starting one)."""
    return _child


def busy():
    """Return whether the child has a request in flight (asked, not yet answered)."""
    child = _child
    return child is not None and bool(child.calls)


def generating():
    """Return whether the child is writing for a request right now."""
    child = _child
    return child is not None and any(call.started and not call.closed for call in list(child.calls.values()))


def memory():
    """Return the child's resident memory in bytes (from /proc), or None when no child runs."""
    child = _child
    if child is None:
        return None
    try:
        for line in Path(f"/proc/{child.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def refused():
    """Return the words that say the child is not started again, or "" when it would be."""
    with _lock:
        now = time.monotonic()
        recent = [death for death in _deaths if now - death <= WITHIN]
    return REFUSED.format(deaths=len(recent)) if len(recent) >= DEATHS else ""


def allow_restart():
    """Forget the child's recent deaths: the person asked for it again."""
    with _lock:
        _deaths.clear()


def stop():
    """End the child on purpose (the app is stopping, or a test or benchmark wants a cold start)."""
    global _child
    with _lock:
        child, _child = _child, None
    if child is None:
        return
    child.stopping = True
    try:
        child.process.stdin.close()  # it exits at end of input
    except OSError:
        pass
    try:
        child.process.wait(timeout=2)
    except subprocess.TimeoutExpired:
        child.kill()
        child.process.wait()


def log_path():
    """Return where the child's stderr goes."""
    return preparing.folder() / "process.log"


def _spawn():
    log = log_path()
    log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if log.exists() and log.stat().st_size > LOG_BYTES:
        os.replace(log, log.with_name(log.name + ".1"))
    with log.open("ab") as errors:
        errors.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} the built-in narrator starts\n".encode())
        errors.flush()
        log_start = errors.tell()
        process = _spawner.run(
            [sys.executable, "-m", "storyteller.llm.builtin_child"],
            cwd=settings.BASE_DIR,
            env={**os.environ, "STORYTELLER_NARRATOR_PARENT": str(os.getpid())},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
            text=True, encoding="utf-8", bufsize=1,
        )
    child = _Child(process, log, log_start)
    threading.Thread(target=_read, args=(child,), name="builtin-narrator-reader", daemon=True).start()
    return child


class _Spawner:
    """One thread that lives as long as the process and starts every child.

    PR_SET_PDEATHSIG fires when the *thread* that started the child ends, so a
    child started from an event loop's worker thread would be killed when that
    loop closes.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.jobs = None

    def run(self, *args, **kwargs):
        with self.lock:
            if self.jobs is None:
                self.jobs = queue.Queue()
                threading.Thread(target=self._serve, name="builtin-narrator-spawner", daemon=True).start()
                atexit.register(stop)
        done = concurrent.futures.Future()
        self.jobs.put((args, kwargs, done))
        return done.result()

    def _serve(self):
        while True:
            args, kwargs, done = self.jobs.get()
            try:
                done.set_result(subprocess.Popen(*args, **kwargs))
            except Exception as error:  # noqa: BLE001 — handed to the caller, who says what failed
                done.set_exception(error)


_spawner = _Spawner()


def _read(child):
    """Read the child's answers until it ends, then end every call it still had."""
    for line in child.process.stdout:
        try:
            message = json.loads(line)
        except ValueError:
            logger.warning("The built-in narrator wrote a line the app cannot read: %r", line[:200])
            continue
        if "ready" in message:
            child.facts = message["ready"]
            child.ready.set()
            continue
        if "failed" in message:
            child.failed = message["failed"]
            continue
        with child.lock:
            call = child.calls.get(message.get("id"))
            if call is not None and any(key in message for key in CLOSING):
                del child.calls[call.id]
        if call is None:
            continue
        if "started" in message:
            call.started = True
        call.deliver(message)
    _ended(child, child.process.wait())


def _ended(child, code):
    global _child
    with _lock:
        if _child is child:
            _child = None
        if not child.stopping:
            _deaths.append(time.monotonic())
    with child.lock:
        child.exited = True
        calls, child.calls = list(child.calls.values()), {}
    if not child.stopping:
        logger.error("The built-in narrator's process %s ended (%s) %.0f s after it started; its last lines:\n%s",
                     child.process.pid, _how(code), time.monotonic() - child.started_at, _tail(child))
    child.ready.set()
    for call in calls:
        call.deliver({"id": call.id, "error": child.failed or DIED})


def _how(code):
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _tail(child):
    try:
        with child.log.open("rb") as log:
            log.seek(child.log_start)
            lines = log.read().decode("utf-8", errors="replace").splitlines()
    except OSError as error:
        return f"(its log {child.log} could not be read: {error})"
    return "\n".join(lines[-TAIL_LINES:]) or "(nothing)"
