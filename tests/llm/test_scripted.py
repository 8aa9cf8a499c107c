import pytest

from storyteller.llm import ChatOptions, ScriptedNarrator, ServerUnavailable, StreamInterrupted
from storyteller.llm.scripted import DEFAULT_REPLY, vector_for

MESSAGES = [{"role": "user", "content": "I wait."}]


async def test_replies_stream_in_script_order_then_the_default():
    narrator = ScriptedNarrator(["A bell rings.", ["Some", "one ", "knocks."]])

    replies = []
    for _ in range(3):
        chunks = [chunk async for chunk in narrator.stream_chat(MESSAGES, ChatOptions())]
        assert chunks[-1].done and chunks[-1].done_reason == "stop"
        replies.append([chunk.text for chunk in chunks[:-1]])

    assert replies == [["A", " bell", " rings."], ["Some", "one ", "knocks."], ["The", " story", " continues."]]
    assert "".join(replies[2]) == DEFAULT_REPLY
    assert [call.messages for call in narrator.calls] == [MESSAGES] * 3


async def test_num_predict_cuts_the_reply_with_length():
    narrator = ScriptedNarrator(["one two three"])

    chunks = [chunk async for chunk in narrator.stream_chat(MESSAGES, ChatOptions(num_predict=2))]

    assert [chunk.text for chunk in chunks] == ["one", " two", ""]
    assert chunks[-1].done_reason == "length"


async def test_a_scripted_exception_fails_the_call_or_the_stream_where_it_stands():
    narrator = ScriptedNarrator([ServerUnavailable("down"), ["Half", StreamInterrupted("dropped")]])

    with pytest.raises(ServerUnavailable):
        [chunk async for chunk in narrator.stream_chat(MESSAGES, ChatOptions())]
    received = []
    with pytest.raises(StreamInterrupted):
        async for chunk in narrator.stream_chat(MESSAGES, ChatOptions()):
            received.append(chunk.text)

    assert received == ["Half"]


async def test_closing_a_stream_early_counts_as_cancelled():
    narrator = ScriptedNarrator(["one two three"])

    stream = narrator.stream_chat(MESSAGES, ChatOptions())
    await anext(stream)
    await stream.aclose()

    assert narrator.cancelled == 1


async def test_complete_json_returns_scripted_objects_and_parses_scripted_text():
    narrator = ScriptedNarrator([{"mood": "calm"}, '{"mood": "tense"}'])
    schema = {"type": "object"}

    assert await narrator.complete_json(MESSAGES, schema, ChatOptions()) == {"mood": "calm"}
    assert await narrator.complete_json(MESSAGES, schema, ChatOptions()) == {"mood": "tense"}
    assert narrator.calls[0].schema == schema


async def test_embeddings_are_deterministic_unit_vectors():
    narrator = ScriptedNarrator()

    [first, second] = await narrator.embed(["a lantern", "a lantern"])

    assert first == second == vector_for("a lantern")
    assert abs(sum(value * value for value in first) - 1) < 1e-9
    assert vector_for("a rope") != first
