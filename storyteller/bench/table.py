"""``table``: 4 tables of 4 players for 60 s, rounds over real websockets against the fake model server (issue 30).

In-process: the ASGI application (the play consumer, the in-memory channel
layer) driven by ``channels.testing.WebsocketCommunicator`` — real websocket
messages through the real consumer and channel layer, without a Daphne
socket (the honest way here: one process, like the default deployment, and
no port to race for). The model server is the real HTTP fake on 127.0.0.1
(``storyteller.llm.fake_server``) in a process of its own (port 8042, or
``STORYTELLER_BENCH_TABLE_PORT``), bounded to 4 requests at once; each
narration is written per stage with a canary per place.

Each table: the owner's socket and four players in two places (two and two),
game-master mode. Every round, each player sends an action carrying a token
of its own; the round plays when all four have sent. After the run: every
action is in the database exactly once, played, in its round's input once
(no lost or doubled action); every frame each seat received is checked for
the other place's tokens and canaries (none: every frame went to the right
seat only); the figure is the round's commit (the turn's one transaction, its
actions marked played and its parts by stage stored), p95 < 50 ms.
"""

import asyncio
import json
import os
import re
import time

ROUND_SECONDS = int(os.environ.get("STORYTELLER_BENCH_TABLE_SECONDS", "60"))
TABLES = 4
PLACES = ("Kitchen", "Yard")
PLAYERS = (("ana", "Mara", "Kitchen"), ("ben", "Edrin", "Kitchen"), ("cyd", "Aldric", "Yard"),
           ("dee", "Nell", "Yard"))


def run(sizes, repeat):
    from asgiref.sync import async_to_sync

    return async_to_sync(_run)()


def _document(table):
    return {"format": "storyteller-world", "version": 1,
            "campaign": {"title": f"Bench table {table}", "genre": "mystery", "protagonist": "Edrin, a cartographer",
                         "opening": "Evening in the old house."},
            "places": [{"name": "Kitchen", "description": "a warm kitchen"},
                       {"name": "Yard", "description": "a cold yard"}],
            "exits": [{"from": "Kitchen", "to": "Yard", "label": "back door", "travel_seconds": 10,
                       "both_ways": True}],
            "characters": [{"name": name, "protagonist": name == "Edrin", "place": place, "description": "a player"}
                           for _, name, place in PLAYERS],
            "items": []}


MODEL_PORT = int(os.environ.get("STORYTELLER_BENCH_TABLE_PORT", "8042"))
MODEL_SERVER = """
import sys
import django
django.setup()
from storyteller.bench.table import _Stages
from storyteller.llm.fake_server import FakeModelServer
server = FakeModelServer(stubs=_Stages(), slots=4, port=int(sys.argv[1])).start()
print(server.url, flush=True)
sys.stdin.read()
server.stop()
"""


class _ModelProcess:
    """The fake model server in a process of its own, as a model server always is: in the bench's process its
    threads took the interpreter's lock from the round's commit (measured: a third of the commit's wall time)."""

    def __init__(self):
        import subprocess
        import sys

        from django.conf import settings

        self.process = subprocess.Popen([sys.executable, "-c", MODEL_SERVER, str(MODEL_PORT)], cwd=settings.BASE_DIR,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.url = self.process.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            self.stop()
            raise RuntimeError(f"the bench's model server did not start (port {MODEL_PORT} taken?)")

    def stop(self):
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self.process.kill()
            self.process.wait()


class _Stages:
    """The fake server's narration: one part per stage the direction names, each with a canary of its place."""

    count = 0

    def reply(self, messages, schema):
        if schema is not None:
            return None
        named = re.findall(r"\[At ([A-Za-z]+)\]", " ".join(m["content"] for m in messages))
        if not named:
            return None
        _Stages.count += 1
        return "\n\n".join(f"[At {place}]\nAll is quiet here: CANARY-{place.upper()}-{_Stages.count}."
                           for place in dict.fromkeys(named))

    def embed(self, text):
        from storyteller.llm.fake_server import vector_for

        return vector_for(text)


async def _run():
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from campaigns import worldfile
    from campaigns.models import Node, Seat, TableAction
    from storyteller import table_rounds
    from storyteller.asgi import application
    from storyteller.steps import postturn

    from .measure import bench_user, figure

    server = _ModelProcess()
    settings.STORYTELLER_LLM_URL, settings.STORYTELLER_LLM_URL_CONFIGURED = server.url, True
    settings.STORYTELLER_LLM_API = "ollama"
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "127.0.0.1"]
    timings, ends = [], []
    table_rounds.observers.append(lambda outcome: timings.append(outcome))

    @sync_to_async
    def make(table):
        owner = bench_user()
        campaign, _ = worldfile.create_campaign(owner, worldfile.read(json.dumps(_document(table)).encode()),
                                                game_master=True, offstage_per_turn=0)
        seats = []
        for name, character, place in PLAYERS:
            user = get_user_model().objects.get_or_create(username=f"{name}{table}")[0]
            key = "protagonist" if character == "Edrin" else character.lower()
            Seat.objects.create(campaign=campaign, character=key, user=user, status=Seat.Status.SEATED)
            seats.append((user, place))
        return campaign, owner, seats

    @sync_to_async
    def cookie(user):
        client = Client()
        client.force_login(user)
        return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())

    async def socket(campaign, user):
        headers = [(b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"), await cookie(user)]
        communicator = WebsocketCommunicator(application, f"/ws/play/{campaign.pk}/", headers=headers)
        connected, _ = await communicator.connect()
        if not connected:
            raise RuntimeError("the bench's socket was refused")
        return communicator

    profile = _Profile()
    await sync_to_async(profile.install, thread_sensitive=True)()
    tables = []
    for table in range(TABLES):
        campaign, owner, seats = await make(table)
        players = [(await socket(campaign, user), place, user.get_username()) for user, place in seats]
        tables.append({"campaign": campaign, "owner": await socket(campaign, owner), "players": players,
                       "frames": {name: [] for _, _, name in players}, "sent": []})

    async def read(communicator, into, needle):
        while True:
            frame = await communicator.receive_from(timeout=60)
            if into is not None:
                into.append(frame)
            if needle in frame:
                return

    async def play(table, deadline):
        number = 0
        while time.monotonic() < deadline:
            number += 1
            for communicator, place, name in table["players"]:
                token = f"ACT-{table['campaign'].pk}-{number}-{name}-{place.upper()}"
                table["sent"].append((token, place))
                await communicator.send_json_to({"action": "turn", "text": f"I act: {token}"})
            await asyncio.gather(read(table["owner"], None, 'data-outcome='),
                                 *(read(c, table["frames"][name], "data-told=") for c, _, name in table["players"]))
        table["rounds"] = number

    started = time.monotonic()
    await asyncio.gather(*(play(table, started + ROUND_SECONDS) for table in tables))
    elapsed = time.monotonic() - started
    for table in tables:
        for communicator, _, name in table["players"]:
            while not await communicator.receive_nothing(timeout=0.2):
                table["frames"][name].append(await communicator.receive_from())
            await communicator.disconnect()
        await table["owner"].disconnect()
    await postturn.settle()
    server.stop()
    table_rounds.observers.clear()

    @sync_to_async
    def check():
        lost = doubled = wrong = frames = 0
        for table in tables:
            inputs = " ".join(Node.objects.filter(branch__campaign=table["campaign"], role="player")
                              .values_list("text", flat=True))
            for token, _ in table["sent"]:
                rows = TableAction.objects.filter(campaign=table["campaign"], text=f"I act: {token}",
                                                  status="played").count()
                lost += rows == 0 or inputs.count(token) == 0
                doubled += rows > 1 or inputs.count(token) > 1
            for _, place, name in table["players"]:
                other = next(p for p in PLACES if p != place).upper()
                for frame in table["frames"][name]:
                    frames += 1
                    wrong += f"-{other}" in frame or f"CANARY-{other}" in frame
        return lost, doubled, wrong, frames

    lost, doubled, wrong, frames = await check()
    await sync_to_async(profile.uninstall, thread_sensitive=True)()
    committed = [t["commit_ms"] / 1000 for t in timings if t.get("phase") == "end"]
    rounds = [t["round_ms"] / 1000 for t in timings if t.get("phase") == "end"]
    failed = [t.get("error") for t in timings if t.get("phase") != "end"]
    ends.append(failed)
    size = (f"{TABLES}x4 players, {elapsed:.0f} s, {len(committed)} rounds, {frames} seat frames; lost {lost}, "
            f"doubled {doubled}, misdelivered {wrong}, failed {len(failed)}")
    if lost or doubled or wrong or failed:
        raise RuntimeError(f"the table bench found a defect: {size}; failures: {failed[:3]}")
    return [figure("table round commit", size, committed, "p95 < 50 ms"),
            figure("table round, send to told", f"{len(rounds)} rounds", rounds, "(fake model; for reading)"),
            *profile.figures()]


class _Profile:
    """Where a round's commit spends its time: every transaction on the database thread, from its BEGIN IMMEDIATE
    (the wait for SQLite's write lock) through its statements to its COMMIT, with the thread's CPU time over it.

    Installed on the connection of the thread the consumers' database calls run on (``thread_sensitive``); a
    transaction that stores narration parts is a round's commit.
    """

    def __init__(self):
        self.current, self.done, self.threads = None, [], set()

    def install(self):
        import threading

        from django.db import connection

        self.connection, self.threads = connection, {threading.get_ident()}
        connection.execute_wrappers.append(self)
        self.original = connection._commit

        def commit():
            started = time.perf_counter()
            try:
                return self.original()
            finally:
                if self.current is not None:
                    ended = time.perf_counter()
                    self.current.update(commit=ended - started, wall=ended - self.current["start"],
                                        cpu=time.thread_time() - self.current["cpu"])
                    self.done.append(self.current)
                    self.current = None

        connection._commit = commit

    def uninstall(self):
        self.connection.execute_wrappers.remove(self)
        del self.connection._commit

    def __call__(self, execute, sql, params, many, context):
        import threading

        self.threads.add(threading.get_ident())
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            took = time.perf_counter() - started
            if sql.startswith("BEGIN"):
                self.current = {"start": started, "begin": took, "cpu": time.thread_time(), "sql": 0.0,
                                "statements": 0, "round": False}
            elif self.current is not None:
                self.current["sql"] += took
                self.current["statements"] += 1
                self.current["round"] |= "campaigns_narrationpart" in sql and sql.startswith("INSERT")

    def figures(self):
        from .measure import figure

        rounds = [row for row in self.done if row["round"]]
        if not rounds:
            return []
        size = (f"{len(rounds)} of {len(self.done)} transactions, "
                f"{sum(r['statements'] for r in rounds) / len(rounds):.0f} statements each, "
                f"{len(self.threads)} thread(s)")

        def part(name, values, target="(where the commit's time goes)"):
            return figure(name, size, values, target)

        return [part("commit: wall", [r["wall"] for r in rounds]),
                part("commit: BEGIN IMMEDIATE (lock wait)", [r["begin"] for r in rounds]),
                part("commit: SQL statements", [r["sql"] for r in rounds]),
                part("commit: COMMIT", [r["commit"] for r in rounds]),
                part("commit: Python between", [r["wall"] - r["begin"] - r["sql"] - r["commit"] for r in rounds]),
                part("commit: thread CPU", [r["cpu"] for r in rounds]),
                part("commit: not on CPU", [r["wall"] - r["cpu"] for r in rounds])]
