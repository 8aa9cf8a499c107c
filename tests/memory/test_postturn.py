"""The memory step of the post-turn worker, through the real fake model server (seed 000 §15, §17, §51)."""

import numpy as np
import pytest
from asgiref.sync import sync_to_async

from campaigns import lineage
from campaigns.models import Campaign, Node
from memory import blocks
from memory.models import Memory, MemoryRun, MemoryVector
from storyteller import llm, tokens
from storyteller.context import Action, build
from storyteller.context.layers import render_action
from storyteller.steps import memories
from tests.campaigns.test_lineage import act
from tests.conftest import make_campaign

from .conftest import play_to
from .test_blocks import FACT, long_block

pytestmark = pytest.mark.django_db(transaction=True)

NARRATOR = "qwen2.5:3b-instruct"
EMBEDDER = "nomic-embed-text"


@sync_to_async
def head_node(campaign):
    campaign.refresh_from_db()
    return lineage.path_of(campaign).nodes().get(depth=campaign.head_depth).pk


@sync_to_async
def rows(**filters):
    return list(Memory.objects.filter(**filters).order_by("id"))


@sync_to_async
def run_of(node_id):
    return MemoryRun.objects.get(node_id=node_id)


def summaries(server):
    return [body for body in server.bodies("/api/chat") if body.get("format") == memories.SCHEMA]


async def test_a_memory_per_block_of_six_actions_anchored_at_the_blocks_last_node(campaign, narrator_server):
    await sync_to_async(play_to)(campaign, 12)
    narrator_server.script_json({"memory": "Aldric promised to return before dawn."},
                                {"memory": "Mara seemed to distrust the abbot."})
    node_id = await head_node(campaign)
    assert await memories.remember(node_id) == MemoryRun.Status.WRITTEN
    first, second = await rows(campaign=campaign)
    assert (first.source_start, first.source_end, first.depth) == (0, 5, 5)
    assert (second.source_start, second.source_end, second.depth) == (6, 11, 11)
    assert first.branch_id == campaign.head_branch_id
    assert first.authority == "accepted_story" and second.authority == "heuristic"
    prompt = summaries(narrator_server)[0]["messages"][-1]["content"]
    assert prompt.startswith("Cast:\n- The player's character: Aldric, a wandering scribe")
    assert "Story excerpt:\n\nRain falls on the abbey" in prompt and prompt.endswith("Memory:")
    run = await run_of(node_id)
    assert (run.written, run.embedded, run.error) == (2, 2, "")
    # A second run finds nothing due until six more actions have settled.
    assert await memories.remember(node_id) == MemoryRun.Status.NOTHING_DUE


async def test_vectors_are_float32_with_model_dimensions_and_time_and_use_the_document_prefix(campaign,
                                                                                             narrator_server):
    await sync_to_async(play_to)(campaign, 12)
    narrator_server.script_json({"memory": "Aldric promised to return before dawn."})
    await memories.remember(await head_node(campaign))
    memory = (await rows(campaign=campaign))[0]
    stored = await MemoryVector.objects.aget(memory=memory)
    assert stored.model == EMBEDDER and stored.dims == 64 and stored.created_at
    vector = np.frombuffer(stored.vector, dtype=np.float32)
    assert np.allclose(vector, llm.scripted.vector_for("search_document: " + memory.text), atol=1e-6)
    [body] = narrator_server.bodies("/api/embed")
    assert body["input"][0] == "search_document: Aldric promised to return before dawn."


async def test_a_fact_early_in_a_long_block_reaches_the_memory_and_the_marker_is_never_stored(owner,
                                                                                             narrator_server):
    texts = long_block()
    # The opening and turns 1-3 make the block (depths 0-5), 2,079 tokens as the summariser reads it.
    overhead = tokens.count(block_text(texts)) - 2079
    texts = long_block(2079 - overhead)
    assert tokens.count(block_text(texts)) == 2079

    @sync_to_async
    def tell():
        campaign = make_campaign(owner, opening=texts[0])
        for depth in (1, 3, 5):
            act(campaign, texts[depth], texts[depth + 1] if depth + 1 < 6 else None)
        play_to(campaign, 12)
        return campaign
    campaign = await tell()
    narrator_server.script_json({"memory": f"{FACT} {blocks.EXCERPT_OMISSION_MARKER} They waited."})
    await memories.remember(await head_node(campaign))
    prompt = summaries(narrator_server)[0]["messages"][-1]["content"]
    assert FACT in prompt and blocks.EXCERPT_OMISSION_MARKER in prompt
    first = (await rows(campaign=campaign))[0]
    assert FACT in first.text and blocks.EXCERPT_OMISSION_MARKER not in first.text


def block_text(texts):
    return "\n\n".join(render_action("do", text) if depth % 2 else text for depth, text in enumerate(texts))


async def test_a_summariser_failure_is_recorded_leaves_the_turn_alone_and_is_retried(campaign, narrator_server):
    await sync_to_async(play_to)(campaign, 12)
    nodes_before = await sync_to_async(Node.objects.count)()
    narrator_server.not_found(NARRATOR, persistent=True)
    node_id = await head_node(campaign)
    assert await memories.remember(node_id) == MemoryRun.Status.FAILED
    run = await run_of(node_id)
    assert "depths 0–5" in run.error and "not found" in run.error
    assert await rows(campaign=campaign) == []
    assert await sync_to_async(Node.objects.count)() == nodes_before
    narrator_server.clear_failures()
    narrator_server.script_json({"memory": "The gate opened."}, {"memory": "The chapel was cold."})
    assert await memories.remember(node_id) == MemoryRun.Status.WRITTEN
    run = await run_of(node_id)
    assert run.attempts == 2 and run.error == "" and run.written == 2


async def test_an_empty_memory_is_a_failure_not_a_stored_row(campaign, narrator_server):
    await sync_to_async(play_to)(campaign, 12)
    narrator_server.script_json({"memory": "   "})
    assert await memories.remember(await head_node(campaign)) == MemoryRun.Status.FAILED
    assert await rows(campaign=campaign) == []


async def test_an_embedding_failure_keeps_the_memories_ranks_them_on_words_and_is_reported(campaign,
                                                                                          narrator_server):
    await sync_to_async(play_to)(campaign, 12)
    narrator_server.not_found(EMBEDDER, persistent=True)
    narrator_server.script_json({"memory": "Mara slipped the amber sundial inside the cracked teapot."},
                                {"memory": "The travellers waited at the ferry landing."})
    node_id = await head_node(campaign)
    assert await memories.remember(node_id) == MemoryRun.Status.WRITTEN
    run = await run_of(node_id)
    assert run.embedded == 0 and "could not be embedded" in run.embedding_note
    assert not await MemoryVector.objects.filter(campaign=campaign).aexists()

    @sync_to_async
    def recall():
        fresh = Campaign.objects.get(pk=campaign.pk)
        return build(fresh, lineage.path_of(fresh), Action("do", "Where is the amber sundial?")).report["memories"]
    report = await recall()
    assert report["semantic"]["used"] is False and "words only" in report["semantic"]["note"]
    assert report["used"][0]["text"].startswith("Mara slipped the amber sundial")
    assert report["used"][0]["lexical"] == 1.0 and report["used"][0]["semantic"] is None
    # The next pass, with the embedding model back, embeds what was left.
    narrator_server.clear_failures()
    embedded, note = await memories.embed_missing(campaign)
    assert (embedded, note) == (2, "")


async def test_without_an_embedding_model_memories_are_ranked_on_words_and_the_run_says_so(campaign, settings):
    settings.STORYTELLER_LLM_URL = "http://127.0.0.1:9"  # nothing listens: the built-in narrator takes over
    settings.STORYTELLER_LLM_URL_CONFIGURED = False
    await sync_to_async(play_to)(campaign, 12)
    await sync_to_async(Memory.objects.create)(campaign=campaign, branch_id=campaign.head_branch_id, depth=5,
                                               source_start=0, source_end=5, text="Mara hid the key.",
                                               authority="accepted_story")
    embedded, note = await memories.embed_missing(campaign)
    assert embedded == 0 and "No embedding model is available" in note and "words only" in note


async def test_eviction_marks_the_overflow_forgotten_keeps_the_rows_and_spares_this_pass(campaign, narrator_server,
                                                                                         settings):
    settings.STORYTELLER_MEMORY_BANK_CAPACITY = 2
    await sync_to_async(play_to)(campaign, 24)
    node_id = await head_node(campaign)
    narrator_server.script_json(*({"memory": f"Memory of block {i}."} for i in range(4)))
    assert await memories.remember(node_id) == MemoryRun.Status.WRITTEN
    # Over capacity, but all four were written by this pass: none is taken by it.
    assert [m.forgotten for m in await rows(campaign=campaign)] == [False] * 4
    await memories.remember(node_id)
    everything = await rows(campaign=campaign)
    assert len(everything) == 4  # never deleted
    assert [m.text for m in everything if not m.forgotten] == ["Memory of block 0.", "Memory of block 3."]
    assert (await run_of(node_id)).evicted == 2


async def test_the_cast_brief_names_the_known_characters_of_the_block_but_never_a_secret_one(campaign,
                                                                                            narrator_server):
    from campaigns.state import apply_events

    def introduce(name, description, secret):
        return {"type": "introduce", "subject": name, "object": "character", "value": description,
                "narrator_only": secret}

    @sync_to_async
    def tell():
        act(campaign, "greet Mara", "Mara the archivist nods; Vess watches from the rafters.")
        node = lineage.path_of(campaign).nodes().get(depth=2)
        apply_events(node, [introduce("Mara", "an archivist", False), introduce("Vess", "a spy of the abbot", True)],
                     source="recorder")
        play_to(campaign, 12)
    await tell()
    narrator_server.script_json({"memory": "Mara greeted Aldric."}, {"memory": "The travellers waited."})
    await memories.remember(await head_node(campaign))
    prompt = summaries(narrator_server)[0]["messages"][-1]["content"]
    brief = prompt.split("Story excerpt:")[0]
    assert "- Mara: an archivist" in brief
    assert "Vess" not in brief and "spy" not in brief
