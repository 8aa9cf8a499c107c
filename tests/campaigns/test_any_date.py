"""Story time for any date a story can be set in (issue 25, point 3): year 1 to the end of 9999.

The clock, the calendar, routines, engagements, intents, triggers, skips and
the world file's export each run at year 1, 1066, 1892, the last minute of
1969, the first of 1970, the 32-bit edge of 19 January 2038 and 9999; the
demo, as shipped (Greyhollow, October 1892), rings its midnight bell at
midnight, on a turn and on a skip.
"""

import json

import pytest

from campaigns import worldfile
from campaigns.models import StateEvent
from campaigns.state.time import calendar, clock, rulebook
from campaigns.state.time.rules import Refused
from storyteller.management.commands.seed_demo import DEMO_WORLD
from tests.campaigns.test_story_time import correct, now, play, rules_document, skip
from tests.campaigns.test_world import ev

MINUTE = 60_000

# The day each story starts on (at 23:59 UTC, a minute before the next day), and that next day in words: the
# weekday is the proleptic Gregorian calendar's (1 January of year 1 was a Monday).
DAYS = {
    "year 1": ("0001-01-03", "Thursday 4 January 1"),
    "1066": ("1066-10-14", "Monday 15 October 1066"),
    "1892": ("1892-10-28", "Saturday 29 October 1892"),
    "the last minute of 1969": ("1969-12-31", "Thursday 1 January 1970"),
    "the first day of 1970": ("1970-01-01", "Friday 2 January 1970"),
    "19 January 2038 (the 32-bit edge at 03:14:07)": ("2038-01-18", "Tuesday 19 January 2038"),
    "9999": ("9999-12-28", "Wednesday 29 December 9999"),
}


def story_at(day):
    """Lantern Keep starting at 23:59 UTC on ``day``: a minute a turn, the bell at midnight and a minute after,
    a trigger for 00:01 the next day, an engagement and a deadline then."""
    following = calendar.local(calendar.parse_instant(f"{day}T12:00", now_ms=0, tz="UTC") + 86_400_000, "UTC")
    tomorrow = following.date().isoformat()
    doc = rules_document(starting_time=f"{day}T23:59", clock={"time_zone": "UTC", "round_seconds": 60})
    doc["triggers"] = [
        {"id": "midnight", "when": {"type": "time", "every": "00:00"}, "max_fires": 5, "beat": "The bell tolls.",
         "effects": [{"type": "variable_change", "subject": "Mara", "object": "debt", "data": {"by": 1}}]},
        {"id": "minute-past", "when": {"type": "time", "every": "00:01"}, "max_fires": 5, "beat": "It echoes."},
        {"id": "the-day", "when": {"type": "time", "after": f"{tomorrow}T00:01"}, "beat": "The day has come.",
         "announce": {"audience": "everyone", "text": "The gate opens at one past midnight",
                      "at": f"{tomorrow}T00:01"}},
    ]
    doc["engagements"] = [{"id": "watch", "who": "Mara", "at": f"{tomorrow}T00:01", "place": "Tower",
                           "what": "the midnight watch"}]
    doc["intents"] = [{"who": "Mara", "id": "leave", "plan": "leave the Keep", "deadline": f"{tomorrow}T12:00"}]
    return doc, tomorrow


@pytest.mark.parametrize("day, said", DAYS.values(), ids=DAYS.keys())
def test_the_clock_triggers_routines_engagements_skips_and_export_keep_any_date(owner, day, said):
    doc, tomorrow = story_at(day)
    campaign, findings = worldfile.create_campaign(owner, doc)
    assert [f for f in findings if f.severity == "error"] == []
    state = now(campaign)
    assert rulebook.now_of(state) == calendar.to_ms(calendar.local(rulebook.now_of(state), "UTC"))
    assert rulebook.clock_of(state).describe().endswith("23:59 at night")
    assert {t.id: s.status for t, s in rulebook.triggers_of(state)} == {
        "midnight": "dormant", "minute-past": "dormant", "the-day": "dormant"}

    play(campaign)  # 23:59 -> 00:00
    state = now(campaign)
    assert rulebook.clock_of(state).describe() == f"{said}, 00:00 at night"
    statuses = {t.id: s for t, s in rulebook.triggers_of(state)}
    assert (statuses["midnight"].status, statuses["midnight"].fires) == ("fired", 1)
    assert statuses["minute-past"].status == "dormant"
    assert rulebook.values_of(state)[("mara", "debt")] == 1, "the bell's effect applied"

    play(campaign)  # 00:00 -> 00:01: the previous check's time is midnight (0 ms on 1 January 1970)
    state = now(campaign)
    statuses = {t.id: s for t, s in rulebook.triggers_of(state)}
    assert (statuses["minute-past"].status, statuses["minute-past"].fires) == ("fired", 1)
    assert statuses["the-day"].status == "fired"
    assert statuses["midnight"].fires == 1, "midnight passed once"
    at = rulebook.now_of(state)
    [watch] = rulebook.engagements_of(state)
    assert watch.at == at and not watch.overdue(at)
    assert watch.overdue(at + 31 * MINUTE)
    [leave] = rulebook.intents_of(state)
    assert leave.deadline == at + (12 * 60 - 1) * MINUTE
    rejected = StateEvent.objects.filter(campaign=campaign, status="rejected")
    assert list(rejected.values_list("reason", flat=True)) == []

    correct(campaign, owner, ev("move", "Edrin", "Yard"))
    assert skip(campaign, owner, reason="the day goes by", until_time="17:30").status == "applied"
    state = now(campaign)
    assert rulebook.clock_of(state).describe() == f"{said}, 17:30 in the evening"
    assert state.location_of("mara") == "tavern", "her routine moved her for the evening"

    exported = worldfile.export(state, campaign)
    assert exported["starting_time"] == f"{tomorrow}T17:30:00"
    again, _ = worldfile.create_campaign(owner, exported)
    assert rulebook.now_of(now(again)) == rulebook.now_of(state)


def test_midnight_on_the_first_of_january_1970_is_a_time_the_triggers_count_from(owner):
    doc = rules_document(starting_time="1970-01-01T00:00", clock={"time_zone": "UTC", "round_seconds": 60})
    doc["triggers"] = [{"id": "minute-past", "when": {"type": "time", "every": "00:01"}, "beat": "It echoes."}]
    campaign, _ = worldfile.create_campaign(owner, doc)
    assert rulebook.now_of(now(campaign)) == 0
    play(campaign)
    [(_, status)] = rulebook.triggers_of(now(campaign))
    assert status.status == "fired", "00:00 -> 00:01 passed 00:01, though the time before was 0 ms"


def test_story_time_ends_on_30_december_9999_and_a_skip_past_it_is_refused_in_words(owner):
    doc = rules_document(starting_time="9999-12-29T20:00", clock={"time_zone": "Pacific/Kiritimati"})
    doc["triggers"] = [{"id": "mondays", "when": {"type": "time", "every": "09:00", "days": "mon"}, "beat": "Bells."}]
    campaign, findings = worldfile.create_campaign(owner, doc)
    assert [f for f in findings if f.severity == "error"] == []
    play(campaign)
    refused = skip(campaign, owner, reason="a long sleep", by_minutes=3 * 24 * 60)
    assert refused.status == "rejected"
    assert refused.reason == "story time would pass 30 December 9999, where story time ends; nothing was moved"
    refused = skip(campaign, owner, reason="a long sleep", until_time="07:00", days_later=5)
    assert refused.status == "rejected" and "past the last day story time has (31 December 9999)" in refused.reason
    with pytest.raises(worldfile.WorldRefused) as refusal:
        worldfile.create_campaign(owner, rules_document(starting_time="9999-12-31T12:00"))
    assert ("starting_time: starting_time is after story time's range: story time runs from 3 January 1 to "
            "30 December 9999 (UTC)") in refusal.value.reasons


def test_a_rule_searched_ahead_at_the_end_of_9999_stops_at_the_last_day():
    end = calendar.parse_instant("9999-12-29T12:00", now_ms=0, tz="UTC")
    assert calendar.parse_rule("the last Friday of each month").first_from(calendar.local(end, "UTC").date()) == (
        calendar.local(end, "UTC").date().replace(day=31))
    assert calendar.parse_rule("every 15th").first_from(calendar.local(end, "UTC").date()) is None
    window = calendar.parse_window({"start": "09:00", "end": "17:00", "days": "sat"})
    assert window.next_start(calendar.moment(end, "UTC")) is None, "no Saturday is left"
    with pytest.raises(Refused, match="names no day in the next four years"):
        calendar.parse_instant("every 15th at 09:00", now_ms=end, tz="UTC")


@pytest.mark.parametrize("ms", [clock.EARLIEST_MS, -62_135_596_800_000 + 3 * 86_400_000 + 1, -2_435_356_800_000,
                                -60_000, -1, 0, 1, 2_147_483_647_000, 2_147_483_648_001, clock.LATEST_MS])
def test_an_instant_reads_and_writes_back_to_the_millisecond_in_any_time_zone(ms):
    for tz in ("UTC", "Europe/London", "Pacific/Kiritimati", "Pacific/Pago_Pago", "America/Lima"):
        assert calendar.to_ms(calendar.local(ms, tz)) == ms


def test_every_time_field_of_the_events_agrees_with_the_clocks_range():
    from campaigns.state.registry import TYPES

    instants = {(name, field): spec for name, kind in TYPES.items() for field, spec in kind.fields.items()
                if field in ("since", "wall_ms", "last_seen_ms")}
    assert instants, "the clock's events carry instants"
    for spec in instants.values():
        assert (spec.minimum, spec.maximum) == (clock.EARLIEST_MS, clock.LATEST_MS)


# --- the demo, as shipped ----------------------------------------------------------------------------------------


@pytest.fixture
def greyhollow(owner):
    campaign, _ = worldfile.create_campaign(owner, json.loads(DEMO_WORLD.read_text()))
    return campaign


def bell(campaign):
    return next(status for trigger, status in rulebook.triggers_of(now(campaign)) if trigger.id == "midnight-bell")


def test_the_demo_rings_its_midnight_bell_when_the_story_reaches_midnight(greyhollow, owner):
    assert rulebook.clock_of(now(greyhollow)).describe() == "Friday 28 October 1892, 19:40 in the evening"
    assert skip(greyhollow, owner, reason="the evening wears on", until_time="23:59").status == "applied"
    assert bell(greyhollow).status == "dormant"
    play(greyhollow, "listen to the wind")  # 23:59:30
    assert bell(greyhollow).status == "dormant"
    play(greyhollow, "wait for midnight")  # 00:00:00
    state = now(greyhollow)
    assert rulebook.clock_of(state).describe() == "Saturday 29 October 1892, 00:00 at night"
    assert (bell(greyhollow).status, bell(greyhollow).fires) == ("fired", 1)
    assert rulebook.values_of(state)[("world", "unease")] == 4, "unease rose from 3"
    [beat] = [note for note in rulebook.notes_of(state) if note.trigger == "midnight-bell"]
    assert beat.status == "pending" and beat.text.startswith("The cracked chapel bell tolls once at midnight")
    assert not StateEvent.objects.filter(campaign=greyhollow, status="rejected").exists()


def test_the_demos_bell_rings_again_on_a_skip_past_the_next_midnight(greyhollow, owner):
    skip(greyhollow, owner, reason="the evening wears on", until_time="23:59")
    play(greyhollow)
    play(greyhollow)
    assert bell(greyhollow).fires == 1
    assert skip(greyhollow, owner, reason="a day in the village", by_minutes=24 * 60).status == "applied"
    assert (bell(greyhollow).status, bell(greyhollow).fires) == ("fired", 2)
    assert rulebook.values_of(now(greyhollow))[("world", "unease")] == 5
