"""``table``: 4 tables of 4 players for 60 s, rounds over real websockets against the fake model server (issue 30).

In-process: the ASGI application (the play consumer, the in-memory channel
layer) driven by ``channels.testing.WebsocketCommunicator`` — real websocket
messages through the real consumer and channel layer, without a Daphne
socket (the honest way here: one process, like the default deployment, and
no port to race for). The model server is the real HTTP fake on 127.0.0.1
(``storyteller.llm.fake_server``), bounded to 4 requests at once; each
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
    from storyteller.llm.fake_server import FakeModelServer
    from storyteller.steps import postturn

    from .measure import bench_user, figure

    server = FakeModelServer(stubs=_Stages(), slots=4)
    server.start()
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
    committed = [t["commit_ms"] / 1000 for t in timings if t.get("phase") == "end"]
    rounds = [t["round_ms"] / 1000 for t in timings if t.get("phase") == "end"]
    failed = [t.get("error") for t in timings if t.get("phase") != "end"]
    ends.append(failed)
    size = (f"{TABLES}x4 players, {elapsed:.0f} s, {len(committed)} rounds, {frames} seat frames; lost {lost}, "
            f"doubled {doubled}, misdelivered {wrong}, failed {len(failed)}")
    if lost or doubled or wrong or failed:
        raise RuntimeError(f"the table bench found a defect: {size}; failures: {failed[:3]}")
    return [figure("table round commit", size, committed, "p95 < 50 ms"),
            figure("table round, send to told", f"{len(rounds)} rounds", rounds, "(fake model; for reading)")]
