"""Who believes what is where, first and second order (issue 14 point 2), and who can perceive an event (D13).

Each story is a list of world steps and the answers it must give, worked out
by hand from the rules: present at a change → sees it (unless hidden or
inside a closed container); arriving → sees what is visible there; away →
keeps the old belief; told → believes it; those who saw something together
know what the others saw.
"""

import pytest

from campaigns.state.minds.beliefs import (
    UNKNOWN,
    Change,
    Container,
    Minds,
    Move,
    Notice,
    Reveal,
    Tell,
    derive,
    perception_refusal,
    perceivers,
)

ROOM, HALL = "room", "hall"


def sally_anne(*, close_box=False):
    """The marble is noticed in the basket; Sally leaves; Anne moves it to the box."""
    steps = [Move("sally", ROOM), Move("anne", ROOM), Change("basket", ROOM), Change("box", ROOM),
             Change("marble", "basket"), Notice("marble", place=ROOM), Move("sally", HALL),
             Change("marble", "box", actor="anne")]
    if close_box:
        steps.append(Container("box", open=False, actor="anne"))
    return steps


def test_sally_anne():
    minds = derive(sally_anne())
    assert minds.believes("sally")["marble"] == "basket"
    assert minds.believes("anne")["marble"] == "box"
    assert minds.believes_about("anne", "sally")["marble"] == "basket"
    assert minds.believes_about("sally", "anne")["marble"] == "basket"
    assert minds.truth()["marble"] == "box"
    assert minds.mistaken("sally") == {"marble": ("basket", "box")}
    assert minds.mistaken("anne") == {}


def test_sally_anne_as_story_state_json():
    state = derive(sally_anne()).as_json()
    assert state["sally"]["believes"]["marble"] == "basket"
    assert state["anne"]["believes"]["marble"] == "box"
    assert state["anne"]["believes_about"]["sally"]["marble"] == "basket"
    assert state["sally"]["believes_about"]["anne"]["marble"] == "basket"


# Each story: (steps, [(kind, *args, expected)]), checked one by one. Kinds:
#   ("believes", who, item, holder)          holder None = whereabouts unknown
#   ("about", who, other, item, holder)      where who thinks other believes item is
#   ("no_belief", who, item)                 who has no belief about item at all
#   ("no_about", who, other, item)
#   ("truth", item, holder)
STORIES = {
    "sally returns and sees the marble in the open box": (
        sally_anne() + [Move("sally", ROOM)],
        [("believes", "sally", "marble", "box"), ("about", "anne", "sally", "marble", "box"),
         ("about", "sally", "anne", "marble", "box")]),
    "sally returns to a closed box: the marble is gone from the basket, whereabouts unknown": (
        sally_anne(close_box=True) + [Move("sally", ROOM)],
        [("believes", "sally", "marble", UNKNOWN), ("about", "anne", "sally", "marble", UNKNOWN),
         ("about", "sally", "anne", "marble", "basket"), ("believes", "anne", "marble", "box")]),
    "a third character entering late sees the marble in the open box": (
        sally_anne() + [Move("charlie", ROOM)],
        [("believes", "charlie", "marble", "box"), ("about", "charlie", "anne", "marble", "box"),
         ("about", "anne", "charlie", "marble", "box"), ("no_about", "charlie", "sally", "marble"),
         ("about", "anne", "sally", "marble", "basket"), ("believes", "sally", "marble", "basket")]),
    "a third character entering late does not see into the closed box": (
        sally_anne(close_box=True) + [Move("charlie", ROOM)],
        [("no_belief", "charlie", "marble"), ("believes", "charlie", "box", ROOM),
         ("no_about", "anne", "charlie", "marble")]),
    "anne tells sally the truth": (
        sally_anne() + [Tell("sally", "marble", by="anne")],
        [("believes", "sally", "marble", "box"), ("about", "anne", "sally", "marble", "box"),
         ("about", "sally", "anne", "marble", "box")]),
    "anne lies to sally": (
        sally_anne() + [Tell("sally", "marble", holder="cupboard", by="anne")],
        [("believes", "sally", "marble", "cupboard"), ("believes", "anne", "marble", "box"),
         ("about", "anne", "sally", "marble", "cupboard"), ("about", "sally", "anne", "marble", "cupboard"),
         ("truth", "marble", "box")]),
    "a letter tells sally, and nobody knows she read it": (
        sally_anne() + [Tell("sally", "marble", holder="box")],
        [("believes", "sally", "marble", "box"), ("about", "anne", "sally", "marble", "basket")]),
    "sally passes on her stale belief to charlie": (
        sally_anne() + [Move("charlie", HALL), Tell("charlie", "marble", by="sally")],
        [("believes", "charlie", "marble", "basket"), ("about", "charlie", "sally", "marble", "basket"),
         ("about", "sally", "charlie", "marble", "basket"), ("truth", "marble", "box")]),
    "sally returns to a closed box, then anne tells her": (
        sally_anne(close_box=True) + [Move("sally", ROOM), Tell("sally", "marble", by="anne")],
        [("believes", "sally", "marble", "box"), ("about", "anne", "sally", "marble", "box")]),
    "away keeps the old belief through several moves": (
        sally_anne() + [Change("marble", "basket", actor="anne"), Change("marble", "anne", actor="anne")],
        [("believes", "sally", "marble", "basket"), ("believes", "anne", "marble", "anne"),
         ("about", "anne", "sally", "marble", "basket")]),
    "charlie sees the marble, leaves, and anne moves it again": (
        sally_anne() + [Move("charlie", ROOM), Move("charlie", HALL), Change("marble", "basket", actor="anne")],
        [("believes", "charlie", "marble", "box"), ("about", "anne", "charlie", "marble", "box"),
         ("about", "charlie", "anne", "marble", "box"), ("believes", "anne", "marble", "basket")]),
    "a change seen by all three": (
        [Move("alice", "market"), Move("bob", "market"), Move("carol", "market"), Change("coin", "alice"),
         Change("coin", "bob", actor="alice")],
        [("believes", "carol", "coin", "bob"), ("about", "carol", "alice", "coin", "bob"),
         ("about", "bob", "carol", "coin", "bob"), ("about", "alice", "bob", "coin", "bob")]),
    "sally sees anne carrying the marble when she returns": (
        sally_anne() + [Change("marble", "anne", actor="anne"), Move("sally", ROOM)],
        [("believes", "sally", "marble", "anne"), ("about", "anne", "sally", "marble", "anne")]),
    "someone leaves with an item: its holder is still true": (
        [Move("sally", ROOM), Move("anne", ROOM), Change("marble", ROOM), Change("marble", "anne", actor="anne"),
         Move("anne", HALL)],
        [("believes", "sally", "marble", "anne"), ("truth", "marble", "anne")]),
    "arriving in an empty room gives nobody a second-order belief": (
        [Change("lamp", "attic"), Move("edrin", "attic")],
        [("believes", "edrin", "lamp", "attic"), ("no_about", "edrin", "mara", "lamp")]),
    "mara hides the key in the teapot while edrin watches the room": (
        [Move("mara", "kitchen"), Move("edrin", "kitchen"), Change("teapot", "kitchen"),
         Change("key", "teapot", actor="mara", hidden=True)],
        [("believes", "mara", "key", "teapot"), ("no_belief", "edrin", "key"), ("believes", "edrin", "teapot",
                                                                                  "kitchen"),
         ("no_about", "mara", "edrin", "key"), ("truth", "key", "teapot")]),
    "the hidden key is revealed in front of both": (
        [Move("mara", "kitchen"), Move("edrin", "kitchen"), Change("teapot", "kitchen"),
         Change("key", "teapot", actor="mara", hidden=True), Reveal("key", actor="mara")],
        [("believes", "edrin", "key", "teapot"), ("about", "edrin", "mara", "key", "teapot"),
         ("about", "mara", "edrin", "key", "teapot")]),
    "a hidden item is not seen on arrival": (
        [Change("cloak", HALL, hidden=True), Move("edrin", HALL)],
        [("no_belief", "edrin", "cloak")]),
    "a hidden item is seen on arrival once revealed": (
        [Change("cloak", HALL, hidden=True), Reveal("cloak"), Move("edrin", HALL)],
        [("believes", "edrin", "cloak", HALL)]),
    "a hidden change leaves the arrival blind, then a reveal in front of the newcomer": (
        [Move("mara", "kitchen"), Change("teapot", "kitchen"), Change("key", "teapot", actor="mara", hidden=True),
         Move("mara", "yard"), Move("aldric", "kitchen"), Reveal("key")],
        [("believes", "aldric", "key", "teapot"), ("believes", "mara", "key", "teapot"),
         ("no_about", "mara", "aldric", "key")]),
    "a hidden dagger in a pocket is not seen": (
        [Move("aldric", "yard"), Move("edrin", "yard"), Change("dagger", "aldric", actor="aldric", hidden=True)],
        [("no_belief", "edrin", "dagger"), ("believes", "aldric", "dagger", "aldric")]),
    "a closed chest hides the key from one who arrives": (
        [Change("chest", HALL), Change("key", "chest"), Container("chest", open=False), Move("edrin", HALL)],
        [("believes", "edrin", "chest", HALL), ("no_belief", "edrin", "key")]),
    "opening the chest shows the key to all present": (
        [Change("chest", HALL), Change("key", "chest"), Container("chest", open=False), Move("edrin", HALL),
         Move("mara", HALL), Container("chest", open=True, actor="edrin")],
        [("believes", "edrin", "key", "chest"), ("believes", "mara", "key", "chest"),
         ("about", "mara", "edrin", "key", "chest"), ("about", "edrin", "mara", "key", "chest")]),
    "opening the chest where one believed the key to be, and finding it gone": (
        [Move("mara", HALL), Change("chest", HALL), Change("key", "chest", actor="mara"),
         Container("chest", open=False, actor="mara"), Move("mara", "yard"), Move("edrin", HALL),
         Container("chest", open=True, actor="edrin"), Change("key", "edrin", actor="edrin"),
         Container("chest", open=False, actor="edrin"), Move("edrin", "tower"), Move("mara", HALL),
         Container("chest", open=True, actor="mara")],
        [("believes", "mara", "key", UNKNOWN), ("believes", "edrin", "key", "edrin")]),
    "a closed chest on return: the believer cannot see the key is gone": (
        [Move("mara", HALL), Change("chest", HALL), Change("key", "chest", actor="mara"),
         Container("chest", open=False, actor="mara"), Move("mara", "yard"), Move("edrin", HALL),
         Container("chest", open=True, actor="edrin"), Change("key", "edrin", actor="edrin"),
         Container("chest", open=False, actor="edrin"), Move("edrin", "tower"), Move("mara", HALL)],
        [("believes", "mara", "key", "chest"), ("truth", "key", "edrin")]),
    "putting the key into a closed chest is seen only by the one who does it": (
        [Move("mara", HALL), Move("edrin", HALL), Change("chest", HALL), Container("chest", open=False),
         Change("key", "chest", actor="mara")],
        [("believes", "mara", "key", "chest"), ("no_belief", "edrin", "key")]),
    "a closed chest carried away keeps its contents where the watcher believes": (
        [Change("chest", HALL), Change("key", "chest"), Move("mara", HALL), Move("aldric", HALL),
         Container("chest", open=False), Change("chest", "aldric", actor="aldric"), Move("aldric", "yard")],
        [("believes", "mara", "chest", "aldric"), ("believes", "mara", "key", "chest"), ("truth", "key", "chest")]),
    "nested open containers show the ring; a closed inner box does not": (
        [Change("chest", HALL), Change("box", "chest"), Change("ring", "box"), Container("box", open=False),
         Move("edrin", HALL), Move("edrin", "yard"), Container("box", open=True), Move("mara", HALL)],
        [("no_belief", "edrin", "ring"), ("believes", "edrin", "box", "chest"), ("believes", "mara", "ring", "box")]),
    "someone said it in the scene: all present believe it and know the others heard": (
        [Move("mara", "kitchen"), Move("edrin", "kitchen"), Change("teapot", "kitchen"),
         Change("key", "teapot", hidden=True), Notice("key", place="kitchen")],
        [("believes", "edrin", "key", "teapot"), ("believes", "mara", "key", "teapot"),
         ("about", "edrin", "mara", "key", "teapot")]),
    "a false claim in the scene: the speaker keeps the truth": (
        [Move("mara", "kitchen"), Move("edrin", "kitchen"), Move("aldric", "kitchen"), Change("teapot", "kitchen"),
         Change("key", "teapot", actor="aldric", hidden=True),
         Notice("key", by="aldric", holder="well")],
        [("believes", "edrin", "key", "well"), ("believes", "mara", "key", "well"),
         ("believes", "aldric", "key", "teapot"), ("about", "mara", "aldric", "key", "well"),
         ("about", "aldric", "mara", "key", "well")]),
    "what is said in the kitchen is not heard in the yard": (
        [Move("mara", "kitchen"), Move("aldric", "yard"), Change("key", "kitchen", hidden=True),
         Notice("key", place="kitchen")],
        [("believes", "mara", "key", "kitchen"), ("no_belief", "aldric", "key")]),
    "someone in the next room does not see a change": (
        [Move("mara", "kitchen"), Move("edrin", "pantry"), Change("key", "kitchen"), Change("key", "mara",
                                                                                             actor="mara")],
        [("no_belief", "edrin", "key"), ("believes", "mara", "key", "mara")]),
    "a late arrival and the one already there each know what the other sees": (
        [Move("anne", ROOM), Change("box", ROOM), Change("marble", "box"), Move("sally", ROOM)],
        [("about", "sally", "anne", "marble", "box"), ("about", "anne", "sally", "marble", "box")]),
    "two items at once: arrivals see both": (
        [Change("key", HALL), Change("coin", HALL), Move("edrin", HALL)],
        [("believes", "edrin", "key", HALL), ("believes", "edrin", "coin", HALL)]),
    "a character never in the scene believes nothing": (
        sally_anne() + [Move("dora", "garden")],
        [("no_belief", "dora", "marble"), ("no_about", "dora", "sally", "marble")]),
    "leaving the map and coming back": (
        [Move("edrin", HALL), Change("key", HALL), Move("edrin", ""), Change("key", "vault"), Move("edrin", HALL)],
        [("believes", "edrin", "key", UNKNOWN), ("truth", "key", "vault")]),
    # Issue 24: the opening, corrections seen, and the cases decided (docs/minds.md "Decided cases").
    "placed with what it holds, wears and hides, a character believes where each is; others see what is visible": (
        [Change("ring", "mara"), Change("dagger", "mara", hidden=True), Change("purse", "mara"),
         Container("purse", open=False), Change("coin", "purse"), Move("mara", HALL), Move("edrin", HALL)],
        [("believes", "mara", "ring", "mara"), ("believes", "mara", "dagger", "mara"),
         ("believes", "mara", "purse", "mara"), ("no_belief", "mara", "coin"), ("believes", "edrin", "ring", "mara"),
         ("no_belief", "edrin", "dagger"), ("no_about", "edrin", "mara", "dagger")]),
    "an item carried outright from one place to another is seen where it was and where it went": (
        [Move("aldric", HALL), Move("edrin", HALL), Change("chest", HALL), Move("mara", "corridor"),
         Move("dora", "yard"), Change("chest", "corridor")],
        [("believes", "aldric", "chest", "corridor"), ("believes", "mara", "chest", "corridor"),
         ("no_belief", "dora", "chest"), ("about", "aldric", "mara", "chest", "corridor")]),
    "an unseen change is known only to the one who did it": (
        [Move("aldric", HALL), Move("edrin", HALL), Change("chest", HALL), Change("chest", "edrin", actor="edrin",
                                                                               unseen=True)],
        [("believes", "aldric", "chest", HALL), ("believes", "edrin", "chest", "edrin")]),
    "one arriving unseen sees those there; they do not see it": (
        [Move("edrin", HALL), Change("key", "edrin"), Change("coin", "aldric"), Move("aldric", HALL, unseen=True)],
        [("believes", "aldric", "key", "edrin"), ("no_belief", "edrin", "coin"),
         ("no_about", "edrin", "aldric", "key")]),
    "a journey passes through the places on its way, seeing and seen": (
        [Move("mara", HALL), Change("chest", HALL), Change("arrows", "aldric"),
         Move("aldric", "corridor", via=("yard", HALL))],
        [("believes", "aldric", "chest", HALL), ("believes", "mara", "arrows", "aldric"),
         ("about", "mara", "aldric", "chest", HALL)]),
    "two told at once each know the other heard it": (
        [Change("key", "chest"), Tell("sally", "key", by="mara", together=("anne",)),
         Tell("anne", "key", by="mara", together=("sally",))],
        [("about", "sally", "anne", "key", "chest"), ("about", "anne", "sally", "key", "chest"),
         ("about", "mara", "sally", "key", "chest")]),
    "told one by one, neither knows the other was told": (
        [Change("key", "chest"), Tell("sally", "key", by="mara"), Tell("anne", "key", by="mara")],
        [("no_about", "sally", "anne", "key"), ("no_about", "anne", "sally", "key")]),
    "a bystander who expected the newcomer to carry the key no longer knows where it is, and the newcomer knows": (
        [Move("edrin", HALL), Change("key", "aldric"), Move("aldric", HALL), Move("aldric", "yard"),
         Change("key", "yard", actor="aldric"), Move("aldric", HALL)],
        [("believes", "edrin", "key", UNKNOWN), ("about", "aldric", "edrin", "key", UNKNOWN),
         ("believes", "aldric", "key", "yard"), ("truth", "key", "yard")]),
    "what lies in an open container a newcomer carries is seen, in a closed one not": (
        [Move("edrin", HALL), Change("basket", "anne"), Change("apple", "basket"), Change("bag", "anne"),
         Container("bag", open=False), Change("coin", "bag"), Move("anne", HALL)],
        [("believes", "edrin", "apple", "basket"), ("no_belief", "edrin", "coin"),
         ("believes", "anne", "apple", "basket")]),
}


@pytest.mark.parametrize("name", list(STORIES))
def test_story(name):
    steps, answers = STORIES[name]
    minds = derive(steps)
    for answer in answers:
        kind, *args = answer
        if kind == "believes":
            who, item, holder = args
            assert item in minds.believes(who), f"{who} should believe something about {item}"
            assert minds.believes(who)[item] == holder, answer
        elif kind == "about":
            who, other, item, holder = args
            assert minds.believes_about(who, other).get(item, "no belief") == holder, answer
            assert minds.as_json([who])[who]["believes_about"][other][item] == holder, answer
        elif kind == "no_belief":
            who, item = args
            assert item not in minds.believes(who), answer
        elif kind == "no_about":
            who, other, item = args
            assert item not in minds.believes_about(who, other), answer
        elif kind == "truth":
            item, holder = args
            assert minds.truth()[item] == holder, answer


def test_there_are_at_least_thirty_stories_with_every_kind_of_twist():
    assert len(STORIES) >= 30
    steps = [step for story, _ in STORIES.values() for step in story]
    assert any(isinstance(step, Tell) for step in steps)
    assert any(isinstance(step, Change) and step.hidden for step in steps)
    assert any(isinstance(step, Container) and not step.open for step in steps)
    assert any("third character" in name for name in STORIES)


def test_steps_continue_an_earlier_derivation():
    first = derive(sally_anne()[:6])
    assert first.believes("sally")["marble"] == "basket"
    later = derive(sally_anne()[6:], first)
    assert later.believes("anne")["marble"] == "box" and later.believes("sally")["marble"] == "basket"


def test_place_of_follows_the_holding_chain():
    minds = derive([Move("aldric", "yard"), Change("chest", "aldric"), Change("box", "chest"), Change("ring", "box")])
    assert minds.place_of("ring") == "yard"
    assert minds.place_of("chest") == "yard"


def test_an_unknown_step_is_refused_with_what_is_expected():
    with pytest.raises(TypeError, match="expected one of Move, Change"):
        Minds().apply(("move", "sally", ROOM))


# Who can perceive an event (D13: present, or one open exit away)

POSITIONS = {"mara": "kitchen", "edrin": "pantry", "aldric": "yard", "tom": "cellar", "gone": ""}
EXITS = [("kitchen", "pantry", "open"), ("pantry", "kitchen", "open"), ("kitchen", "yard", "locked"),
         ("yard", "kitchen", "locked"), ("cellar", "pantry", "open")]


def test_perceivers_are_those_present_and_those_one_open_exit_away():
    assert perceivers("kitchen", POSITIONS, EXITS) == {"mara": "present", "edrin": "nearby"}


def test_a_locked_door_stops_hearing_and_two_rooms_away_is_too_far():
    found = perceivers("kitchen", POSITIONS, EXITS)
    assert "aldric" not in found and "tom" not in found and "gone" not in found


def test_an_exit_open_in_one_direction_carries_sound_both_ways():
    assert perceivers("pantry", POSITIONS, [("cellar", "pantry", "open")]) == {"edrin": "present", "tom": "nearby"}
    assert perceivers("cellar", POSITIONS, [("cellar", "pantry", "open")]) == {"tom": "present", "edrin": "nearby"}


def test_a_perception_from_afar_is_refused_with_the_reason():
    names = {"aldric": "Aldric", "yard": "the Yard", "kitchen": "the Kitchen"}.get
    reason = perception_refusal("aldric", "kitchen", POSITIONS, EXITS, name=names)
    assert reason.startswith("Aldric was not present or nearby (in the Yard; the Kitchen is not one open exit away)")
    assert perception_refusal("edrin", "kitchen", POSITIONS, EXITS) == ""


def test_those_there_see_what_a_newcomer_visibly_carries():
    minds = derive([Move("edrin", HALL), Move("anne", ROOM), Change("marble", "anne", actor="anne"),
                    Change("bag", "anne", actor="anne"), Container("bag", open=False, actor="anne"),
                    Change("ring", "bag", actor="anne"), Move("anne", HALL)])
    assert minds.believes("edrin")["marble"] == "anne"
    assert minds.believes("edrin")["bag"] == "anne"
    assert "ring" not in minds.believes("edrin"), "what is in a closed bag stays unseen"
    assert minds.believes_about("anne", "edrin")["marble"] == "anne"
