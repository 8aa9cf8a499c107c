import socket
from pathlib import Path

import pytest

from knowledge.importer import import_source

# The standard fixtures (seed 003 §72), copied byte for byte from
# ../shared/fixtures/knowledge so the suite runs wherever the checkout is.
FIXTURES = Path(__file__).resolve().parent / "fixtures"

CLASSES = {"canon.md": "canon", "reference.md": "reference", "inspiration.md": "inspiration", "hostile.md": "reference"}


def read_fixture(name):
    return (FIXTURES / name).read_bytes()


def import_fixture(campaign, name, classification=None, **flags):
    return import_source(campaign, name, read_fixture(name), classification or CLASSES[name], **flags)


@pytest.fixture
def library(campaign):
    """The standard three sources, each in its own class."""
    return {name: import_fixture(campaign, name) for name in ["canon.md", "reference.md", "inspiration.md"]}


@pytest.fixture
def loopback_only(monkeypatch):
    """Fail the test on any attempt to connect anywhere but this machine (seed 003 §71)."""
    attempts = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_create = socket.create_connection

    def loopback(address):
        host = address[0] if isinstance(address, tuple) else address
        return isinstance(host, str) and (host in ("localhost", "::1") or host.startswith("127."))

    def guard(address):
        if isinstance(address, (str, bytes)):  # a Unix socket never leaves the machine
            return
        if not loopback(address):
            attempts.append(address)
            raise ConnectionRefusedError(f"test forbids non-loopback connection to {address!r}")

    def connect(self, address):
        guard(address)
        return real_connect(self, address)

    def connect_ex(self, address):
        guard(address)
        return real_connect_ex(self, address)

    def create_connection(address, *args, **kwargs):
        guard(address)
        return real_create(address, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    yield attempts
    assert attempts == [], f"non-loopback connections were attempted: {attempts}"
