"""The model settings page says what really plays: the model, its window, the budget, structured output, a test."""

import re

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from campaigns.models import Campaign, RecorderRun, StateEvent
from storyteller import turns
from storyteller.context import Action
from storyteller.llm import structured
from tests.conftest import make_campaign

HTMX = {"HTTP_HX_REQUEST": "true"}

FACT = {"events": [{"type": "add_fact", "subject": "", "object": "", "value": "The abbey gate stands open.",
                    "narrator_only": False}]}


def fact(page, name, campaign):
    """Return the text of one fact (plays, window, budget, structured) in `campaign`'s row, tags and spaces folded."""
    row = page[page.index(f'id="campaign-model-{campaign.pk}"'):]
    found = re.search(rf'data-fact="{name}">(.*?)</dd>', row, re.S).group(1)
    return " ".join(re.sub(r"<[^>]+>", "", found).split())


async def play(campaign):
    async def relay(_):
        pass

    result = await turns.play_turn(campaign.pk, Action(mode="do", text="open the gate"), relay)
    await result.post_turn
    return result


@pytest.fixture
async def openai_server(narrator_server, settings):
    """The fake server, spoken to as an OpenAI-compatible server."""
    settings.STORYTELLER_LLM_API = "openai"
    return narrator_server


@pytest.fixture
def no_server(fake_ollama, settings):
    """Nothing configured and nothing answering at the default address: the built-in narrator plays."""
    fake_ollama.refuse()
    settings.STORYTELLER_LLM_URL = fake_ollama.url
    settings.STORYTELLER_LLM_URL_CONFIGURED = False
    return fake_ollama


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("accepted,replies,mode", [
    ((structured.JSON_OBJECT,), [FACT], structured.JSON_OBJECT),
    ((structured.TEXT,), [FACT], structured.TEXT),
    (structured.MODES, [{"events": [{"type": "fly"}]}, FACT], structured.JSON_SCHEMA),
], ids=["only-json-object", "only-plain-text", "one-invalid-reply"])
async def test_each_server_negotiates_records_and_the_settings_page_names_the_mode(
    client_of, campaign, openai_server, accepted, replies, mode
):
    openai_server.accept_structured(*accepted)
    openai_server.script_json(*replies)

    result = await play(campaign)

    assert (await RecorderRun.objects.aget(node_id=result.node_id)).status == "applied"
    assert (await StateEvent.objects.aget(node_id=result.node_id, source="recorder")).status == "applied"
    page = (await sync_to_async(client_of.get)(reverse("model_settings"))).content.decode()
    assert fact(page, "structured", campaign) == structured.LABELS[mode] + "."


@pytest.mark.django_db(transaction=True)
async def test_an_invalid_reply_is_asked_again_with_its_reasons(campaign, openai_server):
    openai_server.script_json({"events": [{"type": "fly"}]}, FACT)

    await play(campaign)

    # The state recorder's last request (the minds step's second call comes after it, with a schema of its own).
    recording = [body for body in openai_server.bodies("/v1/chat/completions")
                 if "perceptions" not in str(body.get("response_format"))]
    again = recording[-1]["messages"][-1]["content"]
    assert again.startswith("That answer could not be used: ")
    assert 'events[0].type is "fly"; it must be one of "introduce"' in again


@pytest.mark.parametrize("kind,source", [
    ("llama.cpp", "n_ctx in /props (llama.cpp)"),
    ("vllm", "max_model_len in /v1/models (vLLM)"),
])
def test_the_settings_page_shows_the_window_the_server_reports_and_warns_past_it(
    client_of, campaign, openai_server, kind, source
):
    openai_server.imitate(kind)
    openai_server.context_length = 2048

    page = client_of.get(reverse("model_settings")).content.decode()

    assert fact(page, "window", campaign).startswith(f"2048 tokens — the most this model reads at once, prompt and "
                                                     f"reply together (from {source}).")
    assert "The campaign's budget (4096 tokens) exceeds what this model can read (2048)" in page


def test_a_server_without_a_window_is_said_plainly_with_the_budget_used_instead(client_of, campaign, openai_server):
    page = client_of.get(reverse("model_settings")).content.decode()

    window = fact(page, "window", campaign)
    assert window.startswith("not reported — this server does not say how much its model reads at once")
    assert "the campaign's budget of 4096 tokens is used as it is" in window
    assert fact(page, "structured", campaign).startswith("not yet known — the first recording finds")


def test_with_the_built_in_narrator_each_row_shows_what_plays_its_window_and_the_budget(
    client_of, campaign, no_server
):
    page = client_of.get(reverse("model_settings")).content.decode()

    assert fact(page, "plays", campaign).startswith("smollm2-135m-instruct (built-in) — the built-in narrator")
    assert fact(page, "window", campaign).startswith("8192 tokens — the most this model reads at once")
    assert fact(page, "budget", campaign).startswith("4096 tokens — what this campaign sends each turn, its reply "
                                                     "of up to 200 included")
    assert fact(page, "structured", campaign).startswith("a grammar built from the schema")
    assert "Default (qwen" not in page


def test_test_connection_says_when_it_asked_and_what_it_found(client_of, narrator_server):
    fragment = client_of.post(reverse("test_connection"), **HTMX).content.decode()
    assert re.search(r"Tested at \d\d:\d\d:\d\d</strong> \(\d+ ms\):\s+the server answers, with 2 models\.", fragment)

    narrator_server.refuse()
    fragment = client_of.post(reverse("test_connection"), **HTMX).content.decode()
    assert re.search(r"Tested at \d\d:\d\d:\d\d</strong> \(\d+ ms\):\s+no answer\.", fragment)
    assert "does not answer" in fragment


def test_test_connection_with_the_built_in_narrator_says_so(client_of, no_server):
    fragment = client_of.post(reverse("test_connection"), **HTMX).content.decode()
    assert re.search(r"Tested at .*no model server answers at .*; the built-in narrator plays\.", fragment, re.S)


@pytest.mark.parametrize("window,budget", [(2048, 2048), (32768, 8192)])
def test_a_new_campaign_starts_with_a_budget_its_model_can_read(client_of, narrator_server, window, budget):
    narrator_server.context_length = window

    page = client_of.get(reverse("campaign_create")).content.decode()

    assert re.search(rf'name="context_token_budget" value="{budget}"', page)
    assert f"reads at most {window} tokens at once" in page


def test_a_new_campaign_on_a_server_without_a_window_keeps_the_usual_budget_and_says_why(client_of, openai_server):
    page = client_of.get(reverse("campaign_create")).content.decode()

    assert 'name="context_token_budget" value="8192"' in page
    assert "The server does not say how much the narrator model" in page


def test_choosing_a_model_returns_its_row_and_another_users_campaign_is_404(client_of, campaign, outsider,
                                                                              openai_server):
    openai_server.imitate("llama.cpp")
    fragment = client_of.post(reverse("choose_model", args=[campaign.pk]), {"narrator_model": "nomic-embed-text"},
                              **HTMX).content.decode()
    assert fragment.startswith(f'<div id="campaign-model-{campaign.pk}"')
    assert "<strong>nomic-embed-text</strong>" in fragment
    assert Campaign.objects.get(pk=campaign.pk).narrator_model == "nomic-embed-text"

    other = make_campaign(outsider)
    assert client_of.post(reverse("choose_model", args=[other.pk]), {"narrator_model": "x"}).status_code == 404
