"""Events, perceptions, beliefs and notices as typed events (issue 14 point 1), pure: the Kitchen, no database.

The Kitchen (tests/campaigns/worlds/kitchen.json): Mara in the Kitchen with
an open teapot; Edrin (the protagonist) in the Pantry next door through an
open door; Aldric in the Yard behind a locked back door.
"""

import json
from pathlib import Path

import pytest

from campaigns import worldfile
from campaigns.state import validate_batch
from campaigns.state.registry import clean
from campaigns.state.time.rulebook import now_of

KITCHEN = Path(__file__).parent / "worlds" / "kitchen.json"


def kitchen_document():
    return json.loads(KITCHEN.read_text())


def kitchen():
    checked = worldfile.check(kitchen_document(), "Edrin, a young cartographer")
    assert not checked.errors, checked.errors
    return checked.state


def ev(type, subject="", object="", value="", **extra):
    return {"type": type, "subject": subject, "object": object, "value": value, **extra}


HID = ev("event", object="hid-key", value="Mara hid the key in the teapot.",
         data={"importance": 3, "tags": ["secret", "key"], "participants": ["Mara"], "location": "Kitchen",
               "items": ["iron key", "teapot"], "gist": "Mara hid something in the kitchen."})


def apply(state, *events, source="script"):
    return validate_batch(state, [clean(e) for e in events], source)


def applied(outcome):
    assert outcome.status == "applied", outcome.reason
    return outcome


@pytest.fixture
def state():
    return kitchen()


def test_an_event_is_recorded_with_who_could_perceive_it(state):
    [outcome] = apply(state, HID)
    applied(outcome)
    record = state.get("event:hid-key")
    assert record.value == "Mara hid the key in the teapot."
    assert record.data["importance"] == 3 and record.data["tags"] == ["secret", "key"]
    assert record.data["participants"] == ["mara"] and record.data["location"] == "kitchen"
    assert record.data["items"] == ["iron-key", "teapot"]
    assert record.data["perceived_by"] == {"mara": "present", "protagonist": "nearby"}
    assert record.data["at_ms"] == now_of(state) is not None, "the story time it happened (a world file starts the clock)"
    assert "Kitchen" in record.data["keywords"] and "teapot" in record.data["keywords"]


def test_an_event_takes_the_story_clocks_time(state):
    from campaigns.state.reading import Record
    state.put(Record(None, "clock", "clock", "", "1900000000000", {"mode": "simulated"}, False, "state", 0))
    apply(state, HID)
    assert state.get("event:hid-key").data["at_ms"] == 1_900_000_000_000


def test_events_are_sealed(state):
    apply(state, HID)
    again = ev("event", object="hid-key", value="Mara hid a knife.", data={"importance": 1})
    for source in ("script", "recorder", "correction"):
        [outcome] = apply(state, again, source=source)
        assert outcome.status == "rejected"
        assert outcome.reason.startswith("events are sealed: event:hid-key is already written on this line")
    assert state.get("event:hid-key").value == "Mara hid the key in the teapot."


def test_perception_edits_and_later_perceptions_change_perceptions_only(state):
    apply(state, HID, ev("perception", "Mara", "hid-key", "I hid the key in the teapot.",
                         data={"mode": "witnessed", "accuracy": "accurate"}))
    before = state.get("event:hid-key")
    edit, later = apply(state, ev("perception_edit", "Mara", "hid-key", "I tucked the key in the teapot."),
                        ev("perception", "Aldric", "hid-key", "Mara hid a knife.",
                           data={"mode": "told", "accuracy": "wrong"}))
    applied(edit)
    applied(later)
    assert state.get("perception:hid-key:mara").value == "I tucked the key in the teapot."
    assert state.get("perception:hid-key:mara").data["accuracy"] == "accurate"
    assert state.get("perception:hid-key:aldric").data == {"mode": "told", "gist": "", "accuracy": "wrong"}
    assert state.get("event:hid-key") == before


def test_perceptions_only_for_those_present_or_one_open_exit_away(state):
    outcomes = apply(state, HID,
                     ev("perception", "Mara", "hid-key", "I hid the key in the teapot.", data={"mode": "witnessed"}),
                     ev("perception", "Edrin", "hid-key", "Someone hid something in the kitchen.",
                        data={"mode": "heard", "accuracy": "partial"}),
                     ev("perception", "Aldric", "hid-key", "Mara hid the key.", data={"mode": "witnessed"}))
    assert [o.status for o in outcomes] == ["applied", "applied", "applied", "rejected"]
    assert outcomes[3].reason.startswith("Aldric was not present or nearby when it happened at Kitchen "
                                         "(only Mara, Edrin)")
    assert "record how they learned it later as told or inferred" in outcomes[3].reason
    assert state.get("perception:hid-key:aldric") is None


def test_presence_is_judged_where_everyone_was_when_it_happened(state):
    """Aldric walking in afterwards did not witness it; being told of it is another matter."""
    apply(state, HID, ev("move", "Aldric", "Kitchen"))
    [late] = apply(state, ev("perception", "Aldric", "hid-key", "Mara hid the key.", data={"mode": "witnessed"}))
    assert late.status == "rejected" and "not present or nearby" in late.reason
    [told] = apply(state, ev("perception", "Aldric", "hid-key", "Mara hid a knife.", data={"mode": "told"}))
    applied(told)


def test_a_second_perception_of_the_same_event_is_refused(state):
    apply(state, HID, ev("perception", "Mara", "hid-key", "I hid it."))
    [again] = apply(state, ev("perception", "Mara", "hid-key", "I hid it again."))
    assert again.status == "rejected" and again.reason.endswith("use perception_edit")


def test_a_perception_of_no_event_is_refused(state):
    [outcome] = apply(state, ev("perception", "Mara", "nothing-happened", "I hid it."))
    assert outcome.reason == "no event 'nothing-happened' on this line; record the event first"


def test_evidence_must_be_the_believers_own_perceptions(state):
    apply(state, HID, ev("perception", "Mara", "hid-key", "I hid the key."),
          ev("perception", "Edrin", "hid-key", "Someone hid something.", data={"mode": "heard"}))
    own, others, missing = apply(
        state,
        ev("belief", "Edrin", "thief", "Someone in this house is hiding things.",
           data={"confidence": "likely", "supports": ["hid-key"]}),
        ev("belief", "Edrin", "mara", "Mara is hiding something.",
           data={"supports": ["perception:hid-key:mara"]}),
        ev("belief", "Aldric", "key", "The key is in the teapot.", data={"supports": ["hid-key"]}))
    applied(own)
    assert state.get("belief:protagonist:thief").data["supports"] == ["perception:hid-key:protagonist"]
    assert others.status == "rejected"
    assert others.reason == "evidence must be Edrin's own perceptions: perception:hid-key:mara is Mara's"
    assert missing.status == "rejected" and "Aldric has no perception of event 'hid-key'" in missing.reason


def test_a_belief_changes_only_through_belief_edit(state):
    apply(state, HID, ev("perception", "Edrin", "hid-key", "Someone hid something.", data={"mode": "heard"}),
          ev("belief", "Edrin", "thief", "Aldric is the thief.", data={"confidence": "likely"}))
    [again] = apply(state, ev("belief", "Edrin", "thief", "Mara is the thief."))
    assert again.reason.endswith("use belief_edit")
    [edit] = apply(state, ev("belief_edit", "Edrin", "thief", "", data={"confidence": "doubtful",
                                                                        "contradicts": ["hid-key"]}))
    applied(edit)
    record = state.get("belief:protagonist:thief")
    assert record.value == "Aldric is the thief."
    assert record.data["confidence"] == "doubtful"
    assert record.data["contradicts"] == ["perception:hid-key:protagonist"]


def test_bad_enumerations_and_too_many_tags_are_refused_naming_what_to_change(state):
    bad_mode, bad_importance, tags = apply(
        state, ev("perception", "Mara", "x", "I saw it.", data={"mode": "dreamt"}),
        ev("event", value="Something happened.", data={"importance": 9}),
        ev("event", value="Something happened.", data={"tags": [str(n) for n in range(9)]}))
    assert bad_mode.reason == "data.mode must be one of witnessed, heard, told, inferred, not 'dreamt'"
    assert bad_importance.reason == "data.importance must be a whole number from 1 to 5, not '9'"
    assert tags.reason == "9 tags; give at most 8 words to find it by"


def test_an_event_without_an_id_gets_one_from_its_words_and_two_alike_get_two(state):
    first, second = apply(state, ev("event", value="The kettle boiled."), ev("event", value="The kettle boiled."))
    applied(first)
    applied(second)
    assert state.get("event:kettle-boiled") and state.get("event:kettle-boiled-2")


def test_an_event_names_known_people_places_and_items(state):
    [outcome] = apply(state, ev("event", value="A stranger came.", data={"participants": ["Stranger"]}))
    assert outcome.reason == "unknown entity 'Stranger'; introduce it first"
    [outcome] = apply(state, ev("event", value="Something fell.", data={"items": ["Mara"]}))
    assert outcome.reason == "'Mara' is a character, not a item"


def test_a_notice_names_an_item_and_where_it_is_said(state):
    [outcome] = apply(state, ev("notice", "iron key", data={"by": "Mara", "holder": "teapot"}))
    applied(outcome)
    record = outcome.writes[0]
    assert record["data"] == {"item": "iron-key", "place": "kitchen", "by": "mara", "holder": "teapot", "to": []}
    [private] = apply(state, ev("notice", "iron key", data={"by": "Mara", "to": ["Aldric"]}))
    assert private.writes[0]["data"]["to"] == ["aldric"]


def test_minds_records_never_join_the_state_lines(state):
    from campaigns.state import selection
    apply(state, HID, ev("perception", "Mara", "hid-key", "I hid the key in the teapot."))
    chosen = selection.select(state, "Mara hid the key in the teapot")
    texts = " ".join(line.text for line in [*chosen.here, *chosen.lines])
    assert "I hid the key" not in texts and "Mara hid the key" not in texts
