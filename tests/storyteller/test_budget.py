"""The pure budgeting rules: reserve first, protected next, compaction past the high watermark."""

import pytest

from storyteller.context import budget
from storyteller.context.budget import ContextOverflow


def test_the_reply_reserve_is_max_output_plus_64():
    assert budget.reply_reserve(400) == 464


def test_history_gets_what_is_left_after_reserve_and_protected():
    assert budget.history_allowance(4096, 400, 1000) == 4096 - 464 - 1000


def test_protected_sections_that_do_not_fit_raise_with_both_figures_and_a_remedy():
    with pytest.raises(ContextOverflow) as caught:
        budget.history_allowance(2048, 400, 1700)
    message = str(caught.value)
    assert "1,700" in message and "1,584" in message
    assert "context_token_budget" in message and "max_output_tokens" in message


def test_exactly_filling_the_window_is_allowed_and_one_more_token_is_not():
    assert budget.history_allowance(1000, 100, 836) == 0
    with pytest.raises(ContextOverflow):
        budget.history_allowance(1000, 100, 837)


def test_compaction_starts_only_past_the_high_watermark():
    assert not budget.needs_compaction(700, 1000)
    assert budget.needs_compaction(701, 1000)


def test_the_compaction_point_leaves_the_newest_turns_verbatim_within_the_target():
    overhead = budget.MESSAGE_OVERHEAD
    # Depths 0..10, 100 tokens each: tokens_through at depth d is 100 * (d + 1).
    rows = [(depth, 100 * (depth + 1)) for depth in range(10)]
    head_through = 1100
    # The rest after depth d costs 100 * (10 - d) + overhead * (10 - d): at most 420 leaves depths 7..10 (416).
    point = budget.compaction_point(rows, 10, head_through, 420)
    assert point == 6  # depth 6 is a reply: the verbatim history starts with the action at depth 7
    assert head_through - rows[point][1] + (10 - point) * overhead <= 420


def test_a_point_inside_a_turn_moves_to_the_turns_end():
    rows = [(depth, 100 * (depth + 1)) for depth in range(10)]
    assert budget.compaction_point(rows, 10, 1100, 520) == 6  # 5 would fit; its turn ends at 6


def test_the_newest_node_stays_verbatim_even_when_it_alone_exceeds_the_target():
    rows = [(depth, 100 * (depth + 1)) for depth in range(10)]
    assert budget.compaction_point(rows, 10, 1100, 10) == 9


def test_there_is_no_compaction_point_when_only_the_newest_node_is_uncovered():
    assert budget.compaction_point([], 10, 1100, 10) is None


def test_a_summary_may_take_a_fifth_of_the_room_up_to_its_ceiling():
    assert budget.summary_budget(1000, 1200) == 200
    assert budget.summary_budget(100_000, 1200) == 1200


def test_a_game_masters_headroom_comes_out_of_the_room_above_the_high_watermark_first():
    assert budget.watermarks(3000, 0) == (budget.HIGH_WATERMARK, budget.LOW_WATERMARK)
    assert budget.watermarks(3000, 900) == (budget.HIGH_WATERMARK, budget.LOW_WATERMARK), "900 fit in 30% of 3,000"
    high, low = budget.watermarks(3000, 1200)
    assert high == pytest.approx(0.6) and low == pytest.approx(0.35), "both marks come down by what did not fit"
    assert high * 3000 + 1200 == pytest.approx(3000), "at the mark the headroom still fits"
    assert budget.watermarks(3000, 1200, high=0.5) == (0.5, pytest.approx(0.35))
    assert budget.watermarks(1000, 2000) == (pytest.approx(-1.0), 0.0), "no room: every story compacts, then fails"
