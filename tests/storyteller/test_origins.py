"""Origins include the port: a page on another port of this machine cannot play or post (issue 10, point 4).

Against the real app under Daphne on a random port: the origin it accepts
is derived from the port it serves on, with nothing configured.
"""

import os
import subprocess
import sys

import pytest
from django.test import Client
from django.urls import reverse

from campaigns.models import SavePoint
from storyteller import origins
from storyteller.diagnostics import load
from tests.fake_ollama import FakeModelServer


@pytest.fixture(scope="module")
def app():
    with FakeModelServer() as server, load.LiveApp(server) as live:
        yield live


def test_a_socket_from_another_port_of_this_machine_is_refused(app):
    for origin in (f"http://127.0.0.1:{app.port + 1}", "http://127.0.0.1:8000", f"https://127.0.0.1:{app.port}",
                   f"http://evil.example:{app.port}", "null"):
        with pytest.raises(ConnectionRefusedError, match="403"):
            app.socket("player", origin=origin)


def test_a_socket_from_the_apps_own_origin_plays(app):
    for origin in (app.base, f"http://localhost:{app.port}"):
        sock = app.socket("player", origin=origin)
        try:
            assert load.play_turn(sock, "look around") < 30
        finally:
            sock.close()


def test_a_post_from_another_port_is_refused_and_changes_nothing(app):
    client = app.client("player")
    url = f"/campaigns/{app.people['player']['campaign']}/save-point/"
    for origin in (f"http://127.0.0.1:{app.port + 1}", "http://127.0.0.1:8000", "http://localhost:8000"):
        refused = client.post(url, data={"name": "planted"}, headers={"Origin": origin})
        assert refused.status_code == 403 and "CSRF verification failed" in refused.text
    accepted = client.post(url, data={"name": "mine"})
    assert accepted.status_code == 302
    names = app._manage("shell", "-c", "from campaigns.models import SavePoint; "
                                       "print(sorted(SavePoint.objects.values_list('name', flat=True)))")
    assert names.strip().splitlines()[-1] == "['mine']"


def test_the_served_origin_comes_from_the_port_the_request_arrived_on():
    assert origins.served("ws", ("127.0.0.1", 8123), "127.0.0.1:9999") == {
        "http://127.0.0.1:8123", "http://localhost:8123", "http://[::1]:8123"}
    assert origins.served("https", ("127.0.0.1", 443)) == {
        "https://127.0.0.1", "https://localhost", "https://[::1]"}
    # Only when the server does not say (a test communicator, a Unix socket) does the Host header give the port.
    assert "http://127.0.0.1:8000" in origins.served("ws", None, "127.0.0.1:8000")


def test_an_explicit_origin_is_the_only_one_accepted(settings, campaign, owner):
    settings.STORYTELLER_ORIGIN = "https://story.example.org"
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "story.example.org"]
    assert origins.served("ws", ("127.0.0.1", 8000), "127.0.0.1:8000") == {"https://story.example.org"}
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    client.get(reverse("play", args=[campaign.pk]))
    token = client.cookies["csrftoken"].value
    url = reverse("save_point", args=[campaign.pk])
    for origin, status in [("http://127.0.0.1:8000", 403), ("https://story.example.org", 302)]:
        response = client.post(url, {"name": origin}, HTTP_ORIGIN=origin, HTTP_X_CSRFTOKEN=token,
                               SERVER_PORT="8000", HTTP_HOST="127.0.0.1:8000")
        assert response.status_code == status, origin
    assert list(SavePoint.objects.values_list("name", flat=True)) == ["https://story.example.org"]


@pytest.mark.parametrize("value", ["127.0.0.1:8000", "ftp://x", "http://127.0.0.1:8000/path", "http://u@x",
                                   "http://x:notaport"])
def test_a_malformed_origin_setting_stops_the_app_with_what_to_write(tmp_path, value):
    env = {**os.environ, "STORYTELLER_DATA_DIR": str(tmp_path), "STORYTELLER_ORIGIN": value}
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=load.ROOT, env=env, capture_output=True,
                            text=True)
    assert result.returncode != 0 and "such as http://127.0.0.1:8000" in result.stderr


def test_a_well_formed_origin_setting_is_kept_as_browsers_send_it(tmp_path):
    env = {**os.environ, "STORYTELLER_DATA_DIR": str(tmp_path), "STORYTELLER_ORIGIN": "HTTPS://Story.Example.org:443/"}
    result = subprocess.run([sys.executable, "manage.py", "shell", "-c",
                             "from django.conf import settings; print(settings.STORYTELLER_ORIGIN, "
                             "settings.ALLOWED_HOSTS[-1], settings.CSRF_TRUSTED_ORIGINS)"],
                            cwd=load.ROOT, env=env, capture_output=True, text=True)
    assert result.stdout.strip().splitlines()[-1].split() == [
        "https://story.example.org", "story.example.org", "['https://story.example.org']"]
