"""Memories in a played turn: the query embedded in one call before the build, the section's place and framing,
scores in the report, and use counts written in the turn's own commit (seed 000 §18, §20, §33; seed 004 §B.8)."""

import numpy as np
import pytest
from asgiref.sync import sync_to_async

from campaigns import lineage
from campaigns.models import Campaign, ContextSnapshot
from memory import bank
from memory.models import Memory
from storyteller import llm, tokens, turns
from storyteller.context import Action
from storyteller.context import memories as memory_section
from tests.campaigns.test_lineage import act

from .conftest import play_to, remember_at

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "I ask Mara where she hid the amber sundial."


async def play(campaign, text=QUESTION, *, retry=False):
    async def relay(_):
        pass

    result = await turns.play_turn(campaign.pk, Action(mode="do", text=text), relay, retry=retry)
    await result.post_turn
    return result


@sync_to_async
def story_with_memories(campaign, *, embedded=True):
    play_to(campaign, 24)
    memories = [
        remember_at(campaign, 5, "Mara slipped the amber sundial inside the cracked teapot."),
        remember_at(campaign, 11, "Aldric seemed to distrust the ferryman."),
        remember_at(campaign, 17, "The travellers waited at the ferry landing."),
    ]
    if embedded:
        bank.store_vectors("nomic-embed-text", [(m.pk, llm.scripted.vector_for("search_document: " + m.text))
                                                for m in memories])
    return memories


@sync_to_async
def report_of(node_id):
    return ContextSnapshot.objects.get(node_id=node_id).report


@sync_to_async
def memory(pk):
    return Memory.objects.get(pk=pk)


async def test_the_memory_query_is_the_input_and_the_scene_embedded_in_one_call_before_the_prompt(campaign,
                                                                                                 narrator_server):
    await story_with_memories(campaign)
    narrator_server.requests.clear()
    result = await play(campaign)
    paths = [r.path for r in narrator_server.requests]
    assert paths.index("/api/embed") < paths.index("/api/chat")
    [query_call, *_] = narrator_server.bodies("/api/embed")
    assert query_call["input"][0] == "search_query: " + QUESTION  # the question alone, not diluted
    assert len(query_call["input"]) == 2 and query_call["input"][1].startswith("search_query: ")
    report = (await report_of(result.node_id))["memories"]
    assert report["query"]["input"] == QUESTION
    assert report["semantic"]["used"] and report["semantic"]["model"] == "nomic-embed-text"


async def test_a_long_input_and_long_narration_are_bounded_to_200_and_60_plus_120_tokens(campaign):
    @sync_to_async
    def query():
        play_to(campaign, 12)
        act(campaign, "wait", "The river ran grey. " * 200)
        fresh = Campaign.objects.get(pk=campaign.pk)
        return memory_section.query_for(fresh, lineage.path_of(fresh), Action("do", "word " * 500 + QUESTION))
    q = await query()
    assert tokens.count(q.input) <= 200 and q.input.endswith(QUESTION)
    assert tokens.count(q.context) <= 181


async def test_used_memories_are_framed_first_in_the_tail_with_inferred_marked_and_scores_recorded(campaign,
                                                                                                   narrator_server):
    stored = await story_with_memories(campaign)
    result = await play(campaign)
    report = await report_of(result.node_id)
    keys = [s["key"] for s in report["sections"]]
    assert keys.index("memories") < keys.index("player_input")
    assert keys.index("history") < keys.index("memories")
    section = next(s for s in report["sections"] if s["key"] == "memories")
    assert section["protected"]
    assert "[inferred] Aldric seemed to distrust the ferryman." in section["text"]
    assert "- Mara slipped the amber sundial" in section["text"]
    # What [inferred] means is said once, in the stable prefix, and the tail's section carries its label (issue 27).
    rules = next(s for s in report["sections"] if s["key"] == "narrator_rules")
    assert "[inferred] are interpretation, not established fact" in rules["text"]
    assert section["text"].startswith("Memories from earlier in this story:\n")
    used = report["memories"]["used"]
    assert {entry["id"] for entry in used} == {m.pk for m in stored}  # fewer than memory_top_k: all of them
    for entry in used:
        assert {"semantic", "lexical", "final", "source_start", "source_end"} <= set(entry)
        assert entry["final"] == pytest.approx(entry["semantic"] + 0.15 * entry["lexical"], abs=1e-3)
    assert report["memories"]["considered"] == 3 and report["memories"]["suppressed"] == 0
    assert set(report["memories"]["query"]["weights"]) == set(report["memories"]["query"]["input_terms"])


async def test_use_counts_are_written_in_the_turns_own_commit(campaign, narrator_server):
    stored = await story_with_memories(campaign)
    result = await play(campaign)
    for m in stored:
        fresh = await memory(m.pk)
        assert fresh.use_count == 1 and fresh.last_used_at is not None
    assert result.node_id


async def test_a_failed_turn_counts_no_use(campaign, narrator_server):
    stored = await story_with_memories(campaign)
    narrator_server.fail_mid_stream(after_chunks=1)
    with pytest.raises(turns.TurnFailed):
        await play(campaign)
    assert (await memory(stored[0].pk)).use_count == 0


async def test_a_turn_that_lost_the_race_counts_no_use(campaign, narrator_server):
    stored = await story_with_memories(campaign)

    @sync_to_async
    def move_on():
        act(Campaign.objects.get(pk=campaign.pk), "someone else acts")

    moved = []

    async def relay(_):
        if not moved:
            await move_on()
            moved.append(True)
    narrator_server.script("one two three")
    with pytest.raises(turns.TurnFailed):
        await turns.play_turn(campaign.pk, Action("do", QUESTION), relay)
    assert (await memory(stored[0].pk)).use_count == 0


async def test_with_no_vectors_ranking_is_lexical_and_the_report_says_so(campaign, narrator_server):
    stored = await story_with_memories(campaign, embedded=False)
    narrator_server.requests.clear()
    result = await play(campaign)
    report = (await report_of(result.node_id))["memories"]
    assert not report["semantic"]["used"] and "words only" in report["semantic"]["note"]
    assert report["used"][0]["id"] == stored[0].pk and report["used"][0]["semantic"] is None
    # No memory has a vector, so the memory query was not sent to be embedded.
    assert all("search_query: " + QUESTION not in body["input"] for body in narrator_server.bodies("/api/embed"))


def test_stored_vectors_round_trip_as_float32():
    vector = np.asarray(llm.scripted.vector_for("x"), dtype=np.float32)
    assert np.array_equal(np.frombuffer(vector.tobytes(), dtype=np.float32), vector)
