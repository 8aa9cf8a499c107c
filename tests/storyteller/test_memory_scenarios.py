"""The retention scenarios of seed 004 §C.4.1, played through play_turn and the post-turn worker against the
stub server: every one must carry the planted fact to the recall prompt through memory alone.

And the negative controls: the isolation check fails when another layer
carries the fact, the verdict names the stage that failed, and a memory that
contradicts the state loses and changes nothing (§J).
"""

import pytest
from asgiref.sync import sync_to_async

from campaigns import lineage
from campaigns import state as story_state
from campaigns.models import Campaign, Node
from knowledge import importer
from memory import bank, blocks, checkpoints
from memory.models import Memory
from storyteller import turns
from storyteller.context import Action
from storyteller.context import memories as memory_section
from storyteller.diagnostics import scenarios
from storyteller.diagnostics.isolation import CHECKS, isolation
from storyteller.diagnostics.retention import diagnose
from storyteller.diagnostics.scenarios import F, G, Scenario

pytestmark = pytest.mark.django_db(transaction=True)


def assert_recalled_through_memory_alone(outcome):
    assert outcome.counts, outcome.isolation["failed"]
    assert outcome.verdict == "injected", outcome.diagnosis["stages"]
    stages = outcome.diagnosis["stages"]
    assert stages["created"]["memory_text"] and F.carries(stages["created"]["memory_text"])
    assert stages["ranked"]["replica_matches_stored_selection"], stages["ranked"]
    assert stages["injected"]["text_in_section"]


async def test_independent_default_recalls_the_fact_at_depth_106_through_memory(owner):
    outcome = await scenarios.run("independent_default", owner)
    assert_recalled_through_memory_alone(outcome)
    assert outcome.diagnosis["recall_depth"] == 106 and outcome.diagnosis["plant_depth"] == 1
    assert outcome.details["evicted"] == 0
    assert set(outcome.isolation["checks"]) == set(CHECKS)


async def test_past_capacity_keeps_the_only_memory_of_the_early_stretch(owner):
    outcome = await scenarios.run("past_capacity", owner)
    assert_recalled_through_memory_alone(outcome)
    retained = outcome.diagnosis["stages"]["retained"]
    assert outcome.details["evicted"] > 0  # the bank really went past its capacity of 6
    assert retained["active_memories"] == retained["memory_bank_capacity"] == 6


async def test_past_capacity_with_a_pin_keeps_both_the_pin_and_the_early_memory(owner):
    outcome = await scenarios.run("past_capacity_pinned", owner)
    assert_recalled_through_memory_alone(outcome)
    assert outcome.details["evicted"] > 0
    assert outcome.details["pinned_memory"] and outcome.details["pinned_memory_kept"]


async def test_past_capacity_with_top_k_2_still_ranks_the_fact_into_the_two(owner):
    outcome = await scenarios.run("past_capacity_low_top_k", owner)
    assert_recalled_through_memory_alone(outcome)
    assert outcome.diagnosis["stages"]["ranked"]["top_k_cutoff"] == 2
    assert outcome.diagnosis["stages"]["ranked"]["rank"] <= 2
    assert outcome.details["evicted"] > 0


@pytest.mark.parametrize("name", ["long_block_fact_early", "long_block_fact_late"])
async def test_a_fact_anywhere_in_a_block_over_2000_tokens_reaches_the_summariser_and_the_prompt(owner, name):
    outcome = await scenarios.run(name, owner)
    assert_recalled_through_memory_alone(outcome)
    [covering] = outcome.diagnosis["stages"]["created"]["covering_memories"]
    assert covering["block_tokens"] > blocks.MEMORY_EXCERPT_TOKENS
    assert covering["fact_in_block"] and covering["fact_in_summariser_excerpt"]


async def test_lineage_control_never_shows_an_abandoned_lines_fact_after_the_divergence(owner):
    outcome = await scenarios.run("lineage_control", owner)
    assert_recalled_through_memory_alone(outcome)
    details = outcome.details
    assert details["g_memory"] and details["g_memory_carries_g"]  # G's memory was written on line A
    assert details["divergence_depth"] == 40
    assert details["g_memory_stored"]
    assert not details["g_eligible_after_divergence"]
    assert details["g_injected_after_divergence"] == []
    assert details["g_eligible_again_on_line_a"]


@sync_to_async
def isolation_at(campaign_id, recall_id, fact=F):
    campaign = Campaign.objects.get(pk=campaign_id)
    recall = Node.objects.get(pk=recall_id)
    return isolation(campaign, lineage.path_at(campaign_id, recall.branch_id, recall.depth), fact, recall)


async def test_the_isolation_check_fails_when_another_layer_carries_the_fact(owner):
    outcome = await scenarios.run("long_block_fact_late", owner)
    assert (await isolation_at(outcome.campaign_id, outcome.recall_node_id)).holds

    @sync_to_async
    def early_recall():
        # A reply whose prompt still holds the plant verbatim.
        return Node.objects.get(campaign_id=outcome.campaign_id, depth=10).pk

    recent = await isolation_at(outcome.campaign_id, await early_recall())
    assert not recent.holds and "recent_history" in recent.failed

    @sync_to_async
    def state_carries_it():
        campaign = Campaign.objects.get(pk=outcome.campaign_id)
        story_state.correct(campaign, owner, {"type": "add_fact", "subject": "", "object": "",
                                              "value": "Mara hid the amber sundial in the cracked teapot."})

    await state_carries_it()
    result = await isolation_at(outcome.campaign_id, outcome.recall_node_id)
    assert not result.holds
    assert {"state_document", "state_snapshots"} <= set(result.failed)

    @sync_to_async
    def knowledge_carries_it():
        campaign = Campaign.objects.get(pk=outcome.campaign_id)
        importer.import_source(campaign, "notes.md", b"# Notes\n\nThe sundial is in the teapot.\n", "reference")

    await knowledge_carries_it()
    assert "knowledge" in (await isolation_at(outcome.campaign_id, outcome.recall_node_id)).failed

    @sync_to_async
    def summary_carries_it():
        campaign = Campaign.objects.get(pk=outcome.campaign_id)
        recall = Node.objects.get(pk=outcome.recall_node_id)
        path = lineage.path_at(campaign.pk, recall.branch_id, recall.depth)
        # Through the recall turn's head: it covers more than any checkpoint compaction wrote, so it is the active one.
        checkpoints.write(path, recall.depth - 2, "Mara hid an amber sundial in a teapot at the tavern.", "")

    await summary_carries_it()
    assert "summary" in (await isolation_at(outcome.campaign_id, outcome.recall_node_id)).failed


async def test_the_diagnosis_names_the_first_stage_that_failed(owner):
    # A pin and top_k 1: the pinned memory takes the only place, so F is kept but never ranked in.
    crowded = Scenario("crowded_out", turns=16, top_k=1, pin_first_other=True)
    outcome = await scenarios.run(crowded, owner)  # short: the plant is still in its history, which is no matter here
    assert outcome.verdict == "retained_but_not_ranked", outcome.diagnosis["stages"]["ranked"]
    assert outcome.diagnosis["stages"]["ranked"]["rank"] == 2

    @sync_to_async
    def diagnosed(fact=F, forget=False):
        campaign = Campaign.objects.get(pk=outcome.campaign_id)
        if forget:
            memory = Memory.objects.get(pk=outcome.diagnosis["stages"]["created"]["memory_id"])
            bank.set_flags(memory, forgotten=True)
        return diagnose(campaign, fact, outcome.recall_node_id)

    never_planted = await diagnosed(G)
    assert never_planted.verdict == "not_created" and never_planted.plant_depth is None
    evicted = await diagnosed(forget=True)
    assert evicted.verdict == "created_but_evicted"
    assert evicted.stages["retained"]["forgotten"] and evicted.to_json()["verdict"] == "created_but_evicted"


async def test_a_memory_that_contradicts_state_loses_and_changes_nothing(campaign, owner, narrator_server):
    # Seed 004 §J: the state says the lamp is lit, a pinned memory says it never was.
    @sync_to_async
    def conflict():
        story_state.correct(campaign, owner, {"type": "add_fact", "subject": "", "object": "",
                                              "value": "The tavern lamp is lit."})
        memory = bank.add_by_hand(campaign, "The tavern lamp was never lit that night.")
        bank.set_flags(memory, pinned=True)
        fresh = Campaign.objects.get(pk=campaign.pk)
        return memory, story_state.state_at(lineage.path_of(fresh), fresh).slots

    @sync_to_async
    def after(node_id):
        node = Node.objects.get(pk=node_id)
        path = lineage.path_at(campaign.pk, node.branch_id, node.depth)
        return story_state.state_at(path, campaign).slots, node.snapshot.report

    memory, before = await conflict()

    async def relay(_):
        pass

    result = await turns.play_turn(campaign.pk, Action("do", "I look at the lamp."), relay)
    await result.post_turn
    state, report = await after(result.node_id)
    # Nothing but story time moved (the turn's round).
    assert {slot: record.value for slot, record in state.items() if slot != "clock"} == \
        {slot: record.value for slot, record in before.items()}
    keys = [section["key"] for section in report["sections"]]
    memories = report["sections"][keys.index("memories")]
    assert memories["text"].startswith(memory_section.HEADER) and memory.text in memories["text"]
    assert "The tavern lamp is lit." in report["sections"][keys.index("state")]["text"]
    assert keys.index("memories") < keys.index("state")  # state is read last and settles the conflict


async def test_the_diagnosis_refuses_a_node_without_a_stored_prompt(campaign):
    @sync_to_async
    def diagnose_the_opening():
        opening = Node.objects.get(campaign=campaign, depth=0)
        return diagnose(campaign, F, opening.pk)

    with pytest.raises(ValueError, match="pass the recall turn's reply"):
        await diagnose_the_opening()
