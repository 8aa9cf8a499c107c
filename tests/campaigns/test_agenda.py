"""Agendas (seed 002 日程; WP2 scenarios 8 and 9): routines, engagements, intents and catch-up, pure."""

import pytest

from campaigns.state.time import agenda, calendar
from campaigns.state.time.agenda import Engagement, Intent
from campaigns.state.time.rules import Refused

LISBON = "Europe/Lisbon"
MARA_DAY = [
    {"start": "09:00", "end": "17:00", "days": "mon-fri", "place": "forge", "activity": "working"},
    {"start": "17:00", "end": "22:00", "place": "tavern", "activity": "drinking"},
]
NAMES = {"mara": "Mara", "edrin": "Edrin", "forge": "the Forge", "tavern": "the Tavern", "hall": "the Hall"}


def ms(text):
    return calendar.parse_instant(text, now_ms=0, tz=LISBON)


def moment(text):
    return calendar.moment(ms(text), LISBON)


def name_of(key):
    return NAMES.get(key, key)


@pytest.fixture
def mara():
    return agenda.parse_routine("mara", MARA_DAY)


# Scenario 8: routines, engagements, intents.

def test_routine_windows_match_in_order_and_the_first_match_wins(mara):
    # 2031-03-14 is a Friday.
    assert mara.at(moment("2031-03-14T10:00"))[0].place == "forge"
    assert mara.at(moment("2031-03-14T18:00"))[0].place == "tavern"
    assert mara.at(moment("2031-03-14T23:00")) == (None, None)
    overlapping = agenda.parse_routine("mara", [{"start": "08:00", "end": "12:00", "place": "market"}, *MARA_DAY])
    assert overlapping.at(moment("2031-03-14T10:00"))[0].place == "market"


def test_on_saturday_at_10_the_forge_window_does_not_match(mara):
    assert mara.at(moment("2031-03-15T10:00")) == (None, None)
    assert mara.at(moment("2031-03-15T18:00"))[0].place == "tavern"


def test_a_routine_is_refused_with_every_reason():
    with pytest.raises(Refused) as refused:
        agenda.parse_routine("mara", [{"start": "9", "end": "17:00", "place": "forge"},
                                      {"start": "17:00", "end": "17:00"},
                                      {"start": "18:00", "end": "19:00", "days": "caturday"},
                                      {"start": "18:00", "end": "19:00", "place": "moon"}], places={"forge"})
    reason = str(refused.value)
    assert "window 1: start" in reason and "window 2" in reason and "empty" in reason
    assert "window 3" in reason and "caturday" in reason and "unknown place 'moon'" in reason


def test_a_routine_window_on_a_festival_day(mara):
    cal = calendar.load_calendar({"festivals": [{"name": "Harvest Fair", "rule": "the last Friday of October"}]})
    routine = agenda.parse_routine("mara", [
        {"start": "09:00", "end": "17:00", "on": ["Harvest Fair"], "place": "square", "activity": "selling"},
        *MARA_DAY], cal=cal)
    assert routine.at(calendar.moment(ms("2031-10-31T10:00"), LISBON), cal)[0].place == "square"
    assert routine.at(calendar.moment(ms("2031-10-24T10:00"), LISBON), cal)[0].place == "forge"


def test_the_agenda_shows_the_current_and_next_window(mara):
    day = agenda.agenda_at("mara", moment("2031-03-14T10:00"), routine=mara)
    assert day.now.place == "forge" and day.next.place == "tavern"
    assert calendar.describe_instant(day.next_at, LISBON) == "Friday 14 March 2031, 17:00 in the evening"


MEETING = Engagement("meet-edrin", ("mara", "edrin"), ms("2031-03-14T19:00"), "tavern", "meet Edrin")


def test_an_engagement_past_its_time_stays_pending_and_is_shown_overdue():
    later = ms("2031-03-14T19:20")
    assert MEETING.status == "pending" and MEETING.overdue(later)
    shown, hidden = agenda.due([MEETING], later)
    assert shown == [MEETING] and hidden == 0
    assert agenda.describe_engagement(MEETING, later, LISBON, name_of).endswith("overdue, not yet judged")
    assert not MEETING.overdue(ms("2031-03-14T18:59"))


def test_only_the_recorder_or_a_person_marks_an_engagement_kept():
    kept = agenda.edit_engagement(MEETING, {"status": "kept"}, source="recorder", now_ms=0, tz=LISBON)
    assert kept.status == "kept" and not kept.overdue(ms("2031-03-15T00:00"))
    assert agenda.edit_engagement(MEETING, {"status": "missed"}, source="correction", now_ms=0, tz=LISBON)
    for source in ("engine", "trigger", "world"):
        with pytest.raises(Refused, match="code .* never decides"):
            agenda.edit_engagement(MEETING, {"status": "kept"}, source=source, now_ms=0, tz=LISBON)
    # Code may still move it.
    moved = agenda.edit_engagement(MEETING, {"at": "20:00"}, source="engine", now_ms=ms("2031-03-14T10:00"),
                                   tz=LISBON)
    assert moved.at == ms("2031-03-14T20:00") and moved.status == "pending"


def test_with_eight_due_the_narrator_sees_six():
    now = ms("2031-03-14T12:00")
    eight = [Engagement(f"e{i}", ("mara",), now - 3_600_000 + i * 600_000, "", f"thing {i}") for i in range(8)]
    far = Engagement("later", ("mara",), now + 3_600_000, "", "much later")
    kept = Engagement("done", ("mara",), now - 60_000, "", "already kept", "kept")
    shown, hidden = agenda.due([*eight, far, kept], now)
    assert [e.id for e in shown] == ["e0", "e1", "e2", "e3", "e4", "e5"] and hidden == 2


def test_an_engagement_is_refused_with_every_reason():
    with pytest.raises(Refused) as refused:
        agenda.new_engagement({"id": "a:b", "at": "the ninth of never"}, now_ms=0, tz=LISBON)
    reason = str(refused.value)
    assert "id without ':'" in reason and "names no one" in reason and "at:" in reason and "what" in reason
    made = agenda.new_engagement({"id": "meet", "who": "mara", "at": "14 March 2031 at 19:00", "place": "tavern",
                                  "what": "meet Edrin"}, now_ms=0, tz=LISBON)
    assert made.at == ms("2031-03-14T19:00") and made.write()["slot"] == "engagement:meet"
    with pytest.raises(Refused, match="unknown place 'moon'"):
        agenda.new_engagement({"id": "m", "who": "mara", "at": 0, "place": "moon", "what": "x"}, now_ms=0, tz=LISBON,
                              known=lambda key: key in {"mara"})


def test_intents_sort_by_priority_then_urgency_then_the_nearest_deadline_and_the_top_three_are_named():
    now = ms("2031-03-14T12:00")
    intents = [
        Intent("mara", "a", priority=3, urgency=5, plan="repair the bell"),
        Intent("mara", "b", priority=5, urgency=1, plan="pay the debt"),
        Intent("mara", "c", priority=3, urgency=5, deadline=now + 3_600_000, plan="warn Edrin"),
        Intent("mara", "d", priority=3, urgency=5, deadline=now + 60_000, plan="bar the door"),
        Intent("mara", "e", priority=5, urgency=5, plan="flee", status="dropped"),
    ]
    assert [i.plan for i in agenda.top_intents(intents)] == ["pay the debt", "bar the door", "warn Edrin"]
    day = agenda.agenda_at("mara", moment("2031-03-14T12:00"), intents=intents)
    assert day.lines(now, LISBON)[-1] == "Plans (not orders): pay the debt; bar the door; warn Edrin"


def test_an_intent_is_checked_and_edited():
    with pytest.raises(Refused, match="priority is 9"):
        agenda.new_intent({"who": "mara", "id": "x", "plan": "p", "priority": 9}, now_ms=0, tz=LISBON)
    intent = agenda.new_intent({"who": "mara", "id": "x", "plan": "pay the debt", "deadline": "2031-03-20 12:00"},
                               now_ms=0, tz=LISBON)
    assert intent.write()["slot"] == "intent:mara:x" and intent.deadline == ms("2031-03-20T12:00")
    done = agenda.edit_intent(intent, {"status": "done"}, now_ms=0, tz=LISBON)
    assert done.status == "done" and Intent.from_record(done.data()) == done


# Scenario 9: catch-up.

def plan(at, *, mara_at="smithy-yard", player_at="hall", routines=None, cursors=None, **options):
    routines = routines if routines is not None else {"mara": agenda.parse_routine("mara", MARA_DAY)}
    return agenda.catch_up_plan(["mara"], moment(at), routines=routines, locations={"mara": mara_at},
                                cursors=cursors or {}, protagonist_place=player_at, name_of=name_of, **options)


def test_a_skip_to_16_00_on_a_weekday_sends_mara_to_the_forge_working_and_saves_her_cursor():
    result = plan("2031-03-14T16:00", mara_at="cottage")
    assert result.moves == [agenda.Move("mara", "forge", "cottage", "working")]
    assert result.activities == {"mara": "working"}
    [cursor] = result.writes
    assert cursor["slot"] == "agenda_cursor:mara" and cursor["value"] == "0@2031-03-14"
    assert result.lines(name_of) == ["Mara went to the Forge (working)"]


def test_a_routine_move_is_planned_without_the_worlds_exits():
    # Seed 002 日程: "忽略出口前往日程地点". The plan is made from places alone, so a locked door between the
    # cellar and the Forge cannot stop it; integration writes it as a move that ignores exits.
    assert plan("2031-03-14T16:00", mara_at="locked-cellar").moves[0] == agenda.Move("mara", "forge", "locked-cellar",
                                                                                      "working")


def test_mara_with_the_player_stays_and_the_narrator_hears_where_she_should_be():
    result = plan("2031-03-14T16:00", mara_at="hall", player_at="hall")
    assert result.moves == [] and result.activities == {} and result.writes == []
    assert result.hints == ["Mara should be at the Forge (working)"]


def test_a_character_already_following_this_window_is_left_alone():
    result = plan("2031-03-14T16:00", mara_at="tavern", cursors={"mara": "0@2031-03-14"})
    assert result.moves == [] and result.writes == []  # the story moved her; her window has not changed


def test_the_next_days_same_window_is_a_new_occurrence():
    result = plan("2031-03-17T10:00", mara_at="tavern", cursors={"mara": "0@2031-03-14"})
    assert [m.place for m in result.moves] == ["forge"]


def test_four_routine_less_characters_off_stage_during_a_skip_three_are_queued_one_waits():
    people = ["ash", "bryn", "cole", "dell", "edrin"]
    locations = {key: "market" for key in people} | {"edrin": "hall"}
    result = agenda.catch_up_plan(people, moment("2031-03-14T16:00"), routines={}, locations=locations, cursors={},
                                  protagonist_place="hall", skipping=True, excluded=frozenset({"ash"}))
    assert result.queued == ["bryn", "cole", "dell"] and result.waiting == []
    assert [w["slot"] for w in result.writes] == ["consolidation:bryn", "consolidation:cole", "consolidation:dell"]
    four = agenda.catch_up_plan(
        ["bryn", "cole", "dell", "fern"], moment("2031-03-14T16:00"), routines={}, locations={}, cursors={},
        protagonist_place="hall", skipping=True)
    assert four.queued == ["bryn", "cole", "dell"] and four.waiting == ["fern"]
    # With two already queued there is room for one.
    again = agenda.catch_up_plan(["fern", "gil"], moment("2031-03-14T16:00"), routines={}, locations={}, cursors={},
                                 protagonist_place="hall", skipping=True, queued=("bryn", "cole"))
    assert again.queued == ["fern"] and again.waiting == ["gil"]


def test_no_queue_without_a_skip():
    result = agenda.catch_up_plan(["bryn"], moment("2031-03-14T16:00"), routines={}, locations={}, cursors={},
                                  protagonist_place="hall")
    assert result.queued == [] and result.writes == []


def test_elsewhere_hints_for_those_present():
    routines = {"mara": agenda.parse_routine("mara", MARA_DAY)}
    hints = agenda.elsewhere_hints(["mara"], moment("2031-03-14T18:00"), routines=routines,
                                   locations={"mara": "hall"}, name_of=name_of)
    assert hints == ["Mara should be at the Tavern (drinking)"]
    assert agenda.elsewhere_hints(["mara"], moment("2031-03-14T18:00"), routines=routines,
                                  locations={"mara": "tavern"}) == []
