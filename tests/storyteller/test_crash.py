"""A process killed mid-turn leaves no partial node and an intact database."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PLAY_ONE_TURN = """
from asgiref.sync import async_to_sync
from campaigns.models import Campaign
from storyteller import turns
from storyteller.context import Action

async def relay(text):
    print("chunk", flush=True)

campaign = Campaign.objects.get()
async_to_sync(turns.play_turn)(campaign.pk, Action(mode="do", text="walk into the storm"), relay)
"""


def test_killing_the_process_mid_reply_leaves_no_partial_turn(tmp_path, fake_ollama):
    env = {**os.environ, "STORYTELLER_DATA_DIR": str(tmp_path), "STORYTELLER_LLM_URL": fake_ollama.url}
    for command in (["migrate", "--noinput"], ["seed_demo"]):
        subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True, capture_output=True)
    fake_ollama.chunk_delay(0.2)
    fake_ollama.script(" gust" * 100)
    player = subprocess.Popen([sys.executable, "manage.py", "shell", "-c", PLAY_ONE_TURN], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        chunks = 0
        while chunks < 3:  # the reply is streaming
            line = player.stdout.readline()
            assert line, "the turn ended before it could be killed"
            chunks += line.strip() == "chunk"
    finally:
        os.kill(player.pid, signal.SIGKILL)
        player.wait()
    time.sleep(0.1)

    database = sqlite3.connect(tmp_path / "storyteller.sqlite3")
    assert database.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert database.execute("SELECT count(*) FROM campaigns_node").fetchone()[0] == 1
    assert database.execute("SELECT count(*) FROM campaigns_contextsnapshot").fetchone()[0] == 0
    assert database.execute("SELECT head_depth FROM campaigns_campaign").fetchone()[0] == 0
    database.close()
