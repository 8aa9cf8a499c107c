"""The real app as several processes on one machine: N Daphne servers and M post-turn workers (issue 31).

The harness behind tests/multiprocess and ``manage.py bench --only
processes``. Every process is the shipped code started as docs/deploy.md
says (``daphne storyteller.asgi:application``, ``manage.py worker``), on
loopback, over one database and one Redis given by the environment the
caller passes (``STORYTELLER_DATABASE_URL`` for PostgreSQL, or a shared
data folder's SQLite file; ``STORYTELLER_REDIS_URL``), narrated by a model
server at ``llm_url``. Each process logs to a file of its own in the data
folder (a pipe nobody reads fills and blocks its writer). A process may be
killed with SIGKILL mid-work, as a crash or the OOM killer would.
"""

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from .load import ROOT, Socket, free_port

# Run in `manage.py shell` against the cluster's database: the people and their campaigns, signed in.
_SETUP = """
import json
from django.contrib.auth import get_user_model
from django.test import Client
from campaigns import story
from campaigns.models import Campaign

def person(name, title):
    user = get_user_model().objects.get_or_create(username=name)[0]
    campaign = story.start_campaign(Campaign.objects.create(
        owner=user, title=title, protagonist="Edrin", opening=f"Rain falls on {name}'s harbour.",
        context_token_budget=4096, max_output_tokens=200))
    client = Client()
    client.force_login(user)
    return {"campaign": campaign.pk, "session": client.cookies["sessionid"].value, "user": name}

print(json.dumps({name: person(name, title) for name, title in json.loads(%r)}))
"""


def __getattr__(name):
    """``observed``: the app's ASGI application, each table round's outcome (its phase, its commit's
    milliseconds) appended as a JSON line to the file ``STORYTELLER_ROUNDS_LOG`` names, for a bench to read from
    another process. Made when Daphne asks for it, so importing this module sets nothing up."""
    if name != "observed":
        raise AttributeError(name)
    # The ASGI module sets Django up: it comes before anything that imports a model (not in sorted order).
    from storyteller.asgi import application  # noqa: I001
    from storyteller import table_rounds

    path = os.environ["STORYTELLER_ROUNDS_LOG"]

    def observe(outcome):
        with open(path, "a", encoding="utf-8") as file:
            file.write(json.dumps({key: outcome.get(key) for key in ("phase", "commit_ms", "error")}) + "\n")

    table_rounds.observers.append(observe)
    return application


def postgres_url():
    """Return the PostgreSQL server the environment names (STORYTELLER_DATABASE_URL or DATABASE_URL), or ""."""
    url = (os.environ.get("STORYTELLER_DATABASE_URL") or os.environ.get("DATABASE_URL") or "").strip()
    return url if url.startswith(("postgres://", "postgresql://")) else ""


@contextlib.contextmanager
def fresh_database(url=None):
    """Yield the environment that puts a cluster on a database of its own: a new PostgreSQL database on the
    server ``url`` (or the environment) names, dropped after, or {} for SQLite in the cluster's data folder."""
    url = url or postgres_url()
    if not url:
        yield {}
        return
    import psycopg

    name = f"storyteller_mp_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {"STORYTELLER_DATABASE_URL": urlunsplit(urlsplit(url)._replace(path=f"/{name}")), "DATABASE_URL": ""}
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Cluster:
    """``daphnes`` Daphne processes and ``workers`` post-turn workers of the real app over one database."""

    application = "storyteller.asgi:application"

    def __init__(self, llm_url, env, *, daphnes=2, workers=2, lease=3.0, folder=None):
        self.llm_url = llm_url
        self.extra = env
        self.daphnes_wanted = daphnes
        self.workers_wanted = workers
        self.lease = lease
        self.folder = Path(folder) if folder else None

    def __enter__(self):
        self.own_folder = self.folder is None
        self.folder = self.folder or Path(tempfile.mkdtemp(prefix="storyteller-processes-"))
        self.env = {**os.environ, "STORYTELLER_DATA_DIR": str(self.folder), "STORYTELLER_LLM_URL": self.llm_url,
                    "STORYTELLER_LLM_API": "ollama", "STORYTELLER_TASKS": "database",
                    "STORYTELLER_TASK_LEASE": str(self.lease), **self.extra}
        self.processes = {}
        self.logs = []
        self.manage("migrate", "--noinput")
        self.daphnes = []
        try:
            for index in range(self.daphnes_wanted):
                self.start_daphne(index)
            for index in range(self.workers_wanted):
                self.start_worker(index)
            for index, port in enumerate(self.daphnes):
                self._wait_for(index, port)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in self.logs:
            log.close()
        if self.own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def start_daphne(self, index):
        """Start Daphne number ``index`` (on a free port the first time, the same port after)."""
        if index >= len(self.daphnes):
            self.daphnes.append(free_port())
        port = self.daphnes[index]
        self._start(f"daphne-{index}", [sys.executable, "-m", "storyteller.serve", "-b", "127.0.0.1", "-p", str(port),
                                        self.application])
        return port

    def start_worker(self, index):
        """Start worker number ``index``, its worker id ``worker-<index>`` (the queue's rows name it)."""
        self._start(f"worker-{index}", [sys.executable, "manage.py", "worker", "--interval", "0.1",
                                        "--no-startup-delay", "--worker-id", f"worker-{index}"])

    def kill(self, name):
        """SIGKILL process ``name`` ("daphne-0", "worker-1"): no cleanup runs, as in a crash."""
        process = self.processes[name]
        os.kill(process.pid, signal.SIGKILL)
        process.wait()

    def manage(self, *args):
        """Run a manage.py command against the cluster's database; return its output."""
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True,
                              text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"manage.py {' '.join(args[:1])} failed: {done.stderr[-3000:]}")
        return done.stdout

    def query(self, code):
        """Run ``code`` in the app's shell (it prints one JSON line last); return that line read."""
        return json.loads(self.manage("shell", "-c", code).strip().splitlines()[-1])

    def people(self, *names):
        """Create a person and a campaign for each of ``names`` (title: "<name>'s story"); return them by name."""
        return self.query(_SETUP % json.dumps([(name, f"{name}'s story") for name in names]))

    def url(self, index):
        return f"http://127.0.0.1:{self.daphnes[index]}"

    def socket(self, index, person, campaign=None):
        """Open the play websocket of ``person``'s campaign (or ``campaign``) on Daphne ``index``."""
        return Socket("127.0.0.1", self.daphnes[index], f"/ws/play/{campaign or person['campaign']}/",
                      {"Origin": self.url(index), "Cookie": f"sessionid={person['session']}"})

    def output(self, name):
        """Return what process ``name`` has logged so far."""
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def _start(self, name, command):
        log = open(self.folder / f"{name}.log", "ab")
        self.logs.append(log)
        self.processes[name] = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def _wait_for(self, index, port, seconds=60):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/login/", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError(f"Daphne on port {port} did not start: {self.output(f'daphne-{index}')[-2000:]}")
