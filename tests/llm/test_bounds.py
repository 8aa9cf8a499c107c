"""Bounded JSON schemas: every answer a bounded schema allows closes within a known length."""

import json

import pytest

from storyteller.llm import bounds, builtin
from storyteller.steps import compaction, memories, recorder

EVENTS = {
    "type": "object",
    "properties": {
        "events": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "type": {"enum": ["introduce", "relationship"]},
                    "subject": {"type": "string"},
                    "value": {"type": "string", "maxLength": 40},
                    "secret": {"type": "boolean"},
                    "nickname": {"type": ["string", "null"]},
                    "count": {"type": "integer"},
                },
            },
        },
    },
}


def fullest(schema):
    """Return the longest value ``schema`` allows: every array full, every string at its maxLength."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return max(schema["enum"], key=lambda value: len(json.dumps(value)))
    if "anyOf" in schema:
        return max((fullest(option) for option in schema["anyOf"]), key=lambda value: len(written(value)))
    kind = schema.get("type")
    kind = [each for each in kind if each != "null"][0] if isinstance(kind, list) else kind
    if kind == "object":
        return {name: fullest(sub) for name, sub in schema["properties"].items()}
    if kind == "array":
        return [fullest(schema["items"]) for _ in range(schema["maxItems"])]
    return {"string": "x" * schema.get("maxLength", 0), "boolean": False, "integer": -10 ** 15,
            "number": -10 ** 15 + 0.25}[kind]


def written(value):
    """Return ``value`` as a grammar lets a model write it: a space after every token."""
    return json.dumps(value, separators=(" , ", " : ")).replace("{", "{ ").replace("[", "[ ")


def test_bound_gives_every_array_and_free_string_a_bound_and_keeps_tighter_ones():
    bounded = bounds.bound(EVENTS, max_items=5, max_length=100)
    events = bounded["properties"]["events"]
    item = events["items"]["properties"]
    assert events["maxItems"] == 5
    assert item["subject"]["maxLength"] == 100 and item["value"]["maxLength"] == 40
    assert "maxLength" not in item["type"], "an enum is bounded by its values"
    assert item["nickname"]["maxLength"] == 100, "a string among other types is bounded too"
    assert "maxItems" not in EVENTS["properties"]["events"], "the schema given is not changed"


def test_longest_is_never_shorter_than_the_fullest_answer_and_none_when_unbounded():
    assert bounds.longest(EVENTS) is None
    bounded = bounds.bound(EVENTS, max_items=3, max_length=25)
    assert bounds.longest(bounded) >= len(written(fullest(bounded)))
    assert bounds.longest(bounds.bound(EVENTS, max_length=25)) is None, "an array with no maxItems is unbounded"


@pytest.mark.parametrize("chars", [200, 480, 1000, 2400, 5000])
def test_fit_bounds_any_schema_within_the_characters_given(chars):
    for schema in (EVENTS, recorder.SCHEMA, memories.SCHEMA, compaction.SCHEMA):
        fitted = bounds.fit(schema, chars)
        if fitted is None:
            # Only a schema whose smallest full answer is longer: one recorder event carries every field of its type.
            assert schema is recorder.SCHEMA and chars < 2400
            continue
        assert bounds.longest(fitted) <= chars
        assert len(written(fullest(fitted))) <= chars


def test_fit_shortens_lists_before_it_cuts_strings_below_a_sentence():
    fitted = bounds.fit(bounds.bound(EVENTS, max_items=10, max_length=160), 2400)
    events = fitted["properties"]["events"]
    assert 1 < events["maxItems"] < 10
    assert events["items"]["properties"]["subject"]["maxLength"] >= bounds.SENTENCE, "lists went first"


def test_fit_says_none_when_nothing_can_fit():
    assert bounds.fit({"type": "object", "properties": {"a": {"enum": ["a" * 50]}}}, 20) is None


def test_the_recorders_longest_answer_closes_within_its_token_limit():
    # The schema is bounded everywhere; the built-in narrator, whose grammar would let it write every field out,
    # fits it to the recorder's limit at three characters a token (JSON of English prose: 3.1-3.2 with SmolLM2's
    # tokenizer), so even its fullest answer closes. A later change to the schema must keep that possible.
    assert bounds.longest(recorder.SCHEMA) is not None, "every array and string of the recorder's schema is bounded"
    fitted = bounds.fit(bounds.bound(recorder.SCHEMA, max_items=builtin.MAX_ITEMS),
                        recorder.MAX_TOKENS * builtin.CHARS_PER_TOKEN)
    assert fitted is not None and bounds.longest(fitted) <= recorder.MAX_TOKENS * 3
