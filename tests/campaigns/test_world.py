"""The world model on the "Lantern Keep" (seed 002 digest, WP1 scenarios 1-11), pure: no database, no model.

Hall ⇄ Corridor (open, 30 s), Corridor ⇄ Vault through the iron door (locked,
opened by the iron key, 20 s), Hall ⇄ Yard (open, 60 s), Yard → Tower
(blocked), Tower → Yard (open). Edrin (the protagonist) and Mara in the Hall,
Aldric in the Yard. In the Hall a closed chest holds the iron key and a closed
box with Mara's ring; Aldric carries 20 arrows, Mara 3; a hidden cloak lies
in the Hall.
"""

import copy
import json
from pathlib import Path

import pytest

from campaigns import worldfile
from campaigns.state import validate_batch
from campaigns.state.registry import clean
from campaigns.state.world import lint, world

LANTERN_KEEP = Path(__file__).parent / "worlds" / "lantern_keep.json"
PROTAGONIST_LINE = "Edrin, a young cartographer"


def document():
    return json.loads(LANTERN_KEEP.read_text())


def keep(doc=None):
    """Return the state of a new campaign whose world is the Lantern Keep (or ``doc``)."""
    checked = worldfile.check(doc or document(), PROTAGONIST_LINE)
    assert not checked.errors, checked.errors
    return checked.state


def ev(type, subject="", object="", value="", **extra):
    return {"type": type, "subject": subject, "object": object, "value": value, **extra}


def ops(actor, *operations):
    """One item_changes event: ops("Edrin", {"op": "take", "item": "iron key"}, ...)."""
    return ev("item_changes", actor, data={"ops": list(operations)})


def op(name, item="", **fields):
    return {"op": name, "item": item, **fields}


def apply(state, *events, source="recorder"):
    """Validate ``events`` in order on ``state`` as ``source`` proposes them; return the outcomes (observation too)."""
    return validate_batch(state, [clean(e) for e in events], source)


def applied(outcome):
    assert outcome.status == "applied", outcome.reason
    return outcome


@pytest.fixture
def state():
    return keep()


# 1. Moves follow open exits; the rejection names the blocking exit; a correction may ignore exits.


def test_a_move_with_no_open_route_is_rejected_naming_the_blocking_exit_and_the_batch_goes_on(state):
    vault, fact, corridor, *_ = apply(state, ev("move", "Mara", "Vault"), ev("add_fact", value="The rain stops."),
                                      ev("move", "Mara", "Corridor"))
    assert vault.status == "rejected"
    assert vault.reason == ("Mara cannot get there: no route of open exits from Hall to Vault "
                            "(Corridor → Vault through the iron door is locked)")
    applied(fact)
    applied(corridor)
    assert state.location_of("mara") == "corridor"
    assert state.get("location:mara").data == {"via": ["corridor"], "travel_seconds": 30}


def test_a_blocked_exit_stops_a_move_and_a_correction_may_move_anyone_anywhere(state):
    [tower] = apply(state, ev("move", "Aldric", "Tower"))
    assert tower.status == "rejected" and "(Yard → Tower is blocked)" in tower.reason
    [forced] = apply(state, ev("move", "Aldric", "Tower", data={"ignore_exits": True}))
    assert forced.status == "rejected" and "is for a person's correction" in forced.reason
    assert state.location_of("aldric") == "yard"
    moved = apply(state, ev("move", "Aldric", "Tower", data={"ignore_exits": True}), source="correction")
    applied(moved[0])
    assert state.location_of("aldric") == "tower"
    [vault, *_] = apply(state, ev("move", "Mara", "Vault", data={"ignore_exits": True}), source="correction")
    applied(vault)


def test_a_move_in_a_story_without_exits_or_to_an_unconnected_place_is_free(state):
    apply(state, ev("introduce", "Market", "place"))
    applied(apply(state, ev("move", "Mara", "Market"))[0])
    assert state.location_of("mara") == "market"


def test_leaving_for_nowhere_remembers_where_from_so_arriving_is_still_checked(state):
    applied(apply(state, ev("leave", "Mara"))[0])
    assert state.get("location:mara").data == {"left": "hall"}
    [arrive] = apply(state, ev("arrive", "Mara", "Vault"))
    assert arrive.status == "rejected" and "no route of open exits from Hall to Vault" in arrive.reason
    [scene] = apply(state, ev("scene", "", "Vault", "Edrin stands in the vault."))
    assert scene.status == "rejected" and "Edrin cannot get there" in scene.reason


# 3. item_changes: in order, each step seeing the last; all or nothing, with every reason.


def test_a_key_in_a_closed_chest_cannot_be_taken_until_the_chest_is_opened_in_the_same_event(state):
    [shut] = apply(state, ops("Edrin", op("take", "iron key")))
    assert shut.status == "rejected" and shut.reason == "the iron key is inside the closed chest"
    applied(apply(state, ops("Edrin", op("open", "chest"), op("take", "iron key")))[0])
    key = world.item_of(state, "iron-key")
    assert (key.holder, key.mode) == ("protagonist", "carried")
    assert world.item_of(state, "chest").container == "open"


def test_a_failing_item_changes_gives_every_reason_at_once_and_writes_nothing(state):
    applied(apply(state, ops("Mara", op("open", "chest"), op("open", "box"), op("take", "ring"),
                             op("wear", "ring")))[0])
    before = dict(state.slots)
    [outcome] = apply(state, ops("Edrin", op("take", "ring"), op("wear", "cloak"),
                                 op("give", "arrows", quantity=5, to="Mara")))
    assert outcome.status == "rejected" and not outcome.writes
    assert outcome.reason == ("1 take: the ring is held by Mara; 2 wear: the cloak is hidden; "
                              "3 give: Edrin carries 0 arrows, 5 needed")
    assert state.slots == before


def test_each_operation_sees_the_one_before_it(state):
    applied(apply(state, ops("Edrin", op("open", "chest"), op("take", "box"), op("open", "box"), op("take", "ring"),
                             op("put", "ring", to="chest"), op("close", "chest")))[0])
    assert world.holding_chain(state, "ring") == ["ring", "chest", "hall"]
    assert world.item_of(state, "box").holder == "protagonist"


# 4. Locks, keys and force; exit locks follow the same rules.


def test_locks_need_the_right_key_in_hand_and_someone_where_the_lock_is(state):
    apply(state, ev("item_edit", "chest", data={"container": "locked", "opener": "iron key"}), source="correction")
    apply(state, ev("set_holder", "Mara", "ring"), source="correction")
    [wrong] = apply(state, ops("Mara", op("unlock", "chest", key="ring")))
    assert wrong.reason == "wrong key: the ring does not open the chest"
    [away] = apply(state, ops("Edrin", op("unlock", exit="Vault", **{"from": "Corridor"})))
    assert away.reason == "Edrin is not at Corridor, where that exit is"
    applied(apply(state, ev("move", "Mara", "Corridor"))[0])
    [no_key] = apply(state, ops("Mara", op("unlock", exit="Vault")))
    assert no_key.reason == ("key not in hand: Mara holds nothing that opens the exit Corridor → Vault through the "
                             "iron door")
    apply(state, ev("item_edit", "chest", data={"container": "closed"}), source="correction")
    applied(apply(state, ev("move", "Mara", "Hall"))[0])
    applied(apply(state, ops("Mara", op("open", "chest"), op("take", "iron key")))[0])
    applied(apply(state, ev("move", "Mara", "Corridor"))[0])
    applied(apply(state, ops("Mara", op("unlock", exit="iron door", key="iron key")))[0])
    assert world.find_exit(state, "corridor", "Vault").state == "open"
    applied(apply(state, ev("move", "Edrin", "Vault"))[0])
    assert state.get("location:protagonist").data == {"via": ["corridor", "vault"], "travel_seconds": 50}


def test_forcing_a_lock_is_for_a_person_not_the_recorder(state):
    applied(apply(state, ev("move", "Aldric", "Hall"), ev("move", "Aldric", "Corridor"))[0])
    forcing = ops("Aldric", op("unlock", exit="Vault", forced=True))
    [refused] = apply(state, forcing)
    assert refused.status == "rejected" and "forcing a lock is for a person's correction" in refused.reason
    applied(apply(state, forcing, source="correction")[0])
    assert world.find_exit(state, "corridor", "Vault").state == "open"
    assert world.find_exit(state, "vault", "Corridor").state == "open", "the way back is the same door"


def test_the_recorder_cannot_unlock_an_exit_by_changing_it(state):
    [refused] = apply(state, ev("exit_change", "Corridor", "Vault", data={"state": "open"}))
    assert refused.status == "rejected" and "locks change through item_changes" in refused.reason
    applied(apply(state, ev("exit_change", "Yard", "Tower", data={"state": "open"}))[0])
    applied(apply(state, ev("exit_change", "Corridor", "Vault", data={"state": "open"}), source="correction")[0])


# 5. Stacks split and merge.


def test_giving_part_of_a_stack_merges_it_into_the_receivers_stack(state):
    applied(apply(state, ev("move", "Aldric", "Hall"))[0])
    applied(apply(state, ops("Aldric", op("give", "arrows", quantity=5, to="Mara")))[0])
    assert world.item_of(state, "aldric-arrows").quantity == 15
    assert world.item_of(state, "mara-arrows").quantity == 8
    assert world.items_named(state, "arrows") == ("aldric-arrows", "mara-arrows"), "no third stack"
    applied(apply(state, ops("Aldric", op("drop", "arrows", quantity=4)))[0])
    [dropped] = [k for k in world.items_named(state, "arrows") if world.item_of(state, k).holder == "hall"]
    assert world.item_of(state, dropped).quantity == 4 and state.name_of(dropped) == "arrows"
    applied(apply(state, ops("Mara", op("take", "arrows")))[0])
    assert world.item_of(state, "mara-arrows").quantity == 12 and world.item_of(state, dropped).gone
    [short] = apply(state, ops("Aldric", op("give", "arrows", quantity=50, to="Mara")))
    assert short.reason == "Aldric carries 11 arrows, 50 needed"


# 6. The holding chain, and ownership apart from possession.


def test_place_of_follows_the_holding_chain_and_ownership_stays(state):
    assert world.holding_chain(state, "ring") == ["ring", "box", "chest", "hall"]
    assert world.place_of(state, "ring") == "hall"
    applied(apply(state, ops("Edrin", op("open", "chest"), op("take", "box")))[0])
    assert world.holding_chain(state, "ring") == ["ring", "box", "protagonist", "hall"]
    applied(apply(state, ev("move", "Edrin", "Corridor"))[0])
    assert world.place_of(state, "ring") == "corridor"
    assert world.item_of(state, "ring").owner == "mara"


# 7. What a character sees, and what the game master sees.


def test_hidden_items_and_closed_containers_contents_are_unseen_until_opened_or_revealed(state):
    def seen():
        return [item.name for item in world.character_view(state, "mara")["place"].items]

    assert seen() == ["chest", "arrows"]
    everything = world.gm_view(state)["place"]
    assert {i.name for i in everything.unseen} == {"cloak", "iron key", "box", "ring"}
    applied(apply(state, ops("Edrin", op("open", "chest")))[0])
    assert seen() == ["chest", "arrows", "box", "iron key"]
    applied(apply(state, ops("Edrin", op("open", "box")))[0])
    assert "ring" in seen() and "cloak" not in seen()
    applied(apply(state, ops("Edrin", op("reveal", "cloak")))[0])
    assert "cloak" in seen()


def test_a_view_lists_twelve_features_exits_and_items_notable_first(state):
    events = [ev("introduce", f"lamp {n}", "item", data={"holder": "Hall", "notable": n >= 17}) for n in range(20)]
    events += [ev("feature", "Hall", f"carving {n}", "a carving") for n in range(13)]
    events += [ev("introduce", f"Cell {n}", "place") for n in range(12)]
    events += [ev("exit_change", "Hall", f"Cell {n}") for n in range(12)]
    assert all(o.status == "applied" for o in apply(state, *events, source="correction"))
    view = world.character_view(state, "protagonist")["place"]
    assert len(view.features) == 12 and len(view.exits) == 12 and len(view.items) == 12
    assert [i.name for i in view.items[:5]] == ["chest", "lamp 17", "lamp 18", "lamp 19", "arrows"]
    assert view.left_out == {"features": 3, "exits": 2, "items": 10, "unseen": 0}
    assert view.features[0].data["name"] == "hearth", "notable features first"


# 8. Wear slots have a capacity.


def test_wearing_on_a_full_slot_is_refused(state):
    apply(state, ev("introduce", "signet", "item", data={"holder": "Mara", "wear_slot": "finger"}), source="correction")
    applied(apply(state, ops("Mara", op("open", "chest"), op("open", "box"), op("take", "ring"),
                             op("wear", "ring")))[0])
    [full] = apply(state, ops("Mara", op("wear", "signet")))
    assert full.reason == "slot full: Mara's finger already has ring"
    apply(state, ev("slot", "finger", data={"capacity": 2}), source="correction")
    applied(apply(state, ops("Mara", op("wear", "signet")))[0])


# 9. Relationships: met in person both ways, told of one way.


def test_meeting_makes_an_acquaintance_both_ways_and_being_told_only_one(state):
    applied(apply(state, ev("know", "Mara", "Aldric", data={"how": "told"}))[0])
    told = state.get("relationship:mara:aldric")
    assert told.data["label"] == "heard of" and state.get("relationship:aldric:mara") is None
    assert "Aldric" in world.known_entities(state, "mara")["character"]
    assert "Mara" not in world.known_entities(state, "aldric")["character"], "Aldric still does not know Mara"
    *_, seen = apply(state, ev("move", "Aldric", "Hall"))
    assert seen.payload["type"] == "observe"
    met = state.get("relationship:aldric:mara")
    assert met.data == {"object": "mara", "label": "acquaintance", "familiarity": 0.0, "trust": 0.0,
                        "closeness": 0.0, "tension": 0.0}
    assert state.get("relationship:protagonist:aldric").data["label"] == "acquaintance"
    assert state.get("relationship:mara:aldric").data["label"] == "heard of", "an existing relationship stays"
    assert state.get("relationship:mara:protagonist").data["label"] == "aunt"


# 10. Knowledge: a closed world of what each character knows exists.


def test_a_known_route_uses_only_what_the_character_knows(state):
    apply(state, ev("exit_change", "Corridor", "Vault", data={"state": "open"}), source="correction")
    assert world.route(state, "hall", "vault").places == ("corridor", "vault")
    assert world.known_route(state, "mara", "hall", "vault") is None, "Mara does not know the iron door"
    view = world.character_view(state, "mara")
    assert "Vault" in view["known"]["place"]
    assert view["place"].place == "hall", "knowing the vault says nothing of what is in it"
    applied(apply(state, ev("move", "Mara", "Corridor"))[0])
    known = world.knowledge(state, "mara")
    assert {"corridor:hall", "corridor:iron-door"} <= set(known["exit"])
    assert known["place"]["corridor"] == "observed" and known["place"]["vault"] == "world"
    assert world.known_route(state, "mara", "hall", "vault").places == ("corridor", "vault")


def test_the_recorder_records_being_told_read_or_inferred_not_observed(state):
    [observed] = apply(state, ev("know", "Aldric", "Vault", data={"how": "observed"}))
    assert observed.status == "rejected" and "written by the application" in observed.reason
    applied(apply(state, ev("know", "Aldric", "Vault", data={"how": "read"}))[0])
    assert world.knowledge(state, "aldric")["place"]["vault"] == "read"
    [again] = apply(state, ev("know", "Aldric", "Vault"))
    assert "already knows" in again.reason
    applied(apply(state, ev("know", "Aldric", "iron door", data={"kind": "exit", "from": "Corridor"}))[0])
    [observe] = apply(state, ev("observe", data={"who": ["aldric"]}))
    assert observe.status == "rejected" and "unknown event type 'observe'" in observe.reason
    applied(apply(state, ev("unknow", "Aldric", "Vault"), source="correction")[0])
    assert "vault" not in world.knowledge(state, "aldric")["place"]


# Character state: public, inner (narrator only), activity, mood.


def test_character_state_keeps_what_an_event_leaves_out(state):
    assert state.get("condition:mara").data == {"inner": "afraid of what is in the vault",
                                                "activity": "tending the fire", "mood": "wary"}
    applied(apply(state, ev("set_condition", "Mara", data={"mood": "relieved"}))[0])
    condition = state.get("condition:mara")
    assert (condition.value, condition.data["mood"], condition.data["activity"]) == (
        "soaked from the rain", "relieved", "tending the fire")


# 11. world_lint.


def broken():
    """The Lantern Keep with one of each thing world_lint reports."""
    doc = document()
    doc["exits"] = [e for e in doc["exits"] if (e["from"], e["to"]) != ("Yard", "Tower")]
    doc["exits"][1].pop("opener")  # Corridor → Vault: locked, and nothing opens it
    doc["characters"] += [{"name": "Brom"}, {"name": "Mara", "place": "Yard"}]
    doc["characters"][1]["relationships"].append({"to": "Aldric", "label": "rival"})
    doc["items"] += [{"name": "lantern", "holder": "Hall"}, {"name": "lantern", "holder": "Hall"}]
    return doc


def test_lint_reports_each_problem_of_a_broken_world_file_and_nothing_on_the_fixed_one():
    checked = worldfile.check(broken(), PROTAGONIST_LINE)
    assert checked.problems == []
    assert [(f.severity, f.check, f.text) for f in checked.findings] == [
        ("error", "duplicate", "2 characters are called 'Mara' (mara, mara-2)"),
        ("error", "lock", "the exit Corridor → Vault through the iron door is locked and no known item opens it"),
        ("error", "same_named_items", "2 items called 'lantern' are at Hall (lantern, lantern-2): nobody can tell "
                                      "which is meant"),
        ("error", "unplaced", "Brom has no place"),
        ("error", "unreachable", "Tower cannot be reached from Hall, where the protagonist is"),
        ("warning", "one_sided", "Mara → Aldric has no relationship back"),
        ("warning", "one_way", "Tower → Yard is a one-way passage: no exit leads back from Yard"),
    ]
    assert [(f.severity, f.check) for f in worldfile.check(document(), PROTAGONIST_LINE).findings] == [
        ("note", "door")], "the iron door's two sides, joined, are all there is to say"


def test_lint_on_a_running_state_sees_what_the_story_did(state):
    apply(state, ev("exit_change", "Hall", "Yard", data={"state": "blocked"}), source="correction")
    assert lint.lint(state) == [], "a blocked way is still a way (the rubble can be cleared)"
    apply(state, ev("retract", object="exit:yard:hall"), source="correction")
    apply(state, ev("retract", object="exit:tower:yard"), source="correction")
    checks = {(f.check, f.subjects) for f in lint.lint(state)}
    assert ("sealed", ("tower",)) in checks and ("one_way", ("exit:hall:yard",)) in checks
    assert ("one_way", ("exit:yard:tower",)) in checks


def test_new_characters_without_relationships_are_reported_when_asked(state):
    apply(state, ev("introduce", "Hermit", "character"), ev("move", "Hermit", "Tower", data={"ignore_exits": True}),
          source="correction")
    [finding] = [f for f in lint.lint(state, new=["hermit"]) if f.check == "no_relationships"]
    assert finding.severity == "warning"


# World files: shape, references and the sections of later parts of seed 002.


def test_a_world_file_round_trips_through_export():
    state = keep()
    apply(state, ops("Edrin", op("open", "chest"), op("take", "iron key")),
          ev("set_condition", "Edrin", "", "curious", data={"inner": "hopes to find the map"}))
    again = keep(worldfile.export(state))
    first, second = world.snapshot(state), world.snapshot(again)
    for snap in (first, second):
        snap["knowledge"] = {who: {kind: set(targets) for kind, targets in known.items()}
                             for who, known in snap["knowledge"].items()}
    assert first == second


def test_story_time_sections_become_their_records_or_are_refused_with_every_reason():
    from campaigns.state.time import calendar, rulebook

    doc = document()
    doc["starting_time"] = "2031-03-14T08:00"
    doc["clock"] = {"mode": "simulated", "time_zone": "Europe/Lisbon"}
    doc["routines"] = [{"who": "Mara", "windows": [{"start": "09:00", "end": "17:00", "place": "Hall"}]}]
    doc["dice"] = [{"key": "lockpick", "name": "Pick a lock", "definition": {"dice": "2d6", "bands": [
        {"label": "fail", "outcome": "the lock holds", "max": 6},
        {"label": "success", "outcome": "it clicks open", "min": 7}]}}]
    doc["lore"] = [{"id": "keep-history", "title": "The Keep", "text": "Built by the first lamplighters."}]
    state = keep(doc)
    assert rulebook.now_of(state) == calendar.parse_instant("2031-03-14T08:00", now_ms=0, tz="Europe/Lisbon")
    assert state.get("routine:mara").data["windows"][0]["place"] == "hall", "names are read as the world's keys"
    assert set(rulebook.checks_of(state)) == {"lockpick"}
    assert state.get("world:lore").data["content"] == doc["lore"], "lore is stored as given, for its own part"
    bad = document()
    bad["clock"] = {"mode": "sundial"}
    bad["routines"] = [{"who": "Nobody", "windows": []}]
    bad["variables"] = [{"name": "debt", "type": "money"}]
    bad["moons"] = 2
    problems = worldfile.check(bad, PROTAGONIST_LINE).problems
    assert "clock: clock mode 'sundial' is not simulated or real" in problems
    assert "routines[0].who (Nobody): unknown character 'Nobody'" in problems
    assert "variables[0] (debt): debt: type 'money' is not one of number, flag, choice, text" in problems
    assert any(p.startswith("unknown section 'moons'") for p in problems)


def test_every_broken_reference_and_bad_value_is_reported_at_once():
    doc = copy.deepcopy(document())
    doc["exits"].append({"from": "Hall", "to": "Moon"})
    doc["exits"].append({"from": "Hall", "to": "Tower", "state": "ajar"})
    doc["items"].append({"name": "pebble", "holder": "Nowhere"})
    doc["characters"][1]["relationships"].append({"to": "Ghost"})
    problems = worldfile.check(doc, PROTAGONIST_LINE).errors
    assert "exits[6].to (Hall → Moon): unknown place 'Moon'" in problems
    assert "exits[7].state (Hall → Tower) must be one of open, locked, blocked, not 'ajar'" in problems
    assert "items[7].holder (pebble): unknown place or character or item 'Nowhere'" in problems
    assert "characters[1].relationships[1].to (Mara): unknown character or faction 'Ghost'" in problems
