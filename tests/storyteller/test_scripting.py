"""manage.py story append / story state and manage.py world: the scripting interface, end to end."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from campaigns.models import Campaign, Node, RecorderRun, StateEvent
from tests.campaigns.test_world import LANTERN_KEEP, document


def run(*args):
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def ev(type, subject="", object="", value="", **extra):
    return {"type": type, "subject": subject, "object": object, "value": value, **extra}


def ops(actor, *operations):
    return ev("item_changes", actor, data={"ops": list(operations)})


def turn(text, *events):
    return {"action": {"mode": "do", "text": text}, "reply": f"The story answers: {text}.", "events": list(events)}


def cycle():
    """Ten turns of moves, transfers and locks around the Lantern Keep, and what a careful reader expects of each.

    Each turn is (script line, change) where ``change(model)`` applies what the turn should do to a plain dict.
    """
    def moves(**where):
        def change(model):
            model["place"].update(where)
        return change

    def both(*changes):
        def change(model):
            for one in changes:
                one(model)
        return change

    def nothing(model):
        pass

    def take_key(model):
        model["chest"], model["key"] = "open", "protagonist"

    def door(state):
        def change(model):
            model["door"] = state
        return change

    def give_two(model):
        model["arrows"]["aldric"] -= 2
        model["arrows"]["mara"] += 2

    def store_key(model):
        model["key"], model["chest"] = "chest", "closed"

    def drop_one(model):
        model["arrows"]["mara"] -= 1
        model["arrows"]["hall"] = model["arrows"].get("hall", 0) + 1

    return [
        (turn("walk to the corridor", ev("move", "Edrin", "Corridor")), moves(protagonist="corridor")),
        (turn("try the iron door", ev("move", "Edrin", "Vault")), nothing),
        (turn("go back", ev("move", "Edrin", "Hall")), moves(protagonist="hall")),
        (turn("open the chest", ops("Edrin", {"op": "open", "item": "chest"}, {"op": "take", "item": "iron key"})),
         take_key),
        (turn("unlock the door", ev("move", "Edrin", "Corridor"),
              ops("Edrin", {"op": "unlock", "exit": "iron door", "key": "iron key"})),
         both(moves(protagonist="corridor"), door("open"))),
        (turn("enter the vault", ev("move", "Edrin", "Vault"), ev("move", "Aldric", "Hall")),
         moves(protagonist="vault", aldric="hall")),
        (turn("Aldric shares arrows", ops("Aldric", {"op": "give", "item": "arrows", "quantity": 2, "to": "Mara"})),
         give_two),
        (turn("lock up", ev("move", "Edrin", "Corridor"),
              ops("Edrin", {"op": "lock", "exit": "iron door", "key": "iron key"})),
         both(moves(protagonist="corridor"), door("locked"))),
        (turn("put the key back", ev("move", "Edrin", "Hall"),
              ops("Edrin", {"op": "put", "item": "iron key", "to": "chest"}, {"op": "close", "item": "chest"})),
         both(moves(protagonist="hall"), store_key)),
        (turn("Mara drops an arrow", ev("move", "Aldric", "Yard"),
              ops("Mara", {"op": "drop", "item": "arrows", "quantity": 1})),
         both(moves(aldric="yard"), drop_one)),
    ]


def observed(state):
    """What the model tracks, read from ``story state``'s JSON."""
    places = {c["key"]: c["place"] for c in state["characters"]}
    items = {i["key"]: i for i in state["items"]}
    [door] = [e for e in state["exits"] if (e["from"], e["key"]) == ("corridor", "iron-door")]
    [back] = [e for e in state["exits"] if (e["from"], e["key"]) == ("vault", "iron-door")]
    assert back["state"] == door["state"], "one door: locked and unlocked from either side together"
    arrows = {}
    for item in state["items"]:
        if item["name"] == "arrows" and item["quantity"] > 0:
            arrows[item["holder"]] = arrows.get(item["holder"], 0) + item["quantity"]
    return {"place": places, "key": items["iron-key"]["holder"], "chest": items["chest"]["container"],
            "door": door["state"], "arrows": arrows,
            "key_place": items["iron-key"]["place_of"]}


def test_fifty_scripted_turns_round_trip_and_the_state_after_each_depth_is_what_a_reader_expects(db, tmp_path):
    turns = cycle() * 5
    script = tmp_path / "story.jsonl"
    script.write_text("\n".join(json.dumps(line) for line, _ in turns) + "\n")
    out = run("story", "append", "--new", "--world", str(LANTERN_KEEP), str(script), "--json").splitlines()
    created = json.loads(out[0])
    assert [finding.split(":")[0] for finding in created["lint"]] == ["note"], "the iron door's sides joined"
    results = [json.loads(line) for line in out[1:]]
    rejected = [(r["line"], r["type"], r["reason"]) for r in results if r["status"] == "rejected"]
    assert rejected == [(n, "move", "Edrin cannot get there: no route of open exits from Corridor to Vault "
                                   "(Corridor → Vault through the iron door is locked)") for n in range(2, 51, 10)]
    campaign = Campaign.objects.get(pk=created["campaign"])
    assert campaign.head_depth == 100
    assert set(RecorderRun.objects.filter(node__campaign=campaign).values_list("status", "model")) == {
        ("applied", "script")}
    # The engine keeps story time: every scripted turn is a round, as a played one is.
    assert {e.source for e in StateEvent.objects.filter(campaign=campaign)} == {"world", "script", "engine"}

    states = json.loads(run("story", "state", "--campaign", str(campaign.pk), "--depth", "all", "--json"))
    assert [s["depth"] for s in states] == list(range(101))
    model = {"place": {"protagonist": "hall", "mara": "hall", "aldric": "yard"}, "key": "chest", "chest": "closed",
             "door": "locked", "arrows": {"aldric": 20, "mara": 3}}
    expected = [json.loads(json.dumps(model))]
    for _, change in turns:
        change(model)
        expected.append(json.loads(json.dumps(model)))
    for state in states:
        seen = observed(state)
        want = expected[state["depth"] // 2]
        key_place = {"chest": "hall", "protagonist": want["place"]["protagonist"]}[want["key"]]
        assert seen == {**want, "key_place": key_place}, f"depth {state['depth']}"
    assert states[100]["node"] == Node.objects.get(campaign=campaign, depth=100).pk
    single = json.loads(run("story", "state", "--campaign", str(campaign.pk), "--depth", "7", "--json"))
    assert single == states[7]


def test_a_malformed_script_is_refused_whole_and_writes_nothing(db, tmp_path, campaign):
    script = tmp_path / "bad.jsonl"
    script.write_text("\n".join([
        json.dumps(turn("look")),
        "{not json",
        json.dumps({"action": {"mode": "dance", "text": "x"}, "reply": "y"}),
        json.dumps({"action": {"mode": "do", "text": "x"}, "reply": "", "events": {}}),
    ]))
    with pytest.raises(CommandError) as refused:
        run("story", "append", "--campaign", str(campaign.pk), str(script))
    message = str(refused.value)
    assert "line 2 is not valid JSON" in message and "line 3: action.mode must be one of" in message
    assert "line 4: reply must be the narrator's text" in message and "line 4: events must be a list" in message
    campaign.refresh_from_db()
    assert campaign.head_depth == 0 and not StateEvent.objects.exists()


def test_a_script_holds_the_play_pages_and_the_story_trees_limits_and_the_bounded_reader(db, tmp_path, campaign):
    script = tmp_path / "long.jsonl"
    script.write_text("\n".join([
        json.dumps({"action": {"mode": "do", "text": "x" * 4001}, "reply": "y"}),
        json.dumps({"action": {"mode": "do", "text": "x", "direction": "d" * 1001}, "reply": "y"}),
        json.dumps({"action": {"mode": "do", "text": "x"}, "reply": "y" * 100_001}),
        '{"action": ' + "[" * 5000 + "]" * 5000 + "}",
        '{"action": {"mode": "do", "text": "x"}, "reply": "y", "n": ' + "7" * 5000 + "}",
    ]))
    with pytest.raises(CommandError) as refused:
        run("story", "append", "--campaign", str(campaign.pk), str(script))
    message = str(refused.value)
    assert "line 1: action.text: Your action is 4,001 characters long" in message
    assert "line 2: action.direction: The direction is 1,001 characters long" in message
    assert "line 3: reply: Ensure this value has at most 100000 characters" in message
    assert "line 4 is nested more than 24 levels deep" in message and "line 5 holds a number 5,000 digits" in message
    campaign.refresh_from_db()
    assert campaign.head_depth == 0 and not StateEvent.objects.exists()


def test_append_prints_each_event_applied_or_rejected_and_applies_corrections(db, tmp_path, campaign):
    script = tmp_path / "story.jsonl"
    line = turn("Mara arrives", ev("introduce", "Mara", "character"), ev("introduce", "Docks", "place"),
                ev("teleport", "Mara", "Moon"))
    line["corrections"] = [ev("move", "Mara", "Docks", data={"ignore_exits": True})]
    script.write_text(json.dumps(line))
    out = run("story", "append", "--campaign", str(campaign.pk), str(script)).splitlines()
    assert out[0] == "line 1 (depth 2): introduce applied"
    assert out[2].startswith("line 1 (depth 2): teleport rejected: unknown event type 'teleport'")
    assert "line 1 (depth 2): move applied" in out
    state = json.loads(run("story", "state", "--campaign", str(campaign.pk), "--json"))
    assert {c["key"]: c["place"] for c in state["characters"]}["mara"] == "docks"


def test_the_world_command_creates_lints_and_exports(db, tmp_path):
    pk = int(run("world", "new", str(LANTERN_KEEP)).strip())
    assert Campaign.objects.get(pk=pk).title == "Lantern Keep"
    assert run("world", "lint", str(LANTERN_KEEP)).strip() == (
        "note: exits[1] and exits[2] both open with the same key: read as the two sides of one door (iron door), "
        "locked and unlocked together; name a different door on each to keep them apart")
    assert run("world", "lint", "--campaign", str(pk)).strip() == "No findings."
    exported = tmp_path / "out.json"
    run("world", "export", "--campaign", str(pk), "-o", str(exported))
    again = int(run("world", "new", str(exported)).strip())
    first = json.loads(run("story", "state", "--campaign", str(pk), "--json"))
    second = json.loads(run("story", "state", "--campaign", str(again), "--json"))
    # The exported clock is where the new story starts: its starting_time, a date of the story's own.
    assert second["clock"].pop("simulated_used") is True
    first["clock"].pop("simulated_used")
    for state in (first, second):
        del state["campaign"], state["node"], state["branch"]
        state["knowledge"] = {who: {kind: sorted(targets) for kind, targets in known.items()}
                              for who, known in state["knowledge"].items()}
    assert first == second
    broken = document()
    broken["characters"].append({"name": "Brom"})
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(CommandError) as failed:
        run("world", "lint", str(path))
    assert "1 error(s)" in str(failed.value)
    with pytest.raises(CommandError) as refused:
        run("world", "new", str(path))
    assert "world_lint: Brom has no place" in str(refused.value)


def test_the_documented_schema_of_every_event_type_is_the_one_the_validator_and_the_recorder_use():
    from pathlib import Path

    from campaigns.state import registry

    text = (Path(__file__).resolve().parents[2] / "docs" / "events.md").read_text()
    documented = {}
    for section in text.split("## Every event type")[1].split("\n### ")[1:]:
        name, _, body = section.partition("\n")
        if "```json\n" in body:
            documented[name.strip()] = json.loads(body.split("```json\n", 1)[1].split("\n```", 1)[0])
    assert set(documented) == set(registry.types_for("correction")) | {"world_section"}
    for name, schema in documented.items():
        assert schema == registry.schema(name, "world" if name == "world_section" else "correction"), name
    printed = json.loads(run("story", "schema"))
    assert printed == documented
    assert json.loads(run("story", "schema", "--recorder")) == registry.recorder_schema()


def test_story_state_prints_a_door_once_with_both_its_sides(db):
    pk = run("world", "new", str(LANTERN_KEEP)).strip()
    printed = run("story", "state", "--campaign", pk).splitlines()
    assert [line for line in printed if "Vault" in line and "nobody" not in line] == ["  Corridor ⇄ Vault: locked"]
    assert "  Yard → Tower: blocked" in printed
