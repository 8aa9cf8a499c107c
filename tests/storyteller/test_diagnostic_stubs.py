"""The memory diagnostic's deterministic stubs (seed 004 §C.4), alone and served over HTTP by the fake server."""

import numpy as np
import pytest

from memory import blocks
from storyteller import llm
from storyteller.diagnostics.stubs import (
    DIMENSIONS,
    BestCaseSummariser,
    ConceptEmbedder,
    DiagnosticStubs,
    Fact,
    ScriptNarrator,
)
from storyteller.llm.fake_server import FakeModelServer
from storyteller.steps.memories import SCHEMA as MEMORY_SCHEMA
from storyteller.steps.recorder import SCHEMA as RECORDER_SCHEMA

F = Fact("I watch Mara slip the amber sundial inside the cracked teapot.", ("sundial", "teapot"))


def summariser_prompt(excerpt):
    return [{"role": "system", "content": "rules"},
            {"role": "user", "content": f"Cast:\n- Aldric\n\nStory excerpt:\n\n{excerpt}\n\nMemory:"}]


def test_a_fact_is_carried_only_with_every_word_and_leaks_with_any_whole_word():
    assert F.carries("The Sundial was in the TEAPOT.") and not F.carries("The sundial was lost.")
    assert F.leaks("The sundial was lost.") and not F.leaks("sundials and teapots")  # whole words only


def test_the_best_case_summariser_keeps_every_sentence_carrying_a_fact_and_names_the_blocks_place():
    excerpt = ("The player adds to the story: I watch Mara slip the amber sundial inside the cracked teapot.\n\n"
               "Rain drifts across the mill race. The sundial is not mentioned again.")
    memory = BestCaseSummariser([F]).memory(excerpt)
    assert memory == ("I watch Mara slip the amber sundial inside the cracked teapot. "
                      "The travellers spent time at the mill race.")


def test_the_best_case_summariser_gets_only_the_excerpt_not_the_cast_brief():
    stubs = DiagnosticStubs(facts=[F])
    reply = stubs.reply(summariser_prompt("Rain drifts across the salt market."), MEMORY_SCHEMA)
    assert reply == {"memory": "The travellers spent time at the salt market."}


def test_the_script_narrator_never_uses_a_word_of_a_planted_fact_and_moves_between_places():
    narrator = ScriptNarrator(words=60)
    replies = [narrator.narrate() for _ in range(60)]
    assert not any(F.leaks(reply) for reply in replies)
    assert all(55 <= len(reply.split()) <= 80 for reply in replies)
    assert len({reply.split(".")[0] for reply in replies}) > 20


def test_every_other_structured_answer_carries_no_fact_and_records_no_state():
    stubs = DiagnosticStubs(facts=[F])
    assert stubs.reply([], RECORDER_SCHEMA) == {"events": []}
    summary = stubs.reply([], {"type": "object", "properties": {"summary": {"type": "string"}}})
    assert summary["summary"] and not F.leaks(summary["summary"])


def test_a_fact_sharing_a_word_with_the_narrators_filler_is_refused():
    with pytest.raises(ValueError, match="shares a word with the stub narrator's filler"):
        DiagnosticStubs(facts=[Fact("The carter mends a wheel.", ("carter", "wheel"))])


def test_the_concept_embedder_puts_a_paraphrase_near_the_original_and_an_unrelated_line_far():
    embedder = ConceptEmbedder()
    memory = np.array(embedder.embed("search_document: Mara slipped the amber sundial inside the cracked teapot."))
    paraphrase = np.array(embedder.embed("search_query: Where is the little brass dial that tells the hour?"))
    unrelated = np.array(embedder.embed("search_query: What does rope cost at the landing this season?"))
    assert len(memory) == DIMENSIONS and abs(np.linalg.norm(memory) - 1) < 1e-9
    assert memory @ paraphrase > 0.2 > memory @ unrelated
    assert embedder.embed("the sundial") == embedder.embed("search_query: the sundial")  # prefixes are dropped


async def test_the_fake_server_serves_the_stubs_over_http_after_anything_scripted():
    stubs = DiagnosticStubs(facts=[F])
    with FakeModelServer(stubs=stubs) as server:
        narrator = llm.OllamaClient(server.url, "qwen2.5:3b-instruct")
        options = llm.ChatOptions(num_predict=200)
        server.script("A scripted reply.")
        assert [c.text async for c in narrator.stream_chat([], options) if c.text] == ["A", " scripted", " reply."]
        streamed = "".join([c.text async for c in narrator.stream_chat([], options) if c.text])
        assert streamed.startswith("The travellers spent time at the ferry landing.")
        excerpt = "The player adds to the story: I watch Mara slip the amber sundial inside the cracked teapot."
        memory = await narrator.complete_json(summariser_prompt(excerpt), MEMORY_SCHEMA, options)
        assert F.carries(memory["memory"])
        assert await narrator.complete_json([], RECORDER_SCHEMA, options) == {"events": []}
        [vector] = await llm.OllamaClient(server.url, "nomic-embed-text").embed(["search_document: a sundial"])
        assert vector == pytest.approx(ConceptEmbedder().embed("a sundial"))


def test_the_fake_server_without_stubs_still_answers_its_default_and_hashed_vectors():
    with FakeModelServer() as server:
        assert server.stubs is None
        assert server._next_reply(None, None).text == "The story continues."
        assert server._vector("x") == llm.scripted.vector_for("x")


def test_the_stub_memories_of_a_long_block_depend_on_what_the_excerpt_kept():
    # The summariser sees only the excerpt: a fact cut from it cannot reach the memory (seed 004 §E).
    filler = "Rain drifts across the mill race. " * 400
    texts = [f"The player adds to the story: {F.text}", filler, filler]
    kept = BestCaseSummariser([F]).memory(blocks.excerpt(texts))
    dropped = BestCaseSummariser([F]).memory(blocks.excerpt(texts)[-2000:])
    assert F.carries(kept) and not F.carries(dropped)
