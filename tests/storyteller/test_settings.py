"""The data folder is its owner's alone: 0700, and every file in it 0600 from its first byte (issue 10, point 5)."""

import os
import stat
import subprocess
import sys
import time

import httpx

from storyteller.diagnostics.load import ROOT, free_port

# Opened by the app itself (not this test), so the files it creates are the app's: it writes, and while its
# connection is open SQLite's -wal and -shm files exist beside the database.
STAT_WHILE_OPEN = """
import os, stat
from django.conf import settings
from django.db import connection
from django.contrib.auth import get_user_model
get_user_model().objects.create_user("someone")
folder = settings.DATA_DIR
names = ["", "secret_key", "storyteller.sqlite3", "storyteller.sqlite3-wal", "storyteller.sqlite3-shm"]
print({name or ".": oct(stat.S_IMODE(os.stat(folder / name).st_mode)) for name in names})
"""


def usual_umask():
    """Start the app as a usual login would: files 0644 unless the app itself says otherwise."""
    os.umask(0o022)


def run(folder, *args):
    env = {**os.environ, "STORYTELLER_DATA_DIR": str(folder)}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True, preexec_fn=usual_umask)


def mode(path):
    return oct(stat.S_IMODE(os.stat(path).st_mode))


def test_a_fresh_start_makes_the_folder_0700_and_every_file_0600(tmp_path):
    folder = tmp_path / "data"
    run(folder, "migrate", "--noinput")
    modes = eval(run(folder, "shell", "-c", STAT_WHILE_OPEN).stdout.strip().splitlines()[-1])
    assert modes == {".": "0o700", "secret_key": "0o600", "storyteller.sqlite3": "0o600",
                     "storyteller.sqlite3-wal": "0o600", "storyteller.sqlite3-shm": "0o600"}

    port = free_port()
    env = {**os.environ, "STORYTELLER_DATA_DIR": str(folder)}
    app = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                            "storyteller.asgi:application"], cwd=ROOT, env=env, stderr=subprocess.PIPE,
                           preexec_fn=usual_umask)
    try:
        for _ in range(150):
            try:
                httpx.get(f"http://127.0.0.1:{port}/login/", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        link = run(folder, "login_link", "--base-url", f"http://127.0.0.1:{port}").stdout.strip()
        assert httpx.get(link, timeout=10).status_code == 302, "signing in writes a session"
        for path in folder.iterdir():
            assert mode(path) == "0o600", path
    finally:
        app.terminate()
        app.wait(timeout=10)
    assert "readable by other users" not in app.stderr.read().decode()


def test_an_existing_open_folder_is_made_private_at_start_saying_so_once(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir(mode=0o755)
    (folder / "secret_key").write_text("an old key")
    (folder / "long_runs").mkdir(mode=0o755)
    (folder / "long_runs" / "run.json").write_text("{}")
    for path in (folder, folder / "secret_key", folder / "long_runs", folder / "long_runs" / "run.json"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)

    first = run(folder, "check")
    second = run(folder, "check")

    assert "readable by other users" in first.stderr and "4 file(s) and folder(s)" in first.stderr
    assert "readable by other users" not in second.stderr
    assert [mode(p) for p in (folder, folder / "secret_key", folder / "long_runs", folder / "long_runs" / "run.json")] \
        == ["0o700", "0o600", "0o700", "0o600"]
    assert (folder / "secret_key").read_text() == "an old key", "an existing key is kept"
