"""No page shows a model server's file paths or stack text: each place a server's error reaches, rendered, scanned."""

import re

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse

from campaigns.models import Node
from storyteller.llm.fake_server import REFUSED_JSON_SCHEMA
from storyteller.steps import postturn
from tests.campaigns.test_lineage import act
from tests.storyteller.test_consumers import connect, frames_until_end
from tests.conftest import as_author

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HTTP_HX_REQUEST": "true"}

# The error llama-cpp-python sent for the recorder's json_schema: a pydantic error, its file path and stack text.
SERVER_ERROR = REFUSED_JSON_SCHEMA

# What must never reach a page: the server's paths and its stack.
LEAK = re.compile(r"/home/someone|site-packages|Traceback|File &quot;|File \"|line \d+, in")

# What it should say instead.
IN_WORDS = "Input should be &#x27;text&#x27; or &#x27;json_object&#x27;"


# Where each API chats and lists its models.
CHAT = {"openai": "/v1/chat/completions", "ollama": "/api/chat"}
MODELS = {"openai": "/v1/models", "ollama": "/api/tags"}


@pytest.fixture(params=["openai", "ollama"])
def api(request, narrator_server, settings):
    """Speak to the fake server through each API in turn; return the API's name."""
    settings.STORYTELLER_LLM_API = request.param
    return request.param


def assert_clean(html):
    leak = LEAK.search(html)
    near = html[max(0, leak.start() - 120):leak.end() + 40] if leak else ""
    assert leak is None, f"a server's internals reached the page: …{near}…"


def test_a_failed_recording_shows_the_servers_words_without_its_internals(client_of, campaign, narrator_server, api):
    as_author(campaign)
    act(campaign, "open the gate", "The gate creaks open.")
    node = Node.objects.get(depth=campaign.head_depth)
    narrator_server.fail_request(CHAT[api], 500, SERVER_ERROR, persistent=True)

    async_to_sync(postturn.run)(node.pk)

    worker = client_of.get(reverse("worker_status", args=[campaign.pk]), **HTMX).content.decode()
    panel = client_of.get(reverse("state_panel", args=[campaign.pk]), **HTMX).content.decode()
    play = client_of.get(reverse("play", args=[campaign.pk])).content.decode()
    assert 'data-worker="failed"' in worker and IN_WORDS in worker
    for html in (worker, panel, play):
        assert_clean(html)


def test_the_settings_page_and_test_connection_show_a_failing_server_without_its_internals(
    client_of, campaign, narrator_server, api
):
    narrator_server.fail_request(MODELS[api], 500, SERVER_ERROR, persistent=True)
    narrator_server.fail_request("/api/show", 500, SERVER_ERROR, persistent=True)

    page = client_of.get(reverse("model_settings")).content.decode()
    tested = client_of.post(reverse("test_connection"), **HTMX).content.decode()

    assert IN_WORDS in page and IN_WORDS in tested
    assert_clean(page)
    assert_clean(tested)


async def test_a_turn_the_server_fails_shows_its_words_without_its_internals(campaign, owner, narrator_server, api):
    narrator_server.fail_request(CHAT[api], 500, SERVER_ERROR)
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"mode": "do", "text": "open the gate"})

    frames = await frames_until_end(communicator)

    assert "Nothing was saved." in frames[-1] and IN_WORDS in frames[-1]
    for frame in frames:
        assert_clean(frame)
    await communicator.disconnect()
