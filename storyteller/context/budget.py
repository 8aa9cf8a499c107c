"""Pure budgeting: how many tokens are left for history, and which whole turns fit.

No database, no model: plain numbers in, plain numbers out, so every rule here
is tested directly (tests/storyteller/test_budget.py).
"""

from dataclasses import dataclass

# Covers the separators added after budgeting and the drift between our
# tokenizer and the serving model's (seed 000 §32): fixed, because what it
# absorbs does not grow with the window.
REPLY_MARGIN = 64

# Role markers and separators a chat template adds around each message
# (ChatML uses <|im_start|>role\n ... <|im_end|>\n: 4 tokens with cl100k).
MESSAGE_OVERHEAD = 4


class ContextOverflow(Exception):
    """The protected part of the prompt cannot fit; the turn fails instead of sending."""

    def __init__(self, needed, available, budget, reserve):
        self.needed = needed
        self.available = available
        super().__init__(
            f"The protected context needs {needed:,} tokens but the budget leaves {available:,} "
            f"({budget:,} context_token_budget minus {reserve:,} reserved for the reply). "
            "Raise context_token_budget, lower max_output_tokens, or shorten the canon rules, "
            "narrator rules or your input."
        )


@dataclass(frozen=True)
class Unit:
    """One whole turn of history (or the opening): never split, never reordered."""

    depths: tuple[int, ...]
    tokens: int


def reply_reserve(max_output_tokens):
    return max_output_tokens + REPLY_MARGIN


def history_allowance(budget, max_output_tokens, protected_tokens):
    """Return the tokens left for history, or raise ContextOverflow when protected sections do not fit."""
    reserve = reply_reserve(max_output_tokens)
    available = budget - reserve
    if protected_tokens > available:
        raise ContextOverflow(protected_tokens, max(available, 0), budget, reserve)
    return available - protected_tokens


def select_history(units_newest_first, allowance):
    """Keep whole turns, newest first, until the next older one does not fit.

    Stops at the first turn that does not fit rather than skipping it, so the
    history the narrator sees is always one unbroken stretch ending now.
    Return ``(kept, dropped)``, both newest first.
    """
    kept = []
    spent = 0
    units = list(units_newest_first)
    for index, unit in enumerate(units):
        if spent + unit.tokens > allowance:
            return kept, units[index:]
        kept.append(unit)
        spent += unit.tokens
    return kept, []


def group_turns(rows_newest_first):
    """Group ``(depth, tokens)`` rows, newest first, into whole-turn units.

    A reply (even depth) joins the player action just before it; the opening
    (depth 0) stands alone.
    """
    units = []
    pending = []
    for depth, tokens in rows_newest_first:
        pending.append((depth, tokens))
        if depth % 2 == 1 or depth == 0:
            depths = tuple(d for d, _ in reversed(pending))
            units.append(Unit(depths, sum(t + MESSAGE_OVERHEAD for _, t in pending)))
            pending = []
    if pending:
        depths = tuple(d for d, _ in reversed(pending))
        units.append(Unit(depths, sum(t + MESSAGE_OVERHEAD for _, t in pending)))
    return units
