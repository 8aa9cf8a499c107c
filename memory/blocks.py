"""Which stretches of the story get a memory, and what the summariser is shown of one (seed 000 §15, seed 004 §E).

A memory is written from one block of MEMORY_INTERVAL story actions (depths
``[k*6, k*6+5]``: the opening, then player actions and replies alike). Blocks
are cut along the line being written, so a line that diverged has blocks of its
own, and a block is written only once a settled action lies past it.
"""

from storyteller import tokens

MEMORY_INTERVAL = 6
# The first memories wait for two blocks: a young story is wholly in the prompt anyway.
MEMORY_START = 12
# One action past the block, so retrying the newest reply never rewrites a remembered stretch.
SETTLE_SLACK = 1
MAX_MEMORIES_PER_RUN = 5

MEMORY_EXCERPT_TOKENS = 2000
EXCERPT_OMISSION_MARKER = "[… the middle of this stretch of story is left out here …]"
_JOIN = "\n\n"


def due_blocks(head_depth, cursor):
    """Return the ``(start, end)`` depth ranges due for a memory on a line ending at ``head_depth``.

    ``cursor`` is the first depth no memory on this line covers yet. At most
    MAX_MEMORIES_PER_RUN blocks, oldest first; the rest wait for the next run.
    """
    if head_depth + 1 < MEMORY_START:
        return []
    blocks = []
    start = cursor - cursor % MEMORY_INTERVAL
    while len(blocks) < MAX_MEMORIES_PER_RUN:
        end = start + MEMORY_INTERVAL - 1
        if end + SETTLE_SLACK > head_depth:
            break
        blocks.append((start, end))
        start += MEMORY_INTERVAL
    return blocks


def excerpt(texts, budget=MEMORY_EXCERPT_TOKENS):
    """Return the block's texts joined by blank lines, within ``budget`` tokens.

    A block that fits is sent whole. A longer one is sent as its opening and
    its end with EXCERPT_OMISSION_MARKER between them: the marker and its blank
    lines are paid for first, the rest halved with the odd token to the end
    (992 + 993 + 15 = 2,000), so a fact early in the block reaches the
    summariser (seed 004 §E). The rejoined text is measured and the opening
    gives up tokens until the whole fits.
    """
    whole = _JOIN.join(text.strip() for text in texts if text.strip())
    if tokens.count(whole) <= budget:
        return whole
    separator = f"{_JOIN}{EXCERPT_OMISSION_MARKER}{_JOIN}"
    rest = budget - tokens.count(separator)
    head_budget, tail_budget = rest // 2, rest - rest // 2
    tail = tokens.cut_end(whole, tail_budget)
    while head_budget > 0:
        joined = tokens.cut(whole, head_budget) + separator + tail
        if tokens.count(joined) <= budget:
            return joined
        head_budget -= 1
    return separator.lstrip() + tail


def strip_marker(text):
    """Return ``text`` without the omission marker a model may have repeated: the marker is never stored."""
    return " ".join(text.replace(EXCERPT_OMISSION_MARKER, " ").split())
