import json
import re

import pytest

from storyteller.llm import (
    ChatOptions,
    ModelNotFound,
    NarratorError,
    NarratorTimeout,
    OpenAIClient,
    ServerUnavailable,
    StreamInterrupted,
)
from storyteller.llm import structured
from storyteller.llm.fake_server import REFUSED_JSON_SCHEMA
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


MOOD = {"type": "object", "properties": {"mood": {"enum": ["calm", "tense"]}}, "required": ["mood"]}

# What a server's own internals look like when they leak into its error text.
INTERNALS = re.compile(r"/home/|site-packages|Traceback|File \"|\.py\b|line \d+")


async def test_a_server_that_refuses_json_schema_is_asked_with_json_object_and_the_schema(fake_ollama):
    fake_ollama.accept_structured(structured.JSON_OBJECT_SCHEMA, structured.JSON_OBJECT, structured.TEXT)
    client = OpenAIClient(fake_ollama.url, "smollm2")

    assert await client.complete_json(MESSAGES, MOOD, ChatOptions()) == {"mood": "calm"}

    refused, accepted = fake_ollama.bodies("/v1/chat/completions")
    assert refused["response_format"]["type"] == "json_schema"
    assert accepted["response_format"] == {"type": "json_object", "schema": MOOD}
    assert accepted["messages"] == MESSAGES, "a server that holds the reply to the schema needs no schema in words"
    assert structured.negotiated(fake_ollama.url, "smollm2") == structured.JSON_OBJECT_SCHEMA


async def test_a_server_that_takes_only_a_bare_json_object_gets_the_schema_in_the_prompt_and_it_is_remembered(
    fake_ollama
):
    fake_ollama.accept_structured(structured.JSON_OBJECT)
    client = OpenAIClient(fake_ollama.url, "smollm2")

    assert await client.complete_json(MESSAGES, MOOD, ChatOptions()) == {"mood": "calm"}
    assert [body["response_format"] for body in fake_ollama.bodies("/v1/chat/completions")][1:] == [
        {"type": "json_object", "schema": MOOD}, {"type": "json_object"}]
    last = fake_ollama.bodies("/v1/chat/completions")[-1]["messages"][-1]["content"]
    assert last.startswith("I open the door.") and structured.SCHEMA_MARKER in last and json.dumps(MOOD) in last

    fake_ollama.requests.clear()
    await client.complete_json(MESSAGES, MOOD, ChatOptions())
    [body] = fake_ollama.bodies("/v1/chat/completions")
    assert body["response_format"] == {"type": "json_object"}, "the next call goes straight to the mode that worked"


async def test_a_plain_text_server_gets_the_schema_in_the_prompt_and_a_fenced_reply_is_read(fake_ollama):
    fake_ollama.accept_structured(structured.TEXT)
    fake_ollama.script_json('Here you are:\n```json\n{"mood": "tense"}\n```')
    client = OpenAIClient(fake_ollama.url, "smollm2")

    assert await client.complete_json(MESSAGES, MOOD, ChatOptions()) == {"mood": "tense"}
    assert "response_format" not in fake_ollama.bodies("/v1/chat/completions")[-1]
    assert structured.negotiated(fake_ollama.url, "smollm2") == structured.TEXT


async def test_a_reply_that_breaks_the_schema_is_asked_for_once_more_with_the_reasons(fake_ollama):
    fake_ollama.script_json({"mood": "furious"}, {"mood": "tense"})
    client = OpenAIClient(fake_ollama.url, "smollm2")

    assert await client.complete_json(MESSAGES, MOOD, ChatOptions()) == {"mood": "tense"}
    first, again = fake_ollama.bodies("/v1/chat/completions")
    assert again["messages"][:-2] == first["messages"] == MESSAGES
    assert again["messages"][-2] == {"role": "assistant", "content": '{"mood": "furious"}'}
    assert 'mood is "furious"; it must be one of "calm", "tense"' in again["messages"][-1]["content"]


MOODS = {"type": "object", "required": ["moods"], "properties": {"moods": {"type": "array", "items": MOOD}}}


async def test_a_reply_cut_off_by_the_limit_is_asked_for_again_without_its_broken_text(fake_ollama):
    fake_ollama.script_json('{"mood": "calm and " ' + "very " * 50 + '"}', {"mood": "calm"})
    client = OpenAIClient(fake_ollama.url, "smollm2")

    assert await client.complete_json(MESSAGES, MOOD, ChatOptions(num_predict=20)) == {"mood": "calm"}
    again = fake_ollama.bodies("/v1/chat/completions")[-1]["messages"]
    assert again[:-1] == MESSAGES
    assert "cut off by the 20-token limit before its JSON closed" in again[-1]["content"]


async def test_a_reply_cut_off_after_whole_items_keeps_them_without_asking_again(fake_ollama):
    # What SmolLM2 does under llama-cpp-python's grammar: one event again and again until the limit.
    event = '{"mood": "calm"}'
    fake_ollama.script_json('{"moods": [' + ", ".join([event] * 30) + "]}")
    client = OpenAIClient(fake_ollama.url, "smollm2")

    assert await client.complete_json(MESSAGES, MOODS, ChatOptions(num_predict=40)) == {"moods": [{"mood": "calm"}]}
    assert len(fake_ollama.bodies("/v1/chat/completions")) == 1, "a usable cut-off reply is not asked for again"


async def test_a_second_reply_that_breaks_the_schema_fails_in_words(fake_ollama):
    fake_ollama.script_json({"mood": "furious"}, {"weather": "rain"})
    client = OpenAIClient(fake_ollama.url, "/models/SmolLM2-135M.gguf")

    with pytest.raises(NarratorError) as raised:
        await client.complete_json(MESSAGES, MOOD, ChatOptions())
    assert str(raised.value) == (
        'The model SmolLM2-135M.gguf answered twice without the JSON that was asked for (the reply lacks "mood"), '
        "so nothing was used. Retry, or choose a larger narrator model.")


async def test_a_server_error_in_every_mode_is_shown_in_its_own_words_without_internals(fake_ollama):
    fake_ollama.fail_request("/v1/chat/completions", 500, REFUSED_JSON_SCHEMA, persistent=True)
    client = OpenAIClient(fake_ollama.url, "smollm2")

    with pytest.raises(NarratorError) as raised:
        await client.complete_json(MESSAGES, MOOD, ChatOptions())
    message = str(raised.value)
    assert "answered HTTP 500: Input should be 'text' or 'json_object'." in message
    assert not INTERNALS.search(message), message
    assert len(fake_ollama.bodies("/v1/chat/completions")) == len(structured.MODES)
    assert structured.negotiated(fake_ollama.url, "smollm2") is None, "no mode worked, so none is remembered"


async def test_an_error_mid_stream_is_shown_without_internals(fake_ollama):
    fake_ollama.fail_mid_stream(message='Traceback (most recent call last):\n  File "/srv/app/llama.py", line 9')
    client = OpenAIClient(fake_ollama.url, "smollm2")

    with pytest.raises(StreamInterrupted) as raised:
        await collect(client.stream_chat(MESSAGES, ChatOptions()))
    assert not INTERNALS.search(str(raised.value)) and "no details given" in str(raised.value)


@pytest.mark.parametrize("kind,words,endpoint", [
    ("llama.cpp", "<|im_start|>system You narrate.<|im_end|> <|im_start|>user I open the door.<|im_end|> "
                  "<|im_start|>assistant", "/apply-template, then /tokenize"),
    ("vllm", "system: You narrate. user: I open the door.", "POST /tokenize with the messages"),
    ("llama-cpp-python", "You narrate. I open the door.", "/extras/tokenize/count"),
])
async def test_a_stream_without_usage_is_counted_by_the_servers_own_tokenizer(fake_ollama, kind, words, endpoint):
    fake_ollama.imitate(kind)
    fake_ollama.stream_usage = False
    client = OpenAIClient(fake_ollama.url + "/v1", "smollm2")

    final = (await collect(client.stream_chat(MESSAGES, ChatOptions())))[-1]

    assert final.prompt_eval_count == fake_ollama.tokens_in(words)
    assert final.eval_count == fake_ollama.tokens_in("The story continues.")
    assert endpoint in final.count_source
    fake_ollama.requests.clear()
    await collect(client.stream_chat(MESSAGES, ChatOptions()))
    tried = [r.path for r in fake_ollama.requests if r.path != "/v1/chat/completions"]
    assert len(tried) == (3 if kind == "llama.cpp" else 2), "the endpoint that worked is remembered"


async def test_usage_in_the_stream_is_used_without_asking_the_tokenizer(fake_ollama):
    fake_ollama.imitate("vllm")
    client = OpenAIClient(fake_ollama.url, "smollm2")

    final = (await collect(client.stream_chat(MESSAGES, ChatOptions())))[-1]

    assert (final.prompt_eval_count, final.count_source) == (6, "the server's usage report")
    assert [r.path for r in fake_ollama.requests] == ["/v1/chat/completions"]


async def test_no_usage_and_no_tokenizer_is_not_reported_and_not_asked_again(fake_ollama):
    fake_ollama.stream_usage = False
    client = OpenAIClient(fake_ollama.url, "smollm2")

    final = (await collect(client.stream_chat(MESSAGES, ChatOptions())))[-1]
    assert (final.prompt_eval_count, final.eval_count, final.count_source) == (None, None, None)
    fake_ollama.requests.clear()
    await collect(client.stream_chat(MESSAGES, ChatOptions()))
    assert [r.path for r in fake_ollama.requests] == ["/v1/chat/completions"]


@pytest.mark.parametrize("kind,source", [
    ("llama.cpp", "n_ctx in /props (llama.cpp)"),
    ("vllm", "max_model_len in /v1/models (vLLM)"),
    ("lmstudio", "max_context_length in /api/v0/models (LM Studio)"),
])
async def test_describe_reads_the_context_window_from_the_servers_own_field(fake_ollama, kind, source):
    fake_ollama.imitate(kind)
    fake_ollama.context_length = 8192
    client = OpenAIClient(fake_ollama.url, "qwen2.5:3b-instruct")

    info = await client.describe()

    assert (info.context_length, info.context_source) == (8192, source)


async def test_a_model_named_by_its_file_path_is_shown_by_its_file_name(fake_ollama):
    fake_ollama.models = ["/home/someone/models/SmolLM2-135M-Instruct.Q4_1.gguf"]
    client = OpenAIClient(fake_ollama.url, "qwen2.5:3b-instruct")

    info = await client.describe()

    assert info.served == "/home/someone/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert info.label == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert (info.context_length, info.structured) == (None, None)


async def test_the_prompt_cache_reuse_a_server_reports_is_kept_and_none_where_it_says_nothing(fake_ollama):
    client = OpenAIClient(fake_ollama.url, "qwen2.5-3b-instruct")
    first = (await collect(client.stream_chat(MESSAGES, ChatOptions())))[-1]
    again = (await collect(client.stream_chat([*MESSAGES, {"role": "user", "content": "And then?"}],
                                              ChatOptions())))[-1]
    from storyteller.llm import caching

    whole = caching.prompt_tokens(MESSAGES, lambda text: len(text.split()))
    # The second prompt begins with every message of the first: all of it but the head of its answer.
    assert (first.cached_tokens, again.cached_tokens) == (0, whole - caching.HEAD)
    fake_ollama.imitate("llama-cpp-python")  # no usage in a stream: nothing said about a cache
    quiet = (await collect(client.stream_chat(MESSAGES, ChatOptions())))[-1]
    assert quiet.cached_tokens is None


def test_llama_cpps_timings_and_openais_usage_both_say_the_cache_reuse():
    from storyteller.llm.openai import _cached_tokens

    assert _cached_tokens({"timings": {"cache_n": 812, "prompt_n": 40}}, None) == 812
    assert _cached_tokens({"usage": {"prompt_tokens_details": {"cached_tokens": 64}}}, None) == 64
    assert _cached_tokens({"choices": []}, 812) == 812, "an event that says nothing keeps what an earlier one said"
