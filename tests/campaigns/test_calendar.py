"""The story calendar (seed 002 时间, WP2 scenario 7): dates and times read and said in words, pure."""

from datetime import date

import pytest

from campaigns.state.time import calendar
from campaigns.state.time.rules import Refused

LISBON = "Europe/Lisbon"


def at(text, tz=LISBON):
    return calendar.parse_instant(text, now_ms=0, tz=tz)


def said(ms, tz=LISBON):
    return calendar.describe_instant(ms, tz)


NOW = at("2031-03-14T08:00")  # a Friday


def test_the_second_tuesday_of_march_2031_is_the_eleventh():
    assert calendar.parse_rule("the second Tuesday of March 2031").fixed() == date(2031, 3, 11)
    assert said(calendar.parse_instant("the second Tuesday of March 2031 at 9am", now_ms=NOW, tz=LISBON)) == (
        "Tuesday 11 March 2031, 09:00 in the morning")


def test_the_15th_of_each_month_matches_that_day_of_every_month_and_no_other():
    rule = calendar.parse_rule("the 15th of each month")
    assert all(rule.matches(date(2031, month, 15)) for month in range(1, 13))
    assert not rule.matches(date(2031, 3, 14)) and not rule.matches(date(2031, 3, 16))
    # From the 14th of March, the next one is the next day.
    assert said(calendar.parse_instant("the 15th of each month", now_ms=NOW, tz=LISBON)) == (
        "Saturday 15 March 2031, 00:00 at night")


def test_a_31st_of_each_month_skips_the_short_months():
    rule = calendar.parse_rule("the 31st of every month")
    assert rule.first_from(date(2031, 4, 1)) == date(2031, 5, 31)


def test_july_is_winter_in_the_southern_hemisphere_and_summer_in_the_north():
    assert calendar.season(date(2031, 7, 10), "south") == "winter"
    assert calendar.season(date(2031, 7, 10), "north") == "summer"
    assert calendar.season(date(2031, 1, 10), "south") == "summer"
    southern = calendar.load_calendar({"hemisphere": "south"})
    assert calendar.parse_rule("winter").matches(date(2031, 7, 10), southern)
    assert not calendar.parse_rule("winter").matches(date(2031, 7, 10))


def test_a_festival_on_the_last_friday_of_october_except_2032():
    cal = calendar.load_calendar({"festivals": [
        {"name": "Harvest Fair", "rule": "the last Friday of October", "except": [2032]}]})
    octobers = [date(year, 10, day) for year in (2031, 2032, 2033) for day in range(1, 32)]
    assert [day for day in octobers if cal.festivals_on(day)] == [date(2031, 10, 31), date(2033, 10, 28)]
    # A festival is a day a rule or a routine may name.
    assert calendar.parse_rule("harvest fair", cal).matches(date(2031, 10, 31), cal)
    assert "(Harvest Fair)" in calendar.describe_instant(at("2031-10-31T12:00"), LISBON, cal)


def test_a_calendar_is_refused_whole_with_every_reason():
    with pytest.raises(Refused) as refused:
        calendar.load_calendar({"hemisphere": "east", "festivals": [
            {"name": "Fair", "rule": "the ninth Friday of October"}, {"rule": "1 May"},
            {"name": "Moot", "rule": "30 February"}]})
    reason = str(refused.value)
    assert "hemisphere 'east'" in reason and "festivals[0] (Fair)" in reason
    assert "festivals[1] has no name" in reason and "February has no day 30" in reason


def test_ninety_minutes_in_words():
    assert calendar.describe_duration(90 * 60) == "1 hour and 30 minutes"
    assert calendar.describe_duration(6 * 60) == "6 minutes"
    assert calendar.describe_duration(45) == "45 seconds"
    assert calendar.describe_duration(86_400 + 3 * 3600 + 4) == "1 day and 3 hours"
    assert calendar.describe_duration(0) == "no time"


@pytest.mark.parametrize("hour, part", [(0, "night"), (4, "night"), (5, "morning"), (11, "morning"),
                                        (12, "afternoon"), (16, "afternoon"), (17, "evening"), (20, "evening"),
                                        (21, "night"), (23, "night")])
def test_day_part_by_hour(hour, part):
    assert calendar.day_part(hour) == part


def test_an_instant_is_said_in_the_campaigns_time_zone():
    assert said(NOW) == "Friday 14 March 2031, 08:00 in the morning"
    assert said(NOW, "Asia/Tokyo") == "Friday 14 March 2031, 17:00 in the evening"
    assert said(at("2031-03-14T08:00Z", "Asia/Tokyo")) == said(NOW)  # Lisbon is on UTC in March


@pytest.mark.parametrize("text, expected", [
    ("14 March 20:00", "Friday 14 March 2031, 20:00 in the evening"),
    ("March 14, 2031 8pm", "Friday 14 March 2031, 20:00 in the evening"),
    ("tomorrow at 07:00", "Saturday 15 March 2031, 07:00 in the morning"),
    ("noon", "Friday 14 March 2031, 12:00 in the afternoon"),
    ("07:00", "Saturday 15 March 2031, 07:00 in the morning"),  # already past today: the next one
    ("7pm on the first Monday of each month", "Monday 7 April 2031, 19:00 in the evening"),
    ("every Monday and Thursday at 9:30", "Monday 17 March 2031, 09:30 in the morning"),
    ("the last Friday of October", "Friday 31 October 2031, 00:00 at night"),
    ("14 March 2030", "Thursday 14 March 2030, 00:00 at night"),  # a day in the past is still that day
    ("2031-03-20 18:30", "Thursday 20 March 2031, 18:30 in the evening"),
])
def test_instants_in_words(text, expected):
    assert said(calendar.parse_instant(text, now_ms=NOW, tz=LISBON)) == expected


@pytest.mark.parametrize("text", ["2d", "the ninth of never", "31 February", "25:00", "13pm", ""])
def test_what_is_not_a_day_or_time_is_refused_with_the_forms_it_could_take(text):
    with pytest.raises(Refused):
        calendar.parse_instant(text, now_ms=NOW, tz=LISBON)


def test_an_unknown_time_zone_names_what_a_zone_looks_like():
    with pytest.raises(Refused, match="IANA name"):
        calendar.zone("Mars/Olympus")


def test_a_date_range_over_new_year_recurs_every_year():
    rule = calendar.parse_rule("20 December to 6 January")
    assert rule.matches(date(2031, 12, 25)) and rule.matches(date(2032, 1, 6))
    assert not rule.matches(date(2032, 1, 7)) and not rule.matches(date(2031, 12, 19))
    with pytest.raises(Refused, match="ends before it starts"):
        calendar.parse_rule("6 January 2032 to 20 December 2031")


def test_a_window_past_midnight_belongs_to_the_day_it_started():
    window = calendar.parse_window({"start": "22:00", "end": "06:00", "days": ["fri"]})
    friday_night, saturday_small_hours = at("2031-03-14T23:00"), at("2031-03-15T03:00")
    assert calendar.in_window(friday_night, LISBON, window)
    assert calendar.in_window(saturday_small_hours, LISBON, window)  # it started on Friday
    assert not calendar.in_window(at("2031-03-16T03:00"), LISBON, window)  # Saturday night's is not Friday's


def test_next_time_of_day_days_later_counts_calendar_days():
    ten_pm = at("2031-03-14T22:00")
    assert said(calendar.next_time_of_day(ten_pm, LISBON, "07:00", 1)) == "Saturday 15 March 2031, 07:00 in the morning"
    assert said(calendar.next_time_of_day(ten_pm, LISBON, "07:00", 0)) == "Saturday 15 March 2031, 07:00 in the morning"
    six_am = at("2031-03-14T06:00")
    assert said(calendar.next_time_of_day(six_am, LISBON, "07:00", 0)) == "Friday 14 March 2031, 07:00 in the morning"
    assert said(calendar.next_time_of_day(six_am, LISBON, "07:00", 1)) == "Saturday 15 March 2031, 07:00 in the morning"


def test_local_times_follow_daylight_saving():
    # Lisbon moves to summer time at 01:00 UTC on the last Sunday of March 2031 (the 30th).
    before, after = at("2031-03-29T12:00"), at("2031-03-30T12:00")
    assert after - before == 23 * 3600 * 1000
