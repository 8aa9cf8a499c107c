"""Pure budgeting: how many tokens are left for the story, and when and where to compact it.

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


def reply_reserve(max_output_tokens):
    return max_output_tokens + REPLY_MARGIN


def history_allowance(budget, max_output_tokens, protected_tokens):
    """Return the tokens left for history, or raise ContextOverflow when protected sections do not fit."""
    reserve = reply_reserve(max_output_tokens)
    available = budget - reserve
    if protected_tokens > available:
        raise ContextOverflow(protected_tokens, max(available, 0), budget, reserve)
    return available - protected_tokens


# Compaction (seed 001 "Prompt budget"): the branch context — the checkpoint
# summary plus the verbatim history — may fill HIGH_WATERMARK of what the
# prompt leaves it; past that the turn compacts first, back to LOW_WATERMARK,
# so a compaction buys many turns of growth before the next (and the next
# cache break). The summary it writes may take SUMMARY_SHARE of the same room.
HIGH_WATERMARK = 0.70
LOW_WATERMARK = 0.45
SUMMARY_SHARE = 0.20
# The post-turn worker compacts ahead of need from here, so most turns never wait for a summary.
EARLY_WATERMARK = 0.60


@dataclass(frozen=True)
class Compaction:
    """What to summarise: ``path`` from the opening through ``through``, continuing the summary that ends at
    ``previous_end`` (-1: none), in at most ``summary_budget`` tokens, bound to the stable prefix ``prefix_hash``."""

    path: object
    through: int
    summary_budget: int
    prefix_hash: str
    previous_end: int = -1


class NeedsCompaction(ContextOverflow):
    """The story's summary and verbatim history passed the watermark: carry out ``plan`` first, then build again."""

    def __init__(self, plan, *, used, room, mark=HIGH_WATERMARK):
        self.plan = plan
        self.needed, self.available = used, room
        Exception.__init__(
            self,
            f"The story's summary and recent passages take {used:,} of the {room:,} tokens the prompt leaves for "
            f"the story (more than {mark:.0%}), so depths 0–{plan.through} must be summarised before this "
            "turn is sent.",
        )


class HistoryEntryTooLarge(ContextOverflow):
    """The newest passage alone does not fit: it is never cut, so the turn fails instead."""

    def __init__(self, *, depth, needed, room):
        self.depth = depth
        self.needed, self.available = needed, room
        Exception.__init__(
            self,
            f"The newest passage of the story (depth {depth}) needs {needed:,} tokens with its summary, but the "
            f"prompt leaves only {room:,} for the story. Raise context_token_budget, lower max_output_tokens, "
            "or shorten the canon rules, always-included knowledge files or your input.",
        )


def needs_compaction(used, room, mark=HIGH_WATERMARK):
    """Return whether ``used`` tokens of branch context pass ``mark`` of its ``room``."""
    return used > mark * room


def watermarks(room, headroom=0, high=HIGH_WATERMARK):
    """Return (the share of ``room`` the branch context may fill before it compacts, the share it compacts back
    to) when the prompt must also keep ``headroom`` tokens free: what a game master's turn adds to it beyond the
    reply's reserve (its rules, a round's request or notes, a step's longer answer).

    The room the high watermark leaves free takes the headroom first, so the
    story keeps its whole room while the headroom fits there; past it both
    marks come down by what is missing, so a compaction still frees as much.
    With no headroom they are the marks every narrator's prompt has.
    """
    if not headroom:
        return high, LOW_WATERMARK
    fits = (room - headroom) / room if room > 0 else 0.0
    return min(high, fits), max(0.0, LOW_WATERMARK - max(0.0, HIGH_WATERMARK - fits))


def summary_budget(room, ceiling):
    """Return the most tokens a new summary may take out of ``room`` (never more than ``ceiling``)."""
    return max(0, min(ceiling, int(SUMMARY_SHARE * room)))


def compaction_point(rows, head_depth, head_through, target):
    """Return the depth to summarise through so the verbatim rest costs at most ``target``, or None.

    ``rows`` are ``(depth, tokens_through)`` of the uncovered nodes before the
    newest, oldest first. The newest node always stays verbatim; when even it
    and its action exceed ``target`` only it stays. A point inside a turn moves
    to the turn's end, so the verbatim history starts with a player action.
    None means there is nothing left to cover.
    """
    rows = list(rows)
    if not rows:
        return None
    point = rows[-1][0]
    for depth, through in rows:
        if head_through - through + (head_depth - depth) * MESSAGE_OVERHEAD <= target:
            point = depth
            break
    if point % 2 == 1 and point + 1 < head_depth:
        point += 1
    return point
