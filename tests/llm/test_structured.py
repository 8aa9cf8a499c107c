"""A reply the token limit cut off keeps its complete list items, and nothing half written."""

from storyteller.llm import structured

EVENT = '{"type": "item_moved", "data": {"item": "silver key", "to": "Mara", "tags": ["a", "b"]}}'
EVENTS = {"type": "object", "required": ["events"], "additionalProperties": False,
          "properties": {"events": {"type": "array", "maxItems": 40, "items": {"type": "object"}}}}
SPEECH = {"type": "object", "required": ["speech", "lore"],
          "properties": {"speech": {"type": "string"}, "lore": {"type": "string"}}}


def test_the_complete_items_before_the_cut_are_kept_and_the_half_written_one_is_not():
    cut = '{"events": [' + EVENT + ", " + EVENT.replace("Mara", "Aldric") + ', {"type": "item_moved", "data": {"it'
    assert structured.salvage(cut) == {"events": [
        {"type": "item_moved", "data": {"item": "silver key", "to": "Mara", "tags": ["a", "b"]}},
        {"type": "item_moved", "data": {"item": "silver key", "to": "Aldric", "tags": ["a", "b"]}}]}


def test_a_cut_inside_an_items_own_list_keeps_no_half_item():
    # The last closed thing is "a" inside the first event's tags: closing there would keep half an event.
    assert structured.salvage('{"events": [{"type": "x", "data": {"tags": ["a"') is None
    assert structured.salvage('{"events": [' + EVENT + ', {"type": "x", "data": {"tags": ["a"') == {
        "events": [{"type": "item_moved", "data": {"item": "silver key", "to": "Mara", "tags": ["a", "b"]}}]}


def test_a_loop_of_one_item_is_kept_once():
    cut = '{"events": [' + ", ".join([EVENT] * 12) + ", " + EVENT[:30]
    assert structured.salvage(cut) == {"events": [structured._parse(EVENT)]}


def test_brackets_and_quotes_inside_strings_do_not_count():
    cut = '{"events": [{"text": "a ] } \\" [ {"}, {"text": "b'
    assert structured.salvage(cut) == {"events": [{"text": 'a ] } " [ {'}]}


def test_nothing_to_salvage_without_a_complete_item():
    assert structured.salvage('{"events": [') is None
    assert structured.salvage('{"speech": "Not to') is None
    assert structured.salvage("The model wrote prose.") is None


def test_a_salvaged_reply_is_used_only_when_it_matches_the_schema():
    cut = '{"events": [' + EVENT + ", " + EVENT[:20]
    assert structured.read(cut, EVENTS, "length", 300) == (structured._parse('{"events": [' + EVENT + "]}"), [])
    # Without the limit's cut it is a broken reply, not a cut-off one.
    assert structured.read(cut, EVENTS, "stop", 300) == (None, ["the reply is not JSON"])
    # The later required key never came: the reply is still cut off, said so.
    value, reasons = structured.read('{"speech": "Hello", "item_changes": ["a", "b', SPEECH, "length", 300)
    assert value is None and reasons == ["the reply was cut off by the 300-token limit before its JSON closed"]
