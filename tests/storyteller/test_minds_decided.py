"""What characters know from the start, corrections seen, and the open cases decided (issue 24 points 5 and 6).

Each story starts a campaign from the Lantern Keep (tests/campaigns/worlds/
lantern_keep.json) with a few things added, plays turns through `manage.py
story append` and reads the answers from `story state --json` only: the
beliefs (``minds``) and the knowledge records (``knowledge``). Hall ⇄
Corridor ⇄ Vault (the iron door, locked), Hall ⇄ Yard; Edrin and Mara in
the Hall with a closed chest, Aldric in the Yard with his arrows. The
decisions are docs/minds.md, "Decided cases".
"""

import json

from tests.campaigns.test_world import document
from tests.storyteller.test_whereabouts import UNKNOWN, check, does, ev, move, notice, run, tell
from tests.storyteller.test_whereabouts import play as whereabouts_play


def world_file(tmp_path, *, items=(), characters=None):
    doc = document()
    doc["items"] += list(items)
    for name, changes in (characters or {}).items():
        next(c for c in doc["characters"] if c["name"] == name).update(changes)
    path = tmp_path / "keep.json"
    path.write_text(json.dumps(doc))
    return path


def play(tmp_path, *turns, world=None):
    """Start a campaign from ``world`` (the Lantern Keep), play ``turns``, return ``story state``'s JSON.

    A turn is a list of events, or ``{"corrections": [...]}``; with no turns the state is the opening's.
    """
    world = world or world_file(tmp_path)
    if turns:
        return whereabouts_play(tmp_path, *turns, world=world)
    campaign = int(run("world", "new", str(world)).strip())
    return json.loads(run("story", "state", "--campaign", str(campaign), "--json"))


def knows(state, who, kind, target):
    return state["knowledge"].get(who, {}).get(kind, {}).get(target)


# Point 5: a person's correction is seen as a recorded event is.


def test_a_correction_is_seen_by_those_present_and_not_by_those_away(db, tmp_path):
    """The issue's case: Mara leaves the Hall, the chest is moved to the Corridor; Aldric stayed and watched."""
    state = play(tmp_path, [move("Aldric", "Hall")],
                 {"corrections": [move("Mara", "Yard"), ev("set_holder", "Corridor", "chest")]})
    check(state, [("truth", "chest", "corridor"), ("believes", "aldric", "chest", "corridor"),
                  ("believes", "protagonist", "chest", "corridor"), ("believes", "mara", "chest", "hall"),
                  ("about", "aldric", "protagonist", "chest", "corridor")])
    assert knows(state, "aldric", "item", "chest") == "observed"


def test_a_correction_said_to_be_unseen_changes_no_one_s_belief(db, tmp_path):
    state = play(tmp_path, [move("Aldric", "Hall")],
                 {"corrections": [ev("set_holder", "Corridor", "chest", data={"unseen": True})]})
    check(state, [("truth", "chest", "corridor"), ("believes", "aldric", "chest", "hall"),
                  ("believes", "protagonist", "chest", "hall"), ("believes", "mara", "chest", "hall")])


def test_someone_moved_unseen_looks_around_but_those_there_do_not_notice_them(db, tmp_path):
    state = play(tmp_path, {"corrections": [ev("move", "Aldric", "Hall", data={"unseen": True})]})
    check(state, [("believes", "aldric", "chest", "hall"), ("no_belief", "protagonist", "aldric-arrows"),
                  ("no_about", "protagonist", "aldric", "chest")])
    assert knows(state, "aldric", "item", "chest") == "observed"
    assert knows(state, "protagonist", "item", "aldric-arrows") is None
    pairs = {(r["from"], r["to"]) for r in state["relationships"]}
    assert ("aldric", "protagonist") in pairs and ("protagonist", "aldric") not in pairs


# Point 6: at a world file's opening everyone believes where what it holds, wears and can see is.


def test_at_the_opening_everyone_believes_where_what_it_holds_wears_and_sees_is(db, tmp_path):
    world = world_file(tmp_path, items=[
        {"name": "silver ring", "holder": "Mara", "mode": "worn", "slot": "finger", "wear_slot": "finger"},
        {"name": "dagger", "holder": "Mara", "hidden": True},
        {"name": "purse", "holder": "Mara", "container": "closed"},
        {"name": "coin", "holder": "purse"}])
    state = play(tmp_path, world=world)
    assert state["depth"] == 0
    check(state, [("believes", "mara", "mara-arrows", "mara"), ("believes", "mara", "silver-ring", "mara"),
                  ("believes", "mara", "dagger", "mara"), ("believes", "mara", "purse", "mara"),
                  ("believes", "mara", "chest", "hall"), ("believes", "aldric", "aldric-arrows", "aldric"),
                  ("believes", "protagonist", "silver-ring", "mara"), ("believes", "protagonist", "mara-arrows", "mara"),
                  ("no_belief", "protagonist", "dagger"), ("no_belief", "mara", "coin"),
                  ("no_belief", "mara", "aldric-arrows"), ("about", "protagonist", "mara", "chest", "hall")])
    assert knows(state, "mara", "item", "dagger") == "observed" and knows(state, "protagonist", "item", "dagger") is None


# The open cases, decided.


def test_told_where_an_item_is_the_listener_knows_of_it_and_of_where_it_was_said_to_be(db, tmp_path):
    state = play(tmp_path, [tell("Aldric", "iron key", by="Mara", holder="chest")],
                 [notice("cloak", place="Hall", holder="Hall")])
    check(state, [("believes", "aldric", "iron-key", "chest"), ("about", "mara", "aldric", "iron-key", "chest")])
    assert (knows(state, "aldric", "item", "iron-key"), knows(state, "aldric", "item", "chest")) == ("told", "told")
    assert knows(state, "mara", "item", "iron-key") is None, "the speaker is not told by her own words"
    assert knows(state, "protagonist", "item", "cloak") == "observed", "pointed out, nobody speaking"


def test_those_already_there_learn_what_a_newcomer_carries(db, tmp_path):
    state = play(tmp_path, [move("Aldric", "Hall")])
    check(state, [("believes", "protagonist", "aldric-arrows", "aldric"), ("believes", "mara", "aldric-arrows", "aldric"),
                  ("about", "aldric", "mara", "aldric-arrows", "aldric")])
    assert knows(state, "protagonist", "item", "aldric-arrows") == "observed"
    assert knows(state, "mara", "item", "aldric-arrows") == "observed"


def test_two_told_at_once_each_know_the_other_heard_it(db, tmp_path):
    both = ev("notice", "iron key", data={"to": ["Edrin", "Aldric"], "by": "Mara", "holder": "chest"})
    state = play(tmp_path, [both])
    check(state, [("believes", "protagonist", "iron-key", "chest"), ("believes", "aldric", "iron-key", "chest"),
                  ("about", "protagonist", "aldric", "iron-key", "chest"),
                  ("about", "aldric", "protagonist", "iron-key", "chest"),
                  ("about", "mara", "aldric", "iron-key", "chest")])


def test_a_bystander_sees_a_newcomer_no_longer_carries_what_it_expected(db, tmp_path):
    state = play(tmp_path, [move("Mara", "Corridor")], [does("Mara", ("drop", "arrows"))], [move("Mara", "Hall")])
    check(state, [("truth", "mara-arrows", "corridor"), ("believes", "protagonist", "mara-arrows", UNKNOWN),
                  ("about", "mara", "protagonist", "mara-arrows", UNKNOWN),
                  ("believes", "mara", "mara-arrows", "corridor")])


def test_what_lies_in_an_open_container_someone_carries_is_seen_and_in_a_closed_one_is_not(db, tmp_path):
    world = world_file(tmp_path, items=[{"name": "basket", "holder": "Aldric", "container": "open"},
                                        {"name": "apple", "holder": "basket"},
                                        {"name": "quiver", "holder": "Aldric", "container": "closed"},
                                        {"name": "flint", "holder": "quiver"}])
    state = play(tmp_path, [move("Aldric", "Hall")], world=world)
    check(state, [("believes", "protagonist", "apple", "basket"), ("believes", "protagonist", "quiver", "aldric"),
                  ("no_belief", "protagonist", "flint"), ("believes", "aldric", "apple", "basket")])
    assert knows(state, "protagonist", "item", "apple") == "observed"
    assert knows(state, "protagonist", "item", "flint") is None


def test_a_journey_passes_through_each_place_on_its_way(db, tmp_path):
    state = play(tmp_path, [move("Aldric", "Corridor")])
    assert [c["place"] for c in state["characters"] if c["key"] == "aldric"] == ["corridor"]
    check(state, [("believes", "aldric", "chest", "hall"), ("believes", "protagonist", "aldric-arrows", "aldric"),
                  ("about", "protagonist", "aldric", "chest", "hall")])
    assert knows(state, "aldric", "place", "hall") == "observed" and knows(state, "aldric", "item", "chest")
    assert knows(state, "aldric", "exit", "hall:yard") == "observed"
    pairs = {(r["from"], r["to"]) for r in state["relationships"]}
    assert {("aldric", "mara"), ("mara", "aldric"), ("aldric", "protagonist")} <= pairs
