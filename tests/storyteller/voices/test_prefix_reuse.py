"""The 200-turn prefix-reuse gate with the game master's layout (issue 15 point 7; seed 002 WP4 "Benchmarks").

The bench's story, laid out and committed by ``voices.gm``'s own functions
(``manage.py bench --only voices``): token shares, not timings, so the figure
is the same on every machine and a layout that caches worse fails here.
"""

import pytest

from storyteller.bench import checkpoint as bench

pytestmark = pytest.mark.django_db


def test_a_game_masters_prompts_reuse_at_least_96_percent_turn_to_turn_as_the_narrators_do():
    narrator = bench.measure_prefix_reuse(bench.PREFIX_REUSE_TURNS)
    game_master = bench.measure_prefix_reuse(bench.PREFIX_REUSE_TURNS, layout="game master")
    assert narrator["reused_share_median"] >= 0.96
    assert game_master["reused_share_median"] >= 0.96, game_master["target"]
    assert game_master["turn_to_turn_median"] >= 0.96, game_master["target"]
    assert game_master["breaks"] == game_master["rotations"], "no cache break but the summary's"
