"""The app as several processes: two Daphne servers and two post-turn workers over one database and Redis.

Issue 31's acceptance, with every part real: the shipped app started as
docs/deploy.md says (storyteller.diagnostics.processes), real websockets to
each Daphne, the Redis channel layer, the database task queue, and the fake
model server over HTTP scripted slow where a test must catch a process in
the middle of its work. Killing is SIGKILL: nothing of the killed process
runs after it.
"""

import json
import re
import threading
import time

import pytest

from storyteller.bench.table import _document
from storyteller.diagnostics.load import played
from storyteller.diagnostics.processes import Cluster
from storyteller.llm.fake_server import FakeModelServer

pytestmark = pytest.mark.multiprocess

# In the app's shell: what a campaign holds (its nodes, its recordings, its queued post-turn tasks).
STATE = """
import json
from django_tasks_db.models import DBTaskResult
from campaigns.models import Node, PostTurnLease, RecorderRun
from memory.models import MemoryRun
campaign = %d
tasks = DBTaskResult.objects.filter(args_kwargs__kwargs__campaign_id=campaign).order_by("enqueued_at")
lease = PostTurnLease.objects.filter(campaign_id=campaign).values("holder", "step").first()
print(json.dumps({
    "nodes": Node.objects.filter(campaign_id=campaign).count(),
    "texts": list(Node.objects.filter(campaign_id=campaign).order_by("depth", "id").values_list("text", flat=True)),
    "recorded": list(RecorderRun.objects.filter(node__campaign_id=campaign).order_by("id")
                     .values_list("node_id", "status")),
    "memory_runs": list(MemoryRun.objects.filter(node__campaign_id=campaign).values_list("node_id", flat=True)),
    "replies": list(Node.objects.filter(campaign_id=campaign, role="narrator", depth__gt=0).order_by("id")
                    .values_list("id", flat=True)),
    "tasks": [{"status": t.status, "workers": t.worker_ids, "node": t.args_kwargs["kwargs"]["node_id"],
               "value": t.return_value} for t in tasks],
    "lease": lease,
}))
"""

TABLE = """
import json
from django.contrib.auth import get_user_model
from django.test import Client
from campaigns import worldfile
from campaigns.models import Seat
from storyteller.bench.table import _document

def session(user):
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value

owner = get_user_model().objects.create_user("host", password=None)
campaign, _ = worldfile.create_campaign(owner, worldfile.read(%r.encode()), game_master=True, offstage_per_turn=0)
player = get_user_model().objects.create_user("ana", password=None)
Seat.objects.create(campaign=campaign, character="mara", user=player, status=Seat.Status.SEATED)
print(json.dumps({"owner": {"session": session(owner), "campaign": campaign.pk},
                  "player": {"session": session(player), "campaign": campaign.pk}}))
"""


CHUNK = r'<span id="pending-text" hx-swap-oob="beforeend">([^<]*)</span>'


def state(cluster, campaign):
    return cluster.query(STATE % campaign)


def settled(cluster, campaign, replies, seconds=90):
    """Wait until every post-turn task of ``campaign`` has ended and ``replies`` replies are recorded."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = state(cluster, campaign)
        if (len(now["recorded"]) >= replies
                and all(task["status"] in ("SUCCESSFUL", "FAILED") for task in now["tasks"])):
            return now
        time.sleep(0.5)
    raise AssertionError(f"the post-turn work did not settle: {now}; worker logs: "
                         f"{cluster.output('worker-0')[-1500:]} {cluster.output('worker-1')[-1500:]}")


def frames_until(sock, needle, into):
    while needle not in (frame := sock.receive()):
        into.append(frame)
    into.append(frame)
    return frame


def test_a_socket_on_one_process_streams_a_table_round_played_through_another(redis_url, database_env):
    with FakeModelServer() as server, Cluster(server.url, database_env, workers=1) as cluster:
        server.chunk_delay(0.05)
        people = cluster.query(TABLE % json.dumps(_document(0)))
        owner = cluster.socket(0, people["owner"])  # on process A
        player = cluster.socket(1, people["player"])  # on process B, where the round plays
        try:
            player.send(json.dumps({"action": "turn", "text": "I act: LANTERN-TOKEN"}))
            seen = []
            frames_until(owner, "data-outcome=", seen)
            told = []
            frames_until(player, "data-told=", told)
        finally:
            owner.close()
            player.close()
        streamed = [piece for frame in seen for piece in re.findall(CHUNK, frame)]
        assert len(streamed) >= 3, "the narration reached process A as it was written, chunk by chunk"
        assert 'data-outcome="committed"' in seen[-1]
        texts = state(cluster, people["owner"]["campaign"])["texts"]
        assert "LANTERN-TOKEN" in " ".join(texts)
        assert "".join(streamed).strip() in texts[-1], "what A showed is the reply B saved"


def test_two_tabs_on_two_processes_sending_at_once_give_one_turn_and_one_refusal(
        redis_url, database_env, model_server):
    with Cluster(model_server.url, database_env, workers=1) as cluster:
        person = cluster.people("reader")["reader"]
        model_server.chunk_delay(0.05)
        model_server.script(" wave" * 30, " gull" * 30)
        first, second = cluster.socket(0, person), cluster.socket(1, person)
        outcomes = {}

        def play(name, sock, text):
            outcomes[name] = played(sock, text)[1]

        try:
            threads = [threading.Thread(target=play, args=("A", first, "open the gate")),
                       threading.Thread(target=play, args=("B", second, "climb the wall"))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
        finally:
            first.close()
            second.close()
        assert sorted(outcomes.values()) == ["committed", "failed"], outcomes
        now = state(cluster, person["campaign"])
        assert now["nodes"] == 3, "the opening and one turn: the refused one saved nothing"


class _Steps:
    """Which campaign each step request came from, and when it was answered (the server's stubs are asked under
    its lock at the end of each request's ``json_delay``: each request was in flight for the delay before it)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.answered = []

    def reply(self, messages, schema):
        if schema is not None:
            found = re.search(r"Rain falls on (\w+)'s harbour", " ".join(str(m.get("content")) for m in messages))
            with self.lock:
                self.answered.append((time.monotonic(), found.group(1) if found else "?"))

    def embed(self, text):
        from storyteller.llm.fake_server import vector_for

        return vector_for(text)

    def overlapping(self, delay, same):
        """Return the pairs of requests in flight at once, of one campaign (``same``) or of two."""
        answered = sorted(self.answered)
        return [(a, b) for i, a in enumerate(answered) for b in answered[i + 1:]
                if b[0] - a[0] < delay * 0.9 and (a[1] == b[1]) == same]


def test_one_campaigns_post_turn_steps_never_run_twice_at_once_across_workers(redis_url, database_env):
    steps, delay = _Steps(), 0.6
    with FakeModelServer(stubs=steps) as server, Cluster(server.url, database_env) as cluster:
        server.json_delay(delay)  # every step's request; the narration streams at once
        people = cluster.people("ann", "bob")
        ann, bob = cluster.socket(0, people["ann"]), cluster.socket(1, people["bob"])
        try:
            # Three replies of one campaign queued while its first steps still run, another campaign's between.
            assert played(ann, "step 1")[1] == "committed"
            assert played(bob, "look around")[1] == "committed"
            for number in (2, 3):
                assert played(ann, f"step {number}")[1] == "committed"
        finally:
            ann.close()
            bob.close()
        mine = settled(cluster, people["ann"]["campaign"], 3)
        settled(cluster, people["bob"]["campaign"], 1)
    assert {key for _, key in steps.answered} == {"ann", "bob"}, steps.answered
    assert steps.overlapping(delay, same=True) == [], "one campaign's step requests never in flight together"
    assert steps.overlapping(delay, same=False), "the two workers did run two campaigns' steps at once"
    assert [node for node, _ in mine["recorded"]] == mine["replies"], "recorded in commit order"
    assert {status for _, status in mine["recorded"]} == {"applied"}


def step_requests(server):
    return sum(1 for r in server.requests if r.path == "/api/chat" and isinstance((r.body or {}).get("format"), dict))


def test_a_worker_killed_mid_step_leaves_the_step_retried_and_nothing_half_applied(
        redis_url, database_env, model_server):
    with Cluster(model_server.url, database_env, lease=2.0) as cluster:
        person = cluster.people("cat")["cat"]
        model_server.json_delay(20)  # the recorder's request waits: the worker is killed while it does
        sock = cluster.socket(0, person)
        try:
            assert played(sock, "open the gate")[1] == "committed"
        finally:
            sock.close()
        deadline = time.monotonic() + 30
        while not step_requests(model_server) and time.monotonic() < deadline:
            time.sleep(0.1)
        now = state(cluster, person["campaign"])
        assert now["lease"]["step"] == "Recording" and now["tasks"][0]["status"] == "RUNNING", now
        holder = now["tasks"][0]["workers"][-1]
        cluster.kill(holder)  # in the recorder's model call
        model_server.json_delay(0)
        done = settled(cluster, person["campaign"], 1)
    task = done["tasks"][0]
    survivor = {"worker-0": "worker-1", "worker-1": "worker-0"}[holder]
    assert task["status"] == "SUCCESSFUL" and task["workers"] == [holder, survivor], done["tasks"]
    assert done["recorded"] == [[done["replies"][0], "applied"]], "recorded once"
    assert done["memory_runs"].count(done["replies"][0]) <= 1
    assert step_requests(model_server) >= 2, "the retry asked the model again"


def test_a_daphne_killed_mid_turn_loses_only_that_unsaved_turn(redis_url, database_env, model_server):
    with Cluster(model_server.url, database_env, workers=1) as cluster:
        people = cluster.people("dan", "eve")
        dan, eve = people["dan"], people["eve"]
        sock = cluster.socket(0, dan)
        other = cluster.socket(1, eve)
        try:
            assert played(sock, "open the gate")[1] == "committed"
            assert played(other, "look around")[1] == "committed"
            model_server.chunk_delay(0.2)
            model_server.script(" storm" * 100)
            sock.send(json.dumps({"mode": "do", "text": "walk into the storm"}))
            chunks = 0
            while chunks < 3:
                chunks += 'id="pending-text"' in sock.receive()
            cluster.kill("daphne-0")
        finally:
            sock.close()
        model_server.chunk_delay(0)
        try:
            assert played(other, "wait for the rain")[1] == "committed", "process B serves on"
        finally:
            other.close()
        again = cluster.socket(1, dan)  # the same person, now through process B
        try:
            assert played(again, "walk into the storm")[1] == "committed"
        finally:
            again.close()
        kept = state(cluster, dan["campaign"])
        assert kept["nodes"] == 5, "the opening, the saved turn and the turn played again: the killed one is gone"
        assert not any("storm storm storm" in text for text in kept["texts"][:3])
        assert state(cluster, eve["campaign"])["nodes"] == 5
