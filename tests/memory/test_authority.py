"""Authority comes from the memory's own wording, never from the model (seed 000 §14)."""

import pytest

from memory import authority


@pytest.mark.parametrize("text", [
    "Aldric seemed to distrust the abbot.",
    "The letter appeared to be forged.",
    "Mara probably hid the key in the well.",
    "The stranger might have followed them from the abbey.",
    "Perhaps the bell rang for the dead.",
])
def test_hedged_wording_makes_a_memory_heuristic(text):
    assert authority.classify(text) == "heuristic"


@pytest.mark.parametrize("text", [
    "Aldric promised to return before dawn.",
    "Mara hid a letter beneath the hearthstone.",
    "The might of the old empire was carved over the gate.",
])
def test_plain_statements_are_accepted_story(text):
    assert authority.classify(text) == "accepted_story"
