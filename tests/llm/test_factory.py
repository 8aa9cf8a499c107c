import pytest
from django.conf import settings
from django.test import override_settings

from storyteller.llm import (
    BuiltinNarrator,
    ChatOptions,
    EmbeddingUnavailable,
    NarratorError,
    NarratorTimeout,
    OllamaClient,
    OpenAIClient,
    ServerUnavailable,
    anarrator_for,
    aserver_status,
    default_narrator_model,
    describe_model,
    embedder_for,
    narrator_for,
    server_status,
)
from storyteller.llm.builtin import BUILTIN_MODEL


@pytest.fixture
def llm_settings():
    """Return a function that overrides settings until the test ends."""
    if not settings.configured:
        settings.configure()
    overrides = []

    def apply(**values):
        override = override_settings(**values)
        override.enable()
        overrides.append(override)

    yield apply
    for override in reversed(overrides):
        override.disable()


def configure(llm_settings, url, *, configured, api="ollama"):
    llm_settings(
        STORYTELLER_LLM_URL=url,
        STORYTELLER_LLM_URL_CONFIGURED=configured,
        STORYTELLER_LLM_API=api,
        STORYTELLER_NARRATOR_MODEL="qwen2.5:3b-instruct",
        STORYTELLER_EMBED_MODEL="nomic-embed-text",
    )


def test_a_configured_ollama_server_narrates_with_the_configured_model(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=True)

    narrator = narrator_for()

    assert isinstance(narrator, OllamaClient)
    assert (narrator.url, narrator.model) == (fake_ollama.url, "qwen2.5:3b-instruct")


def test_an_explicit_model_overrides_the_setting(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=True)

    assert narrator_for("llama3.2:1b").model == "llama3.2:1b"


async def test_a_configured_server_that_is_down_is_kept_and_fails_the_turn(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=True)
    fake_ollama.refuse()

    narrator = narrator_for()

    assert isinstance(narrator, OllamaClient)
    with pytest.raises(ServerUnavailable, match="not running"):
        async for _ in narrator.stream_chat([{"role": "user", "content": "Hello"}], ChatOptions()):
            pass


@pytest.mark.parametrize("api", ["ollama", "openai"])
async def test_the_patience_with_a_silent_server_is_storyteller_llm_timeout(fake_ollama, llm_settings, api):
    configure(llm_settings, fake_ollama.url, configured=True, api=api)
    llm_settings(STORYTELLER_LLM_TIMEOUT=0.5)
    fake_ollama.stall(5)

    with pytest.raises(NarratorTimeout, match="sent nothing for 0.5 s.*raise STORYTELLER_LLM_TIMEOUT"):
        async for _ in narrator_for().stream_chat([{"role": "user", "content": "Hello"}], ChatOptions()):
            pass


def test_a_configured_openai_server_uses_the_openai_client(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=True, api="openai")

    assert isinstance(narrator_for(), OpenAIClient)
    assert isinstance(embedder_for(), OpenAIClient)


def test_an_unknown_api_setting_names_the_setting_to_change(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=True, api="kobold")

    with pytest.raises(NarratorError, match="STORYTELLER_LLM_API"):
        narrator_for()


def test_without_configuration_ollama_answering_at_the_default_address_narrates(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=False)

    narrator = narrator_for()

    assert isinstance(narrator, OllamaClient)
    assert narrator.url == fake_ollama.url
    assert fake_ollama.bodies("/api/version") == [None]


def test_without_configuration_and_no_server_the_builtin_narrator_takes_over(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=False)
    fake_ollama.refuse()

    assert isinstance(narrator_for(), BuiltinNarrator)


def test_the_probe_is_remembered_between_calls(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=False)

    narrator_for()
    embedder_for()

    assert len(fake_ollama.bodies("/api/version")) == 1


def test_the_embedder_uses_the_embed_model(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=True)

    assert embedder_for().model == "nomic-embed-text"


async def test_without_a_server_embedding_is_unavailable(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=False)
    fake_ollama.refuse()

    embedder = await anarrator_for("nomic-embed-text")

    with pytest.raises(EmbeddingUnavailable, match="ollama pull nomic-embed-text"):
        await embedder.embed(["search_document: a lantern"])


def test_status_of_a_configured_server_lists_its_models(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=True)

    status = server_status()

    assert status.api == "ollama"
    assert status.url == fake_ollama.url
    assert (status.configured, status.reachable, status.builtin) == (True, True, False)
    assert status.models == ("qwen2.5:3b-instruct", "nomic-embed-text")
    assert status.error is None


def test_status_of_a_configured_server_that_is_down_says_so(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=True)
    fake_ollama.refuse()

    status = server_status()

    assert (status.configured, status.reachable, status.builtin) == (True, False, False)
    assert "not running" in status.error and fake_ollama.url in status.error


async def test_status_of_an_openai_server_lists_its_models(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=True, api="openai")

    status = await aserver_status()

    assert (status.api, status.reachable) == ("openai", True)
    assert status.models == ("qwen2.5:3b-instruct", "nomic-embed-text")


def test_status_without_a_server_reports_the_builtin_narrator(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=False)
    fake_ollama.refuse()

    status = server_status()

    assert (status.api, status.url, status.builtin, status.reachable) == ("builtin", fake_ollama.url, True, False)
    assert status.models == (BUILTIN_MODEL,)
    assert status.error is None


def test_status_with_an_unknown_api_setting_says_which_setting_to_change(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=True, api="kobold")

    status = server_status()

    assert (status.reachable, status.builtin) == (False, False)
    assert "STORYTELLER_LLM_API" in status.error


def test_a_fresh_status_asks_again_instead_of_trusting_the_last_probe(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=False)
    assert server_status().reachable
    fake_ollama.refuse()

    assert server_status().api == "ollama"  # the probe of a moment ago still stands
    assert server_status(fresh=True).builtin


def test_describe_model_reports_the_context_length_of_the_chosen_model(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=True)
    fake_ollama.context_length = 2048

    info = describe_model("llama3.2:1b")

    assert (info.model, info.context_length, info.error) == ("llama3.2:1b", 2048, None)
    assert default_narrator_model() == "qwen2.5:3b-instruct"


def test_describe_model_reports_a_missing_model_instead_of_raising(fake_ollama, llm_settings):
    configure(llm_settings, fake_ollama.url, configured=True)
    fake_ollama.not_found()

    info = describe_model()

    assert info.model == "qwen2.5:3b-instruct" and info.context_length is None
    assert "ollama pull qwen2.5:3b-instruct" in info.error
