"""
Clients for local language models, and the choice of which one narrates.

An explicitly configured server (STORYTELLER_LLM_URL) is always used, even
while it is down, so a person never gets a different narrator without being
told. Without one, Ollama's default address is probed and the built-in
offline narrator takes over when nothing answers there.
"""

import asyncio
import threading
import time

import httpx
from asgiref.sync import async_to_sync
from django.conf import settings

from .base import (
    ChatOptions,
    Chunk,
    EmbeddingUnavailable,
    ModelInfo,
    ModelNotFound,
    Narrator,
    NarratorError,
    NarratorTimeout,
    ServerStatus,
    ServerUnavailable,
    StreamInterrupted,
    model_label,
    tls_context,
)
from . import preparing, supervisor
from .builtin import BUILTIN_MODEL, BuiltinNarrator, model_path
from . import ollama, openai
from .ollama import OllamaClient
from .openai import OpenAIClient
from .scripted import ScriptedNarrator

__all__ = [
    "BuiltinNarrator",
    "ChatOptions",
    "Chunk",
    "EmbeddingUnavailable",
    "ModelInfo",
    "ModelNotFound",
    "Narrator",
    "NarratorError",
    "NarratorTimeout",
    "OllamaClient",
    "OpenAIClient",
    "ScriptedNarrator",
    "ServerStatus",
    "ServerUnavailable",
    "StreamInterrupted",
    "adescribe_model",
    "anarrator_for",
    "aserver_status",
    "default_narrator_model",
    "describe_model",
    "embedder_for",
    "forget_servers",
    "model_label",
    "narrator_at",
    "narrator_for",
    "server_status",
    "warm",
]

DEFAULT_URL = "http://127.0.0.1:11434"

# Ollama answers /api/version in about a millisecond on loopback; half a second
# is ample, and short enough that a page load without a server barely waits.
PROBE_TIMEOUT = 0.5

# Remember a probe for 10 s: long enough that one turn's several calls probe
# once, short enough that starting Ollama mid-session is noticed quickly.
PROBE_TTL = 10.0

_probes: dict[str, tuple[float, bool]] = {}
_probes_lock = threading.Lock()


def forget_servers():
    """Forget what was learned about every server (a test's server may reuse an earlier one's port)."""
    openai.forget_servers()
    ollama.forget_thinking()


def default_narrator_model() -> str:
    """Return the narrator model for campaigns that name none."""
    return getattr(settings, "STORYTELLER_NARRATOR_MODEL", "qwen2.5:3b-instruct")


def narrator_for(model: str | None = None) -> Narrator:
    """Return the narrator to use for `model` (default_narrator_model() by default)."""
    return _client_for(model or default_narrator_model())


async def anarrator_for(model: str | None = None) -> Narrator:
    """See narrator_for()."""
    return await asyncio.to_thread(narrator_for, model)


def narrator_at(api: str, url: str, model: str) -> Narrator:
    """Return the narrator ``model`` on the server at ``url`` speaking ``api`` ("ollama", "openai" or "builtin"),
    whatever the configured server is: a replay's other narrator (issue 29). Blank ``api`` or ``url`` are the
    configured server's."""
    configured_api, configured_url, _ = _choose_server()
    api, url = api or configured_api, (url or configured_url).rstrip("/")
    if api not in ("ollama", "openai", "builtin"):
        raise NarratorError(f"The narrator's API is {api!r}; choose 'ollama', 'openai' or 'builtin'.")
    return _client(api, url, model or default_narrator_model())


def embedder_for(model: str | None = None) -> Narrator:
    """
    Return the client that embeds with `model` (STORYTELLER_EMBED_MODEL by default).

    Without a model server this is the built-in narrator, whose embed() raises
    EmbeddingUnavailable.
    """
    return _client_for(model or getattr(settings, "STORYTELLER_EMBED_MODEL", "nomic-embed-text"))


def describe_model(model: str | None = None) -> ModelInfo:
    """
    Return what the narrator's server says about `model`.

    A failure is reported in ModelInfo.error instead of raised, for pages
    that show it beside the model's name.
    """
    return async_to_sync(adescribe_model)(model)


async def adescribe_model(model: str | None = None) -> ModelInfo:
    """See describe_model()."""
    narrator = await anarrator_for(model)
    try:
        return await narrator.describe()
    except NarratorError as error:
        url = getattr(narrator, "url", None)
        return ModelInfo(narrator.api, url, narrator.model, context_length=None, error=str(error))


def server_status(*, fresh: bool = False) -> ServerStatus:
    """
    Return which narrator is in use, whether its server answers, and its models.

    `fresh` asks the default address again instead of trusting a recent probe.
    """
    return async_to_sync(aserver_status)(fresh=fresh)


async def aserver_status(*, fresh: bool = False) -> ServerStatus:
    """See server_status()."""
    if fresh:
        with _probes_lock:
            _probes.clear()
    try:
        api, url, configured = await asyncio.to_thread(_choose_server)
    except NarratorError as error:  # STORYTELLER_LLM_API names no API we speak
        return ServerStatus("unknown", None, True, reachable=False, builtin=False, models=(), error=str(error))
    if api == "builtin":
        build = await asyncio.to_thread(preparing.state)
        try:
            if build.state != "ready":
                raise NarratorError(build.message)
            model_path()
        except NarratorError as error:
            return ServerStatus(api, url, configured, reachable=False, builtin=True, models=(), error=str(error))
        return ServerStatus(api, url, configured, reachable=False, builtin=True, models=(BUILTIN_MODEL,), error=None)
    try:
        # Listing needs no model name.
        models = tuple(await _client(api, url, "").list_models())
    except NarratorError as error:
        return ServerStatus(api, url, configured, reachable=False, builtin=False, models=(), error=str(error))
    return ServerStatus(api, url, configured, reachable=True, builtin=False, models=models, error=None)


def warm(model: str | None = None) -> None:
    """Start the built-in narrator's process now if it is the narrator for `model`, so a turn finds it loaded.

    For a worker thread (it may probe the model server); a narrator that
    cannot start is left for the turn to explain.
    """
    if isinstance(narrator_for(model), BuiltinNarrator):
        try:
            supervisor.start()
        except NarratorError:
            pass


def _client_for(model: str) -> Narrator:
    api, url, _configured = _choose_server()
    return _client(api, url, model)


def _client(api: str, url: str, model: str) -> Narrator:
    if api == "builtin":
        return BuiltinNarrator()
    timeout = settings.STORYTELLER_LLM_TIMEOUT
    if api == "openai":
        return OpenAIClient(url, model, timeout=timeout)
    return OllamaClient(url, model, timeout=timeout)


def _choose_server() -> tuple[str, str, bool]:
    """
    Return (api, url, configured) for the narrator to use; see the module docstring.

    For the built-in narrator `url` is the address where nothing answered.
    """
    url = getattr(settings, "STORYTELLER_LLM_URL", DEFAULT_URL).rstrip("/")
    configured = getattr(settings, "STORYTELLER_LLM_URL_CONFIGURED", False)
    if configured:
        api = getattr(settings, "STORYTELLER_LLM_API", "ollama")
        if api not in ("ollama", "openai"):
            raise NarratorError(f"STORYTELLER_LLM_API is {api!r}; set it to 'ollama' or 'openai'.")
        return api, url, True
    if _answers(url):
        return "ollama", url, False
    return "builtin", url, False


def _answers(url: str) -> bool:
    """Return whether an Ollama server answers at `url`, asking at most every PROBE_TTL seconds."""
    now = time.monotonic()
    with _probes_lock:
        checked = _probes.get(url)
    if checked and now - checked[0] < PROBE_TTL:
        return checked[1]
    try:
        answered = httpx.get(f"{url}/api/version", timeout=PROBE_TIMEOUT, verify=tls_context()).status_code == 200
    except (httpx.HTTPError, httpx.InvalidURL):
        answered = False
    with _probes_lock:
        _probes[url] = (now, answered)
    return answered
