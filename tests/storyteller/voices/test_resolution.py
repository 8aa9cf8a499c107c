"""The game master's resolve_round (seed 002 回合结构; WP4 scenario 2), pure, on the Lantern Keep."""

from campaigns.state.time import clock
from campaigns.state.world import world
from storyteller.voices import resolution
from tests.campaigns.test_world import keep


def actor(who, moves_to="", item_changes=(), ignore_exits=False):
    return {"who": who, "moves_to": moves_to, "ignore_exits": ignore_exits, "item_changes": list(item_changes),
            "variable_changes": []}


def test_a_move_with_no_open_route_is_reported_to_the_game_master_and_nobody_moves():
    state = keep()
    resolved = resolution.resolve(state, {"actors": [actor("Edrin", "Vault")], "elapsed_seconds": 30})
    assert resolved.refused == [("actors[1].moves_to", "Edrin cannot get there: no route of open exits from Hall "
                                 "to Vault (Corridor → Vault through the iron door is locked)")]
    assert resolved.applied() == [] and resolved.state.location_of("protagonist") == "hall"
    assert state.location_of("protagonist") == "hall", "the round's state is a copy"


def test_item_changes_return_every_reason_and_apply_whole_or_not_at_all():
    resolved = resolution.resolve(keep(), {"actors": [actor("Mara", item_changes=[
        {"op": "take", "item": "iron key"}, {"op": "wear", "item": "cloak"}, {"op": "give", "item": "arrows",
                                                                              "to": "Edrin", "quantity": 5}])]})
    [(where, reason)] = resolved.refused
    assert where == "actors[1].item_changes"
    assert reason == ("1 take: the iron key is inside the closed chest; 2 wear: the cloak is hidden; "
                      "3 give: Mara carries 3 arrows, 5 needed")
    assert world.item_of(resolved.state, "iron-key").holder == "chest"


def test_the_rounds_travel_is_the_longest_journey_for_the_clock_to_lengthen_a_short_round():
    resolved = resolution.resolve(keep(), {"actors": [actor("Edrin", "Corridor"), actor("Mara", "Yard")],
                                           "elapsed_seconds": 10})
    assert resolved.refused == []
    assert resolved.travel_seconds == 60, "Hall → Yard (60 s) is the longest journey"
    assert [e["type"] for e in resolved.applied()] == ["move", "move"]
    start = clock.start(clock.Settings(), created_ms=0, starting_time="2031-03-14T08:00")
    step = clock.elapse(start.clock, clock.Settings(), seconds=resolved.elapsed_seconds,
                        travel_seconds=resolved.travel_seconds, turn=1, round=1)
    assert step.clock.at - start.clock.at == 60_000 and "lengthened" in step.notice


def test_the_game_master_may_move_someone_ignoring_exits_as_story_transport():
    resolved = resolution.resolve(keep(), {"actors": [actor("Aldric", "Vault", ignore_exits=True)]})
    assert resolved.refused == [] and resolved.state.location_of("aldric") == "vault"


def test_variable_changes_become_story_times_events_one_each():
    events, where = resolution.resolution_events({"actors": [{**actor("Mara"), "variable_changes": [
        {"object": "", "name": "courage", "to": "", "by": 2}, {"object": "Hall", "name": "smoke", "to": "thick",
                                                                "by": 0}]}]})
    assert events == [{"type": "variable_change", "subject": "Mara", "object": "courage", "data": {"by": 2}},
                      {"type": "variable_change", "subject": "Hall", "object": "smoke", "data": {"to": "thick"}}]
    assert where == ["actors[1].variable_changes[1]", "actors[1].variable_changes[2]"]
