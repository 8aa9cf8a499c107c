"""Another process of the app on the test's own database: what a second Daphne process or a worker sees and does.

The tests of per-process state (issue 31) need a writer or a reader that
shares nothing with the test but the database (and Redis, when the test
starts one): a thread would share this process's module-level caches and
hide exactly the staleness they look for. ``Elsewhere(code)`` runs ``code``
in a fresh interpreter with Django set up on the test's database; the two
talk in lines (``tell``, ``said``). Use it from tests marked
``django_db(transaction=True)``, so what each side writes is committed.
"""

import os
import queue
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

ROOT = Path(__file__).resolve().parent.parent

PRELUDE = """
import os, sys
import django
django.setup()
from django.db import connections
connections.databases["default"]["NAME"] = os.environ["ELSEWHERE_DATABASE"]


def said(line):
    print(line, flush=True)


def heard():
    return sys.stdin.readline().strip()

"""


class Elsewhere:
    def __init__(self, code, **env):
        database = str(connections["default"].settings_dict["NAME"])
        self.process = subprocess.Popen(
            [sys.executable, "-c", PRELUDE + textwrap.dedent(code)], cwd=ROOT, text=True,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "storyteller.settings", "ELSEWHERE_DATABASE": database,
                 **{name: str(value) for name, value in env.items()}},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._lines = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.process.stdout:
            self._lines.put(line.strip())
        self._lines.put(None)

    def said(self, timeout=60):
        """Return the next line the other process printed; fail with its stderr if it ended or took too long."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            line = None
        if line is None:
            self.process.kill()
            raise AssertionError(f"the other process said nothing more:\n{self.process.stderr.read()[-3000:]}")
        return line

    def tell(self, line="go"):
        self.process.stdin.write(f"{line}\n")
        self.process.stdin.flush()

    def finish(self, timeout=60):
        """Wait for the other process to end; fail with its stderr unless it ended well."""
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=5)
        assert code == 0, f"the other process failed ({code}):\n{self.process.stderr.read()[-3000:]}"

    def kill(self):
        self.process.kill()
        self.process.wait()


def run_elsewhere(code, **env):
    """Run ``code`` in another process to its end; return the lines it printed."""
    other = Elsewhere(code, **env)
    other.finish()
    lines = []
    while not other._lines.empty():
        line = other._lines.get()
        if line is not None:
            lines.append(line)
    return lines


@pytest.fixture
async def thread_connections_closed():
    """Close the connection of the thread ``sync_to_async`` runs the database on, after the test: PostgreSQL
    keeps a test database with a session open from being dropped."""
    yield
    await sync_to_async(connections.close_all)()
