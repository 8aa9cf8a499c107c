"""A turn with imported knowledge: one query embedding before the build, nothing written early, no network."""

import pytest
from asgiref.sync import sync_to_async

from campaigns import lineage
from campaigns.models import ContextSnapshot, Node
from knowledge import retrieval
from knowledge.importer import embed_source
from storyteller.context import Action, knowledge_query
from tests.knowledge.conftest import import_fixture, loopback_only  # noqa: F401 (fixture)
from tests.storyteller.test_turns import play

pytestmark = pytest.mark.django_db(transaction=True)


@sync_to_async
def indexed_library(campaign):
    for name in ["canon.md", "reference.md", "inspiration.md", "hostile.md"]:
        embed_source(import_fixture(campaign, name))


async def test_the_query_is_embedded_once_before_the_prompt_is_sent(campaign, narrator_server, loopback_only):
    await indexed_library(campaign)
    narrator_server.requests.clear()
    result, _ = await play(campaign, Action(mode="do", text="I ask about warp drives between the stars"))
    paths = [request.path for request in narrator_server.requests]
    assert paths == ["/api/embed", "/api/chat"]
    assert narrator_server.bodies("/api/embed")[0]["input"][0].startswith("search_query: I ask about warp drives")
    report = (await ContextSnapshot.objects.aget(node_id=result.node_id)).report
    assert report["knowledge"]["semantic"]["used"] and report["knowledge"]["semantic"]["model"] == "nomic-embed-text"
    assert any(entry["filename"] == "reference.md" for entry in report["knowledge"]["used"])
    chat = narrator_server.bodies("/api/chat")[0]["messages"][-1]["content"]
    assert "REFERENCE SOURCE — UNTRUSTED DATA" in chat and "fold space" in chat


async def test_a_failing_query_embedding_plays_the_turn_lexically_and_says_why(campaign, narrator_server):
    await indexed_library(campaign)
    narrator_server.not_found("nomic-embed-text")
    result, _ = await play(campaign, Action(mode="do", text="I ask about warp drives between the stars"))
    report = (await ContextSnapshot.objects.aget(node_id=result.node_id)).report
    assert not report["knowledge"]["semantic"]["used"]
    assert "could not be embedded" in report["knowledge"]["semantic"]["note"]
    assert report["knowledge"]["used"], "lexical retrieval carries the turn"


async def test_a_failed_turn_with_knowledge_writes_nothing(campaign, narrator_server):
    await indexed_library(campaign)
    narrator_server.fail_mid_stream(after_chunks=1)
    with pytest.raises(Exception):
        await play(campaign, Action(mode="do", text="I ask about warp drives"))
    assert await Node.objects.acount() == 1 and await ContextSnapshot.objects.acount() == 0


async def test_with_the_builtin_narrator_there_is_no_embedding_model_and_the_report_says_so(campaign, settings):
    settings.STORYTELLER_LLM_URL = "http://127.0.0.1:9"
    settings.STORYTELLER_LLM_URL_CONFIGURED = False
    await indexed_library(campaign)

    @sync_to_async
    def query():
        return retrieval.embed_query(campaign, knowledge_query(campaign, lineage.path_of(campaign),
                                                                Action(mode="do", text="warp drives")))

    probe = await query()
    assert probe.vector is None and "No embedding model" in probe.semantic_note


async def test_every_query_a_turn_needs_is_embedded_in_one_request(campaign, narrator_server):
    await indexed_library(campaign)

    @sync_to_async
    def remember():
        from memory import bank
        from storyteller.llm.scripted import vector_for

        memory = bank.add_by_hand(campaign, "Aldric keeps the silver key in his left boot.")
        bank.store_vectors("nomic-embed-text", [(memory.pk, vector_for(memory.text))])

    await remember()
    narrator_server.requests.clear()
    result, _ = await play(campaign, Action(mode="do", text="I ask about warp drives between the stars"))
    assert [request.path for request in narrator_server.requests] == ["/api/embed", "/api/chat"]
    [texts] = [body["input"] for body in narrator_server.bodies("/api/embed")]
    assert len(texts) == 3, "the knowledge query, then the memory query's input and its scene"
    assert all(text.startswith("search_query: ") for text in texts)
    report = (await ContextSnapshot.objects.aget(node_id=result.node_id)).report
    assert report["knowledge"]["semantic"]["used"] and report["memories"]["semantic"]["used"]
    assert report["memories"]["used"][0]["semantic"] is not None
