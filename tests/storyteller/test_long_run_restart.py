"""A long run killed mid-way (SIGKILL, in its own process) goes on with --resume and plays no turn twice."""

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _manage(env, *args, **kwargs):
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, **kwargs)


def _turns_written(path):
    try:
        return len(json.loads(path.read_text(encoding="utf-8"))["timeline"])
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


def test_a_killed_run_resumes_in_a_new_process_without_playing_a_turn_twice(fake_ollama, tmp_path):
    env = {**os.environ, "STORYTELLER_DATA_DIR": str(tmp_path), "STORYTELLER_LLM_URL": fake_ollama.url,
           "STORYTELLER_LLM_API": "ollama"}
    assert _manage(env, "migrate", "--noinput").returncode == 0
    report = tmp_path / "long_runs" / "campaign-1.json"
    process = subprocess.Popen([sys.executable, "manage.py", "long_run", "--turns", "10"], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while _turns_written(report) < 4 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.poll() is None, process.stderr.read().decode()
        process.kill()  # no clean-up of any kind: wherever the turn was, the process is gone
    finally:
        process.wait(timeout=30)
    killed_at = _turns_written(report)
    assert 4 <= killed_at < 10

    resumed = _manage(env, "long_run", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    run = json.loads(report.read_text(encoding="utf-8"))
    assert run["status"] == "complete" and run["process_starts"] == 2
    assert [entry["turn"] for entry in run["timeline"]] == list(range(1, 11))
    with sqlite3.connect(tmp_path / "storyteller.sqlite3") as db:
        depths = [row[0] for row in db.execute(
            "SELECT depth FROM campaigns_node WHERE campaign_id = 1 AND role = 'player' ORDER BY depth")]
        branches = db.execute("SELECT count(*) FROM campaigns_branch WHERE campaign_id = 1").fetchone()[0]
    assert depths == [2 * turn - 1 for turn in range(1, 11)] and branches == 1
