"""Who believes what is where, through `manage.py story append` and `story state` only (issue 14 point 2).

Every story starts a new campaign from the House (tests/campaigns/worlds/house.json):
Sally and Anne in the Room with an open basket holding the marble, an open
box and a hidden ring; the Hall outside with a closed chest holding a coin
and an open cupboard; Edrin and Charlie in the Garden with a lamp; Dora in the
Attic. Room ⇄ Hall ⇄ Garden, Hall ⇄ Attic, all open. Each story is a script of
turns, and each answer is read from `story state --json`: ``minds[who]
["believes"][item]`` and ``minds[who]["believes_about"][other][item]``, and
the truth from the items' holders. The answers are worked out by hand from
the rules: present at a change → sees it (unless hidden or inside a closed
container); arriving → sees what is visible there; away → keeps the old
belief; told → believes what was said; those who saw something together
know what the others saw.
"""

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

HOUSE = Path(__file__).resolve().parents[1] / "campaigns" / "worlds" / "house.json"
UNKNOWN = None


def run(*args):
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def ev(type, subject="", object="", value="", **extra):
    return {"type": type, "subject": subject, "object": object, "value": value, **extra}


def move(who, to):
    return ev("move", who, to)


def does(who, *operations):
    return ev("item_changes", who, data={"ops": [dict(zip(("op", "item", "to"), op)) for op in operations]})


def notice(item, **data):
    return ev("notice", item, data=data)


def tell(listener, item, by="", holder=""):
    return ev("notice", item, data={"to": [listener], "by": by, "holder": holder})


def play(tmp_path, *turns, world=HOUSE):
    """Start a campaign from ``world`` (the House), play ``turns`` through the commands, return the state.

    A turn is a list of events, or ``{"corrections": [...]}`` for a person's corrections.
    """
    script = tmp_path / "story.jsonl"
    lines = []
    for n, events in enumerate(turns, 1):
        line = {"action": {"mode": "do", "text": f"turn {n}"}, "reply": f"Turn {n}."}
        line.update(events if isinstance(events, dict) else {"events": list(events)})
        lines.append(json.dumps(line) + "\n")
    script.write_text("".join(lines))
    out = run("story", "append", "--new", "--world", str(world), str(script), "--json").splitlines()
    campaign = json.loads(out[0])["campaign"]
    rejected = [json.loads(line) for line in out[1:] if json.loads(line)["status"] != "applied"]
    assert rejected == [], rejected
    return json.loads(run("story", "state", "--campaign", str(campaign), "--json"))


def check(state, answers):
    minds = state["minds"]
    truth = {item["key"]: item["holder"] for item in state["items"]}
    for answer in answers:
        kind, *args = answer
        if kind == "believes":
            who, item, holder = args
            assert item in minds.get(who, {}).get("believes", {}), f"{who} should believe something of {item}"
            assert minds[who]["believes"][item] == holder, answer
        elif kind == "about":
            who, other, item, holder = args
            about = minds.get(who, {}).get("believes_about", {}).get(other, {})
            assert item in about, f"{who} should have an idea of what {other} believes of {item}"
            assert about[item] == holder, answer
        elif kind == "no_belief":
            who, item = args
            assert item not in minds.get(who, {}).get("believes", {}), answer
        elif kind == "no_about":
            who, other, item = args
            assert item not in minds.get(who, {}).get("believes_about", {}).get(other, {}), answer
        elif kind == "truth":
            item, holder = args
            assert truth[item] == holder, answer
        else:
            raise AssertionError(f"unknown answer {answer}")


SALLY_ANNE = [[notice("marble", place="Room")], [move("Sally", "Hall")],
              [does("Anne", ("take", "marble"), ("put", "marble", "box"))]]


def test_sally_and_anne(db, tmp_path):
    """The issue's own story: then Sally believes basket, Anne box, each what the other believes, the truth box."""
    state = play(tmp_path, *SALLY_ANNE)
    check(state, [("believes", "sally", "marble", "basket"), ("believes", "anne", "marble", "box"),
                  ("about", "anne", "sally", "marble", "basket"), ("about", "sally", "anne", "marble", "basket"),
                  ("truth", "marble", "box")])


def test_story_state_after_every_depth_follows_the_story(db, tmp_path):
    play(tmp_path, *SALLY_ANNE)
    states = json.loads(run("story", "state", "--campaign", str(_latest()), "--depth", "all", "--json"))
    marble = [(s["depth"], s["minds"]["sally"]["believes"]["marble"], s["minds"]["anne"]["believes"]["marble"])
              for s in states]
    assert marble == [(0, "basket", "basket"), (1, "basket", "basket"), (2, "basket", "basket"),
                      (3, "basket", "basket"), (4, "basket", "basket"), (5, "basket", "basket"),
                      (6, "basket", "box")]


def _latest():
    from campaigns.models import Campaign
    return Campaign.objects.order_by("-id").values_list("pk", flat=True)[0]


CLOSE_BOX = [does("Anne", ("close", "box"))]
CHARLIE_IN = [move("Charlie", "Room")]

STORIES = {
    "sally returns and sees the marble in the open box": (
        [*SALLY_ANNE, [move("Sally", "Room")]],
        [("believes", "sally", "marble", "box"), ("about", "anne", "sally", "marble", "box"),
         ("about", "sally", "anne", "marble", "box")]),
    "sally returns to a closed box: the marble is gone from the basket, whereabouts unknown": (
        [*SALLY_ANNE, CLOSE_BOX, [move("Sally", "Room")]],
        [("believes", "sally", "marble", UNKNOWN), ("about", "anne", "sally", "marble", UNKNOWN),
         ("about", "sally", "anne", "marble", "basket"), ("believes", "anne", "marble", "box")]),
    "a third character entering late sees the marble in the open box": (
        [*SALLY_ANNE, CHARLIE_IN],
        [("believes", "charlie", "marble", "box"), ("about", "charlie", "anne", "marble", "box"),
         ("about", "anne", "charlie", "marble", "box"), ("no_about", "charlie", "sally", "marble"),
         ("about", "anne", "sally", "marble", "basket"), ("believes", "sally", "marble", "basket")]),
    "a third character entering late does not see into the closed box": (
        [*SALLY_ANNE, CLOSE_BOX, CHARLIE_IN],
        [("no_belief", "charlie", "marble"), ("believes", "charlie", "box", "room"),
         ("believes", "charlie", "basket", "room"), ("no_about", "anne", "charlie", "marble")]),
    "anne tells sally the truth": (
        [*SALLY_ANNE, [tell("Sally", "marble", by="Anne")]],
        [("believes", "sally", "marble", "box"), ("about", "anne", "sally", "marble", "box"),
         ("about", "sally", "anne", "marble", "box")]),
    "anne lies to sally": (
        [*SALLY_ANNE, [tell("Sally", "marble", by="Anne", holder="cupboard")]],
        [("believes", "sally", "marble", "cupboard"), ("believes", "anne", "marble", "box"),
         ("about", "anne", "sally", "marble", "cupboard"), ("about", "sally", "anne", "marble", "cupboard"),
         ("truth", "marble", "box")]),
    "a letter tells sally, and nobody knows she read it": (
        [*SALLY_ANNE, [tell("Sally", "marble", holder="box")]],
        [("believes", "sally", "marble", "box"), ("about", "anne", "sally", "marble", "basket")]),
    "sally passes her stale belief on to charlie": (
        [*SALLY_ANNE, [move("Charlie", "Hall")], [tell("Charlie", "marble", by="Sally")]],
        [("believes", "charlie", "marble", "basket"), ("about", "charlie", "sally", "marble", "basket"),
         ("about", "sally", "charlie", "marble", "basket"), ("truth", "marble", "box")]),
    "sally returns to a closed box, then anne tells her": (
        [*SALLY_ANNE, CLOSE_BOX, [move("Sally", "Room")], [tell("Sally", "marble", by="Anne")]],
        [("believes", "sally", "marble", "box"), ("about", "anne", "sally", "marble", "box")]),
    "away keeps the old belief through several changes": (
        [*SALLY_ANNE, [does("Anne", ("take", "marble"), ("put", "marble", "basket"), ("take", "marble"))]],
        [("believes", "sally", "marble", "basket"), ("believes", "anne", "marble", "anne"),
         ("about", "anne", "sally", "marble", "basket"), ("truth", "marble", "anne")]),
    "charlie sees the marble, leaves, and anne moves it again": (
        [*SALLY_ANNE, CHARLIE_IN, [move("Charlie", "Hall")],
         [does("Anne", ("take", "marble"), ("put", "marble", "basket"))]],
        [("believes", "charlie", "marble", "box"), ("about", "anne", "charlie", "marble", "box"),
         ("about", "charlie", "anne", "marble", "box"), ("believes", "anne", "marble", "basket")]),
    "a change seen by all three": (
        [CHARLIE_IN, [does("Anne", ("take", "marble"), ("give", "marble", "Charlie"))]],
        [("believes", "sally", "marble", "charlie"), ("believes", "charlie", "marble", "charlie"),
         ("about", "sally", "anne", "marble", "charlie"), ("about", "charlie", "sally", "marble", "charlie"),
         ("about", "anne", "charlie", "marble", "charlie"), ("truth", "marble", "charlie")]),
    "sally sees anne carrying the marble when she returns": (
        [[move("Sally", "Hall")], [does("Anne", ("take", "marble"))], [move("Sally", "Room")]],
        [("believes", "sally", "marble", "anne"), ("about", "anne", "sally", "marble", "anne")]),
    "someone leaves with an item: the one left behind knows who has it": (
        [[does("Anne", ("take", "marble"))], [move("Anne", "Hall")]],
        [("believes", "sally", "marble", "anne"), ("truth", "marble", "anne")]),
    "arriving where a chest is closed: the chest seen, the coin not": (
        [[move("Edrin", "Hall")]],
        [("believes", "protagonist", "chest", "hall"), ("believes", "protagonist", "cupboard", "hall"),
         ("no_belief", "protagonist", "coin")]),
    "the hidden ring is seen by nobody in the room": (
        [[move("Charlie", "Room")]],
        [("no_belief", "sally", "ring"), ("no_belief", "anne", "ring"), ("no_belief", "charlie", "ring"),
         ("truth", "ring", "room")]),
    "the hidden ring revealed in front of both": (
        [[does("Anne", ("reveal", "ring"))]],
        [("believes", "sally", "ring", "room"), ("believes", "anne", "ring", "room"),
         ("about", "sally", "anne", "ring", "room"), ("about", "anne", "sally", "ring", "room")]),
    "the hidden ring revealed, then a third character arrives and sees it": (
        [[does("Anne", ("reveal", "ring"))], CHARLIE_IN],
        [("believes", "charlie", "ring", "room"), ("about", "charlie", "sally", "ring", "room")]),
    "the hidden ring revealed and taken while one is away: on her return she sees who carries it": (
        [[move("Sally", "Hall")], [does("Anne", ("reveal", "ring"), ("take", "ring"))], [move("Sally", "Room")]],
        [("believes", "sally", "ring", "anne"), ("believes", "anne", "ring", "anne"),
         ("about", "sally", "anne", "ring", "anne")]),
    "opening the chest shows the coin to all present": (
        [[move("Edrin", "Hall"), move("Charlie", "Hall")], [does("Edrin", ("open", "chest"))]],
        [("believes", "protagonist", "coin", "chest"), ("believes", "charlie", "coin", "chest"),
         ("about", "charlie", "protagonist", "coin", "chest"), ("about", "protagonist", "charlie", "coin", "chest")]),
    "opening the chest where one believed the coin to be, and finding it gone": (
        [[move("Charlie", "Hall")], [does("Charlie", ("open", "chest"))], [does("Charlie", ("close", "chest"))],
         [move("Charlie", "Garden")], [move("Anne", "Hall")],
         [does("Anne", ("open", "chest"), ("take", "coin"), ("close", "chest"))], [move("Anne", "Room")],
         [move("Charlie", "Hall")], [does("Charlie", ("open", "chest"))]],
        [("believes", "charlie", "coin", UNKNOWN), ("believes", "anne", "coin", "anne"), ("truth", "coin", "anne")]),
    "a closed chest on return: the believer cannot see the coin is gone": (
        [[move("Charlie", "Hall")], [does("Charlie", ("open", "chest"))], [does("Charlie", ("close", "chest"))],
         [move("Charlie", "Garden")], [move("Anne", "Hall")],
         [does("Anne", ("open", "chest"), ("take", "coin"), ("close", "chest"))], [move("Anne", "Room")],
         [move("Charlie", "Hall")]],
        [("believes", "charlie", "coin", "chest"), ("truth", "coin", "anne")]),
    "a box closed after the marble went in: a late arrival sees only the box": (
        [[does("Anne", ("take", "marble"), ("put", "marble", "box"), ("close", "box"))], CHARLIE_IN],
        [("believes", "sally", "marble", "box"), ("no_belief", "charlie", "marble"),
         ("believes", "charlie", "box", "room")]),
    "nested containers: the marble in the box in the closed basket": (
        [[does("Anne", ("take", "marble"), ("put", "marble", "box"), ("take", "box"), ("put", "box", "basket"),
               ("close", "basket"))], CHARLIE_IN],
        [("believes", "sally", "marble", "box"), ("believes", "sally", "box", "basket"),
         ("believes", "charlie", "basket", "room"), ("no_belief", "charlie", "box"),
         ("no_belief", "charlie", "marble")]),
    "said in the scene: all present believe it and know the others heard": (
        [[does("Anne", ("reveal", "ring"), ("take", "ring"), ("put", "ring", "box"), ("close", "box"))],
         [move("Sally", "Hall")], [move("Sally", "Room")], [notice("ring", place="Room")]],
        [("believes", "sally", "ring", "box"), ("about", "sally", "anne", "ring", "box"),
         ("about", "anne", "sally", "ring", "box")]),
    "a false claim in the scene: the speaker keeps the truth": (
        [CHARLIE_IN, [notice("marble", by="Anne", holder="cupboard")]],
        [("believes", "sally", "marble", "cupboard"), ("believes", "charlie", "marble", "cupboard"),
         ("believes", "anne", "marble", "basket"), ("about", "sally", "anne", "marble", "cupboard"),
         ("about", "anne", "charlie", "marble", "cupboard"), ("truth", "marble", "basket")]),
    "what is said in the room is not heard in the garden": (
        [[notice("marble", by="Anne", holder="cupboard")]],
        [("believes", "sally", "marble", "cupboard"), ("no_belief", "charlie", "marble"),
         ("no_belief", "protagonist", "marble")]),
    "someone in the next room does not see a change": (
        [[move("Sally", "Hall")], [does("Anne", ("take", "marble"))]],
        [("believes", "sally", "marble", "basket"), ("believes", "anne", "marble", "anne")]),
    "a late arrival and the one already there each know what the other sees": (
        [CHARLIE_IN],
        [("about", "charlie", "sally", "marble", "basket"), ("about", "sally", "charlie", "marble", "basket"),
         ("believes", "charlie", "box", "room")]),
    "arriving sees every visible item there at once": (
        [[move("Edrin", "Room")]],
        [("believes", "protagonist", "marble", "basket"), ("believes", "protagonist", "basket", "room"),
         ("believes", "protagonist", "box", "room"), ("no_belief", "protagonist", "ring")]),
    "a character never in the scene believes nothing of it": (
        [*SALLY_ANNE],
        [("no_belief", "dora", "marble"), ("no_about", "dora", "sally", "marble")]),
    "leaving the map and coming back to an empty basket": (
        [[ev("leave", "Sally")], [does("Anne", ("take", "marble"))], [move("Anne", "Hall")],
         [ev("arrive", "Sally", "Room")]],
        [("believes", "sally", "marble", UNKNOWN), ("truth", "marble", "anne")]),
    "a gift: giver and receiver both know": (
        [[does("Anne", ("take", "marble"))], [move("Anne", "Hall"), move("Charlie", "Hall")],
         [does("Anne", ("give", "marble", "Charlie"))]],
        [("believes", "charlie", "marble", "charlie"), ("believes", "anne", "marble", "charlie"),
         ("believes", "sally", "marble", "anne"), ("about", "charlie", "anne", "marble", "charlie")]),
    "a person's correction moves the marble: those where it was and where it lands see it go": (
        [[move("Charlie", "Hall")], {"corrections": [ev("set_holder", "cupboard", "marble")]}],
        [("truth", "marble", "cupboard"), ("believes", "charlie", "marble", "cupboard"),
         ("believes", "sally", "marble", "cupboard"), ("about", "sally", "charlie", "marble", "cupboard")]),
    "a person's correction marked unseen moves the marble: nobody saw it, everyone keeps their belief": (
        [[move("Charlie", "Hall")],
         {"corrections": [ev("set_holder", "cupboard", "marble", data={"unseen": True})]}],
        [("truth", "marble", "cupboard"), ("no_belief", "charlie", "marble"),
         ("believes", "sally", "marble", "basket"), ("believes", "anne", "marble", "basket")]),
    "the protagonist arrives late too, and is told a lie": (
        [*SALLY_ANNE, [move("Edrin", "Hall")], [tell("Edrin", "marble", by="Sally")]],
        [("believes", "protagonist", "marble", "basket"), ("about", "sally", "protagonist", "marble", "basket"),
         ("truth", "marble", "box")]),
    "someone arrives carrying the marble: those already there see who has it": (
        [[does("Anne", ("take", "marble"))], [move("Anne", "Hall")], [move("Anne", "Garden")]],
        [("believes", "charlie", "marble", "anne"), ("believes", "protagonist", "marble", "anne"),
         ("about", "anne", "charlie", "marble", "anne"), ("about", "charlie", "protagonist", "marble", "anne")]),
    "dropping the marble in the hall in front of the one waiting there": (
        [[move("Charlie", "Hall")], [does("Anne", ("take", "marble"))], [move("Anne", "Hall")],
         [does("Anne", ("drop", "marble"))]],
        [("believes", "charlie", "marble", "hall"), ("about", "anne", "charlie", "marble", "hall"),
         ("believes", "sally", "marble", "anne")]),
}


@pytest.mark.parametrize("name", list(STORIES))
def test_story(name, db, tmp_path):
    turns, answers = STORIES[name]
    check(play(tmp_path, *turns), answers)


def test_there_are_at_least_thirty_stories_with_every_kind_of_twist():
    assert len(STORIES) >= 30
    events = [event for turns, _ in STORIES.values() for events in turns if isinstance(events, list)
              for event in events]
    ops = [op["op"] for event in events if event["type"] == "item_changes" for op in event["data"]["ops"]]
    assert any(event["type"] == "notice" and event["data"].get("to") for event in events), "a told fact"
    assert "reveal" in ops, "a hidden item"
    assert "close" in ops, "a closed container"
    assert any("third character" in name for name in STORIES)


def test_undo_shows_the_earlier_beliefs_and_a_new_line_has_its_own(db, tmp_path):
    from campaigns import story
    from campaigns.models import Campaign

    play(tmp_path, *SALLY_ANNE)
    campaign = Campaign.objects.get(pk=_latest())
    story.undo(campaign)
    campaign.refresh_from_db()
    before = json.loads(run("story", "state", "--campaign", str(campaign.pk), "--json"))
    check(before, [("believes", "anne", "marble", "basket"), ("truth", "marble", "basket")])
    script = tmp_path / "other.jsonl"
    script.write_text(json.dumps({"action": {"mode": "do", "text": "Anne pockets it"}, "reply": "She does.",
                                  "events": [does("Anne", ("take", "marble"))]}) + "\n")
    run("story", "append", "--campaign", str(campaign.pk), str(script))
    after = json.loads(run("story", "state", "--campaign", str(campaign.pk), "--json"))
    check(after, [("believes", "anne", "marble", "anne"), ("believes", "sally", "marble", "basket"),
                  ("truth", "marble", "anne")])


def test_the_per_line_cache_answers_as_a_fresh_reading_does(db, tmp_path):
    from campaigns import lineage
    from campaigns.models import Campaign
    from campaigns.state.minds import whereabouts

    play(tmp_path, *STORIES["opening the chest where one believed the coin to be, and finding it gone"][0])
    campaign = Campaign.objects.get(pk=_latest())
    path = lineage.path_of(campaign)
    grown = [whereabouts.minds_at(path.capped(depth), campaign).as_json() for depth in range(path.head_depth + 1)]
    for depth in range(path.head_depth + 1):
        whereabouts.forget()
        assert whereabouts.minds_at(path.capped(depth), campaign).as_json() == grown[depth], depth


def test_a_recording_that_lands_after_the_next_turn_is_read_in_its_place(db, tmp_path):
    """The recorder of turn 2 may finish after turn 3 was played: its records go before turn 3's, not after."""
    from campaigns import lineage
    from campaigns.models import Campaign, Node
    from campaigns.state import apply_events
    from campaigns.state.minds import whereabouts

    play(tmp_path, [move("Sally", "Hall")], [], [move("Sally", "Room")])
    campaign = Campaign.objects.get(pk=_latest())
    path = lineage.path_of(campaign)
    assert whereabouts.minds_at(path, campaign).believes("sally")["marble"] == "basket"
    late = Node.objects.get(campaign=campaign, depth=4)  # turn 2, while Sally was in the hall
    apply_events(late, [does("Anne", ("take", "marble"), ("put", "marble", "box"), ("close", "box"))],
                 source="recorder", attempt=2, mark=False)
    cached = whereabouts.minds_at(path, campaign).as_json()
    whereabouts.forget()
    assert cached == whereabouts.minds_at(path, campaign).as_json()
    # Read after turn 3 she would have watched it go into the box; read in its place, it was done while she was out.
    assert cached["sally"]["believes"]["marble"] is None, "back at turn 3: not in the basket, the box shut"
