"""Chunking is pure and deterministic: heading-aware, bounded, no overlap (seed 003 §76)."""

import time

import pytest

from knowledge import chunking
from storyteller import tokens
from tests.knowledge.conftest import read_fixture


def canon():
    return read_fixture("canon.md").decode()


def test_the_same_text_always_gives_the_same_passages():
    assert chunking.chunk(canon()) == chunking.chunk(canon())


def test_passages_cover_the_text_in_order_without_overlap():
    passages = chunking.chunk(canon())
    assert [p.index for p in passages] == list(range(len(passages)))
    rebuilt = "\n\n".join(p.text for p in passages)
    assert rebuilt.split() == canon().split()


def test_a_heading_closes_a_passage_only_once_it_holds_sixty_tokens():
    text = "# Book\n\n## One\n\nShort line.\n\n## Two\n\nAnother short line.\n\n## Three\n\n" + "Long words here. " * 40
    passages = chunking.chunk(text)
    first = passages[0]
    assert "## One" in first.text and "## Two" in first.text, "small sections run through their headings"
    for passage in passages[:-1]:
        assert passage.tokens >= chunking.MIN_TOKENS


def test_the_heading_trail_names_what_the_passage_text_does_not():
    passages = chunking.chunk(canon())
    mara = next(p for p in passages if "### Captain Vale" in p.text or "### Mara" in p.text)
    assert mara.heading_path.startswith("Westhaven Setting Bible")
    for passage in passages:
        for heading in passage.heading_path.split(chunking.HEADING_SEPARATOR):
            if heading:
                assert f"# {heading}\n" not in passage.text


def test_no_passage_exceeds_the_ceiling_and_a_long_paragraph_splits_at_sentences():
    paragraph = " ".join(f"Sentence number {n} tells of the ferry and the river." for n in range(400))
    passages = chunking.chunk(f"# Long\n\n{paragraph}")
    assert len(passages) > 1
    assert all(p.tokens <= chunking.MAX_TOKENS for p in passages)
    assert all(p.text.rstrip().endswith(".") for p in passages)


def test_one_enormous_word_is_still_cut_under_the_ceiling():
    passages = chunking.chunk("x" * 20000)
    assert all(p.tokens <= chunking.MAX_TOKENS for p in passages)
    assert "".join(p.text for p in passages) == "x" * 20000


def test_remote_images_become_placeholders_and_everything_else_stays_text():
    text = read_fixture("hostile.md").decode()
    (passage,) = chunking.chunk(text)
    assert "https://example.com/track.png" not in passage.text and "[image]" in passage.text
    assert "<script>alert(1)</script>" in passage.text, "HTML is kept as characters, not removed or run"
    assert "[the ferry timetable](https://example.com/timetable)" in passage.text, "a link is just text"


def test_code_blocks_stay_whole_text_and_their_hashes_are_not_headings():
    text = "# Notes\n\n```\n# not a heading\nprint('hi')\n```\n\nAfter."
    (passage,) = chunking.chunk(text)
    assert "# not a heading" in passage.text and passage.heading_path == ""


def test_plain_text_files_have_no_headings():
    (passage,) = chunking.chunk("# just a line\n\nmore", markdown=False)
    assert passage.heading_path == "" and passage.text.startswith("# just a line")


def test_passage_hashes_and_token_counts_are_of_their_own_text():
    for passage in chunking.chunk(canon()):
        assert passage.tokens == tokens.count(passage.text)
        assert len(passage.content_hash) == 64


MiB = 1024 * 1024
# Inputs that made one pattern or count rescan what it had already read: each took from 40 s to hours per MiB.
PATHOLOGICAL = {
    "words, no paragraph breaks": ("lorem ipsum dolor sit amet " * 40_000)[:MiB],
    "one run of letters": "a" * MiB,
    "tiny sentences": "a. " * (MiB // 3),
    "a heading line of spaces": "# " + " " * MiB + "x",
    "image openers on one line": "![" * (MiB // 2),
    "unclosed image addresses on one line": "![a](" * (MiB // 5),
    "a line of hashes and spaces": "# " + "# " * (MiB // 2),
}


@pytest.mark.parametrize("text", PATHOLOGICAL.values(), ids=PATHOLOGICAL.keys())
def test_chunking_is_linear_on_any_megabyte(text):
    started = time.perf_counter()
    passages = chunking.chunk(text)
    seconds = time.perf_counter() - started
    assert seconds < 15, f"{seconds:.1f} s for 1 MiB"
    assert all(p.tokens <= chunking.MAX_TOKENS for p in passages)
    assert "".join(text.split()) == "".join("".join(p.text for p in passages).split()) or "![" in text


def test_an_image_scan_finds_what_the_pattern_found():
    text = "![a](x) ![](y) ![b](z\n) ![c] (d) ![![e](f)](g) ![h](i"
    # What the pattern !\[([^\]\n]*)\]\([^)\n]*\) replaced, case by case.
    assert chunking.inert(text) == "[image: a] [image] ![b](z\n) ![c] (d) [image: ![e]](g) ![h](i"


def test_a_heading_keeps_its_title_without_closing_hashes_and_a_long_line_is_text():
    (passage,) = chunking.chunk("## The North Gate ##  \n\nIt is open.\n\n# " + "long " * 100 + "\n\nmore")
    assert passage.heading_path == "" and passage.text.startswith("## The North Gate ##")
    passages = chunking.chunk("# Book\n\n## The North Gate ##\n\n" + "Words here. " * 700 + "\n\n## Next\n\nMore.")
    assert "Book › The North Gate" in [p.heading_path for p in passages]
