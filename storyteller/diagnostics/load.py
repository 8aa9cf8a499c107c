"""Hostile imports into a running app while another person plays (issue 10, point 2).

The harness behind ``manage.py bench --only imports`` and
tests/storyteller/test_import_load.py. It starts the real app under Daphne on
a free loopback port with its own data folder, narrated by the fake model
server; one person plays turns over the real websocket while another
uploads each hostile file through the real import pages. For every upload it
reports the app's peak resident memory above idle (sampled from /proc every
few milliseconds) and the player's turn latency, from the action sent to the
page update that follows the commit.
"""

import base64
import io
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024

_SETUP = """
import json
from django.contrib.auth import get_user_model
from django.test import Client
from campaigns import story
from campaigns.models import Campaign

def person(name):
    user = get_user_model().objects.create_user(name, password=None)
    campaign = story.start_campaign(Campaign.objects.create(
        owner=user, title=f"{name}'s story", protagonist="Edrin", opening="Rain falls on the harbour.",
        context_token_budget=4096, max_output_tokens=200))
    client = Client()
    client.force_login(user)
    return {"campaign": campaign.pk, "session": client.cookies["sessionid"].value}

print(json.dumps({"player": person("player"), "importer": person("importer")}))
"""


def rss(pid="self"):
    """Return the resident memory of process ``pid`` (this one by default) in bytes, from /proc."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


class PeakMemory:
    """Sample a process's resident memory every few milliseconds while the block runs; ``above`` is its peak
    over what it held when the block began."""

    def __init__(self, pid="self"):
        self.pid = pid

    def __enter__(self):
        self.idle = self.peak = rss(self.pid)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while not self.done.is_set():
            self.peak = max(self.peak, rss(self.pid))
            time.sleep(0.003)

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        self.peak = max(self.peak, rss(self.pid))
        self.above = self.peak - self.idle


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiveApp:
    """The real app under Daphne on a free port, with its own data folder, narrated by ``server``."""

    def __init__(self, server):
        self.server = server

    def __enter__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="storyteller-load-"))
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "STORYTELLER_DATA_DIR": str(self.folder), "STORYTELLER_LLM_URL": self.server.url,
                    "STORYTELLER_LLM_API": "ollama"}
        self._manage("migrate", "--noinput")
        self.people = json.loads(self._manage("shell", "-c", _SETUP).strip().splitlines()[-1])
        # The app's log goes to a file: a pipe nobody read filled after some hundred model calls, and the app's
        # next log line then blocked its event loop, every socket with it.
        self.log = open(self.folder / "app.log", "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "storyteller.serve", "-b", "127.0.0.1", "-p", str(self.port), "storyteller.asgi:application"],
            cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{self.base}/login/", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.2)
        self.process.kill()
        raise RuntimeError("the app did not start: " + self.output()[-2000:])

    def __exit__(self, *exc):
        self.process.terminate()
        self.process.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def output(self):
        """Return what the app has logged so far."""
        return (self.folder / "app.log").read_text(errors="replace")

    def _manage(self, *args):
        return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, check=True,
                              capture_output=True, text=True).stdout

    def client(self, who):
        """Return an HTTP client signed in as ``who`` ("player" or "importer"), with its CSRF token."""
        client = httpx.Client(base_url=self.base, cookies={"sessionid": self.people[who]["session"]}, timeout=300)
        client.get("/")
        client.headers.update({"X-CSRFToken": client.cookies["csrftoken"], "Origin": self.base})
        return client

    def socket(self, who, origin=None):
        """Return the play websocket of ``who``'s campaign, opened from ``origin`` (the app's own by default)."""
        return Socket("127.0.0.1", self.port, f"/ws/play/{self.people[who]['campaign']}/",
                      {"Origin": origin or self.base, "Cookie": f"sessionid={self.people[who]['session']}"})


class Socket:
    """The least of a websocket client (RFC 6455): text frames out, masked; text frames in; pings answered."""

    def __init__(self, host, port, path, headers):
        self.sock = socket.create_connection((host, port), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket", "Connection: Upgrade",
                 f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionRefusedError("the server closed the connection during the handshake")
            self.buffer += chunk
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        self.status = head.split(b"\r\n")[0].decode()
        if " 101 " not in self.status:
            self.sock.close()
            raise ConnectionRefusedError(self.status)

    def send(self, text, opcode=0x1):
        payload, mask = text.encode() if isinstance(text, str) else text, os.urandom(4)
        size = len(payload)
        header = bytes([0x80 | opcode])
        if size < 126:
            header += bytes([0x80 | size])
        elif size < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", size)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", size)
        masked = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def receive(self):
        """Return the next text message; raise EOFError when the server closes."""
        while True:
            first, second = self._read(2)
            size = second & 0x7F
            if size == 126:
                size = struct.unpack(">H", self._read(2))[0]
            elif size == 127:
                size = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(size)
            opcode = first & 0x0F
            if opcode == 0x9:
                self.send(payload, opcode=0xA)
            elif opcode == 0x8:
                raise EOFError("the server closed the websocket")
            elif opcode in (0x1, 0x0):
                return payload.decode()

    def _read(self, size):
        while len(self.buffer) < size:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the server closed the connection")
            self.buffer += chunk
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def close(self):
        self.sock.close()


def play_turn(sock, text):
    """Send an action and return the seconds until the frame that ends the turn (it carries the outcome)."""
    return played(sock, text)[0]


def played(sock, text):
    """Send an action; return (the seconds until the frame that ends the turn, the outcome it carries)."""
    started = time.perf_counter()
    sock.send(json.dumps({"mode": "do", "text": text}))
    while 'id="turn-outcome"' not in (frame := sock.receive()):
        pass
    outcome = frame.split('data-outcome="', 1)[1].split('"', 1)[0]
    return time.perf_counter() - started, outcome


@dataclass
class Outcome:
    name: str
    status: int
    seconds: float
    peak_above_idle: int
    turns: list = field(default_factory=list)
    answer: str = ""

    def row(self):
        ordered = sorted(self.turns)
        return {"name": self.name, "status": self.status, "import_s": round(self.seconds, 2),
                "peak_mib_above_idle": round(self.peak_above_idle / MiB, 1), "turns": len(ordered),
                "turn_ms_median": round(ordered[len(ordered) // 2] * 1000, 1),
                "turn_ms_max": round(ordered[-1] * 1000, 1)}


def hostile_uploads(app):
    """Return (name, url, files) for each hostile upload: what issue 10 reproduced, and what it asked for."""
    importer = app.client("importer")
    bundle = importer.get(f"/campaigns/{app.people['importer']['campaign']}/export/").content
    bomb = zip_bomb(256 * MiB)
    knowledge = f"/campaigns/{app.people['importer']['campaign']}/knowledge/upload/"
    return [
        ("zip bomb (1 MB, inflates to 256 MiB)", "/campaigns/import/", {"bundle": ("b.zip", bomb)}),
        ("zip header lying about its size", "/campaigns/import/", {"bundle": ("b.zip", lying(bomb, 1000))}),
        ("50 MiB padded bundle", "/campaigns/import/",
         {"bundle": ("b.json", bundle[:-1] + b" " * (50 * MiB) + bundle[-1:])}),
        ("JSON nested 100,000 deep", "/campaigns/import/", {"bundle": ("b.json", b"[" * 100_000)}),
        ("a 10,000-digit number", "/campaigns/import/", {"bundle": ("b.json", b'{"n": ' + b"7" * 10_000 + b"}")}),
        ("1 MiB knowledge file, no paragraph breaks", knowledge,
         {"files": ("notes.txt", ("lorem ipsum dolor sit amet " * 40_000)[:MiB].encode())}),
    ]


def zip_bomb(inflated):
    """Return a zip of about a megabyte whose one member, campaign.json, inflates to ``inflated`` bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with archive.open("campaign.json", "w") as stream:
            chunk = b" " * MiB
            for _ in range(inflated // MiB):
                stream.write(chunk)
    return buffer.getvalue()


def lying(data, claimed):
    """Return a one-member zip whose headers claim its member inflates to ``claimed`` bytes."""
    data = bytearray(data)
    struct.pack_into("<I", data, data.find(b"PK\x03\x04") + 22, claimed)
    struct.pack_into("<I", data, data.rfind(b"PK\x01\x02") + 24, claimed)
    return bytes(data)


def follow_import(client, url, seconds=600):
    """Ask an import's progress page every half second, as the page does, until it sends the person on; return
    the last answer (the play page's redirect, or the page saying why the import stopped)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        response = client.get(url)
        if response.status_code != 200 or "import stopped" in response.text:
            return response
        time.sleep(0.5)
    raise TimeoutError(f"the import at {url} was still being written after {seconds} s")


def run(app, uploads, idle_turns=3):
    """Play while each upload runs; return (idle turn seconds, [Outcome])."""
    player = app.socket("player")
    try:
        idle = [play_turn(player, f"look around {n}") for n in range(idle_turns)]
        outcomes = [_during(app, player, *upload) for upload in uploads]
    finally:
        player.close()
    return idle, outcomes


def _during(app, player, name, url, files):
    importer = app.client("importer")
    done = threading.Event()
    answer = {}

    def upload():
        started = time.perf_counter()
        data = {"classification": "reference"} if "files" in files else {}
        response = importer.post(url, files=files, data=data)
        status = response.status_code
        if status == 302 and response.headers["location"].startswith("/imports/"):
            response = follow_import(importer, response.headers["location"])
        answer.update(status=status, seconds=time.perf_counter() - started, text=response.text)
        done.set()

    with PeakMemory(app.process.pid) as memory:
        thread = threading.Thread(target=upload)
        thread.start()
        turns = []
        while not done.is_set() or not turns:
            turns.append(play_turn(player, f"keep playing {len(turns)}"))
        thread.join()
    importer.close()
    return Outcome(name, answer["status"], answer["seconds"], memory.above, turns, answer["text"])
