"""Hostile imports cost a bounded amount and freeze nobody else (issue 10, point 2), measured on the running app.

Each upload runs against the real app under Daphne while another person
plays over the real websocket; the app's resident memory and the other
person's turn latency are measured while it runs.
"""

import pytest

from storyteller.diagnostics import load
from tests.fake_ollama import FakeModelServer

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def measured():
    with FakeModelServer() as server, load.LiveApp(server) as app:
        idle, outcomes = load.run(app, load.hostile_uploads(app))
    return idle, {outcome.name: outcome for outcome in outcomes}


EXPECTED = {
    "zip bomb (1 MB, inflates to 256 MiB)": (400, "unpacks to more than"),
    "zip header lying about its size": (400, "larger than its header says"),
    "50 MiB padded bundle": (302, ""),
    "JSON nested 100,000 deep": (400, "nested more than"),
    "a 10,000-digit number": (400, "digits long"),
    "1 MiB knowledge file, no paragraph breaks": (200, "Imported notes.txt"),
}


@pytest.mark.parametrize("name", EXPECTED)
def test_a_hostile_upload_is_answered_in_words_within_bounded_memory_while_another_person_plays(measured, name):
    idle, outcomes = measured
    outcome = outcomes[name]
    status, words = EXPECTED[name]
    assert outcome.status == status, outcome.answer[-2000:]
    assert words in outcome.answer
    assert outcome.peak_above_idle < 200 * MiB, outcome.row()
    # Idle, a turn against the fake server takes tens of milliseconds; an import on the shared database thread
    # held every turn for its whole length (16-60 s).
    assert max(outcome.turns) < max(3.0, 10 * max(idle)), outcome.row()


def test_the_measured_figures(measured):
    """Not an assertion: the figures issue 10 asks for, printed with -s (docs/performance.md has a run)."""
    idle, outcomes = measured
    print(f"\nidle turn ms: {[round(t * 1000) for t in idle]}")
    for outcome in outcomes.values():
        print(outcome.row())
