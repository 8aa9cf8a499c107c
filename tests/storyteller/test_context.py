"""The context builder: order, reserve, overflow, whole turns, report totals, lineage."""

import pytest

from campaigns import lineage, story
from campaigns.models import CanonRule
from storyteller import context, tokens
from storyteller.context import Action, ContextOverflow, budget
from tests.campaigns.test_lineage import act
from tests.storyteller.test_context_checkpoints import build_compacting


def build(campaign, action=None):
    return context.build(campaign, lineage.path_of(campaign), action or Action(mode="do", text="look around"))


def prompt_text(ctx):
    return "\n".join(message["content"] for message in ctx.messages)


def test_stable_prefix_comes_first_history_next_and_the_input_last(campaign):
    act(campaign, "open the gate", "The gate creaks open.")
    ctx = build(campaign, Action(mode="say", text="Hello?", direction="keep it eerie"))
    roles = [m["role"] for m in ctx.messages]
    assert roles == ["system", "assistant", "user", "assistant", "user"]
    system = ctx.messages[0]["content"]
    assert system.index("narrator of an interactive story") < system.index("Title: The Silver Key")
    assert system.index("Title: The Silver Key") < system.index("Magic cannot resurrect the dead.")
    assert ctx.messages[1]["content"] == campaign.opening
    assert ctx.messages[3]["content"] == "The gate creaks open."
    last = ctx.messages[-1]["content"]
    assert last.index("keep it eerie") < last.index('says: "Hello?"')
    assert [s["key"] for s in ctx.report["sections"]] == [
        "narrator_rules", "campaign_profile", "canon", "history", "direction", "player_input",
    ]
    assert [s["zone"] for s in ctx.report["sections"]] == [
        "stable_prefix", "stable_prefix", "stable_prefix", "branch_context", "dynamic_tail", "dynamic_tail",
    ]


def test_the_pretrained_knowledge_rule_is_always_in_the_system_block(campaign):
    assert "Pretrained knowledge may help with language" in build(campaign).messages[0]["content"]


def test_canon_is_labelled_level_one_and_disabled_rules_are_left_out(campaign):
    CanonRule.objects.create(campaign=campaign, text="The moon is green.", enabled=False)
    ctx = build(campaign)
    canon = next(s for s in ctx.report["sections"] if s["key"] == "canon")
    assert canon["authority"] == "Level 1 canon"
    assert "Magic cannot resurrect the dead." in canon["text"]
    assert "green" not in prompt_text(ctx)


def test_the_reply_reserve_is_never_spent_on_history(campaign):
    for turn in range(30):
        act(campaign, f"walk further {turn}", "You walk on through the long wet grass. " * 20)
    ctx = build_compacting(campaign)
    report = ctx.report["budget"]
    assert report["reply_reserve"] == campaign.max_output_tokens + 64
    assert report["prompt_tokens"] + report["reply_reserve"] <= campaign.context_token_budget
    assert ctx.report["checkpoint"], "a long story is summarised, not cut, in this small budget"


def test_history_keeps_whole_turns_newest_first_without_gaps(campaign):
    for turn in range(30):
        act(campaign, f"walk further {turn}", f"Reply number {turn}. " + "Grass and rain. " * 30)
    ctx = build_compacting(campaign)
    history = [m["content"] for m in ctx.messages[2:-1]]
    assert history[0].startswith("The player's character acts: walk further"), "a kept turn starts with its action"
    assert history[-1].startswith("Reply number 29.")
    numbers = [int(m.split()[2].rstrip(".")) for m in history if m.startswith("Reply number")]
    assert numbers == list(range(numbers[0], 30))


def test_report_totals_add_up_and_match_a_recount_of_the_messages(campaign):
    act(campaign, "open the gate", "The gate creaks open.")
    ctx = build(campaign, Action(mode="do", text="knock", direction="be brief"))
    report = ctx.report
    history = next(s for s in report["sections"] if s["key"] == "history")
    assert report["budget"]["prompt_tokens"] == report["budget"]["protected_tokens"] + history["tokens"]
    recount = sum(tokens.count(m["content"]) + budget.MESSAGE_OVERHEAD for m in ctx.messages)
    assert report["budget"]["prompt_tokens"] == recount
    assert report["branch"] == campaign.head_branch_id and report["head_depth"] == campaign.head_depth


def test_overflow_names_both_figures_and_what_to_change(campaign):
    campaign.context_token_budget = 600
    campaign.max_output_tokens = 200
    with pytest.raises(ContextOverflow) as caught:
        build(campaign, Action(mode="do", text="shout " * 400))
    message = str(caught.value)
    assert "needs" in message and "leaves 336" in message and "context_token_budget" in message


def test_abandoned_text_never_reaches_a_later_prompt(campaign):
    act(campaign, "open the gate", "The gate creaks open.")
    act(campaign, "read the forbidden grimoire", "ABANDONED-CANARY whispers from the pages.")
    story.undo(campaign)
    act(campaign, "walk to the well", "The well is dry.")
    assert "ABANDONED-CANARY" not in prompt_text(build(campaign))
    assert "grimoire" not in prompt_text(build(campaign))
    # Returning to that line makes it eligible again.
    story.switch_branch(campaign, campaign.head_branch.parent)
    assert "ABANDONED-CANARY" in prompt_text(build(campaign))


def test_continue_mode_needs_no_text(campaign):
    ctx = build(campaign, Action(mode="continue"))
    assert ctx.messages[-1]["content"] == "The player asks you to continue the story."


def test_nothing_of_the_story_is_reported_dropped_it_is_summarised(campaign):
    for turn in range(30):
        act(campaign, f"walk further {turn}", "You walk on through the long wet grass. " * 20)
    ctx = build_compacting(campaign)
    history = next(s for s in ctx.report["sections"] if s["key"] == "history")
    start, end = ctx.report["history"]["covered"]
    assert (start, end + 1 + len(history["components"])) == (0, 61)
    assert not [d for d in ctx.report["dropped"] if d["key"] == "history"]


def test_a_game_masters_headroom_keeps_the_story_as_long_while_it_fits_above_the_high_watermark(campaign):
    from storyteller.context import NeedsCompaction

    def with_headroom(headroom):
        return context.build(campaign, lineage.path_of(campaign), Action(mode="do", text="look around"),
                             headroom=headroom)

    plain = build(campaign)
    spent = plain.report["budget"]
    room = spent["branch_allowance"]
    fits = int((1 - budget.HIGH_WATERMARK) * room)
    kept = with_headroom(fits)
    assert kept.messages == plain.messages, "a headroom that fits above the high watermark changes nothing sent"
    assert kept.report["budget"]["game_master_headroom"] == fits
    assert kept.report["budget"]["unused"] == spent["unused"] - fits
    assert kept.report["budget"]["high_watermark"] == spent["high_watermark"]
    # Past it, the story compacts sooner: by what the headroom needs beyond the room the watermark leaves.
    half = with_headroom(room // 2).report["budget"]
    assert half["high_watermark"] == int((room - room // 2) / room * room)
    turn = 0
    while build(campaign).report["budget"]["branch_tokens"] <= half["high_watermark"]:
        act(campaign, f"walk further {turn}", "You walk on through the long wet grass. " * 6)
        turn += 1
    assert build(campaign).report["checkpoint"] is None, "the narrator's prompt needs no summary yet"
    with pytest.raises(NeedsCompaction):
        with_headroom(room // 2)
    with pytest.raises(ContextOverflow, match="context_token_budget"):
        with_headroom(room + 1)
