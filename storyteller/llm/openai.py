"""
The OpenAI-compatible client (llama.cpp's server, llama-cpp-python's, LM Studio, vLLM) over httpx.

The chat API is shared; the rest differs by server, and each is asked in its
own terms: structured output is negotiated (``structured``), the prompt's
token count comes from the stream's usage or else the server's tokenizer
endpoint, and the context window from whichever field the server has.
"""

import json
import threading
from collections.abc import AsyncIterator

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

_START_HINT = (
    "Start your OpenAI-compatible server (llama.cpp, LM Studio, vLLM), or set "
    "STORYTELLER_LLM_URL to where it runs."
)

# How a server answers a request part it does not support (llama-cpp-python
# answers a response_format it cannot parse with 500): try the next mode.
_REJECTED = {400, 415, 422, 500, 501}

# Counting a prompt is a convenience: a tokenizer that takes longer than this is skipped.
COUNT_TIMEOUT = 5.0

# The tokenizer endpoint that works, per server root ("" when none does), for this process.
_counters: dict[str, str] = {}
_counters_lock = threading.Lock()

_COUNT_SOURCES = {
    "usage": "the server's usage report",
    "vllm": "the server's tokenizer (POST /tokenize with the messages; chat template included)",
    "llama.cpp": "the server's tokenizer (POST /apply-template, then /tokenize; chat template included)",
    "llama-cpp-python": "the server's tokenizer (POST /extras/tokenize/count with the messages' text; "
                        "the chat template's few tokens per message are not in it)",
}


def forget_servers():
    """Forget what was learned about every server (a test's server may reuse an earlier one's port)."""
    with _counters_lock:
        _counters.clear()
    structured.forget()


class OpenAIClient:
    api = "openai"

    def __init__(self, url: str, model: str, *, api_key: str | None = None, timeout: float = READ_TIMEOUT):
        self.url = url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        # People paste either the server root or its /v1 address; accept both.
        self._api = self.url if self.url.endswith("/v1") else f"{self.url}/v1"

    def __repr__(self):
        return f"OpenAIClient({self.url!r}, {self.model!r})"

    async def stream_chat(self, messages: list[dict], options: ChatOptions) -> AsyncIterator[Chunk]:
        body = self._chat_body(messages, options) | {"stream": True, "stream_options": {"include_usage": True}}
        finish_reason = None
        usage, cached = {}, None
        parts = []
        splitter = thinking.Splitter()
        with self._errors():
            # Leaving the `async with` closes the connection, which is how an
            # OpenAI-compatible server learns to stop generating.
            async with self._client() as client:
                async with client.stream("POST", f"{self._api}/chat/completions", json=body) as response:
                    if response.status_code != 200:
                        await response.aread()
                        self._raise_for(response)
                    async for line in response.aiter_lines():
                        if not line.startswith("data:"):
                            continue  # blank separators, ": keep-alive" comments, "event:" lines
                        data = line.removeprefix("data:").strip()
                        if data == "[DONE]":
                            break
                        event = self._parse_event(data)
                        usage = event.get("usage") or usage
                        cached = _cached_tokens(event, cached)
                        for choice in event.get("choices") or []:
                            delta = choice.get("delta") or {}
                            # llama.cpp, DeepSeek and vLLM send reasoning_content; newer vLLM "reasoning".
                            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                            if reasoning:
                                yield Chunk(thinking=reasoning)
                            for chunk in thinking.chunks(splitter.feed(delta.get("content") or "")):
                                _gather(parts, chunk)
                                yield chunk
                            finish_reason = choice.get("finish_reason") or finish_reason
        for chunk in thinking.chunks(splitter.close()):
            _gather(parts, chunk)
            yield chunk
        # Some servers end the stream without "[DONE]"; a finish_reason is
        # proof enough that the reply is whole.
        if finish_reason is None:
            raise StreamInterrupted(
                f"The model server at {self.url} closed the reply before it finished. Try the turn again."
            )
        prompt_tokens, reply_tokens, source = usage.get("prompt_tokens"), usage.get("completion_tokens"), "usage"
        if prompt_tokens is None:
            # llama-cpp-python sends no usage in a stream, even when asked.
            reply = "".join(parts) if reply_tokens is None else None
            prompt_tokens, counted, source = await self.count_tokens(messages, reply)
            reply_tokens = counted if reply_tokens is None else reply_tokens
        yield Chunk(
            done=True,
            done_reason=finish_reason,
            prompt_eval_count=prompt_tokens,
            eval_count=reply_tokens,
            count_source=_COUNT_SOURCES.get(source),
            cached_tokens=cached,
        )

    async def complete_json(self, messages: list[dict], schema: dict, options: ChatOptions) -> dict:
        """Return the reply as JSON that matches `schema`, in the first mode the server accepts (see structured)."""
        start = structured.negotiated(self.url, self.model) or structured.MODES[0]
        modes = structured.MODES[structured.MODES.index(start):]
        for mode in modes:
            async def ask(sent, mode=mode):
                return await self._ask_json(mode, sent, schema, options, last=mode == modes[-1])

            try:
                return await structured.checked(
                    ask, structured.prompted(mode, messages, schema), schema, model=self.model,
                    limit=options.num_predict,
                )
            except _Rejected:
                continue
        raise AssertionError("the last mode is never rejected")  # pragma: no cover

    async def count_tokens(self, messages: list[dict], reply: str | None = None):
        """
        Return (prompt tokens, reply tokens, source) by the server's own tokenizer, and which endpoint it was.

        The reply is counted only when given. (None, None, None) when the
        server has no tokenizer endpoint we know, or it failed: a count is
        never worth failing a turn for.
        """
        with _counters_lock:
            known = _counters.get(self._root)
        kinds = [known] if known is not None else list(_COUNTERS)
        try:
            async with client_for(COUNT_TIMEOUT, headers=self._headers()) as client:
                for kind in filter(None, kinds):
                    prompt, counted = await _COUNTERS[kind](self, client, messages, reply)
                    if prompt:
                        with _counters_lock:
                            _counters[self._root] = kind
                        return prompt, counted, kind
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None, None, None  # a transport failure says nothing about the endpoint: ask again next time
        with _counters_lock:
            _counters[self._root] = ""
        return None, None, None

    async def embed(self, texts: list[str]) -> list[list[float]]:
        reply = await self._post("/embeddings", {"model": self.model, "input": texts})
        data = sorted(reply.get("data", []), key=lambda item: item.get("index", 0))
        if len(data) != len(texts):
            raise NarratorError(
                f"The model server at {self.url} answered /embeddings without one vector per text; "
                f"check that {self.model} is an embedding model."
            )
        return [item["embedding"] for item in data]

    async def describe(self) -> ModelInfo:
        entries = await self._models()
        entry = next((e for e in entries if e.get("id") == self.model), None)
        served = None
        if entry is None and len(entries) == 1:
            # llama.cpp's servers run one model and answer with it whatever name is asked.
            entry = entries[0]
            served = entry.get("id")
        context_length, source = await self._context_window(entry or {})
        mode = structured.negotiated(self.url, self.model)
        return ModelInfo(
            api=self.api, url=self.url, model=self.model, context_length=context_length, context_source=source,
            structured=structured.LABELS[mode] if mode else None, served=served,
        )

    async def list_models(self) -> list[str]:
        return [entry["id"] for entry in await self._models()]

    async def _context_window(self, entry: dict) -> tuple[int | None, str | None]:
        """Return the window the server runs the model with, and where it said so; (None, None) if it does not."""
        # The OpenAI API has no context length. llama.cpp's n_ctx_train in
        # /v1/models is the trained length, not the window the server was
        # started with, so trusting it would overflow prompts.
        if entry.get("max_model_len"):
            return int(entry["max_model_len"]), "max_model_len in /v1/models (vLLM)"
        try:
            async with client_for(COUNT_TIMEOUT, headers=self._headers()) as client:
                props = await _json_or_none(client.get(f"{self._root}/props"))
                settings = (props or {}).get("default_generation_settings") or {}
                n_ctx = settings.get("n_ctx") or (props or {}).get("n_ctx")
                if n_ctx:
                    return int(n_ctx), "n_ctx in /props (llama.cpp)"
                if entry.get("id"):
                    studio = await _json_or_none(client.get(f"{self._root}/api/v0/models/{entry['id']}"))
                    for field in ("loaded_context_length", "max_context_length"):
                        if (studio or {}).get(field):
                            return int(studio[field]), f"{field} in /api/v0/models (LM Studio)"
        except (httpx.HTTPError, ValueError, TypeError):
            pass
        return None, None

    async def _ask_json(self, mode: str, messages: list[dict], schema: dict, options: ChatOptions, *, last: bool):
        """Return (text, finish_reason) for one structured request in `mode`; _Rejected if the server refuses it."""
        body = self._chat_body(messages, options) | {"stream": False}
        response_format = structured.response_format(mode, schema)
        if response_format is not None:
            body["response_format"] = response_format
        with self._errors():
            async with self._client() as client:
                response = await client.post(f"{self._api}/chat/completions", json=body)
        if response.status_code in _REJECTED and not last:
            raise _Rejected(mode)
        if response.status_code != 200:
            self._raise_for(response)
        structured.remember(self.url, self.model, mode)
        try:
            answered = response.json()
            _note_usage(messages, answered)
            choice = answered["choices"][0]
            _, text = thinking.split(choice["message"]["content"] or "")
            return text, choice.get("finish_reason")
        except (ValueError, KeyError, IndexError, TypeError) as error:
            raise NarratorError(
                f"The model server at {self.url} answered /chat/completions without a message; "
                "is it an OpenAI-compatible server? Otherwise set STORYTELLER_LLM_API=ollama."
            ) from error

    def _chat_body(self, messages: list[dict], options: ChatOptions) -> dict:
        # num_ctx has no OpenAI equivalent: these servers fix the window at start.
        body = {
            "model": self.model,
            "messages": messages,
            "max_tokens": options.num_predict,
            "temperature": options.temperature,
        }
        if options.seed is not None:
            body["seed"] = options.seed
        if options.stop:
            body["stop"] = list(options.stop)
        if messages and messages[-1].get("role") == "assistant":
            # Go on from the unfinished last message rather than answer it: vLLM's names for it; llama.cpp's
            # server continues a final assistant message by itself and ignores them.
            body |= {"continue_final_message": True, "add_generation_prompt": False}
        return body

    async def _models(self) -> list[dict]:
        with self._errors():
            async with self._client() as client:
                response = await client.get(f"{self._api}/models")
        if response.status_code != 200:
            self._raise_for(response)
        return response.json().get("data", [])

    async def _post(self, path: str, body: dict) -> dict:
        with self._errors():
            async with self._client() as client:
                response = await client.post(f"{self._api}{path}", json=body)
        if response.status_code != 200:
            self._raise_for(response)
        return response.json()

    @property
    def _root(self) -> str:
        """The server's root: its own endpoints (tokenizer, /props) live beside /v1, not under it."""
        return self._api.removesuffix("/v1")

    def _client(self) -> httpx.AsyncClient:
        return client_for(self.timeout, headers=self._headers())

    def _headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _parse_event(self, data: str) -> dict:
        try:
            event = json.loads(data)
        except json.JSONDecodeError as error:
            raise StreamInterrupted(
                f"The model server at {self.url} sent an event that is not JSON ({data[:80]!r}); "
                "is STORYTELLER_LLM_URL pointing at an OpenAI-compatible server? Set "
                "STORYTELLER_LLM_API=ollama for Ollama."
            ) from error
        if event.get("error"):
            raise StreamInterrupted(
                f"The model server at {self.url} stopped mid-reply: {server_message(_message_of(event['error']))}. "
                "Try the turn again."
            )
        return event

    def _raise_for(self, response: httpx.Response):
        message = _error_text(response)
        if response.status_code == 404:
            raise ModelNotFound(
                f'The model server at {self.url} does not have the model "{self.model}" ({message}). '
                "Load it in the server, or set STORYTELLER_NARRATOR_MODEL to a model it lists."
            )
        if response.status_code in (401, 403):
            raise NarratorError(
                f"The model server at {self.url} refused the API key (HTTP {response.status_code}: {message}). "
                "Check the key the server expects."
            )
        raise NarratorError(f"The model server at {self.url} answered HTTP {response.status_code}: {message}.")

    def _errors(self):
        return translate_http_errors(self.url, _START_HINT, self.timeout)


def _cached_tokens(event, cached):
    """Return the prompt tokens ``event`` says the server reused from its cache, else ``cached`` (seen before)."""
    details = (event.get("usage") or {}).get("prompt_tokens_details") or {}
    if isinstance(details.get("cached_tokens"), int):
        return details["cached_tokens"]
    timings = event.get("timings") or {}  # llama.cpp's server, on its last chunk
    return timings["cache_n"] if isinstance(timings.get("cache_n"), int) else cached


def _gather(parts, chunk):
    """Keep the reply's text of ``chunk`` in ``parts`` (what the reply's tokens are counted from)."""
    if chunk.taken_back:
        parts.clear()
    elif chunk.text:
        parts.append(chunk.text)


class _Rejected(Exception):
    """The server refused a structured-output mode: try the next one."""


async def _json_or_none(request) -> dict | None:
    response = await request
    if response.status_code != 200:
        return None
    value = response.json()
    return value if isinstance(value, dict) else None


async def _count_of(request) -> int | None:
    """Return the count a tokenizer endpoint answered: its "count", or the length of its "tokens"."""
    reply = await _json_or_none(request)
    if reply is None:
        return None
    return reply["count"] if isinstance(reply.get("count"), int) else len(reply.get("tokens") or [])


async def _count_vllm(narrator, http, messages, reply):
    url, model = f"{narrator._root}/tokenize", narrator.model
    prompt = await _count_of(http.post(url, json={"model": model, "messages": messages}))
    if not prompt or reply is None:
        return prompt, None
    return prompt, await _count_of(http.post(url, json={"model": model, "prompt": reply, "add_special_tokens": False}))


async def _count_llama_cpp(narrator, http, messages, reply):
    template = await _json_or_none(http.post(f"{narrator._root}/apply-template", json={"messages": messages}))
    if not (template or {}).get("prompt"):
        return None, None
    url = f"{narrator._root}/tokenize"
    prompt = await _count_of(http.post(url, json={"content": template["prompt"], "add_special": True}))
    if not prompt or reply is None:
        return prompt, None
    return prompt, await _count_of(http.post(url, json={"content": reply}))


async def _count_llama_cpp_python(narrator, http, messages, reply):
    url, model = f"{narrator._root}/extras/tokenize/count", narrator.model
    text = "\n".join(str(message.get("content") or "") for message in messages)
    prompt = await _count_of(http.post(url, json={"model": model, "input": text}))
    if not prompt or reply is None:
        return prompt, None
    return prompt, await _count_of(http.post(url, json={"model": model, "input": reply}))


# Tried in this order until one counts; the first that does is remembered for the server.
_COUNTERS = {"vllm": _count_vllm, "llama.cpp": _count_llama_cpp, "llama-cpp-python": _count_llama_cpp_python}


def _error_text(response: httpx.Response) -> str:
    try:
        return server_message(_message_of(response.json()["error"]))
    except (ValueError, KeyError, TypeError):
        return server_message(response.text[:1000]) if response.text else response.reason_phrase


def _message_of(error) -> str:
    return str(error.get("message", error)) if isinstance(error, dict) else str(error)


def _note_usage(messages, answered):
    """Note what an OpenAI-compatible server said a structured request cost: llama.cpp's server says what it read
    (``timings.prompt_n``; what it held in its cache is ``cache_n``), vLLM and others how much was cached
    (``usage.prompt_tokens_details.cached_tokens``); the rest only the whole prompt."""
    used = answered.get("usage") if isinstance(answered.get("usage"), dict) else {}
    timings = answered.get("timings") if isinstance(answered.get("timings"), dict) else {}
    prompt, written = used.get("prompt_tokens"), used.get("completion_tokens")
    cached = (used.get("prompt_tokens_details") or {}).get("cached_tokens")
    if isinstance(timings.get("prompt_n"), int):
        usage.note(messages, prompt=prompt, read=timings["prompt_n"], written=written,
                   source="llama.cpp's timings.prompt_n (what it read after its cached prefix)")
    elif isinstance(cached, int) and isinstance(prompt, int):
        usage.note(messages, prompt=prompt, read=prompt - cached, written=written,
                   source="usage.prompt_tokens less prompt_tokens_details.cached_tokens")
    else:
        usage.note(messages, prompt=prompt, written=written,
                   source="usage.prompt_tokens (the whole prompt: this server does not say what it read)")
