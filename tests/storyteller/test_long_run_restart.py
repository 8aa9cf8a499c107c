"""A long run stopped by Ctrl-C or killed outright, in its own process, goes on with --resume: no turn is played
twice and the verdict is the one an unbroken run reaches."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Start a command as a terminal starts it, with Ctrl-C's default action, however this suite was started: a suite
# run in the background (`nohup scripts/test &`) ignores SIGINT, and an ignored signal stays ignored in every
# child, across exec, so Python would never turn the Ctrl-C into KeyboardInterrupt. Setting the default before
# exec is the one way back (a handler set in the child after it starts is too late for the interpreter's own).
AS_FROM_A_TERMINAL = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                      "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


def _manage(env, *args):
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def _run_of(path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return {"timeline": []}


def _stopped_after(env, report, turns, how, *args):
    """Start ``manage.py long_run *args``, and once ``turns`` turns are written stop it with signal ``how``."""
    process = subprocess.Popen([sys.executable, "-c", AS_FROM_A_TERMINAL, "manage.py", "long_run", *args], cwd=ROOT,
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(_run_of(report)["timeline"]) < turns and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.poll() is None, process.stderr.read()
        process.send_signal(how)
        _, errors = process.communicate(timeout=60)
    finally:
        process.kill()
    return process.returncode, errors


def test_a_run_stopped_by_ctrl_c_and_then_killed_resumes_each_time_and_still_recovers_the_fact(tmp_path):
    env = {**os.environ, "STORYTELLER_DATA_DIR": str(tmp_path)}
    assert _manage(env, "migrate", "--noinput").returncode == 0
    report = tmp_path / "long_runs" / "campaign-1.json"

    code, errors = _stopped_after(env, report, 3, signal.SIGINT, "--turns", "24", "--independent-fact", "--stubs")
    assert code != 0 and "Interrupted: the run keeps every committed turn" in errors
    assert _run_of(report)["status"] == "interrupted"

    # No clean-up of any kind this time: wherever the turn was, the process is gone.
    code, _ = _stopped_after(env, report, len(_run_of(report)["timeline"]) + 3, signal.SIGKILL, "--resume", "--stubs")
    assert code == -signal.SIGKILL and len(_run_of(report)["timeline"]) < 24

    resumed = _manage(env, "long_run", "--resume", "--stubs")
    assert resumed.returncode == 0, resumed.stderr
    run = _run_of(report)
    assert run["status"] == "complete" and run["process_starts"] == 3
    assert run["verdict"] == "recovered_through_memory_independent"
    assert [entry["turn"] for entry in run["timeline"]] == list(range(1, 26))  # 24 and the recall
    with sqlite3.connect(tmp_path / "storyteller.sqlite3") as db:
        depths = [row[0] for row in db.execute(
            "SELECT depth FROM campaigns_node WHERE campaign_id = 1 AND role = 'player' ORDER BY depth")]
        branches = db.execute("SELECT count(*) FROM campaigns_branch WHERE campaign_id = 1").fetchone()[0]
    assert depths == [2 * turn - 1 for turn in range(1, 26)] and branches == 1
