"""The built-in narrator on the pages: the play page's banner, the model settings section, the self-check."""

import json
import subprocess
import time

import pytest
from django.urls import reverse

from storyteller.llm import supervisor

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def builtin(settings):
    settings.STORYTELLER_LLM_URL = "http://127.0.0.1:9"  # nothing answers: the built-in narrator plays
    settings.STORYTELLER_LLM_URL_CONFIGURED = False
    return settings


@pytest.fixture
def being_prepared(builtin, tmp_path):
    """The data folder says the narrator's build runs (a real process stands for it)."""
    builtin.DATA_DIR = tmp_path
    (tmp_path / "narrator").mkdir()
    process = subprocess.Popen(["sleep", "600"])
    status = tmp_path / "narrator" / "build.json"
    status.write_text(json.dumps({"state": "building", "started": time.time() - 30, "pid": process.pid}))
    yield status
    process.kill()
    process.wait()


def test_the_play_page_says_the_narrator_is_being_prepared_and_keeps_asking(client_of, campaign, being_prepared):
    page = client_of.get(reverse("play", args=[campaign.pk])).content.decode()

    banner = page[page.index('id="narrator-banner"'):page.index("</p>", page.index('id="narrator-banner"'))]
    assert "The built-in narrator is being prepared (about" in banner and "connect Ollama to play now" in banner
    assert f'hx-get="{reverse("narrator_banner", args=[campaign.pk])}"' in banner and 'hx-trigger="every 5s"' in banner


def test_the_banner_stops_asking_once_the_narrator_is_ready(client_of, campaign, being_prepared):
    being_prepared.write_text(json.dumps({"state": "ready", "started": time.time() - 300, "finished": time.time()}))

    banner = client_of.get(reverse("narrator_banner", args=[campaign.pk]), **HTMX).content.decode()

    assert 'data-builtin="ready"' in banner and "Playing with the built-in demo narrator" in banner
    assert "hx-trigger" not in banner


def test_the_banner_is_the_owners_alone_and_only_read(client, client_of, campaign, outsider, builtin):
    url = reverse("narrator_banner", args=[campaign.pk])
    assert client_of.post(url).status_code == 405
    client_of.force_login(outsider)
    assert client_of.get(url).status_code == 404
    client.logout()
    assert client.get(url).status_code == 302


def test_with_a_model_server_the_banner_names_it(client_of, campaign, narrator_server):
    banner = client_of.get(reverse("narrator_banner", args=[campaign.pk]), **HTMX).content.decode()

    assert "Narrator: qwen2.5:3b-instruct via ollama." in banner


def test_the_settings_page_says_the_narrator_is_being_prepared_and_polls(client_of, being_prepared):
    page = client_of.get(reverse("model_settings")).content.decode()

    section = page[page.index('id="builtin-narrator"'):]
    assert section.startswith('id="builtin-narrator" class="builtin-narrator" data-builtin="building"')
    assert f'hx-get="{reverse("builtin_status")}"' in section[:400]
    assert "being prepared (about" in section
    status = page[page.index('id="connection-status"'):page.index('id="builtin-narrator"')]
    assert "being prepared" in status and 'class="error"' in status


@pytest.mark.django_db(transaction=True)
def test_the_settings_page_shows_the_running_narrators_memory(client_of, builtin):
    client_of.post(reverse("restart_builtin"))  # starts it, as a person pressing the button would

    for _tick in range(600):
        section = client_of.get(reverse("builtin_status"), **HTMX).content.decode()
        if 'data-fact="memory"' in section:
            break
        time.sleep(0.05)
    assert 'data-builtin="running"' in section
    assert " MB</strong> of memory" in section and "extra buffer types are off" in section
    assert supervisor.running() is not None


@pytest.mark.django_db(transaction=True)
def test_the_self_check_runs_from_the_settings_page(client_of, builtin):
    page = client_of.get(reverse("model_settings")).content.decode()
    assert 'data-action="self-check"' in page and f'hx-post="{reverse("self_check")}"' in page

    found = client_of.post(reverse("self_check"), **HTMX).content.decode()

    for topic in ("Narrator", "Built-in narrator", "Processor", "Data folder", "Memory"):
        assert f'data-finding="{topic}"' in found
    assert 'data-finding="Built-in narrator" data-ok="true"' in found
    assert "answered a 5-token request" in found


def test_the_narrator_pages_refuse_the_wrong_method_and_strangers(client, client_of):
    assert client_of.get(reverse("self_check")).status_code == 405
    assert client_of.get(reverse("restart_builtin")).status_code == 405
    assert client_of.post(reverse("builtin_status")).status_code == 405
    client.logout()
    for name in ("builtin_status", "self_check", "restart_builtin"):
        for ask in (client.get, client.post):
            assert ask(reverse(name)).status_code == 302, "to the sign-in page"
