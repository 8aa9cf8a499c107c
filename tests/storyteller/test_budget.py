"""The pure budgeting rules: reserve first, protected next, whole turns newest first."""

import pytest

from storyteller.context import budget
from storyteller.context.budget import ContextOverflow, Unit


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


def test_whole_turns_are_kept_newest_first_and_selection_stops_at_the_first_misfit():
    units = [Unit((5, 6), 50), Unit((3, 4), 200), Unit((1, 2), 10), Unit((0,), 5)]
    remaining = iter(units)
    kept = budget.select_history(remaining, 100)
    # The small older turn is not used to fill the gap: history stays one unbroken stretch.
    assert kept == [units[0]]
    # Nothing older than the first misfit is even read.
    assert list(remaining) == units[2:]


def test_everything_fits_when_the_allowance_is_large():
    units = [Unit((1, 2), 10), Unit((0,), 5)]
    assert budget.select_history(units, 15) == units


def test_rows_group_into_turns_of_action_and_reply_with_the_opening_alone():
    rows = [(4, 10), (3, 5), (2, 7), (1, 3), (0, 20)]
    units = list(budget.group_turns(rows))
    overhead = budget.MESSAGE_OVERHEAD
    assert [u.depths for u in units] == [(3, 4), (1, 2), (0,)]
    assert units[0].tokens == 15 + 2 * overhead
    assert units[2].tokens == 20 + overhead
