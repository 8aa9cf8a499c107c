"""The story calendar: Gregorian dates and times of day in the story's time zone, read and said in words.

Pure and deterministic (seed 002 时间: "inWindow, nextTimeOfDay, parseInstant,
describeInstant, describeDuration, dayPart"; months, dates, date ranges, days
of the month, the nth weekday of a month, seasons by hemisphere, world
festivals and their exclusions). Instants are UTC milliseconds; the time zone
only changes how they are read and said. The grammar is documented in
``docs/rules.md``; anything outside it is refused with what was expected.
"""

import re
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .rules import Refused

MONTHS = {name: number for number, names in enumerate((
    ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
    ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
    ("december", "dec")), start=1) for name in names}
MONTH_NAMES = ("", "January", "February", "March", "April", "May", "June", "July", "August", "September",
               "October", "November", "December")
# datetime.weekday() numbering: Monday is 0.
WEEKDAYS = {name: number for number, names in enumerate((
    ("monday", "mon"), ("tuesday", "tue", "tues"), ("wednesday", "wed"), ("thursday", "thu", "thur", "thurs"),
    ("friday", "fri"), ("saturday", "sat"), ("sunday", "sun"))) for name in names}
WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
ORDINALS = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4,
            "fifth": 5, "5th": 5, "last": -1}
HEMISPHERES = ("north", "south")
# Meteorological seasons, whole months, northern hemisphere; the south is six months on.
SEASONS = {12: "winter", 1: "winter", 2: "winter", 3: "spring", 4: "spring", 5: "spring", 6: "summer", 7: "summer",
           8: "summer", 9: "autumn", 10: "autumn", 11: "autumn"}
_OPPOSITE_SEASON = {"winter": "summer", "summer": "winter", "spring": "autumn", "autumn": "spring"}
# (hour the part ends, its name): 05:00 is morning, 12:00 afternoon, 17:00 evening, 21:00 night.
DAY_PARTS = ((5, "night"), (12, "morning"), (17, "afternoon"), (21, "evening"), (24, "night"))
DAY_MS = 86_400_000
# How far ahead a repeating rule is searched for its next day: every rule of the
# grammar repeats within four years (the 29th of February is the longest).
HORIZON_DAYS = 4 * 366 + 1
# Festivals and markers of one calendar, and exclusions of one festival.
MAX_ENTRIES = 200


def zone(name):
    """Return the ZoneInfo called ``name``, or refuse with what a time zone looks like."""
    try:
        return _zone(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise Refused(f"unknown time zone {name!r}; use an IANA name such as 'Europe/Lisbon' or 'UTC'") from None


@lru_cache(maxsize=64)
def _zone(name):
    return ZoneInfo(name)


# Instants are counted from here in whole milliseconds, on the proleptic Gregorian calendar both ways: no float
# (a year-1 instant is 6.2e13 ms) and no platform's time functions (some refuse instants before 1970).
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MS = timedelta(milliseconds=1)


def local(ms, tz):
    """Return the aware local datetime of the UTC instant ``ms`` in the time zone named ``tz``."""
    return (EPOCH + timedelta(milliseconds=ms)).astimezone(zone(tz))


def to_ms(moment):
    """Return the UTC milliseconds of an aware datetime."""
    return (moment - EPOCH) // MS


def days_from(day, count):
    """Yield ``day`` and the ``count - 1`` days after it, stopping at the last day a date can be (9999-12-31): a
    search ahead near the end of story time ends there instead of failing."""
    for _ in range(count):
        yield day
        if day == date.max:
            return
        day += timedelta(days=1)


def later(day, days):
    """Return the day ``days`` after ``day``, or refuse one past the last day a date can be."""
    try:
        return day + timedelta(days=days)
    except OverflowError:
        raise Refused(f"{days} days after {day.isoformat()} is past the last day story time has "
                      "(31 December 9999)") from None


def at_local(day, minute, tz):
    """Return the UTC ms of ``minute`` past midnight on the local ``day`` (a gap in the clocks moves it on)."""
    naive = datetime.combine(day, time()) + timedelta(minutes=minute)
    return to_ms(naive.replace(tzinfo=zone(tz)))


# --- rules: sets of days -------------------------------------------------------------------------------------------


class Rule:
    """A set of days: ``matches(day, calendar)``, and the first matching day from one onwards."""

    def matches(self, day, calendar=None):
        raise NotImplementedError

    def fixed(self):
        """Return the one day this rule names, when it names exactly one; else None."""
        return None

    def first_from(self, day, calendar=None):
        """Return the first day on or after ``day`` that matches, or None within ``HORIZON_DAYS``."""
        one = self.fixed()
        if one is not None:
            return one if one >= day else None
        return next((candidate for candidate in days_from(day, HORIZON_DAYS) if self.matches(candidate, calendar)),
                    None)


@dataclass(frozen=True)
class On(Rule):
    """A day of a month: one date when ``year`` is given, else every year (the 29th of February: leap years)."""

    month: int
    day: int
    year: int | None = None

    def matches(self, day, calendar=None):
        return day.day == self.day and day.month == self.month and (self.year is None or day.year == self.year)

    def fixed(self):
        return date(self.year, self.month, self.day) if self.year is not None else None


@dataclass(frozen=True)
class MonthDay(Rule):
    """The same day of every month ("the 15th of each month"); months too short for it are skipped."""

    day: int

    def matches(self, day, calendar=None):
        return day.day == self.day


@dataclass(frozen=True)
class NthWeekday(Rule):
    """The nth (1-5, or -1 for the last) weekday of a month, of every month when ``month`` is None."""

    n: int
    weekday: int
    month: int | None = None
    year: int | None = None

    def matches(self, day, calendar=None):
        if day.weekday() != self.weekday or (self.month and day.month != self.month):
            return False
        if self.year is not None and day.year != self.year:
            return False
        if self.n == -1:
            return day.day > _month_end(day.year, day.month).day - 7
        return (day.day - 1) // 7 + 1 == self.n

    def fixed(self):
        if self.year is None or self.month is None:
            return None
        return nth_weekday(self.year, self.month, self.weekday, self.n)


@dataclass(frozen=True)
class Weekdays(Rule):
    days: frozenset

    def matches(self, day, calendar=None):
        return day.weekday() in self.days


@dataclass(frozen=True)
class Month(Rule):
    month: int
    year: int | None = None

    def matches(self, day, calendar=None):
        return day.month == self.month and (self.year is None or day.year == self.year)


@dataclass(frozen=True)
class Year(Rule):
    year: int

    def matches(self, day, calendar=None):
        return day.year == self.year


@dataclass(frozen=True)
class Span(Rule):
    """From one day to another, both included; without years it recurs every year and may wrap past New Year."""

    start: On
    end: On

    def matches(self, day, calendar=None):
        if self.start.year is not None:
            return self.start.fixed() <= day <= self.end.fixed()
        here, first, last = (day.month, day.day), (self.start.month, self.start.day), (self.end.month, self.end.day)
        return first <= here <= last if first <= last else here >= first or here <= last


@dataclass(frozen=True)
class Season(Rule):
    name: str

    def matches(self, day, calendar=None):
        return season(day, calendar.hemisphere if calendar else "north") == self.name


@dataclass(frozen=True)
class Named(Rule):
    """A festival or marker of the campaign's calendar, looked up when matched."""

    name: str

    def matches(self, day, calendar=None):
        entry = calendar.entry(self.name) if calendar else None
        return entry is not None and entry.on(day, calendar)


def nth_weekday(year, month, weekday, n):
    """Return the date of the nth (or, n = -1, the last) ``weekday`` of the month, or None when there is none."""
    if n == -1:
        last = _month_end(year, month)
        return last - timedelta(days=(last.weekday() - weekday) % 7)
    first = date(year, month, 1)
    day = first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))
    return day if day.month == month else None


def _month_end(year, month):
    if month == 12:
        return date(year, 12, 31)
    return date(year, month + 1, 1) - timedelta(days=1)


def season(day, hemisphere="north"):
    """Return the season of ``day`` (meteorological: whole months) in the ``hemisphere``."""
    name = SEASONS[day.month]
    return name if hemisphere == "north" else _OPPOSITE_SEASON[name]


def day_part(hour):
    """Return the part of the day an hour (0-23) falls in: night, morning, afternoon or evening."""
    for end, name in DAY_PARTS:
        if hour < end:
            return name
    raise Refused(f"hour {hour} is not between 0 and 23")


# --- parsing ------------------------------------------------------------------------------------------------------

_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_MONTH = "(" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_WEEKDAY = "(" + "|".join(sorted(WEEKDAYS, key=len, reverse=True)) + r")s?"
_ORDINAL = "(" + "|".join(ORDINALS) + ")"
_YEAR = r"(\d{4})"
_PATTERNS = [
    ("iso", re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")),
    ("day_month", re.compile(rf"{_DAY} (?:of )?{_MONTH}(?: {_YEAR})?")),
    ("month_day", re.compile(rf"{_MONTH} {_DAY}(?: {_YEAR})?")),
    ("nth_weekday", re.compile(rf"{_ORDINAL} {_WEEKDAY} (?:of|in) (?:(?:each|every) month|{_MONTH}(?: {_YEAR})?)")),
    ("month_day_each", re.compile(rf"{_DAY} (?:day )?(?:of|in) (?:each|every) month|(?:each|every) {_DAY}")),
    ("month", re.compile(rf"(?:(?:all|the whole) of )?{_MONTH}(?: {_YEAR})?")),
    ("year", re.compile(_YEAR)),
    ("season", re.compile(r"(spring|summer|autumn|fall|winter)")),
    ("weekdays", re.compile(r"(?:(?:every|each|on) )?(weekdays|weekends|working days)")),
]
_WEEKDAY_LIST = re.compile(rf"(?:(?:every|each|on) )?{_WEEKDAY}(?:(?:, | and | or |, and ){_WEEKDAY})*")
_WEEKDAY_WORD = re.compile(_WEEKDAY)
_SPAN = re.compile(r"(?:from |between )?(.+?) (?:to|until|till|through|and|-|–) (.+)")
_LEAD = re.compile(r"^(?:the |on |every year on )+")


def _clean(text):
    text = " ".join(str(text or "").lower().replace(",", " ").split()).strip(" .")
    return _LEAD.sub("", text)


# The longest rule or instant read: "the second Wednesday of September 2031 at 11:30 pm" is 50 characters, a
# range of two such days about 100. Longer text is refused before any pattern is tried.
MAX_RULE = 200


def _bounded(text, what):
    """Return ``text`` as a string a pattern may read, or refuse a value that is not text or is far too long."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise Refused(f"{what} must be text such as '14 March 2031', not {type(text).__name__}")
    text = str(text)
    if len(text) > MAX_RULE:
        raise Refused(f"{what} is {len(text):,} characters long; a day or a time is written in at most {MAX_RULE}")
    return text


def parse_rule(text, calendar=None):
    """Return the Rule (a set of days) that ``text`` names, or refuse with the forms it could take.

    ``calendar`` resolves festival and marker names; without one a name is refused.
    """
    text = _bounded(text, "a day")
    rule = _rule(_clean(text), calendar)
    if rule is None:
        raise Refused(f"cannot read {str(text)!r} as a day: write a date ('14 March 2031', '2031-03-14', "
                      "'March 14'), 'the second Tuesday of March 2031', 'the 15th of each month', 'every Monday', "
                      "'weekdays', a month, a season, a range ('20 December to 6 January') or a festival's name")
    return rule


def _rule(text, calendar):
    if calendar is not None and calendar.entry(text) is not None:
        return Named(text)
    day = _day(text)
    if day is not None:
        return day
    span = _SPAN.fullmatch(text)
    if span:
        # A range's ends are single days, read without looking for ranges again: "a to a to …" recursed once per "to".
        start, end = _day(_clean(span.group(1))), _day(_clean(span.group(2)))
        if isinstance(start, On) and isinstance(end, On):
            if (start.year is None) != (end.year is None):
                raise Refused(f"the range {text!r} gives a year at one end only; give both or neither")
            if start.year is not None and start.fixed() > end.fixed():
                raise Refused(f"the range {text!r} ends before it starts")
            return Span(start, end)
    return Named(text) if calendar is STORED and text else None


def _day(text):
    """Return the Rule of one day, month, season or set of weekdays of the grammar (no range, no name), or None."""
    for kind, pattern in _PATTERNS:
        found = pattern.fullmatch(text)
        if found:
            return _BUILD[kind](found.groups())
    if _WEEKDAY_LIST.fullmatch(text):
        return Weekdays(frozenset(WEEKDAYS[name] for name in _WEEKDAY_WORD.findall(text)))
    return None


class _Stored:
    """The calendar a stored rule is read back with: a name the grammar does not know was a festival or marker
    of the campaign's calendar when the rule was stored (and checked then); it is looked up when matched."""

    hemisphere = "north"

    def entry(self, name):
        return None


STORED = _Stored()


def _on(month, day, year):
    limit = 29 if month == 2 else _month_end(2001, month).day
    if not 1 <= day <= limit:
        raise Refused(f"{MONTH_NAMES[month]} has no day {day}")
    if year is not None:
        try:
            date(year, month, day)
        except ValueError:
            raise Refused(f"{MONTH_NAMES[month]} {year} has no day {day}") from None
    return On(month, day, year)


def _year(text):
    return int(text) if text else None


def _day_of_month(text):
    day = int(text)
    if not 1 <= day <= 31:
        raise Refused(f"no month has a day {day}")
    return MonthDay(day)


_BUILD = {
    "iso": lambda g: _on(int(g[1]), int(g[2]), int(g[0])) if 1 <= int(g[1]) <= 12 else _bad_month(g[1]),
    "day_month": lambda g: _on(MONTHS[g[1]], int(g[0]), _year(g[2])),
    "month_day": lambda g: _on(MONTHS[g[0]], int(g[1]), _year(g[2])),
    "nth_weekday": lambda g: NthWeekday(ORDINALS[g[0]], WEEKDAYS[g[1]], MONTHS[g[2]] if g[2] else None, _year(g[3])),
    "month_day_each": lambda g: _day_of_month(g[0] or g[1]),
    "month": lambda g: Month(MONTHS[g[0]], _year(g[1])),
    "year": lambda g: Year(int(g[0])),
    "season": lambda g: Season("autumn" if g[0] == "fall" else g[0]),
    "weekdays": lambda g: Weekdays(frozenset({5, 6} if g[0] == "weekends" else range(5))),
}


def _bad_month(text):
    raise Refused(f"there is no month {text}; months are 1 to 12")


_TIME = re.compile(r"(\d{1,2})(?::(\d{2}))?(?: ?(am|pm|a\.m\.|p\.m\.))?|noon|midday|midnight")


def parse_time(text, *, end=False):
    """Return the minutes past midnight of a time of day ("07:00", "7am", "8:30 pm", "noon", "midnight").

    ``end``: the end of a window may be "24:00" (midnight at the end of the day).
    """
    clean = " ".join(_bounded(text or "", "a time of day").lower().split())
    found = _TIME.fullmatch(clean)
    if not found:
        raise Refused(f"cannot read {str(text)!r} as a time of day; write it as '07:00', '7am' or '8:30 pm'")
    if clean in ("noon", "midday"):
        return 12 * 60
    if clean == "midnight":
        return 24 * 60 if end else 0
    hour, minute, half = int(found.group(1)), int(found.group(2) or 0), (found.group(3) or "").replace(".", "")
    if half and not 1 <= hour <= 12:
        raise Refused(f"{text!r}: with am or pm the hour is 1 to 12")
    if found.group(2) is None and not half:
        raise Refused(f"cannot read {str(text)!r} as a time of day; write it as '07:00', '7am' or '8:30 pm'")
    if half:
        hour = hour % 12 + (12 if half == "pm" else 0)
    if minute > 59 or hour > 24 or (hour == 24 and (minute or not end)):
        raise Refused(f"{text!r} is not a time of day (00:00 to 23:59{', or 24:00 to end a window' if end else ''})")
    return hour * 60 + minute


def format_time(minute):
    return f"{minute // 60:02d}:{minute % 60:02d}"


_ISO_INSTANT = re.compile(r"(\d{4})-(\d{2})-(\d{2})[t ](\d{2}):(\d{2})(?::(\d{2}))?(z|[+-]\d{2}:?\d{2})?")
_RELATIVE = {"today": 0, "tomorrow": 1, "yesterday": -1}
# A time of day as it can follow or lead a day: with minutes, with am/pm, or a word (a bare "14" is a day).
_CLOCK = r"(?:\d{1,2}:\d{2}(?: ?(?:am|pm|a\.m\.|p\.m\.))?|\d{1,2} ?(?:am|pm|a\.m\.|p\.m\.)|noon|midday|midnight)"
_CLOCK_ONLY = re.compile(_CLOCK)
_TRAILING_TIME = re.compile(rf"(.+?)(?: at)? ({_CLOCK})")
_LEADING_TIME = re.compile(rf"({_CLOCK}) (?:on )?(.+)")


def parse_instant(text, *, now_ms, tz, calendar=None):
    """Return the UTC ms that ``text`` names, read in the time zone ``tz``.

    ISO ("2031-03-14T08:00", with or without an offset), a day of the grammar
    of ``parse_rule`` with an optional time ("the second Tuesday of March 2031
    at 9am", "14 March 20:00", "tomorrow at 07:00"), or a time alone (the next
    such time). A day without a year is its next occurrence from ``now_ms``; a
    day without a time is its midnight.
    """
    raw = " ".join(_bounded(text or "", "a date and time").lower().split())
    iso = _ISO_INSTANT.fullmatch(raw)
    if iso:
        return _iso_instant(iso, text, tz)
    clean = _clean(raw)
    if not clean:
        raise Refused("no time given; write a date and time such as '14 March 2031 at 20:00'")
    if _CLOCK_ONLY.fullmatch(clean):
        return next_time_of_day(now_ms, tz, clean)
    minute, day_text = 0, clean
    found = _TRAILING_TIME.fullmatch(clean)
    if found:
        day_text, minute = _clean(found.group(1)), parse_time(found.group(2))
    else:
        found = _LEADING_TIME.fullmatch(clean)
        if found:
            day_text, minute = _clean(found.group(2)), parse_time(found.group(1))
    now = local(now_ms, tz)
    if day_text in _RELATIVE:
        return at_local(later(now.date(), _RELATIVE[day_text]), minute, tz)
    rule = parse_rule(day_text, calendar)
    day = rule.fixed()
    if day is None:
        day = rule.first_from(now.date(), calendar)
        if day is not None and at_local(day, minute, tz) < now_ms:
            day = rule.first_from(later(day, 1), calendar) if day < date.max else None
        if day is None:
            raise Refused(f"{str(text)!r} names no day in the next four years")
    return at_local(day, minute, tz)


def _iso_instant(found, text, tz):
    year, month, day, hour, minute, second = (int(g or 0) for g in found.groups()[:6])
    try:
        naive = datetime(year, month, day, hour, minute, second)
    except ValueError:
        raise Refused(f"{str(text)!r} is not a real date and time") from None
    offset = found.group(7)
    if offset is None:
        return to_ms(naive.replace(tzinfo=zone(tz)))
    if offset == "z":
        return to_ms(naive.replace(tzinfo=timezone.utc))
    sign = -1 if offset[0] == "-" else 1
    digits = offset[1:].replace(":", "")
    delta = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return to_ms(naive.replace(tzinfo=timezone(sign * delta)))


def next_time_of_day(now_ms, tz, clock_time, days_later=0):
    """Return the UTC ms of ``clock_time`` (local) ``days_later`` calendar days after ``now_ms``'s day.

    With ``days_later`` 0 it is the next such time: today if it is still
    ahead, else tomorrow (at 22:00, "07:00" is tomorrow morning). With 1 or
    more it is that time on the day that many days on, whatever the hour now.
    """
    if days_later < 0:
        raise Refused(f"days_later is {days_later}; it counts days ahead, 0 or more")
    minute = parse_time(clock_time)
    today = local(now_ms, tz).date()
    target = at_local(later(today, days_later), minute, tz)
    if days_later == 0 and target <= now_ms:
        target = at_local(later(today, 1), minute, tz)
    return target


# --- windows ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Moment:
    """One instant read locally, with what windows and rules ask of it, computed once for many questions."""

    ms: int
    tz: str
    when: datetime
    day: date
    minute: int

    @property
    def yesterday(self):
        return self.day - timedelta(days=1)


def moment(ms, tz):
    """Return the Moment of the UTC instant ``ms`` in the time zone ``tz``."""
    when = local(ms, tz)
    return Moment(ms, tz, when, when.date(), when.hour * 60 + when.minute)


_DAY_RANGE = re.compile(rf"{_WEEKDAY} ?(?:-|–|to) ?{_WEEKDAY}")


def parse_days(days):
    """Return the weekdays (0 = Monday) a window's ``days`` names: a list of names, "weekdays", "mon-fri"…

    None or empty means every day.
    """
    if not days:
        return frozenset()
    if not isinstance(days, (str, list)):
        raise Refused(f"days must be text or a list of days of the week, not {type(days).__name__}")
    items = [days] if isinstance(days, str) else days
    chosen = set()
    for item in items:
        text = _clean(_bounded(item, "a day of the week"))
        span = _DAY_RANGE.fullmatch(text)
        if span:
            first, last = WEEKDAYS[span.group(1)], WEEKDAYS[span.group(2)]
            chosen |= {(first + step) % 7 for step in range((last - first) % 7 + 1)}
            continue
        rule = _rule(text, None)
        if not isinstance(rule, Weekdays):
            raise Refused(f"cannot read {item!r} as days of the week; write 'mon', 'Monday', 'mon-fri' or 'weekends'")
        chosen |= rule.days
    return frozenset(chosen)


@dataclass(frozen=True)
class Window:
    """Local times of day from ``start`` to ``end`` (minutes; an end before the start runs past midnight).

    ``days`` (weekdays, empty: every day) and ``on`` (rules: festivals,
    markers, dates) are asked of the day the window starts; both must hold.
    """

    start: int
    end: int
    days: frozenset = frozenset()
    on: tuple = ()

    def start_day(self, at, calendar=None):
        """Return the day the occurrence of this window holding ``at`` (a Moment) started, or None."""
        if self.start < self.end:
            inside, day = self.start <= at.minute < self.end, at.day
        elif at.minute >= self.start:
            inside, day = True, at.day
        else:
            inside, day = at.minute < self.end, at.yesterday
        return day if inside and self.on_day(day, calendar) else None

    def contains(self, at, calendar=None):
        return self.start_day(at, calendar) is not None

    def on_day(self, day, calendar):
        if self.days and day.weekday() not in self.days:
            return False
        return not self.on or any(rule.matches(day, calendar) for rule in self.on)

    def next_start_day(self, at, calendar=None, horizon_days=14):
        """Return the day of the next start of this window after the Moment ``at``, or None within the horizon."""
        for offset, day in enumerate(days_from(at.day, horizon_days + 1)):
            if offset == 0 and self.start <= at.minute:
                continue
            if self.on_day(day, calendar):
                return day
        return None

    def next_start(self, at, calendar=None, horizon_days=14):
        """Return the UTC ms of the next start of this window after the Moment ``at``, or None within the horizon."""
        day = self.next_start_day(at, calendar, horizon_days)
        return at_local(day, self.start, at.tz) if day is not None else None


def parse_window(data, calendar=None):
    """Return the Window of ``{"start", "end", "days", "on"}``, or refuse with every reason at once."""
    if not isinstance(data, dict):
        raise Refused(f"a window is an object {{start, end, days, on}}, not {type(data).__name__}")
    reasons = []
    start = end = 0
    days, on = frozenset(), ()
    try:
        start = parse_time(data.get("start"))
    except Refused as error:
        reasons.append(f"start: {error}")
    try:
        end = parse_time(data.get("end"), end=True)
    except Refused as error:
        reasons.append(f"end: {error}")
    if not reasons and start == end % (24 * 60):
        reasons.append(f"the window {data.get('start')}–{data.get('end')} is empty; "
                       "a window's end differs from its start")
    try:
        days = parse_days(data.get("days"))
    except Refused as error:
        reasons.append(str(error))
    markers = data.get("on") or []
    rules = []
    if not isinstance(markers, (str, list)):
        reasons.append(f"on must be a day or a list of days, not {type(markers).__name__}")
        markers = []
    for marker in [markers] if isinstance(markers, str) else markers:
        try:
            rules.append(parse_rule(marker, calendar))
        except Refused as error:
            reasons.append(f"on: {error}")
    if reasons:
        raise Refused("; ".join(reasons))
    return Window(start, end, days, tuple(rules))


def in_window(ms, tz, window, calendar=None):
    """Return whether the instant ``ms`` falls in ``window`` (a Window, or its data) in the time zone ``tz``."""
    if not isinstance(window, Window):
        window = parse_window(window, calendar)
    return window.contains(moment(ms, tz), calendar)


# --- the campaign's calendar --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """A festival or marker: a named rule, minus its exclusions ("the last Friday of October, except 2032")."""

    name: str
    rule: Rule
    excepts: tuple = ()
    festival: bool = True

    def on(self, day, calendar=None):
        return self.rule.matches(day, calendar) and not any(rule.matches(day, calendar) for rule in self.excepts)


@dataclass(frozen=True)
class Calendar:
    hemisphere: str = "north"
    entries: tuple = ()
    _by_name: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        self._by_name.update({entry.name.lower(): entry for entry in self.entries})

    def entry(self, name):
        return self._by_name.get(" ".join(str(name).lower().split()))

    def festivals_on(self, day):
        """Return the names of the festivals (not the plain markers) on ``day``."""
        return [entry.name for entry in self.entries if entry.festival and entry.on(day, self)]


def load_calendar(data):
    """Return the Calendar of a world file's ``calendar`` section, or refuse with every reason at once.

    ``{"hemisphere": "north" | "south", "festivals": [{"name", "rule", "except": [...]}], "markers": [...]}``;
    an exclusion is a year or any day of the grammar; rules may not name other festivals.
    """
    data = data or {}
    if not isinstance(data, dict):
        raise Refused("the calendar is refused: it is an object {hemisphere, festivals, markers}")
    reasons = []
    hemisphere = data.get("hemisphere", "north")
    if not isinstance(hemisphere, str) or hemisphere not in HEMISPHERES:
        reasons.append(f"hemisphere {str(hemisphere)[:40]!r} is not north or south")
    entries, seen = [], set()
    for section, festival in (("festivals", True), ("markers", False)):
        items = data.get(section) or []
        if not isinstance(items, list) or len(items) > MAX_ENTRIES:
            reasons.append(f"{section} must be a list of at most {MAX_ENTRIES} {{name, rule, except}}")
            continue
        for index, item in enumerate(items):
            where = f"{section}[{index}]"
            if not isinstance(item, dict) or not str(item.get("name") or "").strip():
                reasons.append(f"{where} has no name")
                continue
            name = " ".join(str(item["name"]).split())[:MAX_RULE]
            if name.lower() in seen:
                reasons.append(f"{where}: {name!r} is named twice")
            seen.add(name.lower())
            try:
                rule = parse_rule(item.get("rule"))
                excepts = tuple(parse_rule(text) for text in _as_list(item.get("except")))
            except Refused as error:
                reasons.append(f"{where} ({name}): {error}")
                continue
            entries.append(Entry(name, rule, excepts, festival))
    if reasons:
        raise Refused("the calendar is refused: " + "; ".join(reasons))
    return Calendar(hemisphere, tuple(entries))


def _as_list(value):
    if value is None:
        return []
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return [value]
    if not isinstance(value, list) or len(value) > MAX_ENTRIES:
        raise Refused(f"except is a day, a year or a list of at most {MAX_ENTRIES} of them")
    return value


# --- words --------------------------------------------------------------------------------------------------------


def describe_instant(ms, tz, calendar=None):
    """Return the instant in words for a narrator: "Friday 14 March 2031, 08:00 in the morning"."""
    when = local(ms, tz)
    part = day_part(when.hour)
    text = (f"{WEEKDAY_NAMES[when.weekday()]} {when.day} {MONTH_NAMES[when.month]} {when.year}, "
            f"{when.hour:02d}:{when.minute:02d} {'at' if part == 'night' else 'in the'} {part}")
    festivals = calendar.festivals_on(when.date()) if calendar else []
    return text + (f" ({', '.join(festivals)})" if festivals else "")


_UNITS = ((86_400, "day"), (3_600, "hour"), (60, "minute"), (1, "second"))


def describe_duration(seconds):
    """Return a duration in words: its largest unit and the next one down, 5,400 s -> "1 hour and 30 minutes".

    Smaller units are dropped ("1 day and 3 hours", not "... and 4 seconds"):
    a narrator needs the size of a gap, not its last second.
    """
    seconds = int(round(abs(seconds)))
    if seconds == 0:
        return "no time"
    counts = []
    for size, name in _UNITS:
        count, seconds = divmod(seconds, size)
        counts.append((count, name))
    first = next(index for index, (count, _) in enumerate(counts) if count)
    parts = [f"{count} {name}{'' if count == 1 else 's'}" for count, name in counts[first:first + 2] if count]
    return " and ".join(parts)
