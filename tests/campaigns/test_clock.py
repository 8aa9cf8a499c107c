"""The story clock (seed 002 时间; WP2 scenarios 1-4 and 6): caps, skips, modes, travel — pure, no database."""

import pytest

from campaigns.state.time import calendar, clock
from campaigns.state.time.clock import Clock, Settings
from campaigns.state.time.rules import Refused

LISBON = "Europe/Lisbon"
SETTINGS = Settings(time_zone=LISBON)
MINUTE = 60_000


def ms(text):
    return calendar.parse_instant(text, now_ms=0, tz=LISBON)


def started(text="2031-03-14T08:00"):
    return clock.start(SETTINGS, created_ms=ms("2031-01-01T00:00"), starting_time=text).clock


def said(step):
    return calendar.describe_instant(step.clock.at, LISBON)


# Scenario 1: the start.

def test_a_world_starting_time_starts_the_clock_there_in_the_campaigns_zone():
    step = clock.start(SETTINGS, created_ms=ms("2031-01-01T00:00"), starting_time="2031-03-14 08:00")
    assert said(step) == "Friday 14 March 2031, 08:00 in the morning"
    assert step.log == {"type": "clock_start", "turn": 0, "round": 0, "from": step.clock.at, "to": step.clock.at,
                        "starting_time": "2031-03-14 08:00"}
    assert step.writes == [{"slot": "clock", "kind": "clock", "subject": "", "value": str(step.clock.at),
                            "data": {"mode": "simulated", "time_zone": LISBON, "simulated_used": True},
                            "narrator_only": False}]


def test_without_a_starting_time_the_clock_starts_at_the_creation_floored_to_the_minute():
    created = ms("2031-05-02T10:17") + 42_123
    step = clock.start(SETTINGS, created_ms=created)
    assert step.clock.at == ms("2031-05-02T10:17")
    assert not step.clock.simulated_used


def test_a_clock_record_reads_back_as_the_same_clock():
    now = started()
    record = now.write()
    assert Clock.from_record(record["value"], record["data"]) == now


# Scenario 2: rounds.

def test_a_round_with_no_elapsed_time_takes_the_campaigns_30_seconds():
    now = started()
    step = clock.elapse(now, SETTINGS, turn=1, round=1)
    assert step.clock.at - now.at == 30_000
    assert step.log["type"] == "elapse" and step.log["seconds"] == 30 and step.log["turn"] == 1
    assert clock.elapse(now, Settings(time_zone=LISBON, round_seconds=90), turn=1, round=1).seconds == 90


def test_a_round_of_an_hour_moves_an_hour():
    step = clock.elapse(started(), SETTINGS, seconds=3600, turn=1, round=1)
    assert said(step) == "Friday 14 March 2031, 09:00 in the morning"


def test_a_round_of_more_than_a_day_is_refused_not_clamped():
    with pytest.raises(Refused, match="at most one day"):
        clock.elapse(started(), SETTINGS, seconds=86_401, turn=1, round=1)
    assert clock.elapse(started(), SETTINGS, seconds=86_400, turn=1, round=1).seconds == 86_400


@pytest.mark.parametrize("seconds", [-5, 1.5, "soon", True])
def test_a_round_of_a_negative_or_non_whole_time_is_refused(seconds):
    with pytest.raises(Refused):
        clock.elapse(started(), SETTINGS, seconds=seconds, turn=1, round=1)


# Scenario 3: skips.

def test_a_skip_by_90_minutes_keeps_its_reason_in_the_log():
    step = clock.skip(started(), SETTINGS, by_minutes=90, reason="they rest", turn=2, round=0)
    assert said(step) == "Friday 14 March 2031, 09:30 in the morning"
    assert step.log["type"] == "skip" and step.log["reason"] == "they rest" and step.log["seconds"] == 5400


def test_a_skip_until_07_00_one_day_later_from_22_00_ends_the_next_morning():
    step = clock.skip(started("2031-03-14T22:00"), SETTINGS, until_time="07:00", days_later=1, reason="sleep",
                      turn=1, round=0)
    assert said(step) == "Saturday 15 March 2031, 07:00 in the morning"


def test_a_skip_of_31_days_is_refused_naming_max_skip_days():
    with pytest.raises(Refused, match=r"clock.maxSkipDays \(30 days\)"):
        clock.skip(started(), SETTINGS, by_minutes=31 * 24 * 60, reason="the voyage", turn=1, round=0)
    assert clock.skip(started(), SETTINGS, by_minutes=30 * 24 * 60, reason="the voyage", turn=1, round=0)
    with pytest.raises(Refused, match="maxSkipDays"):
        clock.skip(started(), SETTINGS, until_time="08:00", days_later=31, reason="the voyage", turn=1, round=0)


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_a_skip_without_a_reason_is_refused(reason):
    with pytest.raises(Refused, match="needs a reason"):
        clock.skip(started(), SETTINGS, by_minutes=10, reason=reason, turn=1, round=0)


def test_a_skip_gives_minutes_or_a_time_not_both_and_only_forwards():
    with pytest.raises(Refused, match="either by_minutes or until_time"):
        clock.skip(started(), SETTINGS, by_minutes=10, until_time="07:00", reason="r", turn=1, round=0)
    with pytest.raises(Refused, match="either by_minutes or until_time"):
        clock.skip(started(), SETTINGS, reason="r", turn=1, round=0)
    with pytest.raises(Refused, match="at least one minute"):
        clock.skip(started(), SETTINGS, by_minutes=0, reason="r", turn=1, round=0)


# Scenario 4: real mode.

REAL = Settings(mode="real", time_zone=LISBON)


def real_clock(at="2031-03-14T08:00"):
    return clock.start(REAL, created_ms=ms(at)).clock


def test_a_real_clock_cannot_skip():
    with pytest.raises(Refused, match="cannot be skipped"):
        clock.skip(real_clock(), REAL, by_minutes=10, reason="rest", turn=1, round=0)


def test_a_real_clock_never_goes_back():
    now = real_clock()
    assert clock.turn_start(now, wall_ms=now.at - 10 * MINUTE, turn=1) is None
    assert clock.real(now, wall_ms=now.at - MINUTE, turn=1, round=1) is None
    with pytest.raises(Refused, match="never goes back"):
        clock.apply(now, REAL, {"type": "real"}, wall_ms=now.at - MINUTE, turn=1, round=1)
    step = clock.real(now, wall_ms=now.at + 12_000, turn=1, round=1)
    assert step.log["type"] == "real" and step.seconds == 12


def test_real_to_simulated_continues_from_the_later_of_story_and_wall_time():
    now = real_clock()
    assert clock.switch_mode(now, "simulated", wall_ms=now.at + 5 * MINUTE, turn=1, round=0).clock.at == (
        now.at + 5 * MINUTE)
    ahead = Clock(now.at + 60 * MINUTE, "real", LISBON)
    switched = clock.switch_mode(ahead, "simulated", wall_ms=now.at, turn=1, round=0).clock
    assert switched.at == ahead.at and switched.mode == "simulated"


def test_simulated_to_real_is_refused_once_simulated_dates_were_used():
    fresh = clock.start(SETTINGS, created_ms=ms("2031-03-14T08:00")).clock
    assert clock.switch_mode(fresh, "real", wall_ms=fresh.at + MINUTE, turn=0, round=0).clock.mode == "real"
    used = clock.elapse(fresh, SETTINGS, turn=1, round=1).clock
    with pytest.raises(Refused, match="never follow the wall clock"):
        clock.switch_mode(used, "real", wall_ms=used.at + MINUTE, turn=1, round=0)
    with pytest.raises(Refused, match="never follow the wall clock"):
        clock.switch_mode(started(), "real", wall_ms=ms("2031-03-14T09:00"), turn=0, round=0)


def test_a_return_after_6_minutes_tells_the_narrator_6_minutes_and_after_4_nothing():
    now = real_clock()
    six = clock.turn_start(now, wall_ms=now.at + 6 * MINUTE, last_seen_ms=now.at, turn=2)
    assert "away for 6 minutes" in six.notice and six.log["away_seconds"] == 360
    four = clock.turn_start(now, wall_ms=now.at + 4 * MINUTE, last_seen_ms=now.at, turn=2)
    assert four.notice == "" and four.clock.at == now.at + 4 * MINUTE


def test_a_line_left_behind_by_undo_resyncs_to_the_wall_without_calling_it_an_absence():
    # Decision D7: this line's clock is an hour behind because the person undid; they last played a minute ago.
    behind = real_clock()
    wall = behind.at + 61 * MINUTE
    step = clock.turn_start(behind, wall_ms=wall, last_seen_ms=wall - MINUTE, turn=3)
    assert step.log["type"] == "resync" and step.clock.at == wall
    assert step.log["trailed_seconds"] == 3600 and step.notice == ""


def test_a_simulated_clock_never_resyncs_to_the_wall():
    assert clock.turn_start(started(), wall_ms=ms("2040-01-01T00:00"), turn=1) is None


# Scenario 6: travel.

def test_a_30_second_round_crossing_exits_of_30_and_20_seconds_is_lengthened_to_50_and_says_so():
    travel = clock.round_travel([[30, 20]])  # Hall -> Corridor -> Vault
    step = clock.elapse(started(), SETTINGS, seconds=30, travel_seconds=travel, turn=1, round=1)
    assert step.seconds == 50
    assert step.log["lengthened_from"] == 30 and step.log["travel_seconds"] == 50
    assert step.notice == "The round was lengthened from 30 seconds to 50 seconds: the journey takes that long."
    # A round already long enough is left alone.
    assert clock.elapse(started(), SETTINGS, seconds=60, travel_seconds=50, turn=1, round=1).notice == ""


def test_the_longest_journey_of_a_round_counts_because_people_travel_at_once():
    assert clock.round_travel([[30, 20], [90], []]) == 90
    assert clock.round_travel([]) == 0


def test_a_journey_longer_than_a_day_cannot_fit_one_round():
    with pytest.raises(Refused, match="more than the one day"):
        clock.elapse(started(), SETTINGS, travel_seconds=90_000, turn=1, round=1)


# The event entry point.

def test_clock_events_go_through_one_entry_point_and_need_a_started_clock():
    with pytest.raises(Refused, match="has not started"):
        clock.apply(None, SETTINGS, {"type": "elapse"}, wall_ms=0, turn=1, round=1)
    first = clock.apply(None, SETTINGS, {"type": "clock_start", "starting_time": "2031-03-14T08:00"},
                        wall_ms=ms("2031-01-01T00:00"), turn=0, round=0)
    with pytest.raises(Refused, match="already started"):
        clock.apply(first.clock, SETTINGS, {"type": "clock_start"}, wall_ms=0, turn=0, round=0)
    skipped = clock.apply(first.clock, SETTINGS, {"type": "skip", "by_minutes": 90, "reason": "they rest"},
                          wall_ms=0, turn=1, round=0)
    assert skipped.clock.at == first.clock.at + 90 * MINUTE
    with pytest.raises(Refused, match="unknown clock event"):
        clock.apply(first.clock, SETTINGS, {"type": "rewind"}, wall_ms=0, turn=1, round=0)


def test_campaign_clock_settings_are_checked_with_every_reason():
    with pytest.raises(Refused) as refused:
        Settings(mode="lunar", time_zone="Nowhere/Here", round_seconds=0, max_skip_days=400).check()
    reason = str(refused.value)
    assert all(word in reason for word in ("lunar", "Nowhere/Here", "round_seconds", "max_skip_days"))


def test_a_real_clock_cannot_start_at_a_worlds_starting_time():
    with pytest.raises(Refused, match="follows the wall clock and cannot start"):
        clock.start(REAL, created_ms=ms("2031-01-01T00:00"), starting_time="2031-03-14T08:00")
