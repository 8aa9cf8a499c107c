"""The Ollama client: /api/chat, /api/embed, /api/show and /api/tags over httpx."""

import json
import threading
from collections.abc import AsyncIterator
from dataclasses import replace

import httpx

from . import structured, thinking, usage
from .base import (
    READ_TIMEOUT,
    ChatOptions,
    Chunk,
    ModelInfo,
    ModelNotFound,
    NarratorError,
    StreamInterrupted,
    client_for,
    server_message,
    translate_http_errors,
)

# Ollama holds a reply to the schema passed as `format` (a grammar built from it).
STRUCTURED = "format with the schema — Ollama holds every reply to the schema"

# Ollama counts in prompt_eval_count only the prompt tokens it evaluated: a prefix it held in its cache is not counted.
READ = "Ollama's prompt_eval_count (what it read; a prefix it held in its cache is not counted)"

_START_HINT = "Start it with `ollama serve`, or set STORYTELLER_LLM_URL to where it runs."

# What Ollama answers a request with ``think`` for a model that cannot think (HTTP 400).
THINK_REFUSED = "does not support thinking"

# (url, model) of the models this process learned refuse ``think``: they are asked without it.
_refuse_think: set[tuple[str, str]] = set()
_refuse_think_lock = threading.Lock()


def forget_thinking():
    """Forget which models refused ``think`` (a test's server may reuse an earlier one's port)."""
    with _refuse_think_lock:
        _refuse_think.clear()


class OllamaClient:
    api = "ollama"

    def __init__(self, url: str, model: str, *, keep_alive: str = "30m", timeout: float = READ_TIMEOUT):
        self.url = url.rstrip("/")
        self.model = model
        self.keep_alive = keep_alive
        self.timeout = timeout

    def __repr__(self):
        return f"OllamaClient({self.url!r}, {self.model!r})"

    async def stream_chat(self, messages: list[dict], options: ChatOptions) -> AsyncIterator[Chunk]:
        body = self._chat_body(messages, options, stream=True)
        with self._errors():
            # A fresh client per call is safe across event loops, and leaving
            # the `async with` closes the connection, which makes Ollama stop
            # generating when the caller closes this iterator early.
            async with client_for(self.timeout) as client:
                async with client.stream("POST", f"{self.url}/api/chat", json=body) as response:
                    if response.status_code != 200:
                        await response.aread()
                        self._raise_for(response)
                    splitter = thinking.Splitter()
                    async for line in response.aiter_lines():
                        if not line.strip():
                            continue
                        part = self._parse_line(line)
                        message = part.get("message") or {}
                        if message.get("thinking"):
                            yield Chunk(thinking=message["thinking"])
                        for chunk in thinking.chunks(splitter.feed(message.get("content") or "")):
                            yield chunk
                        if part.get("done"):
                            for chunk in thinking.chunks(splitter.close()):
                                yield chunk
                            yield Chunk(
                                done=True,
                                done_reason=part.get("done_reason"),
                                prompt_eval_count=part.get("prompt_eval_count"),
                                eval_count=part.get("eval_count"),
                                count_source="Ollama's prompt_eval_count",
                            )
                            return
        raise StreamInterrupted(
            f"The model server at {self.url} closed the reply before it finished. Try the turn again."
        )

    async def complete_json(self, messages: list[dict], schema: dict, options: ChatOptions) -> dict:
        """Return the reply as JSON that matches `schema`; a reasoning model is asked not to think first."""
        async def ask(sent):
            body = self._chat_body(sent, replace(options, think=False), stream=False) | {"format": schema}
            reply = await self._chat(body)
            usage.note(sent, read=reply.get("prompt_eval_count"), written=reply.get("eval_count"), source=READ)
            _, text = thinking.split(reply.get("message", {}).get("content", ""))
            return text, reply.get("done_reason")

        return await structured.checked(ask, messages, schema, model=self.model, limit=options.num_predict)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        # Texts go through unchanged: task prefixes such as nomic's
        # "search_document: " are the caller's decision.
        reply = await self._post("/api/embed", {"model": self.model, "input": texts, "keep_alive": self.keep_alive})
        embeddings = reply.get("embeddings")
        if not isinstance(embeddings, list) or len(embeddings) != len(texts):
            raise NarratorError(
                f"The model server at {self.url} answered /api/embed without one vector per text; "
                f"check that {self.model} is an embedding model (`ollama show {self.model}`)."
            )
        return embeddings

    async def describe(self) -> ModelInfo:
        reply = await self._post("/api/show", {"model": self.model})
        context_length = None
        for key, value in reply.get("model_info", {}).items():
            if key.endswith(".context_length"):
                context_length = int(value)
        return ModelInfo(api=self.api, url=self.url, model=self.model, context_length=context_length,
                         context_source="the model's context_length in /api/show" if context_length else None,
                         structured=STRUCTURED)

    async def list_models(self) -> list[str]:
        with self._errors():
            async with client_for(self.timeout) as client:
                response = await client.get(f"{self.url}/api/tags")
        if response.status_code != 200:
            self._raise_for(response)
        return [entry["name"] for entry in response.json().get("models", [])]

    def _chat_body(self, messages: list[dict], options: ChatOptions, *, stream: bool) -> dict:
        sent = {"num_predict": options.num_predict, "temperature": options.temperature}
        if options.num_ctx is not None:
            sent["num_ctx"] = options.num_ctx
        if options.seed is not None:
            sent["seed"] = options.seed
        if options.stop:
            sent["stop"] = list(options.stop)
        body = {
            "model": self.model,
            "messages": messages,
            "stream": stream,
            "keep_alive": self.keep_alive,
            "options": sent,
        }
        with _refuse_think_lock:
            refused = (self.url, self.model) in _refuse_think
        if options.think is not None and not refused:
            body["think"] = options.think
        return body

    async def _chat(self, body: dict) -> dict:
        """POST /api/chat; a model that refuses ``think`` is remembered, and asked again without it."""
        try:
            return await self._post("/api/chat", body)
        except _ThinkRefused:
            with _refuse_think_lock:
                _refuse_think.add((self.url, self.model))
            return await self._post("/api/chat", {k: v for k, v in body.items() if k != "think"})

    async def _post(self, path: str, body: dict) -> dict:
        with self._errors():
            async with client_for(self.timeout) as client:
                response = await client.post(f"{self.url}{path}", json=body)
        if response.status_code == 400 and "think" in body and THINK_REFUSED in response.text:
            raise _ThinkRefused()
        if response.status_code != 200:
            self._raise_for(response)
        return response.json()

    def _parse_line(self, line: str) -> dict:
        try:
            part = json.loads(line)
        except json.JSONDecodeError as error:
            raise StreamInterrupted(
                f"The model server at {self.url} sent a line that is not JSON ({line[:80]!r}); "
                "is STORYTELLER_LLM_URL pointing at Ollama? Set STORYTELLER_LLM_API=openai for "
                "an OpenAI-compatible server."
            ) from error
        if "error" in part:
            raise StreamInterrupted(
                f"The model server at {self.url} stopped mid-reply: {server_message(str(part['error']))}. "
                "Try the turn again."
            )
        return part

    def _raise_for(self, response: httpx.Response):
        message = _error_text(response)
        if response.status_code == 404:
            raise ModelNotFound(
                f'The model server at {self.url} does not have the model "{self.model}" ({message}). '
                f"Download it with `ollama pull {self.model}`, or choose a model it has (`ollama list`)."
            )
        raise NarratorError(
            f"The model server at {self.url} answered HTTP {response.status_code}: {message}. "
            "Check the Ollama log (`ollama serve` prints it)."
        )

    def _errors(self):
        return translate_http_errors(self.url, _START_HINT, self.timeout)


class _ThinkRefused(Exception):
    """The model cannot think, and Ollama refuses a request that says whether it should."""


def _error_text(response: httpx.Response) -> str:
    try:
        return server_message(str(response.json()["error"]))
    except (ValueError, KeyError, TypeError):
        return server_message(response.text[:1000]) if response.text else response.reason_phrase
