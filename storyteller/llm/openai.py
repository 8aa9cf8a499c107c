"""The OpenAI-compatible client (llama.cpp server, LM Studio, vLLM) over httpx."""

import json
from collections.abc import AsyncIterator

import httpx

from .base import (
    READ_TIMEOUT,
    ChatOptions,
    Chunk,
    ModelInfo,
    ModelNotFound,
    NarratorError,
    StreamInterrupted,
    client_for,
    parse_json_reply,
    translate_http_errors,
)

_START_HINT = (
    "Start your OpenAI-compatible server (llama.cpp, LM Studio, vLLM), or set "
    "STORYTELLER_LLM_URL to where it runs."
)


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
        usage = {}
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
                        for choice in event.get("choices") or []:
                            text = (choice.get("delta") or {}).get("content")
                            if text:
                                yield Chunk(text=text)
                            finish_reason = choice.get("finish_reason") or finish_reason
        # Some servers end the stream without "[DONE]"; a finish_reason is
        # proof enough that the reply is whole.
        if finish_reason is None:
            raise StreamInterrupted(
                f"The model server at {self.url} closed the reply before it finished. Try the turn again."
            )
        yield Chunk(
            done=True,
            done_reason=finish_reason,
            prompt_eval_count=usage.get("prompt_tokens"),
            eval_count=usage.get("completion_tokens"),
        )

    async def complete_json(self, messages: list[dict], schema: dict, options: ChatOptions) -> dict:
        response_format = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}}
        body = self._chat_body(messages, options) | {"stream": False, "response_format": response_format}
        reply = await self._post("/chat/completions", body)
        try:
            text = reply["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError) as error:
            raise NarratorError(
                f"The model server at {self.url} answered /chat/completions without a message; "
                "is it an OpenAI-compatible server? Otherwise set STORYTELLER_LLM_API=ollama."
            ) from error
        return parse_json_reply(text, self.model)

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
        # The OpenAI API has no context length; vLLM adds max_model_len. The
        # llama.cpp server's n_ctx_train is the trained length, not the window
        # it was started with, so trusting it would overflow prompts.
        context_length = None
        for entry in await self._models():
            if entry.get("id") == self.model and entry.get("max_model_len"):
                context_length = int(entry["max_model_len"])
        return ModelInfo(api=self.api, url=self.url, model=self.model, context_length=context_length)

    async def list_models(self) -> list[str]:
        return [entry["id"] for entry in await self._models()]

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

    def _client(self) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return client_for(self.timeout, headers=headers)

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
                f"The model server at {self.url} stopped mid-reply: {_message_of(event['error'])}. "
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


def _error_text(response: httpx.Response) -> str:
    try:
        return _message_of(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200] or response.reason_phrase


def _message_of(error) -> str:
    return str(error.get("message", error)) if isinstance(error, dict) else str(error)
