"""Which blocks get a memory, and what the summariser is shown of a long one (seed 000 §15, seed 004 §E)."""

from memory import blocks
from storyteller import tokens

FACT = "Mara slipped the amber sundial inside the cracked teapot on the tavern's top shelf."


def long_block(total=2079, fact_at=1):
    """Return six texts joined to exactly ``total`` tokens, with FACT early (in text ``fact_at``)."""
    filler = "The travellers spent another slow hour at the ferry landing while the river ran grey. "
    texts = [(filler * 14).strip() for _ in range(6)]
    texts[fact_at] = FACT + " " + texts[fact_at]
    while tokens.count("\n\n".join(texts)) > total:
        texts[-1] = texts[-1][: texts[-1].rstrip().rfind(" ")]
    while tokens.count("\n\n".join(texts)) < total:
        texts[-1] += " x"
    return texts


def test_no_memory_before_the_story_has_twelve_actions():
    assert blocks.due_blocks(10, 0) == []


def test_blocks_of_six_actions_each_wait_for_one_settled_action_past_them():
    assert blocks.due_blocks(11, 0) == [(0, 5)]  # 12 actions; 6-11 has nothing past it yet
    assert blocks.due_blocks(12, 0) == [(0, 5), (6, 11)]
    assert blocks.due_blocks(12, 6) == [(6, 11)]
    assert blocks.due_blocks(17, 12) == []


def test_at_most_five_memories_are_written_per_run():
    assert blocks.due_blocks(200, 0) == [(0, 5), (6, 11), (12, 17), (18, 23), (24, 29)]


def test_a_block_that_fits_is_sent_whole():
    texts = ["The gate creaks.", "open it", "Rain falls."]
    assert blocks.excerpt(texts) == "The gate creaks.\n\nopen it\n\nRain falls."


def test_a_fact_early_in_a_2079_token_block_reaches_the_summariser():
    texts = long_block()
    assert tokens.count("\n\n".join(texts)) == 2079
    shown = blocks.excerpt(texts)
    assert FACT in shown
    assert blocks.EXCERPT_OMISSION_MARKER in shown
    assert tokens.count(shown) <= blocks.MEMORY_EXCERPT_TOKENS
    assert shown.endswith(texts[-1][-200:])  # and the end of the block is there too


def test_the_excerpt_is_the_opening_and_the_end_992_993_and_a_15_token_marker():
    whole = "\n\n".join(long_block())
    shown = blocks.excerpt(long_block())
    head, tail = shown.split(f"\n\n{blocks.EXCERPT_OMISSION_MARKER}\n\n")
    assert tokens.count(f"\n\n{blocks.EXCERPT_OMISSION_MARKER}\n\n") == 15
    assert whole.startswith(head) and whole.endswith(tail)
    assert tokens.count(tail) == 993
    assert 990 <= tokens.count(head) <= 992  # the opening gives up tokens only if the rejoined text is over


def test_the_marker_is_never_stored():
    repeated = f"Mara hid the sundial. {blocks.EXCERPT_OMISSION_MARKER} The travellers waited."
    assert blocks.strip_marker(repeated) == "Mara hid the sundial. The travellers waited."
