"""Real servers for the multi-process tests: Redis (scripts/with-redis), the database, the fake model server.

These tests start the shipped app as separate processes (two Daphne, two
workers: storyteller.diagnostics.processes), so they need what a deployment
needs: a Redis server, given by ``STORYTELLER_REDIS_URL`` (scripts/with-redis
starts a throwaway one; scripts/test runs this folder under it), and a
database every process reaches — PostgreSQL when ``STORYTELLER_DATABASE_URL``
names one (scripts/with-postgres), a fresh database for each test; else
SQLite in the cluster's shared data folder. A plain ``pytest`` run without
Redis skips them, saying why.
"""

import os
import socket
from urllib.parse import urlsplit

import pytest

from storyteller.diagnostics import processes
from storyteller.llm.fake_server import FakeModelServer


def _reachable(url):
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port or 6379), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture
def redis_url():
    url = os.environ.get("STORYTELLER_REDIS_URL", "").strip()
    if not url:
        pytest.skip("needs a Redis server: run under scripts/with-redis (scripts/test does)")
    if not _reachable(url):
        pytest.skip(f"STORYTELLER_REDIS_URL {url} does not answer")
    return url


@pytest.fixture
def database_env():
    """Return the environment that puts every process of a cluster on one fresh database."""
    with processes.fresh_database() as env:
        yield env


@pytest.fixture
def model_server():
    with FakeModelServer() as server:
        yield server
