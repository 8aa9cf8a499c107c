"""The narrator interface every model client implements, and its errors.

A narrator streams a reply to chat messages, answers with JSON that matches a
schema, embeds text and describes itself. Clients translate every transport
failure into a NarratorError whose message tells a person what to change.
"""

import contextlib
import functools
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Protocol

import httpx

# Loopback connects in microseconds; a server that has not accepted within
# 2 s is not running there, and the person should hear that quickly.
CONNECT_TIMEOUT = 2.0

# A 3B model on a laptop CPU can take a minute to load and read a long prompt
# before its first token; anything silent for longer than this is stuck.
READ_TIMEOUT = 120.0


@dataclass(frozen=True)
class ChatOptions:
    num_predict: int = 512  # max output tokens
    num_ctx: int | None = None  # context window to ask the server for
    temperature: float = 0.8
    seed: int | None = None
    stop: tuple[str, ...] = ()
    # A reasoning model's thinking: None leaves it to the server; False asks the model not to think, where the
    # server takes the request (Ollama's ``think``). Every structured request asks for False.
    think: bool | None = None


@dataclass(frozen=True)
class Chunk:
    text: str = ""
    thinking: str = ""  # a reasoning model's thinking (storyteller.llm.thinking): never part of ``text``
    taken_back: bool = False  # ``thinking`` is every text chunk before it: they were thinking, not the reply
    done: bool = False
    done_reason: str | None = None  # "stop", "length", ...
    prompt_eval_count: int | None = None  # server-reported, on the final chunk
    eval_count: int | None = None
    count_source: str | None = None  # where the two counts came from, in words
    # Prompt tokens the server says it reused from its cache (OpenAI's usage.prompt_tokens_details.cached_tokens,
    # llama.cpp's timings.cache_n); None where it does not say (Ollama, llama-cpp-python).
    cached_tokens: int | None = None


@dataclass(frozen=True)
class ModelInfo:
    api: str  # "ollama" | "openai" | "builtin" | "scripted"
    url: str | None  # None for in-process narrators
    model: str  # the name the app asks for
    context_length: int | None  # None when the server does not say
    error: str | None = None  # describe_model(): why the model could not be described
    context_source: str | None = None  # where context_length came from, in words
    structured: str | None = None  # how JSON is asked for (structured.LABELS), None before it is known
    served: str | None = None  # the model the server answers with, when it is not the name asked for

    @property
    def label(self) -> str:
        """Return the model that plays, as a person reads it."""
        return model_label(self.served or self.model)


@dataclass(frozen=True)
class ServerStatus:
    api: str
    url: str | None
    configured: bool  # the person set STORYTELLER_LLM_URL
    reachable: bool
    builtin: bool
    models: tuple[str, ...]
    error: str | None


class NarratorError(Exception):
    """A narrator call failed; str(error) tells the person what happened and what to do."""


class ServerUnavailable(NarratorError):
    """The model server could not be reached (refused, unknown host, connect timeout)."""


class ModelNotFound(NarratorError):
    """The server runs but does not have the requested model."""


class NarratorTimeout(NarratorError):
    """The server sent nothing within the read timeout."""


class StreamInterrupted(NarratorError):
    """The reply broke off: an error line, a dropped connection or a malformed line."""


class EmbeddingUnavailable(NarratorError):
    """This narrator cannot embed text."""


class Narrator(Protocol):
    api: str
    model: str

    def stream_chat(self, messages: list[dict], options: ChatOptions) -> AsyncIterator[Chunk]:
        """
        Yield text chunks, then exactly one final Chunk(done=True) with usage.

        Closing the iterator early (aclose()) stops generation.
        """

    async def complete_json(self, messages: list[dict], schema: dict, options: ChatOptions) -> dict:
        """Return the model's reply constrained to `schema`, parsed."""

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Return one vector per text, in order."""

    async def describe(self) -> ModelInfo:
        """Return what the server says about the model."""

    async def list_models(self) -> list[str]:
        """Return the names of the models the server can run."""


@contextlib.contextmanager
def translate_http_errors(url: str, start_hint: str, timeout: float) -> Iterator[None]:
    """
    Turn httpx failures inside the block into NarratorErrors for a person.

    `start_hint` says how to start this kind of server; it follows the
    "not running" message.
    """
    try:
        yield
    except httpx.ConnectTimeout as error:
        raise ServerUnavailable(
            f"The model server at {url} is not running (no answer within {CONNECT_TIMEOUT:g} s). "
            f"{start_hint}"
        ) from error
    except httpx.ConnectError as error:
        reason = "connection refused" if "refused" in str(error).lower() else str(error)
        raise ServerUnavailable(f"The model server at {url} is not running ({reason}). {start_hint}") from error
    except httpx.TimeoutException as error:
        raise NarratorTimeout(
            f"The model server at {url} sent nothing for {timeout:g} s; it may still be loading "
            "the model or be overloaded. Try the turn again in a moment, or raise STORYTELLER_LLM_TIMEOUT."
        ) from error
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as error:
        raise StreamInterrupted(
            f"The connection to the model server at {url} dropped mid-reply ({error or type(error).__name__}). "
            "Try the turn again."
        ) from error
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as error:
        raise NarratorError(
            f"{url!r} is not a usable model server address ({error}); set STORYTELLER_LLM_URL "
            "to a full address such as http://127.0.0.1:11434."
        ) from error


def model_label(name: str) -> str:
    """Return how to show model id `name`: a file path (llama.cpp names models by theirs) by its file name."""
    if name.startswith(("/", "~", "./", "../")) or "\\" in name or re.match(r"[A-Za-z]:[\\/]", name):
        return re.split(r"[\\/]", name.rstrip("/\\"))[-1] or name
    return name


# Python tracebacks and file paths a server may put in its error text: internals, not words for a person.
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)|\n?\s*File \"")
_PYDANTIC_MESSAGE = re.compile(r"""'msg': (?:"([^"]*)"|'([^']*)')""")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_PATH = re.compile(r"(?:\b[A-Za-z]:)?(?:[\\/][^\s\\/\"'<>|:,;()\[\]]+){2,}[\\/]?")
MAX_SERVER_MESSAGE = 200


def server_message(text: str) -> str:
    """
    Return a server's error text fit to show a person: its own words, without file paths or stack text.

    A validation error (pydantic's list of dicts, as llama-cpp-python sends)
    is reduced to its messages.
    """
    messages = [double or single for double, single in _PYDANTIC_MESSAGE.findall(text)]
    if messages:
        text = "; ".join(dict.fromkeys(messages))
    text = _TRACEBACK.split(text, maxsplit=1)[0]
    text = _PATH.sub("…", _URL.sub("", text))
    text = " ".join(text.split()).strip(" :;,-")
    if len(text) > MAX_SERVER_MESSAGE:
        text = text[:MAX_SERVER_MESSAGE].rsplit(" ", 1)[0] + " …"
    return text or "no details given"


def parse_json_reply(text: str, model: str) -> dict:
    """Return the JSON object `model` answered with, or say why it is unusable."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise NarratorError(
            f"The model {model} answered with text that is not JSON (it stops making sense at character "
            f"{error.pos}: {text[:80]!r}). Try again, or choose a larger narrator model."
        ) from error
    if not isinstance(value, dict):
        raise NarratorError(
            f"The model {model} answered with JSON {type(value).__name__} {text[:80]!r} instead of "
            "an object. Try again, or choose a larger narrator model."
        )
    return value


def timeouts_for(read_timeout: float) -> httpx.Timeout:
    """Return the timeouts for one model call: short connect, `read_timeout` for the rest."""
    return httpx.Timeout(read_timeout, connect=CONNECT_TIMEOUT)


def client_for(read_timeout: float, **options) -> httpx.AsyncClient:
    """Return a fresh client for one model call, with timeouts_for(read_timeout) and the shared TLS context."""
    return httpx.AsyncClient(timeout=timeouts_for(read_timeout), verify=tls_context(), **options)


@functools.cache
def tls_context():
    """Return the one TLS context every model call (and the server probe) uses."""
    # httpx builds a certificate store for every client it makes: 80 ms each,
    # 15 of a 36 s memory-diagnostic scenario (cProfile), paid on every model
    # call of every turn. One context, built once, serves them all.
    return httpx.create_ssl_context()
