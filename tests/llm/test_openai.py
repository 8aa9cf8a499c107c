import pytest

from storyteller.llm import (
    ChatOptions,
    ModelNotFound,
    NarratorTimeout,
    OpenAIClient,
    ServerUnavailable,
    StreamInterrupted,
)
from storyteller.llm.scripted import vector_for
from tests.llm.streams import MESSAGES, collect, wait_for


async def test_sse_stream_skips_the_null_first_delta_and_ends_at_done(fake_ollama):
    fake_ollama.script("Dust swirls in the lamplight.")
    client = OpenAIClient(fake_ollama.url, "qwen2.5-3b-instruct")

    chunks = await collect(client.stream_chat(MESSAGES, ChatOptions()))

    assert [c.text for c in chunks[:-1]] == ["Dust", " swirls", " in", " the", " lamplight."]
    final = chunks[-1]
    assert (final.done, final.text, final.done_reason) == (True, "", "stop")
    assert (final.prompt_eval_count, final.eval_count) == (6, 5)


async def test_sse_stream_without_done_line_still_finishes(fake_ollama):
    fake_ollama.script("Quiet.")
    fake_ollama.omit_done()
    client = OpenAIClient(fake_ollama.url, "qwen2.5-3b-instruct")

    chunks = await collect(client.stream_chat(MESSAGES, ChatOptions()))

    assert [c.text for c in chunks] == ["Quiet.", ""]
    assert chunks[-1].done and chunks[-1].done_reason == "stop"


async def test_stream_sends_openai_parameters_and_asks_for_usage(fake_ollama):
    client = OpenAIClient(fake_ollama.url + "/v1", "qwen2.5-3b-instruct", api_key="sk-local")
    options = ChatOptions(num_predict=64, num_ctx=8192, temperature=0.3, seed=7, stop=("\n\n",))

    await collect(client.stream_chat(MESSAGES, options))

    [request] = [r for r in fake_ollama.requests if r.path == "/v1/chat/completions"]
    assert request.headers["authorization"] == "Bearer sk-local"
    assert request.body == {
        "model": "qwen2.5-3b-instruct",
        "messages": MESSAGES,
        "max_tokens": 64,
        "temperature": 0.3,
        "seed": 7,
        "stop": ["\n\n"],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def test_a_reply_cut_by_max_tokens_reports_length(fake_ollama):
    fake_ollama.script("one two three four five")
    client = OpenAIClient(fake_ollama.url, "qwen2.5-3b-instruct")

    chunks = await collect(client.stream_chat(MESSAGES, ChatOptions(num_predict=3)))

    assert "".join(c.text for c in chunks) == "one two three"
    assert chunks[-1].done_reason == "length"


async def test_an_error_event_mid_stream_raises(fake_ollama):
    fake_ollama.fail_mid_stream(after_chunks=1, message="out of memory")
    client = OpenAIClient(fake_ollama.url, "qwen2.5-3b-instruct")

    with pytest.raises(StreamInterrupted, match="out of memory"):
        await collect(client.stream_chat(MESSAGES, ChatOptions()))


async def test_a_missing_model_is_model_not_found(fake_ollama):
    fake_ollama.not_found()
    client = OpenAIClient(fake_ollama.url, "mystery-7b")

    with pytest.raises(ModelNotFound, match='"mystery-7b"'):
        await collect(client.stream_chat(MESSAGES, ChatOptions()))


async def test_a_stopped_server_is_reported_as_not_running_at_its_url(fake_ollama):
    fake_ollama.refuse()
    client = OpenAIClient(fake_ollama.url, "qwen2.5-3b-instruct")

    with pytest.raises(ServerUnavailable) as raised:
        await client.complete_json(MESSAGES, {"type": "object"}, ChatOptions())

    assert "not running" in str(raised.value)
    assert fake_ollama.url in str(raised.value)


async def test_a_silent_server_times_out(fake_ollama):
    fake_ollama.stall(5)
    client = OpenAIClient(fake_ollama.url, "qwen2.5-3b-instruct", timeout=0.5)

    with pytest.raises(NarratorTimeout):
        await collect(client.stream_chat(MESSAGES, ChatOptions()))


async def test_closing_the_stream_early_closes_the_connection(fake_ollama):
    fake_ollama.script(" ".join(f"word{i}" for i in range(40)))
    fake_ollama.chunk_delay(0.02)
    client = OpenAIClient(fake_ollama.url, "qwen2.5-3b-instruct")

    stream = client.stream_chat(MESSAGES, ChatOptions())
    assert (await anext(stream)).text == "word0"
    await stream.aclose()

    await wait_for(lambda: fake_ollama.cancelled == 1)
    assert len(fake_ollama.chunks) < 40


async def test_complete_json_sends_a_json_schema_response_format(fake_ollama):
    schema = {"type": "object", "properties": {"mood": {"type": "string"}}, "required": ["mood"]}
    fake_ollama.script_json({"mood": "calm"})
    client = OpenAIClient(fake_ollama.url, "qwen2.5-3b-instruct")

    reply = await client.complete_json(MESSAGES, schema, ChatOptions())

    assert reply == {"mood": "calm"}
    [body] = fake_ollama.bodies("/v1/chat/completions")
    assert body["stream"] is False
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": schema, "strict": True},
    }


async def test_complete_json_without_a_script_gets_json_matching_the_schema(fake_ollama):
    schema = {
        "type": "object",
        "properties": {"mood": {"enum": ["calm", "tense"]}, "items": {"type": "array"}},
        "required": ["mood", "items"],
    }
    client = OpenAIClient(fake_ollama.url, "qwen2.5-3b-instruct")

    assert await client.complete_json(MESSAGES, schema, ChatOptions()) == {"mood": "calm", "items": []}


async def test_embed_returns_vectors_in_input_order(fake_ollama):
    texts = ["search_document: a lantern", "search_document: a rope"]
    client = OpenAIClient(fake_ollama.url, "nomic-embed-text")

    assert await client.embed(texts) == [vector_for(text) for text in texts]
    assert fake_ollama.bodies("/v1/embeddings") == [{"model": "nomic-embed-text", "input": texts}]


async def test_list_models_and_describe_without_a_context_length(fake_ollama):
    client = OpenAIClient(fake_ollama.url, "qwen2.5:3b-instruct")

    assert await client.list_models() == ["qwen2.5:3b-instruct", "nomic-embed-text"]
    info = await client.describe()
    assert (info.api, info.model, info.context_length) == ("openai", "qwen2.5:3b-instruct", None)
