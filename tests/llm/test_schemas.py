"""Checking a reply against its schema, with reasons a model can act on when asked again."""

from storyteller.llm.schemas import problems

EVENT = {"anyOf": [
    {"type": "object", "properties": {"type": {"const": "move"}, "subject": {"type": "string", "maxLength": 5}},
     "required": ["type", "subject"]},
    {"type": "object", "properties": {"type": {"const": "scene"}, "value": {"type": "string"}},
     "required": ["type", "value"]},
]}


def test_a_tagged_union_judges_a_value_by_the_shape_its_tag_names():
    assert problems({"type": "move", "subject": "Mara"}, EVENT) == []
    assert problems({"type": "move", "subject": "Aldric the Tall"}, EVENT, "events[0]") == [
        "events[0].subject is 15 characters long; at most 5 are allowed"]
    assert problems({"type": "scene"}, EVENT, "events[0]") == ['events[0] lacks "value"']


def test_an_unknown_tag_is_named_with_the_tags_allowed():
    assert problems({"type": "fly"}, EVENT, "events[0]") == ['events[0].type is "fly"; it must be one of "move", "scene"']


def test_an_untagged_union_says_no_shape_matched():
    either = {"anyOf": [{"type": "string"}, {"type": "boolean"}]}
    assert problems("yes", either) == [] and problems(True, either) == []
    assert problems(3, either, "x") == ["x matches none of the allowed shapes"]
