"""ScriptedNarrator: an in-process narrator that plays back scripted replies, for unit tests."""

import hashlib
import json
import math
import re
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

from . import thinking
from .base import ChatOptions, Chunk, ModelInfo, parse_json_reply

DEFAULT_REPLY = "The story continues."
EMBEDDING_DIMENSIONS = 64


@dataclass(frozen=True)
class Call:
    method: str  # "stream_chat" | "complete_json" | "embed"
    messages: list[dict] | None = None
    options: ChatOptions | None = None
    schema: dict | None = None
    texts: list[str] | None = None


class ScriptedNarrator:
    """
    Answer each chat with the next scripted reply, then with DEFAULT_REPLY.

    A reply is a string (streamed word by word, each word keeping its leading
    spaces), a list of chunks where an exception instance is raised when its
    turn comes (a failure mid-stream), a dict (for complete_json), or an
    exception instance (the call fails before any text). Every call is
    recorded in `calls`; every stream closed before its end counts in
    `cancelled`.
    """

    api = "scripted"

    def __init__(self, replies=(), *, model: str = "scripted", context_length: int = 8192):
        self.model = model
        self.context_length = context_length
        self.calls: list[Call] = []
        self.cancelled = 0
        self._replies = deque(replies)

    def script(self, *replies):
        """Queue more replies after the ones already scripted."""
        self._replies.extend(replies)

    async def stream_chat(self, messages: list[dict], options: ChatOptions) -> AsyncIterator[Chunk]:
        self.calls.append(Call("stream_chat", messages=messages, options=options))
        chunks = self._next_chunks()
        done_reason = "stop"
        if len(chunks) > options.num_predict:
            chunks, done_reason = chunks[: options.num_predict], "length"
        splitter = thinking.Splitter()  # a scripted reasoning model's <think> block, as a server's clients split it
        try:
            for chunk in chunks:
                if isinstance(chunk, BaseException):
                    raise chunk
                for piece in thinking.chunks(splitter.feed(chunk)):
                    yield piece
            for piece in thinking.chunks(splitter.close()):
                yield piece
        except GeneratorExit:
            self.cancelled += 1
            raise
        yield Chunk(
            done=True,
            done_reason=done_reason,
            prompt_eval_count=sum(len(str(m.get("content") or "").split()) for m in messages),
            eval_count=len(chunks),
        )

    async def complete_json(self, messages: list[dict], schema: dict, options: ChatOptions) -> dict:
        self.calls.append(Call("complete_json", messages=messages, options=options, schema=schema))
        reply = self._replies.popleft() if self._replies else {}
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, dict):
            return reply
        return parse_json_reply("".join(reply), self.model)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(Call("embed", texts=texts))
        return [vector_for(text) for text in texts]

    async def describe(self) -> ModelInfo:
        return ModelInfo(api=self.api, url=None, model=self.model, context_length=self.context_length)

    async def list_models(self) -> list[str]:
        return [self.model]

    def _next_chunks(self) -> list:
        reply = self._replies.popleft() if self._replies else DEFAULT_REPLY
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, dict):
            reply = json.dumps(reply)
        if isinstance(reply, str):
            return re.findall(r"\s*\S+|\s+", reply)
        return list(reply)


def vector_for(text: str) -> list[float]:
    """Return a deterministic unit vector for `text`, derived from its SHA-256."""
    values = []
    counter = 0
    while len(values) < EMBEDDING_DIMENSIONS:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        values.extend(byte / 127.5 - 1.0 for byte in digest)
        counter += 1
    values = values[:EMBEDDING_DIMENSIONS]
    norm = math.sqrt(sum(value * value for value in values))
    return [value / norm for value in values]

