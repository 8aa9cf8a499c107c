import asyncio
import time

import pytest

from storyteller.llm import (
    ChatOptions,
    ModelNotFound,
    NarratorError,
    NarratorTimeout,
    OllamaClient,
    ServerUnavailable,
    StreamInterrupted,
)
from storyteller.llm.scripted import vector_for
from tests.llm.streams import MESSAGES, collect, wait_for


async def test_stream_yields_tokens_in_order_then_one_final_chunk_with_usage(fake_ollama):
    fake_ollama.script("The door creaks open onto a dark hall.")
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct")

    chunks = await collect(client.stream_chat(MESSAGES, ChatOptions()))

    assert [c.text for c in chunks[:-1]] == ["The", " door", " creaks", " open", " onto", " a", " dark", " hall."]
    assert [c.done for c in chunks] == [False] * 8 + [True]
    final = chunks[-1]
    assert final.text == ""
    assert final.done_reason == "stop"
    assert final.prompt_eval_count == 6  # words in MESSAGES, as the fake counts
    assert final.eval_count == 8
    written = fake_ollama.chunks
    assert [chunk.text for chunk in written] == [chunk.text for chunk in chunks[:-1]]
    assert [chunk.at for chunk in written] == sorted(chunk.at for chunk in written)


async def test_stream_sends_model_options_and_keep_alive(fake_ollama):
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct", keep_alive="1h")
    options = ChatOptions(num_predict=64, num_ctx=8192, temperature=0.3, seed=7, stop=("\n\n",))

    await collect(client.stream_chat(MESSAGES, options))

    [body] = fake_ollama.bodies("/api/chat")
    assert body["model"] == "qwen2.5:3b-instruct"
    assert body["messages"] == MESSAGES
    assert body["stream"] is True
    assert body["keep_alive"] == "1h"
    assert body["options"] == {"num_predict": 64, "num_ctx": 8192, "temperature": 0.3, "seed": 7, "stop": ["\n\n"]}


async def test_unset_options_are_left_to_the_server(fake_ollama):
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct")

    await collect(client.stream_chat(MESSAGES, ChatOptions()))

    [body] = fake_ollama.bodies("/api/chat")
    assert body["keep_alive"] == "30m"
    assert body["options"] == {"num_predict": 512, "temperature": 0.8}


async def test_a_reply_cut_by_num_predict_reports_length(fake_ollama):
    fake_ollama.script("one two three four five")
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct")

    chunks = await collect(client.stream_chat(MESSAGES, ChatOptions(num_predict=2)))

    assert "".join(c.text for c in chunks) == "one two"
    assert chunks[-1].done_reason == "length"


async def test_an_error_line_mid_stream_raises_after_the_tokens_before_it(fake_ollama):
    fake_ollama.script("The hall is long and cold.")
    fake_ollama.fail_mid_stream(after_chunks=2, message="llama runner process has terminated")
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct")
    received = []

    with pytest.raises(StreamInterrupted, match="llama runner process has terminated"):
        async for chunk in client.stream_chat(MESSAGES, ChatOptions()):
            received.append(chunk.text)

    assert received == ["The", " hall"]


async def test_a_missing_model_says_how_to_pull_it(fake_ollama):
    fake_ollama.not_found()
    client = OllamaClient(fake_ollama.url, "llama3.2:1b")

    with pytest.raises(ModelNotFound) as raised:
        await collect(client.stream_chat(MESSAGES, ChatOptions()))

    assert "ollama pull llama3.2:1b" in str(raised.value)


async def test_a_missing_embedding_model_says_how_to_pull_it_while_the_narrator_works(fake_ollama):
    fake_ollama.not_found("nomic-embed-text", persistent=True)
    embedder = OllamaClient(fake_ollama.url, "nomic-embed-text")
    narrator = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct")

    for _ in range(2):
        with pytest.raises(ModelNotFound, match="ollama pull nomic-embed-text"):
            await embedder.embed(["search_query: the key"])
    assert (await collect(narrator.stream_chat(MESSAGES, ChatOptions())))[-1].done

    fake_ollama.clear_failures()
    assert len(await embedder.embed(["search_query: the key"])) == 1


async def test_a_stopped_server_is_reported_as_not_running_at_its_url(fake_ollama):
    fake_ollama.refuse()
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct")

    with pytest.raises(ServerUnavailable) as raised:
        await collect(client.stream_chat(MESSAGES, ChatOptions()))

    message = str(raised.value)
    assert "not running" in message
    assert fake_ollama.url in message
    assert "ollama serve" in message


async def test_a_resumed_server_answers_again_on_the_same_port(fake_ollama):
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct")
    fake_ollama.refuse()
    with pytest.raises(ServerUnavailable):
        await client.list_models()

    fake_ollama.resume()

    assert await client.list_models() == ["qwen2.5:3b-instruct", "nomic-embed-text"]


async def test_a_silent_server_times_out(fake_ollama):
    fake_ollama.stall(5)
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct", timeout=0.5)
    started = time.monotonic()

    with pytest.raises(NarratorTimeout, match="sent nothing for 0.5 s"):
        await collect(client.stream_chat(MESSAGES, ChatOptions()))

    assert time.monotonic() - started < 3


async def test_closing_the_stream_early_closes_the_connection_and_stops_the_server(fake_ollama):
    fake_ollama.script(" ".join(f"word{i}" for i in range(40)))
    fake_ollama.chunk_delay(0.02)
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct")

    stream = client.stream_chat(MESSAGES, ChatOptions())
    assert (await anext(stream)).text == "word0"
    assert (await anext(stream)).text == " word1"
    await stream.aclose()

    await wait_for(lambda: fake_ollama.cancelled == 1)
    assert len(fake_ollama.chunks) < 40


async def test_a_stream_read_to_the_end_is_not_counted_as_cancelled(fake_ollama):
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct")

    await collect(client.stream_chat(MESSAGES, ChatOptions()))
    await asyncio.sleep(0.05)

    assert fake_ollama.cancelled == 0


async def test_complete_json_sends_the_schema_as_format_and_parses_the_reply(fake_ollama):
    schema = {"type": "object", "properties": {"mood": {"type": "string"}}, "required": ["mood"]}
    fake_ollama.script_json('{"mood": "tense"}')
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct")

    reply = await client.complete_json(MESSAGES, schema, ChatOptions(temperature=0))

    assert reply == {"mood": "tense"}
    [body] = fake_ollama.bodies("/api/chat")
    assert body["format"] == schema
    assert body["stream"] is False
    assert body["options"]["temperature"] == 0


async def test_complete_json_asks_once_more_for_text_that_is_not_json(fake_ollama):
    schema = {"type": "object", "properties": {"mood": {"type": "string"}}, "required": ["mood"]}
    fake_ollama.script_json("Sure! Here is the JSON you asked for.", {"mood": "calm"})
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct")

    assert await client.complete_json(MESSAGES, schema, ChatOptions()) == {"mood": "calm"}
    first, again = fake_ollama.bodies("/api/chat")
    assert again["messages"][:-2] == first["messages"]
    assert again["messages"][-2] == {"role": "assistant", "content": "Sure! Here is the JSON you asked for."}
    assert "the reply is not JSON" in again["messages"][-1]["content"]


async def test_complete_json_gives_up_after_a_second_reply_that_is_not_json(fake_ollama):
    fake_ollama.script_json("Sure! Here is the JSON you asked for.", "Here it is again.")
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct")

    with pytest.raises(NarratorError, match="answered twice without the JSON that was asked for") as raised:
        await client.complete_json(MESSAGES, {"type": "object"}, ChatOptions())
    assert "the reply is not JSON" in str(raised.value) and "Here it is again" not in str(raised.value)


async def test_describe_reads_the_context_length_from_model_info(fake_ollama):
    fake_ollama.context_length = 32768
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct")

    info = await client.describe()

    assert (info.api, info.url, info.model, info.context_length) == (
        "ollama",
        fake_ollama.url,
        "qwen2.5:3b-instruct",
        32768,
    )
    assert fake_ollama.bodies("/api/show") == [{"model": "qwen2.5:3b-instruct"}]


async def test_embed_passes_nomic_prefixes_through_unchanged(fake_ollama):
    texts = ["search_document: The key is under the mat.", "search_query: where is the key?"]
    client = OllamaClient(fake_ollama.url, "nomic-embed-text")

    vectors = await client.embed(texts)

    assert vectors == [vector_for(text) for text in texts]
    [body] = fake_ollama.bodies("/api/embed")
    assert body["input"] == texts
    assert body["model"] == "nomic-embed-text"


async def test_list_models_names_the_pulled_models(fake_ollama):
    fake_ollama.models = ["qwen2.5:3b-instruct", "nomic-embed-text", "llama3.2:1b"]
    client = OllamaClient(fake_ollama.url + "/", "qwen2.5:3b-instruct")

    assert await client.list_models() == ["qwen2.5:3b-instruct", "nomic-embed-text", "llama3.2:1b"]


async def test_reset_forgets_every_reply_failure_and_delay_left_scripted(fake_ollama):
    schema = {"type": "object", "properties": {"mood": {"type": "string"}}, "required": ["mood"]}
    fake_ollama.script("LEFT OVER by an earlier test.")
    fake_ollama.script_json({"mood": "left over"})
    fake_ollama.fail_request("/api/chat", 500, "left over", persistent=True)
    fake_ollama.chunk_delay(5)
    fake_ollama.json_delay(5)
    fake_ollama.reset()
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct")

    started = time.perf_counter()
    chunks = await collect(client.stream_chat(MESSAGES, ChatOptions()))
    assert "".join(c.text for c in chunks) == fake_ollama.default_reply, "the next test's turn gets its own reply"
    assert await client.complete_json(MESSAGES, schema, ChatOptions()) == {"mood": ""}
    assert time.perf_counter() - started < 2, "no delay is left either"
