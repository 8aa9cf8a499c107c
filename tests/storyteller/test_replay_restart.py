"""A replay killed outright (SIGKILL, in its own process) mid-line resumes where it stopped: no turn played twice."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from storyteller.llm.fake_server import FakeModelServer

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "campaigns" / "worlds" / "greyhollow.json"
ACTIONS = [f"walk on along the quay, step {n}" for n in range(1, 11)]


def _manage(env, *args):
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def _replayed(database):
    """Return the depths and texts of the replay's nodes, and the replay's status and runner."""
    with sqlite3.connect(database) as db:
        row = db.execute("SELECT branch_id, status, runner FROM campaigns_replay WHERE id = 1").fetchone()
        if row is None:
            return [], None, None
        nodes = db.execute("SELECT depth, role, text FROM campaigns_node WHERE branch_id = ? ORDER BY depth",
                           [row[0]]).fetchall()
    return nodes, row[1], row[2]


def test_a_replay_killed_mid_line_resumes_where_it_stopped_and_plays_no_turn_twice(tmp_path):
    script = tmp_path / "line.jsonl"
    script.write_text("".join(json.dumps({"action": {"mode": "do", "text": text}, "reply": f"The quay, {n}."}) + "\n"
                              for n, text in enumerate(ACTIONS, 1)))
    with FakeModelServer() as recorder, FakeModelServer() as other:
        env = {**os.environ, "STORYTELLER_DATA_DIR": str(tmp_path), "STORYTELLER_LLM_URL": recorder.url,
               "STORYTELLER_LLM_API": "ollama"}
        assert _manage(env, "migrate", "--noinput").returncode == 0
        made = _manage(env, "story", "append", str(script), "--new", "--world", str(DEMO))
        assert made.returncode == 0, made.stderr
        other.default_reply = "The other narrator tells it slowly, word by word, along the grey and empty quay."
        other.chunk_delay(0.04)
        process = subprocess.Popen(
            [sys.executable, "manage.py", "replay", "--campaign", "1", "--from-depth", "1", "--to-depth", "20",
             "--model", "other-model", "--url", other.url, "--api", "openai"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        database = tmp_path / "storyteller.sqlite3"
        try:
            deadline = time.monotonic() + 120
            while len(_replayed(database)[0]) < 6 and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            asked = len(other.requests)
            while len(other.requests) == asked and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)  # the next turn's request is out: the kill lands while the narrator writes
            assert process.poll() is None, process.stderr.read()
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
        finally:
            process.kill()
        nodes, status, runner = _replayed(database)
        assert process.returncode == -signal.SIGKILL and status == "running" and runner == process.pid
        assert 6 <= len(nodes) < 20 and len(nodes) % 2 == 0, "the turn being written left nothing"
        killed_at = len(nodes)

        resumed = _manage(env, "replay", "--resume", "1")
        assert resumed.returncode == 0, resumed.stderr
        assert f"turn {killed_at // 2 + 1} of 10 played" in resumed.stdout
        assert f"turn {killed_at // 2} of 10 played" not in resumed.stdout
        nodes, status, runner = _replayed(database)
        assert (status, runner) == ("done", None)
        assert [(depth, role) for depth, role, _ in nodes] == [(d, "player" if d % 2 else "narrator")
                                                               for d in range(1, 21)]
        assert [text for _, role, text in nodes if role == "player"] == ACTIONS
        with sqlite3.connect(database) as db:
            assert db.execute("SELECT count(*) FROM campaigns_branch").fetchone()[0] == 2
            assert db.execute("SELECT count(*) FROM campaigns_node").fetchone()[0] == 21 + 20
            recorded = db.execute("SELECT count(*) FROM campaigns_recorderrun r JOIN campaigns_node n ON "
                                  "n.id = r.node_id WHERE n.branch_id = 2").fetchone()[0]
        assert recorded == 10, "every reply of the replay was recorded, the killed run's last one too"
