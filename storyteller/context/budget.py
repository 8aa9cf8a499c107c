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
            "narrator rules, always-included knowledge files or your input."
        )


@dataclass(frozen=True)
class Unit:
    """One whole turn of history (or the opening): never split, never reordered.

    ``rows`` are the rows it was grouped from, oldest first, carried along so
    the builder needs no second query for the text.
    """

    depths: tuple[int, ...]
    tokens: int
    rows: tuple = ()


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
    """Return whole turns, newest first, up to the first one that does not fit.

    Stops there rather than skipping it, so the history the narrator sees is
    one unbroken stretch ending now; and stops *reading* there, so a long
    story costs no more to build than a short one.
    """
    kept = []
    spent = 0
    for unit in units_newest_first:
        if spent + unit.tokens > allowance:
            break
        kept.append(unit)
        spent += unit.tokens
    return kept


def group_turns(rows_newest_first):
    """Yield whole-turn units from rows ``(depth, tokens, ...)``, newest first.

    A reply (even depth) joins the player action just before it; the opening
    (depth 0) stands alone.
    """
    pending = []
    for row in rows_newest_first:
        pending.append(row)
        if row[0] % 2 == 1 or row[0] == 0:
            yield _unit(pending)
            pending = []
    if pending:
        yield _unit(pending)


def _unit(rows_newest_first):
    rows = tuple(reversed(rows_newest_first))
    return Unit(tuple(row[0] for row in rows), sum(row[1] + MESSAGE_OVERHEAD for row in rows), rows)
