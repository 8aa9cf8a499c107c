"""Reasoning models' thinking is kept apart from the reply in every form a server sends it, streamed or whole."""

import pytest

from storyteller.llm import ChatOptions, OllamaClient, OpenAIClient, ScriptedNarrator, thinking
from tests.fake_ollama import Thought
from tests.llm.streams import MESSAGES, collect

THOUGHT = "The player wants the door; the cellar key is narrator only, so I keep quiet about it."
REPLY = "The door creaks open onto a dark hall."
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def gathered(chunks):
    """Return (text, thinking) of a stream as a turn keeps them."""
    reply = thinking.Reply()
    for chunk in chunks:
        reply.add(chunk)
    return reply.text, reply.thinking


def fed(*parts):
    splitter = thinking.Splitter()
    pieces = [piece for part in parts for piece in splitter.feed(part)] + splitter.close()
    return [(piece.kind, piece.text) for piece in pieces]


def test_a_think_block_split_between_chunks_never_shows_as_text():
    assert fed("<thi", "nk>I wonder", " what", "</th", "ink>\n\nThe door", " opens.") == [
        ("thinking", "I wonder"), ("thinking", " what"), ("text", "The door"), ("text", " opens.")]


def test_a_lone_closing_tag_takes_back_the_text_before_it():
    assert fed("I wonder", " what", "</think>", "\n\nThe door opens.") == [
        ("text", "I wonder"), ("text", " what"), ("taken_back", "I wonder what"), ("text", "The door opens.")]


def test_text_that_only_looks_like_a_tag_is_kept_whole():
    assert fed("She wrote <b>", "bold</b> and 3 <", " 4.") == [
        ("text", "She wrote <b>"), ("text", "bold</b> and 3 "), ("text", "< 4.")]
    assert thinking.split("Ends with <thi") == ("", "Ends with <thi")


def test_a_whole_reply_splits_into_thinking_and_text():
    assert thinking.split("<think>plan</think>\n{\"ok\": true}") == ("plan", '{"ok": true}')
    assert thinking.split("plan</think>{\"ok\": true}") == ("plan", '{"ok": true}')
    assert thinking.split("<think>only thinking</think>") == ("only thinking", "")
    assert thinking.split("No thinking at all.") == ("", "No thinking at all.")


@pytest.mark.parametrize("form", ["field", "tags", "open"])
async def test_ollama_streams_each_form_of_thinking_apart_from_the_text(fake_ollama, form):
    fake_ollama.script(Thought(THOUGHT, REPLY, form=form))
    client = OllamaClient(fake_ollama.url, "qwen3:4b")
    chunks = await collect(client.stream_chat(MESSAGES, ChatOptions()))
    assert gathered(chunks) == (REPLY, THOUGHT)
    assert chunks[-1].done


@pytest.mark.parametrize("form", ["field", "tags", "open"])
async def test_an_openai_compatible_server_streams_each_form_apart_from_the_text(fake_ollama, form):
    fake_ollama.script(Thought(THOUGHT, REPLY, form=form))
    client = OpenAIClient(fake_ollama.url, "qwen3-4b")
    chunks = await collect(client.stream_chat(MESSAGES, ChatOptions()))
    assert gathered(chunks) == (REPLY, THOUGHT)


async def test_the_thinking_field_streams_before_the_text_as_it_arrives(fake_ollama):
    fake_ollama.script(Thought("one two three", "Done.", form="field"))
    client = OllamaClient(fake_ollama.url, "qwen3:4b")
    chunks = await collect(client.stream_chat(MESSAGES, ChatOptions()))
    assert [c.thinking for c in chunks[:3]] == ["one", " two", " three"]
    assert [c.text for c in chunks[3:-1]] == ["Done."]


async def test_a_structured_request_asks_ollama_not_to_think_and_gets_the_json_alone(fake_ollama):
    fake_ollama.script_json(Thought("I should say ok.", '{"ok": true}', form="tags"))
    client = OllamaClient(fake_ollama.url, "qwen3:4b")
    assert await client.complete_json(MESSAGES, SCHEMA, ChatOptions()) == {"ok": True}
    [body] = fake_ollama.bodies("/api/chat")
    assert body["think"] is False


async def test_json_with_thinking_in_the_text_is_read_without_it(fake_ollama):
    fake_ollama.script_json('<think>Hmm, {"ok": false} would be wrong.</think>{"ok": true}')
    for client in (OllamaClient(fake_ollama.url, "qwen3:4b"), OpenAIClient(fake_ollama.url, "qwen3-4b")):
        fake_ollama.script_json('<think>Hmm, {"ok": false} would be wrong.</think>{"ok": true}')
        assert await client.complete_json(MESSAGES, SCHEMA, ChatOptions()) == {"ok": True}


async def test_a_model_that_cannot_think_is_asked_again_without_think_and_remembered(fake_ollama):
    fake_ollama.refuse_think()
    client = OllamaClient(fake_ollama.url, "qwen2.5:3b-instruct")
    assert await client.complete_json(MESSAGES, SCHEMA, ChatOptions()) == {"ok": False}
    assert await client.complete_json(MESSAGES, SCHEMA, ChatOptions()) == {"ok": False}
    bodies = fake_ollama.bodies("/api/chat")
    assert ["think" in body for body in bodies] == [True, False, False], "refused once, then never asked again"


async def test_a_narration_leaves_thinking_to_the_server(fake_ollama):
    client = OllamaClient(fake_ollama.url, "qwen3:4b")
    await collect(client.stream_chat(MESSAGES, ChatOptions()))
    [body] = fake_ollama.bodies("/api/chat")
    assert "think" not in body


async def test_the_scripted_narrator_splits_a_think_block_as_the_clients_do():
    narrator = ScriptedNarrator([f"<think>{THOUGHT}</think>{REPLY}"])
    chunks = await collect(narrator.stream_chat(MESSAGES, ChatOptions()))
    assert gathered(chunks) == (REPLY, THOUGHT)
