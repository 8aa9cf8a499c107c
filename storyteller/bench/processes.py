"""``processes``: 8 tables of 4 players for 60 s, SQLite in one process against PostgreSQL + Redis in two (issue 31).

The table bench's rounds (its world, its four players in two places, its
staged fake narration with a canary per place, its checks), played here
against the real app started as separate processes
(``storyteller.diagnostics.processes``) over real loopback websockets, once
as the default install runs it (SQLite, one Daphne process, the post-turn
steps in that process) and once as docs/deploy.md runs it (PostgreSQL, the
Redis channel layer, two Daphne processes and two ``manage.py worker``
processes). Each table's sockets are on one process (tables alternate
between the two), as a proxy hashing the socket's path places them.

The second run needs the servers, PostgreSQL named by
``STORYTELLER_BENCH_POSTGRES`` or ``STORYTELLER_DATABASE_URL`` (a database
of its own is made there) and Redis by ``STORYTELLER_REDIS_URL``; without
them it is skipped, saying so. With throwaway servers:

    scripts/with-postgres scripts/with-redis .venv/bin/python manage.py bench --only processes
 The
model server is the table bench's fake, in a process of its own, 4 requests
at once.

Figures per run: the round's commit (its one transaction, timed in the
Daphne process that played it: the cluster serves
``storyteller.diagnostics.processes:observed``, the app's application with
an observer that appends each round's outcome to a file), send to
told, and the frames delivered to the seats, every one checked for the
other place's tokens and canaries. A lost, doubled or misdelivered action,
or a failed round, fails the bench.
"""

import json
import os
import threading
import time

SECONDS = int(os.environ.get("STORYTELLER_BENCH_PROCESSES_SECONDS", "60"))
TABLES = 8

_SETUP = """
import json
from django.contrib.auth import get_user_model
from django.test import Client
from campaigns import worldfile
from campaigns.models import Seat
from storyteller.bench.table import PLAYERS, _document

def session(user):
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value

tables = []
owner = get_user_model().objects.create_user("bench", password=None)
for table in range(%d):
    campaign, _ = worldfile.create_campaign(owner, worldfile.read(json.dumps(_document(table)).encode()),
                                            game_master=True, offstage_per_turn=0)
    players = []
    for name, character, place in PLAYERS:
        user = get_user_model().objects.create_user(f"{name}{table}", password=None)
        key = "protagonist" if character == "Edrin" else character.lower()
        Seat.objects.create(campaign=campaign, character=key, user=user, status=Seat.Status.SEATED)
        players.append({"session": session(user), "place": place, "name": user.username})
    tables.append({"campaign": campaign.pk, "owner": session(owner), "players": players})
print(json.dumps(tables))
"""

_CHECK = """
import json
from campaigns.models import Node, TableAction
sent = json.loads(%r)
lost = doubled = 0
for campaign, tokens in sent.items():
    inputs = " ".join(Node.objects.filter(campaign_id=int(campaign), role="player").values_list("text", flat=True))
    for token in tokens:
        rows = TableAction.objects.filter(campaign_id=int(campaign), text=f"I act: {token}", status="played").count()
        lost += rows == 0 or inputs.count(token) == 0
        doubled += rows > 1 or inputs.count(token) > 1
print(json.dumps({"lost": lost, "doubled": doubled}))
"""


def run(sizes, repeat):
    from .measure import figure

    figures = _one("SQLite, 1 process", {"STORYTELLER_TASKS": "in-process", "STORYTELLER_REDIS_URL": "",
                                         "STORYTELLER_DATABASE_URL": "", "DATABASE_URL": ""}, daphnes=1, workers=0)
    from storyteller.diagnostics.processes import postgres_url

    postgres = os.environ.get("STORYTELLER_BENCH_POSTGRES", "").strip() or postgres_url()
    if postgres and os.environ.get("STORYTELLER_REDIS_URL"):
        figures += _one("PostgreSQL + Redis, 2 processes + 2 workers", postgres, daphnes=2, workers=2)
    else:
        figures.append(figure("processes: PostgreSQL + Redis skipped", "set STORYTELLER_BENCH_POSTGRES and "
                              "STORYTELLER_REDIS_URL (see the module)", [0.0], "(needs both servers)"))
    return figures


def _one(label, env, *, daphnes, workers):
    """Play the tables on a cluster: ``env`` is its database's environment, or a PostgreSQL URL to make one on."""
    import contextlib
    import shutil
    import tempfile
    from pathlib import Path

    from storyteller.diagnostics.processes import Cluster, fresh_database

    from .table import _ModelProcess

    folder = Path(tempfile.mkdtemp(prefix="storyteller-bench-processes-"))
    rounds = folder / "rounds.jsonl"
    model = _ModelProcess()
    try:
        with fresh_database(env) if isinstance(env, str) else contextlib.nullcontext(env) as database:
            cluster = Cluster(model.url, {**database, "STORYTELLER_ROUNDS_LOG": str(rounds)}, daphnes=daphnes,
                              workers=workers, lease=30.0, folder=folder)
            cluster.application = "storyteller.diagnostics.processes:observed"
            with cluster:
                return _played(label, cluster, daphnes, rounds)
    finally:
        model.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _played(label, cluster, daphnes, rounds_file):
    from .measure import figure
    from .table import PLACES

    tables = cluster.query(_SETUP % TABLES)
    sockets = []
    for index, table in enumerate(tables):
        process = index % daphnes
        owner = cluster.socket(process, {"session": table["owner"]}, table["campaign"])
        players = [(cluster.socket(process, {"session": p["session"]}, table["campaign"]), p)
                   for p in table["players"]]
        sockets.append((table, owner, players))
    results = {}
    deadline = time.monotonic() + SECONDS
    threads = [threading.Thread(target=_table, args=(entry, deadline, results)) for entry in sockets]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SECONDS + 300)
    elapsed = time.monotonic() - started
    for _, owner, players in sockets:
        owner.close()
        for sock, _ in players:
            sock.close()
    sent = {str(table["campaign"]): [token for token, _ in results[table["campaign"]]["sent"]]
            for table, _, _ in sockets}
    checked = cluster.query(_CHECK % json.dumps(sent))
    wrong = frames = 0
    told, errors = [], []
    for table, _, players in sockets:
        result = results[table["campaign"]]
        errors += result["errors"]
        told += result["told"]
        for _, player in players:
            other = next(p for p in PLACES if p != player["place"]).upper()
            for frame in result["frames"][player["name"]]:
                frames += 1
                wrong += f"-{other}" in frame or f"CANARY-{other}" in frame
    outcomes = [json.loads(line) for line in rounds_file.read_text().splitlines()] if rounds_file.exists() else []
    committed = [o["commit_ms"] / 1000 for o in outcomes if o["phase"] == "end" and o["commit_ms"] is not None]
    failed = [o for o in outcomes if o["phase"] != "end"]
    size = (f"{label}: {TABLES}x4 players, {elapsed:.0f} s, {len(committed)} rounds, {frames} seat frames; "
            f"lost {checked['lost']}, doubled {checked['doubled']}, misdelivered {wrong}, failed {len(failed)}")
    if checked["lost"] or checked["doubled"] or wrong or failed or errors or not committed:
        raise RuntimeError(f"the processes bench found a defect: {size}; {errors[:3]} {failed[:3]}")
    return [figure("processes: table round commit", size, committed, "(beside the table bench's p95 < 50 ms)"),
            figure("processes: send to told", f"{label}: {len(told)} rounds", told, "(fake model; for reading)")]


def _table(entry, deadline, results):
    """Play one table's rounds until ``deadline``: every player sends, then every seat reads until told."""
    table, owner, players = entry
    result = results[table["campaign"]] = {"sent": [], "frames": {p["name"]: [] for _, p in players}, "told": [],
                                           "errors": []}
    number = 0
    try:
        while time.monotonic() < deadline:
            number += 1
            began = time.perf_counter()
            for sock, player in players:
                token = f"ACT-{table['campaign']}-{number}-{player['name']}-{player['place'].upper()}"
                result["sent"].append((token, player["place"]))
                sock.send(json.dumps({"action": "turn", "text": f"I act: {token}"}))
            while "data-outcome=" not in owner.receive():
                pass
            for sock, player in players:
                while "data-told=" not in (frame := sock.receive()):
                    result["frames"][player["name"]].append(frame)
                result["frames"][player["name"]].append(frame)
            result["told"].append(time.perf_counter() - began)
    except Exception as error:  # noqa: BLE001 — said in the bench's failure, with the table's campaign
        result["errors"].append(f"table {table['campaign']}: {error!r}")
