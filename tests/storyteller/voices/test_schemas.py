"""Every voice's schema is bounded, so the built-in narrator's grammar holds it and every answer closes (D3)."""

import pytest

from storyteller.llm import bounds, gbnf
from storyteller.llm.builtin import CHARS_PER_TOKEN
from storyteller.llm.fake_server import example_for
from storyteller.llm.schemas import problems
from storyteller.voices import author, schemas


@pytest.mark.parametrize("name", list(schemas.ALL))
def test_every_voice_schema_is_bounded_compiles_to_a_grammar_and_fits_a_step(name):
    schema = schemas.ALL[name]
    assert bounds.longest(schema) is not None, f"{name} has an unbounded string or array"
    assert gbnf.grammar(schema)
    assert bounds.fit(schema, author.MAX_TOKENS * CHARS_PER_TOKEN) is not None
    assert problems(example_for(schema), schema) == [], "the fake server's smallest answer fits"


def test_the_game_masters_step_carries_the_seeds_parts():
    step = schemas.GM_ROUND["properties"]
    assert set(step) == {"resolve_round", "activate_characters", "expand_world", "rolls", "narrate"}
    actor = step["resolve_round"]["properties"]["actors"]["items"]["properties"]
    assert set(actor) == {"who", "moves_to", "ignore_exits", "item_changes", "variable_changes"}
    assert "forced" in actor["item_changes"]["items"]["properties"], "the game master may break a lock"
    reply = schemas.CHARACTER_REPLY["properties"]
    assert "forced" not in reply["item_changes"]["items"]["properties"], "a character may not"
    assert schemas.OFFSTAGE_REPLY["properties"]["account"]["maxLength"] == 300
