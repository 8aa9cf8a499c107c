"""The Redis channel layer as the settings build it: used when STORYTELLER_REDIS_URL is set, and a Redis that
stops answering fails a send with an error instead of hanging the socket that sent it.

A Redis server of the test's own (Debian's redis-server on a free loopback
port) is paused with SIGSTOP, as a Redis host that stops answering without
closing its connections is: the app's process, started with the setting,
must get an error within its socket timeout (10 s).
"""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from storyteller.diagnostics.load import ROOT, free_port

pytestmark = pytest.mark.multiprocess

SEND = """
import asyncio, sys, time
import django
django.setup()
from channels.layers import get_channel_layer
layer = get_channel_layer()
print(type(layer).__module__ + "." + type(layer).__name__, flush=True)

async def main():
    await layer.group_add("campaign-1", "probe")
    await layer.group_send("campaign-1", {"type": "story.changed"})
    print("sent", flush=True)
    sys.stdin.readline()  # the test pauses Redis now
    started = time.monotonic()
    try:
        await layer.group_send("campaign-1", {"type": "story.changed"})
        print("no error", flush=True)
    except Exception as error:
        print(f"error {type(error).__name__} after {time.monotonic() - started:.1f}", flush=True)

asyncio.run(main())
"""


@pytest.fixture
def own_redis(tmp_path):
    if not shutil.which("redis-server"):
        pytest.skip("needs Debian's redis-server (scripts/test installs it)")
    port = free_port()
    server = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--dir", str(tmp_path),
                               "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, check=False).returncode:
        assert time.monotonic() < deadline, "redis-server did not start"
        time.sleep(0.05)
    yield server, f"redis://127.0.0.1:{port}/0"
    os.kill(server.pid, signal.SIGCONT)
    server.terminate()
    server.wait(timeout=10)


def test_a_redis_that_stops_answering_fails_the_send_within_the_socket_timeout(own_redis, tmp_path):
    server, url = own_redis
    env = {**os.environ, "STORYTELLER_REDIS_URL": url, "STORYTELLER_DATA_DIR": str(tmp_path / "data"),
           "DJANGO_SETTINGS_MODULE": "storyteller.settings"}
    app = subprocess.Popen([sys.executable, "-c", SEND], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert app.stdout.readline().strip() == "channels_redis.core.RedisChannelLayer"
        assert app.stdout.readline().strip() == "sent", "a live Redis carries the message"
        os.kill(server.pid, signal.SIGSTOP)
        try:
            said = app.communicate("\n", timeout=20)[0].split()
        except subprocess.TimeoutExpired:
            pytest.fail("the send to a Redis that stopped answering hung")
        assert said[0] == "error" and said[1] == "TimeoutError", said
        assert float(said[-1]) <= 12, "within the socket timeout, not a hang"
    finally:
        app.kill()
        app.wait()


def test_without_the_setting_the_layer_is_in_memory(tmp_path):
    env = {**os.environ, "STORYTELLER_REDIS_URL": "", "STORYTELLER_DATA_DIR": str(tmp_path / "data"),
           "DJANGO_SETTINGS_MODULE": "storyteller.settings"}
    code = ("import django; django.setup(); from channels.layers import get_channel_layer; "
            "print(type(get_channel_layer()).__name__)")
    said = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert said.stdout.strip() == "InMemoryChannelLayer"
