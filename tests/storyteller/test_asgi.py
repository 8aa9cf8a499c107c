"""The ASGI application as Daphne serves it: static files never answer a path traversal with a 500 (issue 10)."""

import socket

import pytest

from storyteller.diagnostics import load
from tests.fake_ollama import FakeModelServer


@pytest.fixture(scope="module")
def app():
    with FakeModelServer() as server, load.LiveApp(server) as live:
        yield live


def status(app, target):
    """Return the status line for GET ``target`` sent exactly as written (no client normalises it)."""
    with socket.create_connection(("127.0.0.1", app.port), timeout=10) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{app.port}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data.split(b"\r\n", 1)[0].decode()


@pytest.mark.parametrize("target", [
    "/static/../manage.py", "/static/..%2fmanage.py", "/static/%2e%2e/%2e%2e/etc/passwd",
    "/static/css/%2e%2e/%2e%2e/%2e%2e/storyteller/settings.py", "/static/..%5cmanage.py", "/static//etc/passwd",
    "/static/a%00b",
])
def test_a_static_path_that_climbs_out_is_not_found(app, target):
    assert status(app, target) == "HTTP/1.1 404 Not Found"


def test_a_real_static_file_is_served(app):
    assert status(app, "/static/css/storyteller.css") == "HTTP/1.1 200 OK"
