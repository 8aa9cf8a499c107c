"""The story state: every event type applied and rejected, the state following the tree, canon and corrections."""

import pytest

from campaigns import lineage, story
from campaigns.models import CanonRule, Node, RecorderRun, StateEvent
from campaigns.state import apply_events, correct, state_at
from tests.campaigns.test_lineage import act, retry


def head_node(campaign):
    campaign.refresh_from_db()
    return Node.objects.get(branch_id=campaign.head_branch_id, depth=campaign.head_depth)


def record(campaign, *events):
    """Apply recorder events to the head reply, as the post-turn recorder does."""
    return apply_events(head_node(campaign), list(events), source="recorder", attempt=1)


def turn(campaign, *events):
    """Play a turn, then record its events."""
    act(campaign, "look around", "The story goes on.")
    return record(campaign, *events)


def state(campaign):
    campaign.refresh_from_db()
    return state_at(lineage.path_of(campaign), campaign)


def ev(type, subject="", object="", value="", **extra):
    return {"type": type, "subject": subject, "object": object, "value": value, **extra}


@pytest.fixture
def world(campaign):
    """A tavern, Mara in it, the silver key held by the protagonist."""
    act(campaign, "enter the tavern", "The Crooked Lantern is warm.")
    record(
        campaign,
        ev("introduce", "Crooked Lantern Tavern", "place", "a smoky tavern", aliases=["the Lantern"]),
        ev("introduce", "Mara", "character", "a guarded archivist"),
        ev("introduce", "docks", "place"),
        ev("scene", "", "Crooked Lantern Tavern", "Aldric shelters from the rain."),
        ev("arrive", "Mara"),
        ev("introduce", "silver key", "item", "a key with an abbey symbol", data={"holder": "protagonist"}),
    )
    return campaign


def ops(actor, *operations):
    """An item_changes event: ``("give", "silver key", {"to": "Mara"})`` and the like."""
    return ev("item_changes", actor, data={"ops": [{"op": op, "item": item, **more}
                                                   for op, item, *rest in operations for more in (rest or [{}])]})


def test_the_world_fixture_applies_every_event(world):
    assert all(e.status == "applied" for e in StateEvent.objects.all()), [
        (e.payload, e.reason) for e in StateEvent.objects.all()
    ]
    now = state(world)
    assert now.holder_of("silver-key") == "protagonist"
    assert set(now.present()) == {"mara", "protagonist"}
    assert now.resolve("the Lantern") == "crooked-lantern-tavern"
    assert now.resolve("Aldric") == "protagonist", "the campaign's protagonist is an entity from the start"


APPLIED = [
    (ev("introduce", "Edrin", "character"), lambda s: s.resolve("Edrin") == "edrin"),
    (ev("move", "Mara", "docks"), lambda s: s.location_of("mara") == "docks"),
    (ev("arrive", "Mara", "docks"), lambda s: s.location_of("mara") == "docks"),
    (ev("leave", "Mara"), lambda s: s.location_of("mara") == ""),
    (ops("Aldric", ("give", "silver key", {"to": "Mara"})), lambda s: s.holder_of("silver-key") == "mara"),
    (ops("Aldric", ("drop", "silver key")), lambda s: s.holder_of("silver-key") == "crooked-lantern-tavern"),
    (ev("add_fact", "Mara", "", "Mara has met Aldric."), lambda s: s.find_fact("Mara has met Aldric") is not None),
    (ev("relationship", "Mara", "Aldric", "trusts him cautiously"),
     lambda s: s.slots["relationship:mara:protagonist"].value == "trusts him cautiously"),
    (ev("open_thread", value="Find Edrin"), lambda s: s.find_thread("Find Edrin").data["status"] == "open"),
    (ev("set_condition", "Mara", "", "soaked from the rain"), lambda s: s.slots["condition:mara"].value),
    (ev("scene", "", "docks", "Fog rolls over the docks."),
     lambda s: s.scene().data["location"] == "docks" and s.location_of("protagonist") == "docks"),
]


@pytest.mark.parametrize("event,check", APPLIED, ids=[e["type"] + str(i) for i, (e, _) in enumerate(APPLIED)])
def test_each_event_type_applies(world, event, check):
    stored, *observed = turn(world, event)
    assert all(e.payload["type"] == "observe" for e in observed)
    assert stored.status == "applied", stored.reason
    assert check(state(world))


def test_take_retract_and_resolve_apply_to_what_exists(world):
    turn(world, ops("Aldric", ("drop", "silver key")), ev("open_thread", value="Find Edrin"),
         ev("add_fact", value="The bridge is intact."))
    events = turn(world, ops("Mara", ("take", "silver key")), ev("resolve_thread", "", "found", "Find Edrin"),
                  ev("retract_fact", value="the bridge is intact"))
    assert [e.status for e in events][:3] == ["applied"] * 3, [e.reason for e in events]
    now = state(world)
    assert now.holder_of("silver-key") == "mara"
    assert now.find_thread("Find Edrin").data["status"] == "resolved"
    assert now.find_fact("The bridge is intact.") is None


REJECTED = [
    (ev("introduce", "Mara", "character"), "already known"),
    (ev("introduce", "Ghost", "spaceship"), "unknown kind"),
    (ev("move", "Vale", "docks"), "unknown entity 'Vale'"),
    (ev("move", "Mara", "silver key"), "not a place"),
    (ev("arrive", "Nobody"), "unknown entity"),
    (ev("leave", "docks"), "not anywhere to leave"),
    (ops("Mara", ("take", "silver key")), "the silver key is held by Aldric"),
    (ops("Mara", ("drop", "silver key")), "the silver key is held by Aldric"),
    (ops("Mara", ("give", "silver key", {"to": "Aldric"})), "the silver key is held by Aldric"),
    (ev("acquire", "Mara", "silver key"), "unknown event type"),
    (ev("add_fact", "Mara"), "gives no fact"),
    (ev("retract_fact", value="The moon is green."), "no such fact"),
    (ev("relationship", "Mara", "Vale", "fears"), "unknown entity"),
    (ev("open_thread"), "gives no thread"),
    (ev("resolve_thread", value="Find the crown"), "no open thread"),
    (ev("set_condition", "Mara"), "gives no condition"),
    (ev("scene", "", "docks"), "gives no scene summary"),
    (ev("teleport", "Mara", "docks"), "unknown event type"),
    (ev("retract", object="scene"), "unknown event type"),
]


@pytest.mark.parametrize("event,reason", REJECTED, ids=[e["type"] + str(i) for i, (e, _) in enumerate(REJECTED)])
def test_each_event_type_is_rejected_with_its_reason_and_changes_nothing(world, event, reason):
    before = state(world).slots
    [stored] = turn(world, event)
    assert stored.status == "rejected"
    assert reason in stored.reason
    assert state(world).slots == before


def test_a_batch_applies_the_valid_events_and_records_every_rejection(world):
    events = turn(world, ev("move", "Vale", "docks"), ev("move", "Mara", "docks"), "not an object")
    assert [e.status for e in events] == ["rejected", "applied", "rejected", "applied"]
    assert events[-1].payload["type"] == "observe" and events[-1].payload["data"]["who"] == ["mara"]
    assert RecorderRun.objects.get(node=head_node(world)).status == "applied"
    assert state(world).location_of("mara") == "docks"


def test_a_recorded_node_is_not_recorded_twice(world):
    assert record(world, ev("move", "Mara", "docks")) == []


def test_canon_outranks_a_contradicting_event_which_is_rejected_with_the_reason(world):
    CanonRule.objects.create(campaign=world, text="Mara is Edrin's sister.")
    act(world, "ask about Edrin", "Mara says she is not his sister.")
    events = record(world, ev("add_fact", "Mara", "", "Mara is not Edrin's sister."),
                    ev("add_fact", value="Magic can resurrect the dead."),
                    ev("retract_fact", value="Magic cannot resurrect the dead."))
    assert [e.status for e in events] == ["rejected"] * 3
    assert all("canon" in e.reason for e in events)
    assert "Mara is Edrin's sister." in events[0].reason
    assert state(world).find_fact("Mara is not Edrin's sister.") is None


def test_a_fact_that_uses_the_opposite_word_contradicts_canon_and_the_same_sense_does_not(world):
    CanonRule.objects.create(campaign=world, text="Mara is alive.")
    CanonRule.objects.create(campaign=world, text="The abbey vault is locked.")
    act(world, "look at Mara", "Mara lies very still.")
    events = record(world, ev("add_fact", "Mara", "", "Mara is dead."),
                    ev("add_fact", value="The abbey vault is unlocked."),
                    ev("add_fact", "Mara", "", "Mara is not dead."),
                    ev("add_fact", "Mara", "", "Mara is asleep."))
    assert [e.status for e in events] == ["rejected", "rejected", "applied", "applied"], [e.reason for e in events]
    assert "contradicts campaign canon (Level 1): 'Mara is alive.'" in events[0].reason
    assert "'The abbey vault is locked.'" in events[1].reason


def test_a_fact_saying_the_opposite_of_initial_canon_supersedes_it(world):
    gate = CanonRule.objects.create(campaign=world, text="The north gate is open.", scope="initial")
    act(world, "watch the gate", "The guards swing the north gate shut.")
    [stored] = record(world, ev("add_fact", value="The north gate is shut."))
    assert stored.status == "applied", stored.reason
    assert state(world).superseded(gate.pk).value == "The north gate is shut."


def test_accepted_state_supersedes_initial_canon(world):
    gate = CanonRule.objects.create(campaign=world, text="The north gate is open.", scope="initial")
    act(world, "watch the gate", "The north gate collapses in a roar of stone.")
    [stored] = record(world, ev("add_fact", "", "The north gate is open.", "The north gate has collapsed."))
    assert stored.status == "applied", stored.reason
    now = state(world)
    assert now.superseded(gate.pk).value == "The north gate has collapsed."
    assert now.find_fact("The north gate has collapsed.")
    story.undo(world)
    assert state(world).superseded(gate.pk) is None, "before the collapse the initial canon still holds"


def test_a_name_from_an_abandoned_line_is_rejected_as_abandoned_history(world):
    act(world, "follow the stranger", "A stranger called Vale waits outside.")
    record(world, ev("introduce", "Vale", "character"))
    story.undo(world)
    act(world, "stay by the fire", "The fire crackles.")
    [stored] = record(world, ev("move", "Vale", "docks"))
    assert stored.status == "rejected" and "abandoned history" in stored.reason


def test_undo_redo_switch_retry_and_save_points_show_the_state_of_the_node_they_land_on(world):
    point = story.create_save_point(world, "in the tavern")
    act(world, "go to the docks", "Fog.")
    record(world, ev("move", "Mara", "docks"))
    assert state(world).location_of("mara") == "docks"
    story.undo(world)
    assert state(world).location_of("mara") == "crooked-lantern-tavern"
    story.redo(world)
    assert state(world).location_of("mara") == "docks"
    retry(world, "Fog, and no Mara.")
    assert state(world).location_of("mara") == "crooked-lantern-tavern", "a retried reply starts from its parent's state"
    record(world, ops("Aldric", ("give", "silver key", {"to": "Mara"})))
    retried = head_node(world).branch
    story.switch_branch(world, retried.parent)
    assert state(world).location_of("mara") == "docks"
    assert state(world).holder_of("silver-key") == "protagonist"
    story.switch_branch(world, retried)
    assert state(world).holder_of("silver-key") == "mara"
    story.restore_save_point(point)
    restored = state(world)
    assert restored.location_of("mara") == "crooked-lantern-tavern" and restored.holder_of("silver-key") == "protagonist"


def test_a_late_record_on_an_earlier_node_does_not_override_a_deeper_one(world):
    """Order is story order (depth), not the order rows were written."""
    first = head_node(world)
    act(world, "wait", "Mara leaves for the docks.")
    record(world, ev("move", "Mara", "docks"))
    apply_events(first, [ev("set_condition", "Mara", "", "tired")], source="correction")
    apply_events(first, [ev("move", "Mara", "Crooked Lantern Tavern")], source="correction")
    now = state(world)
    assert now.location_of("mara") == "docks"
    assert now.slots["condition:mara"].value == "tired"


def test_a_correction_keeps_who_changed_what_from_what(world, owner):
    turn(world, ev("relationship", "Mara", "Aldric", "distrusts him"))
    event = correct(world, owner, ev("relationship", "Mara", "Aldric", "trusts him cautiously"))
    assert event.status == "applied" and event.source == "correction" and event.author == owner
    assert event.previous == [{"slot": "relationship:mara:protagonist", "value": "distrusts him",
                               "data": {"object": "protagonist", "label": "acquaintance", "familiarity": 0.0,
                                        "trust": 0.0, "closeness": 0.0, "tension": 0.0}, "authority": "state"}]
    line = state(world).slots["relationship:mara:protagonist"]
    assert line.authority == "correction" and "correction by reader" in line.provenance


def test_the_recorder_cannot_overwrite_a_corrected_fact(world, owner):
    correct(world, owner, ev("add_fact", "Mara", "", "Mara is an archivist."))
    act(world, "ask Mara", "She says she was never an archivist.")
    [stored] = record(world, ev("retract_fact", value="Mara is an archivist."))
    assert stored.status == "rejected" and "manual correction" in stored.reason
    assert state(world).find_fact("Mara is an archivist.")


def test_corrections_retract_any_line_mark_it_narrator_only_and_set_possessions(world, owner):
    assert correct(world, owner, ev("mark", object="entity:mara", narrator_only=True)).status == "applied"
    assert state(world).entity("mara").narrator_only
    assert correct(world, owner, ev("set_holder", "Mara", "silver key")).status == "applied"
    assert state(world).holder_of("silver-key") == "mara"
    assert correct(world, owner, ev("retract", object="holder:silver-key")).status == "applied"
    assert state(world).holder_of("silver-key") == ""
    rejected = correct(world, owner, ev("add_fact", value="Magic can resurrect the dead."))
    assert rejected.status == "rejected" and "canon" in rejected.reason


def test_a_correction_at_the_opening_belongs_to_every_line(campaign, owner):
    correct(campaign, owner, ev("entity", "Mara", "character", "the archivist", aliases="the archivist, M."))
    act(campaign, "look around")
    story.undo(campaign)
    act(campaign, "walk away")
    assert state(campaign).resolve("M.") == "mara"


def test_a_turns_partial_read_agrees_with_the_full_fold_through_every_head_move(world, owner):
    from campaigns.state import state_for_turn
    from campaigns.state.reading import BASE_KINDS

    def agree():
        world.refresh_from_db()
        path = lineage.path_of(world)
        full = state_at(path, world)
        part = state_for_turn(path, world, "Mara and the silver key")
        base = {slot: r for slot, r in full.slots.items() if r.kind in BASE_KINDS}
        assert {slot: r for slot, r in part.slots.items() if r.kind in BASE_KINDS} == base
        for slot in ("location:mara", "holder:silver-key", "location:protagonist", "scene"):
            assert part.get(slot) == full.slots.get(slot), slot
        assert part.names == full.names

    first = head_node(world)
    agree()
    turn(world, ev("introduce", "Vale", "character"), ev("open_thread", value="Who is Vale?"))
    agree()
    story.undo(world)
    agree()
    turn(world, ev("introduce", "Edrin", "character"), ev("move", "Mara", "docks"))
    agree()
    apply_events(first, [ev("introduce", "Ghost", "character")], source="correction")  # late, at an older node
    agree()
    correct(world, owner, ev("retract", object="entity:edrin"))
    agree()
    story.switch_branch(world, head_node(world).branch.parent)
    agree()


def test_a_reply_already_recorded_is_left_alone_and_a_failed_one_becomes_applied(campaign):
    from campaigns.state import record_failure

    act(campaign, "enter the tavern", "Mara waits by the fire.")
    node = head_node(campaign)
    record_failure(node, "timed out", attempt=1)
    [first] = apply_events(node, [ev("introduce", "Mara", "character")], source="recorder", attempt=2, model="m")
    run = RecorderRun.objects.get(node=node)
    assert (first.status, run.status, run.error, run.attempts, run.model) == ("applied", "applied", "", 2, "m")
    # A retry that raced the success writes nothing, not even its rejections.
    assert apply_events(node, [ev("introduce", "Vale", "character")], source="recorder", attempt=3) == []
    assert StateEvent.objects.filter(node=node).count() == 1 and RecorderRun.objects.get(node=node).attempts == 2
    assert first.pk == StateEvent.objects.get(node=node).pk and first.payload["subject"] == "Mara"


def test_each_stored_event_keeps_its_place_in_the_batch_and_its_records(campaign):
    from campaigns.models import StateRecord

    act(campaign, "enter the tavern", "Mara and Vale wait by the fire.")
    stored = record(campaign, ev("introduce", "Mara", "character"), ev("move", "Nobody", "tavern"),
                    ev("introduce", "Vale", "character"), ev("introduce", "Crooked Lantern", "place"),
                    ev("arrive", "Vale", "Crooked Lantern"))
    in_database = list(StateEvent.objects.filter(node=head_node(campaign)).order_by("id"))
    assert [e.pk for e in stored] == [e.pk for e in in_database]
    assert [e.payload for e in stored] == [e.payload for e in in_database]
    assert [e.status for e in in_database] == ["applied", "rejected", "applied", "applied", "applied", "applied"]
    assert in_database[-1].payload["type"] == "observe", "Vale looked around the Crooked Lantern"
    assert StateRecord.objects.get(slot="entity:vale").event_id == stored[2].pk
    assert StateRecord.objects.get(slot="location:vale").event.payload["type"] == "arrive"


def test_a_new_protagonist_line_is_read_at_once_though_the_state_is_cached(world):
    from campaigns.state import state_for_turn

    def read():
        world.refresh_from_db()
        return state_for_turn(lineage.path_of(world), world, "Aldric looks around")

    assert read().resolve("Aldric") == "protagonist"
    world.protagonist = "Brennan, a lamplighter"
    world.save(update_fields=["protagonist"])
    now = read()
    assert now.resolve("Brennan") == "protagonist" and now.resolve("Aldric") is None
    assert now.name_of("protagonist") == "Brennan" and now.resolve("the Lantern") == "crooked-lantern-tavern"
