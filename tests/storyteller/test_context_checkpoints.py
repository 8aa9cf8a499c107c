"""The builder with checkpoints: prompt order, the coverage invariant, the watermarks and the window's edges
(seed 001 "Prompt budget", "Prompt layout", "Failure semantics"; issue 4 item 6)."""

import pytest

from campaigns import lineage
from campaigns.models import CanonRule, Node
from memory import checkpoints
from memory.models import Checkpoint
from storyteller import context, tokens
from storyteller.context import Action, ContextOverflow, HistoryEntryTooLarge, NeedsCompaction, budget
from tests.campaigns.test_lineage import act

LOOK = Action(mode="do", text="look around")


def compact(need, text="SUMMARY: the story so far."):
    """Do what the turn does with a NeedsCompaction, with a summary written by hand."""
    return checkpoints.write(need.plan.path, need.plan.through, text, need.plan.prefix_hash, model="test")


def build(campaign, action=LOOK, **options):
    campaign.refresh_from_db()
    return context.build(campaign, lineage.path_of(campaign), action, **options)


def build_compacting(campaign, action=LOOK, text="SUMMARY: the story so far."):
    """Build as a turn does: compact when asked (at most twice), then build."""
    for _ in range(2):
        try:
            return build(campaign, action)
        except NeedsCompaction as need:
            compact(need, text)
    return build(campaign, action)


def long_story(campaign, turns=30, words=20):
    for turn in range(turns):
        act(campaign, f"walk further {turn}", f"Reply number {turn}. " + "Grass and rain. " * words)
    return campaign


def history_of(ctx):
    return next(s for s in ctx.report["sections"] if s["key"] == "history")


def branch_used(ctx):
    return ctx.report["budget"]["branch_tokens"]


def test_the_order_is_stable_prefix_then_summary_then_verbatim_history_then_the_tail(campaign):
    long_story(campaign)
    ctx = build_compacting(campaign, Action(mode="do", text="knock", direction="be brief"))
    keys = [s["key"] for s in ctx.report["sections"]]
    assert keys[:5] == ["narrator_rules", "campaign_profile", "canon", "summary", "history"]
    assert keys[-2:] == ["direction", "player_input"]
    assert [m["role"] for m in ctx.messages[:3]] == ["system", "system", "user"]
    assert ctx.messages[1]["content"].endswith("SUMMARY: the story so far.")
    assert ctx.messages[2]["content"].startswith("The player's character acts: walk further")


def test_every_node_of_the_path_is_verbatim_or_covered_by_the_checkpoint(campaign):
    long_story(campaign)
    ctx = build_compacting(campaign)
    start, end = ctx.report["history"]["covered"]
    verbatim = [c["depth"] for c in history_of(ctx)["components"]]
    assert start == 0 and verbatim == list(range(end + 1, campaign.head_depth + 1))
    assert not [d for d in ctx.report["dropped"] if d["key"] == "history"]
    every_verbatim = sum(n.tokens + budget.MESSAGE_OVERHEAD
                         for n in lineage.path_of(campaign).nodes().filter(depth__gt=end))
    assert history_of(ctx)["tokens"] == every_verbatim


def test_history_is_never_shortened_without_a_checkpoint(campaign):
    long_story(campaign)
    with pytest.raises(NeedsCompaction) as caught:
        build(campaign)
    assert "must be summarised" in str(caught.value)
    assert caught.value.plan.through % 2 == 0 and caught.value.plan.through < campaign.head_depth


def test_compaction_brings_the_story_back_below_the_low_watermark(campaign):
    long_story(campaign)
    ctx = build_compacting(campaign)
    spent = ctx.report["budget"]
    verbatim = history_of(ctx)["tokens"]
    assert verbatim <= budget.LOW_WATERMARK * spent["branch_allowance"] - budget.summary_budget(
        spent["branch_allowance"], checkpoints.MAX_SUMMARY_TOKENS)
    assert spent["branch_tokens"] <= spent["high_watermark"]


def test_report_totals_add_up_with_a_summary_and_match_a_recount_of_the_messages(campaign):
    long_story(campaign)
    ctx = build_compacting(campaign)
    report = ctx.report["budget"]
    recount = sum(tokens.count(m["content"]) + budget.MESSAGE_OVERHEAD for m in ctx.messages)
    assert report["prompt_tokens"] == recount
    assert report["prompt_tokens"] + report["reply_reserve"] <= campaign.context_token_budget


def _story_at_the_mark(campaign, extra):
    """Play until the branch context is within a turn of the high watermark, then return the room and the spend."""
    act(campaign, "open the gate", "The gate creaks open.")
    ctx = build(campaign)
    room = ctx.report["budget"]["branch_allowance"]
    used = branch_used(ctx)
    # One turn whose reply brings the branch context to exactly the watermark (plus ``extra``).
    action_cost = tokens.count(context.message_for("player", "do", "wait")["content"]) + budget.MESSAGE_OVERHEAD
    target = int(budget.HIGH_WATERMARK * room) + extra - used - action_cost - budget.MESSAGE_OVERHEAD
    reply = ("rain " * target).strip()
    while tokens.count(reply) < target:
        reply += " rain"
    while tokens.count(reply) > target:
        reply = reply.rsplit(" ", 1)[0]
    assert tokens.count(reply) == target
    act(campaign, "wait", reply)
    return room


def test_at_exactly_the_high_watermark_nothing_compacts_and_one_token_more_does(campaign, owner):
    from tests.conftest import make_campaign

    room = _story_at_the_mark(campaign, 0)
    ctx = build(campaign)
    assert ctx.report["budget"]["branch_allowance"] == room
    assert branch_used(ctx) == int(budget.HIGH_WATERMARK * room)

    other = make_campaign(owner)
    CanonRule.objects.create(campaign=other, text="Magic cannot resurrect the dead.")
    _story_at_the_mark(other, 1)
    with pytest.raises(NeedsCompaction):
        build(other)


def test_a_prompt_exactly_filling_the_window_is_built_and_one_token_more_is_not(campaign):
    act(campaign, "open the gate", "The gate creaks open.")
    ctx = build(campaign)
    spent = ctx.report["budget"]
    # The window exactly: nothing left unused.
    campaign.context_token_budget -= spent["unused"]
    campaign.save()
    exact = build(campaign, compact_above=1.0)
    assert exact.report["budget"]["unused"] == 0
    assert exact.report["budget"]["prompt_tokens"] + exact.report["budget"]["reply_reserve"] == \
        campaign.context_token_budget
    campaign.context_token_budget -= 1
    campaign.save()
    with pytest.raises(ContextOverflow) as caught:
        build(campaign, compact_above=1.0)
    assert "42 of the 41 tokens" in str(caught.value)


def test_a_single_passage_too_large_for_the_budget_fails_with_its_own_error(campaign):
    act(campaign, "open the gate", "word " * 4000)
    with pytest.raises(NeedsCompaction) as caught:
        build(campaign)
    compact(caught.value)
    with pytest.raises(HistoryEntryTooLarge) as caught:
        build(campaign)
    message = str(caught.value)
    assert "newest passage" in message and "depth 2" in message and "context_token_budget" in message
    assert Node.objects.filter(campaign=campaign).count() == 3


def test_a_smaller_model_window_compacts_instead_of_dropping(campaign):
    long_story(campaign, turns=12)
    assert build(campaign).report["checkpoint"] is None  # fits the 4,096-token window whole
    campaign.context_token_budget = 2048
    campaign.save()
    with pytest.raises(NeedsCompaction):
        build(campaign)
    ctx = build_compacting(campaign)
    start, end = ctx.report["history"]["covered"]
    assert [c["depth"] for c in history_of(ctx)["components"]][0] == end + 1
    assert ctx.report["budget"]["prompt_tokens"] + ctx.report["budget"]["reply_reserve"] <= 2048


def test_a_changed_stable_prefix_rebuilds_the_checkpoint(campaign):
    long_story(campaign)
    build_compacting(campaign, text="SUMMARY: under the old canon.")
    CanonRule.objects.create(campaign=campaign, text="The river runs uphill.")
    with pytest.raises(NeedsCompaction):
        build(campaign)
    ctx = build_compacting(campaign, text="SUMMARY: under the new canon.")
    assert ctx.messages[1]["content"].endswith("under the new canon.")


def test_an_edited_covered_node_is_caught_by_the_source_hash_and_rebuilt(campaign):
    long_story(campaign)
    first = build_compacting(campaign).report["checkpoint"]
    Node.objects.filter(campaign=campaign, depth=3).update(text="a forged line")
    checkpoints.forget_checks()  # as a restart does: the application itself never edits a node
    with pytest.raises(NeedsCompaction):
        build(campaign)
    rebuilt = build_compacting(campaign, text="SUMMARY: rebuilt.").report["checkpoint"]
    assert rebuilt["id"] != first["id"]
    assert rebuilt["source_end"] == first["source_end"]
    assert Checkpoint.objects.filter(pk=first["id"]).exists()


def test_deleting_every_checkpoint_changes_no_node_and_the_next_build_asks_for_one_again(campaign):
    long_story(campaign)
    build_compacting(campaign)
    before = list(Node.objects.filter(campaign=campaign).values())
    head = (campaign.head_branch_id, campaign.head_depth)
    assert checkpoints.delete_all(campaign.pk) == 1
    campaign.refresh_from_db()
    assert list(Node.objects.filter(campaign=campaign).values()) == before
    assert (campaign.head_branch_id, campaign.head_depth) == head
    with pytest.raises(NeedsCompaction):
        build(campaign)
