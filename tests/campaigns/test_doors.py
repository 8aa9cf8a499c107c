"""Doors are one thing with two sides (issue 24 point 4), pure: the Lantern Keep's state, no database.

The Keep's iron door is given as two exits, Corridor → Vault and Vault →
Corridor, both locked and opened by the iron key: the world file reads them
as one door, and whatever happens to it from one side happens from the other.
"""

import copy

import pytest

from campaigns import worldfile
from campaigns.state.world import world

from .test_world import PROTAGONIST_LINE, apply, applied, document, ev, keep, op, ops


@pytest.fixture
def state():
    return keep()


def side(state, origin, name):
    return world.find_exit(state, origin, name)


def holding_the_key(state, who, where):
    """Give ``who`` the iron key and put them at ``where`` (a person's corrections)."""
    apply(state, ev("set_holder", who, "iron key"), ev("move", who, where, data={"ignore_exits": True}),
          source="correction")


def test_the_world_file_reads_the_iron_door_as_one_door_and_lint_says_which_exits_it_joined():
    checked = worldfile.check(document(), PROTAGONIST_LINE)
    [note] = [f for f in checked.findings if f.check == "door"]
    assert (note.severity, note.text) == ("note", "exits[1] and exits[2] both open with the same key: read as the "
                                          "two sides of one door (iron door), locked and unlocked together; name "
                                          "a different door on each to keep them apart")
    outside, inside = side(checked.state, "corridor", "iron door"), side(checked.state, "vault", "iron door")
    assert outside.door == inside.door == "iron-door"
    assert world.other_side(checked.state, outside) == inside and world.other_side(checked.state, inside) == outside


def test_unlocking_from_one_side_opens_both_and_locking_from_the_other_locks_both(state):
    holding_the_key(state, "Mara", "Corridor")
    applied(apply(state, ops("Mara", op("unlock", exit="iron door", key="iron key")))[0])
    assert side(state, "vault", "iron door").state == "open"
    applied(apply(state, ev("move", "Mara", "Vault"))[0])
    applied(apply(state, ops("Mara", op("lock", exit="iron door")))[0])
    assert (side(state, "corridor", "iron door").state, side(state, "vault", "iron door").state) == (
        "locked", "locked")
    [refused] = apply(state, ev("move", "Edrin", "Vault"))
    assert refused.reason == ("Edrin cannot get there: no route of open exits from Hall to Vault (Corridor → Vault "
                              "through the iron door is locked)")


def test_nobody_is_locked_inside_by_a_door_opened_from_outside(state):
    apply(state, ev("move", "Aldric", "Vault", data={"ignore_exits": True}), source="correction")
    holding_the_key(state, "Mara", "Corridor")
    applied(apply(state, ops("Mara", op("unlock", exit="Vault")))[0])
    applied(apply(state, ev("move", "Aldric", "Hall"))[0])
    assert state.location_of("aldric") == "hall"


def test_within_one_item_changes_each_operation_sees_the_door_as_the_ones_before_left_it(state):
    holding_the_key(state, "Mara", "Corridor")
    [again] = apply(state, ops("Mara", op("unlock", exit="iron door"), op("unlock", exit="iron door")))
    assert again.reason == "2 unlock: the exit Corridor → Vault through the iron door is not locked (it is open)"
    applied(apply(state, ops("Mara", op("unlock", exit="iron door"), op("lock", exit="iron door")))[0])
    assert side(state, "vault", "iron door").state == "locked"


def test_blocking_or_hiding_one_side_does_the_same_to_the_other_and_revealing_shows_both(state):
    applied(apply(state, ev("exit_change", "Hall", "Yard", data={"state": "blocked"}), source="correction")[0])
    assert side(state, "yard", "Hall").state == "blocked"
    applied(apply(state, ev("exit_change", "Hall", "Corridor", data={"hidden": True}), source="correction")[0])
    assert side(state, "corridor", "Hall").hidden
    applied(apply(state, ops("Edrin", op("reveal", exit="Corridor")))[0])
    assert not side(state, "corridor", "Hall").hidden and not side(state, "hall", "Corridor").hidden


def test_a_door_changes_both_sides_in_one_event_and_those_on_the_far_side_see_it(state):
    apply(state, ev("move", "Aldric", "Vault", data={"ignore_exits": True}), source="correction")
    apply(state, ev("unknow", "Aldric", "iron door", data={"kind": "exit", "from": "Vault"}), source="correction")
    holding_the_key(state, "Mara", "Corridor")
    unlocked, seen = apply(state, ops("Mara", op("unlock", exit="iron door")))
    assert sorted(w["slot"] for w in unlocked.writes if w["kind"] == "exit") == ["exit:corridor:iron-door",
                                                                                  "exit:vault:iron-door"]
    assert "aldric" in seen.payload["data"]["witnesses"]
    assert state.get("knows:aldric:exit:vault:iron-door") is not None


def test_a_way_made_both_ways_is_one_door_named_by_its_label(state):
    made = applied(apply(state, ev("exit_change", "Hall", "Tower", data={"label": "trapdoor", "both_ways": True,
                                                                         "opener": "iron key"}),
                         source="correction")[0])
    assert [(w["slot"], w["data"]["door"]) for w in made.writes] == [("exit:hall:trapdoor", "trapdoor"),
                                                                      ("exit:tower:trapdoor", "trapdoor")]
    holding_the_key(state, "Edrin", "Tower")
    applied(apply(state, ops("Edrin", op("lock", exit="trapdoor")))[0])
    assert side(state, "hall", "trapdoor").state == "locked"


def test_naming_a_door_joins_an_exit_to_its_way_back_and_the_later_write_states_the_door(state):
    apply(state, ev("exit_change", "Yard", "Tower", data={"door": "gate"}),
          ev("exit_change", "Tower", "Yard", data={"door": "gate", "state": "locked", "opener": "iron key"}),
          source="correction")
    assert side(state, "yard", "Tower").door == side(state, "tower", "Yard").door == "gate"
    assert side(state, "yard", "Tower").state == "locked", "joined: the door is as its last write says"


def test_a_door_has_one_side_in_each_place(state):
    apply(state, ev("exit_change", "Yard", "Tower", data={"label": "gate", "door": "gate"}), source="correction")
    [refused] = apply(state, ev("exit_change", "Yard", "Tower", data={"label": "postern", "door": "gate"}),
                      source="correction")
    assert refused.reason == ("Yard → Tower through the gate already goes through that door (gate); a door has one "
                              "side in each place")
    applied(apply(state, ev("exit_change", "Yard", "Tower", data={"label": "postern"}), source="correction")[0])
    assert {e.key for e in world.exits_from(state, "yard")} == {"tower", "postern", "hall"}, (
        "a second way between the same places, beside the labelled one")


def test_the_recorder_still_cannot_unlock_a_door_by_changing_either_side(state):
    [refused] = apply(state, ev("exit_change", "Vault", "iron door", data={"state": "open"}))
    assert "locks change through item_changes" in refused.reason
    assert side(state, "corridor", "iron door").state == "locked"


# World files: the ways a file gives a door.


def exits_of(doc):
    checked = worldfile.check(doc, PROTAGONIST_LINE)
    return checked, {(e.origin, e.key): e for e in (world.exit_of(r) for r in checked.state.of_kind("exit"))}


def without_iron_door():
    doc = document()
    doc["exits"] = [e for e in doc["exits"] if e.get("label") != "iron door"]
    return doc


def test_one_exit_naming_a_door_makes_its_way_back_through_it():
    doc = without_iron_door()
    doc["exits"].append({"from": "Corridor", "to": "Vault", "door": "iron door", "state": "locked",
                         "opener": "iron key"})
    checked, exits = exits_of(doc)
    assert checked.errors == [] and not [f for f in checked.findings if f.check == "door"]
    back = exits[("vault", "iron-door")]
    assert (back.to, back.label, back.state, back.opener, back.door) == ("corridor", "iron door", "locked",
                                                                         "iron-key", "iron-door")


def test_two_exits_naming_the_same_door_are_its_two_sides_whatever_their_labels():
    doc = without_iron_door()
    doc["exits"] += [{"from": "Corridor", "to": "Vault", "door": "iron door", "label": "iron door",
                      "state": "locked", "opener": "iron key", "travel_seconds": 20},
                     {"from": "Vault", "to": "Corridor", "door": "iron door", "label": "way out",
                      "state": "locked", "opener": "iron key", "travel_seconds": 25}]
    checked, exits = exits_of(doc)
    assert checked.errors == []
    assert exits[("vault", "way-out")].door == exits[("corridor", "iron-door")].door == "iron-door"
    assert exits[("vault", "way-out")].travel_seconds == 25, "each side keeps its own label and travel time"


def test_sides_of_one_door_that_disagree_are_refused_naming_both():
    doc = document()
    doc["exits"][2]["state"] = "open"  # exits[2]: Vault → Corridor (0-based, as the file)
    assert worldfile.check(doc, PROTAGONIST_LINE).errors == [
        "exits[1] (Corridor → Vault) and exits[2] are the two sides of one door (iron door) and a door's sides share its state, but "
        "they differ in state: give both the same, or name a different door on each"]


def test_different_doors_keep_two_exits_apart_and_the_same_label_alone_does_not_join_them():
    doc = document()
    doc["exits"][1]["door"], doc["exits"][2]["door"] = "outer door", "inner door"
    _, exits = exits_of(doc)
    assert exits[("corridor", "iron-door")].door != exits[("vault", "iron-door")].door
    plain = without_iron_door()
    plain["exits"] += [{"from": "Corridor", "to": "Vault", "label": "arch"},
                       {"from": "Vault", "to": "Corridor", "label": "arch"}]
    _, exits = exits_of(plain)
    assert exits[("corridor", "arch")].door == exits[("vault", "arch")].door == ""


def test_a_file_naming_a_door_badly_is_refused_in_words():
    doc = document()
    doc["exits"][0]["door"] = 7
    assert "exits[0].door (Hall → Corridor) must be the door's name (the iron door)" in worldfile.check(doc, PROTAGONIST_LINE).errors


def test_export_writes_a_door_as_one_exit_both_ways_and_reads_back_the_same_doors(state):
    exported = worldfile.export(state)
    iron = [e for e in exported["exits"] if e.get("label") == "iron door"]
    assert iron == [{"from": "corridor", "to": "vault", "state": "locked", "label": "iron door", "opener": "iron-key",
                     "travel_seconds": 20, "both_ways": True}]
    again = keep(copy.deepcopy(exported))
    assert world.snapshot(again)["exits"] == world.snapshot(state)["exits"]
