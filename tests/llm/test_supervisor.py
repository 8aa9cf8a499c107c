"""The built-in narrator's child process under real signals: killed, crashed again and again, stuck, orphaned."""

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storyteller.llm import BuiltinNarrator, ChatOptions, NarratorError, builtin, supervisor

ROOT = Path(__file__).resolve().parents[2]

MESSAGES = [
    {"role": "system", "content": "You are the narrator of a short adventure."},
    {"role": "user", "content": "Tell me, at great length, the whole history of the abbey."},
]


@pytest.fixture(autouse=True)
def _restarts_allowed():
    """Each test starts with no recent deaths on the record, and leaves none."""
    supervisor.allow_restart()
    yield
    supervisor.allow_restart()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


async def streaming(narrator):
    """Return a reply's stream once its first words have come."""
    stream = narrator.stream_chat(MESSAGES, ChatOptions(num_predict=400, seed=1))
    first = await anext(stream)
    assert first.text
    return stream


def kill_the_child():
    child = supervisor.running()
    assert child is not None
    os.kill(child.process.pid, signal.SIGKILL)
    return child.process.pid


async def test_a_killed_child_fails_the_reply_in_words_and_the_next_request_starts_a_fresh_one(caplog):
    narrator = BuiltinNarrator()
    stream = await streaming(narrator)
    killed = kill_the_child()

    with caplog.at_level(logging.ERROR, logger="storyteller.llm.supervisor"):
        with pytest.raises(NarratorError) as failure:
            async for _chunk in stream:
                pass
    assert str(failure.value) == supervisor.DIED
    assert "stopped unexpectedly" in str(failure.value) and "Traceback" not in str(failure.value)
    assert f"process {killed} ended (killed by SIGKILL)" in caplog.text, "its end and last lines go to the log"

    chunks = [chunk async for chunk in narrator.stream_chat(MESSAGES, ChatOptions(num_predict=4, seed=1))]
    assert chunks[-1].done
    assert supervisor.running().process.pid != killed


async def test_three_deaths_in_a_minute_stop_the_restarts_until_the_person_asks_again():
    narrator = BuiltinNarrator()
    for _death in range(supervisor.DEATHS):
        stream = await streaming(narrator)
        kill_the_child()
        with pytest.raises(NarratorError, match="stopped unexpectedly"):
            async for _chunk in stream:
                pass

    with pytest.raises(NarratorError) as refused:
        await anext(narrator.stream_chat(MESSAGES, ChatOptions(num_predict=4)))
    message = str(refused.value)
    assert message.startswith("The built-in narrator stopped unexpectedly 3 times within a minute")
    assert "Connect Ollama to play now" in message and "model settings page" in message
    assert supervisor.running() is None, "no fourth child was started"
    assert supervisor.refused() == message

    supervisor.allow_restart()  # what the model settings page's button and Retry do
    chunks = [chunk async for chunk in narrator.stream_chat(MESSAGES, ChatOptions(num_predict=4, seed=1))]
    assert chunks[-1].done


async def test_a_child_that_does_not_let_go_when_stopped_is_ended_and_replaced():
    narrator = BuiltinNarrator()
    stream = await streaming(narrator)
    stuck = supervisor.running().process.pid
    os.kill(stuck, signal.SIGSTOP)  # as if stuck in native code: it reads no cancel
    started = time.monotonic()

    await stream.aclose()

    assert time.monotonic() - started < supervisor.STOP_GRACE + 1
    for _tick in range(50):
        if not alive(stuck):
            break
        await asyncio.sleep(0.1)
    assert not alive(stuck)
    chunks = [chunk async for chunk in narrator.stream_chat(MESSAGES, ChatOptions(num_predict=4, seed=1))]
    assert chunks[-1].done


async def test_the_child_reports_its_resident_memory():
    builtin.ready_facts()

    resident = supervisor.memory()

    # SmolLM2-135M at Q4_1 is 90 MB; its 8,192-token window's cache and the interpreter come on top.
    assert 100_000_000 < resident < 1_500_000_000


# A stand-in for the web process: starts the narrator's child, says both pids, and waits to be killed.
APP = """
import django, os, sys, time
django.setup()
from storyteller.llm import builtin, supervisor
builtin.ready_facts()
print(os.getpid(), supervisor.running().process.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_no_child_outlives_the_app(how, tmp_path):
    env = {**os.environ, "STORYTELLER_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "storyteller.settings"}
    app = subprocess.Popen([sys.executable, "-c", APP], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = app.stdout.readline()
        assert line, "the stand-in app did not start its narrator"
        app_pid, child_pid = map(int, line.split())
        assert alive(child_pid)

        os.kill(app_pid, how)
        app.wait(timeout=10)
        deadline = time.monotonic() + 2
        while alive(child_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child_pid), "the child noticed its parent was gone within 2 s"
    finally:
        app.kill()
        app.wait()
