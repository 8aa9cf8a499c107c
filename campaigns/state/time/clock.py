"""The story clock: when it is in the story, and every rule about how that may change (seed 002 时间).

Story time is UTC milliseconds in the ``clock`` record (value), with
``{mode, time_zone, simulated_used}`` as its data. In *simulated* mode it
moves only with the story: each round by its elapsed seconds (the campaign's
``round_seconds``, 30, when none is given; at most a day; never shorter than
the round's travel), and between rounds by a skip with a reason (at most
``max_skip_days``, 30). In *real* mode it follows the wall clock, never goes
back and cannot skip. Each change is one ``Step``: the new clock and the
time-log payload its event carries (the events of a line are its time log,
so undo and branches each show their own time). A change the rules forbid
raises ``Refused`` with the reason.
"""

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from . import calendar
from .rules import Refused, write

MODES = ("simulated", "real")
# Seed 002 时间: "未提供时用 clock.roundSeconds，默认 30"; "最多一天"; "单次最多 clock.maxSkipDays，默认 30 天".
ROUND_SECONDS = 30
MAX_ROUND_SECONDS = 86_400
MAX_SKIP_DAYS = 30
# Seed 002 时间: the game master hears of an absence of "至少五分钟" (five minutes or more) in real mode.
ABSENCE_SECONDS = 300
# Story time's one range, in UTC ms: every instant a world file, a correction or a rule carries is checked
# against it where it comes in (``instant``), and the clock never leaves it. Dates are the proleptic Gregorian
# calendar, as far as Python's dates go: year 1 to 9999 (there is no year 10000 to read or say). Each end keeps
# two days from the edge, so every time zone's local reading of an instant, the day before it (a window that
# began yesterday) and the day after it are dates; a rule's search ahead stops at the last day
# (calendar.days_from). The one place that says which dates exist: forms, fields and rules ask it.
EARLIEST_MS = calendar.to_ms(datetime(1, 1, 3, tzinfo=timezone.utc))
LATEST_MS = calendar.to_ms(datetime(9999, 12, 30, tzinfo=timezone.utc))
# The events a clock change is recorded as; their rows are the time log.
EVENT_TYPES = ("clock_start", "elapse", "skip", "real", "resync", "clock_mode")


@dataclass(frozen=True)
class Settings:
    """The campaign's clock settings (Campaign fields ``clock_mode``, ``time_zone``, ``round_seconds``,
    ``max_skip_days``)."""

    mode: str = "simulated"
    time_zone: str = "UTC"
    round_seconds: int = ROUND_SECONDS
    max_skip_days: int = MAX_SKIP_DAYS

    def check(self):
        """Return these settings, or refuse with every reason at once (for the campaign form)."""
        reasons = []
        if self.mode not in MODES:
            reasons.append(f"clock mode {self.mode!r} is not simulated or real")
        try:
            calendar.zone(self.time_zone)
        except Refused as error:
            reasons.append(str(error))
        if not 1 <= self.round_seconds <= MAX_ROUND_SECONDS:
            reasons.append(f"round_seconds is {self.round_seconds}; a round lasts 1 to {MAX_ROUND_SECONDS:,} seconds")
        if not 1 <= self.max_skip_days <= 365:
            reasons.append(f"max_skip_days is {self.max_skip_days}; choose 1 to 365 days")
        if reasons:
            raise Refused("; ".join(reasons))
        return self


@dataclass(frozen=True)
class Clock:
    """The story clock of one line: ``at`` (UTC ms), its mode, its time zone, and whether the story has used
    simulated dates of its own (after which it may never follow the wall clock again)."""

    at: int
    mode: str = "simulated"
    time_zone: str = "UTC"
    simulated_used: bool = False

    @classmethod
    def from_record(cls, value, data):
        """Return the Clock a ``clock`` record holds (its value and data)."""
        return cls(int(value), data.get("mode", "simulated"), data.get("time_zone", "UTC"),
                   bool(data.get("simulated_used")))

    def write(self):
        """Return the ``clock`` record write of this clock."""
        return write("clock", "clock", value=self.at,
                     data={"mode": self.mode, "time_zone": self.time_zone, "simulated_used": self.simulated_used})

    def describe(self, cal=None):
        """Return the date and time in words, in the clock's time zone."""
        return calendar.describe_instant(self.at, self.time_zone, cal)


@dataclass(frozen=True)
class Step:
    """One change of the clock: the clock after it, the time-log payload of its event, and words for the
    narrator when the step needs explaining (a lengthened round, an absence)."""

    clock: Clock
    log: dict
    notice: str = ""
    writes: list = field(default_factory=list)

    @property
    def seconds(self):
        return (self.log["to"] - self.log["from"]) // 1000


def within(ms, what):
    """Return ``ms`` when it is an instant of story time's range, or refuse naming ``what`` and the range."""
    if isinstance(ms, bool) or not isinstance(ms, int) or not EARLIEST_MS <= ms <= LATEST_MS:
        shown = "not a whole number of milliseconds" if not isinstance(ms, int) or isinstance(ms, bool) else (
            "before" if ms < EARLIEST_MS else "after")
        if shown in ("before", "after"):
            shown = f"{shown} story time's range"
        raise Refused(f"{what} is {shown}: story time runs from {_edge(EARLIEST_MS)} to {_edge(LATEST_MS)} (UTC)")
    return ms


def instant(value, what, *, now_ms, tz, cal=None):
    """Return the UTC ms of ``value`` (ms, or words or ISO read in ``tz``), within story time's range, or refuse
    naming ``what``: the one reading of every instant a world file, a correction or a rule gives."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "":
        raise Refused(f"{what} must be a date and time (words or ISO, e.g. 2031-03-14T19:00), not {value!r}"[:200])
    try:
        ms = value if isinstance(value, int) else calendar.parse_instant(value, now_ms=now_ms, tz=tz, calendar=cal)
    except (OverflowError, ValueError) as error:  # a date the calendar cannot hold in that time zone
        if isinstance(error, Refused):
            raise Refused(f"{what}: {error}") from None
        ms = LATEST_MS + 1
    return within(ms, what)


def _edge(ms):
    when = calendar.local(ms, "UTC")
    return f"{when.day} {calendar.MONTH_NAMES[when.month]} {when.year}"


def _step(kind, before, after, *, turn, round, notice="", **extra):
    if not EARLIEST_MS <= after.at <= LATEST_MS:
        raise Refused(f"story time would pass {_edge(LATEST_MS)}, where story time ends; nothing was moved")
    log = {"type": kind, "turn": turn, "round": round, "from": before.at if before else after.at, "to": after.at,
           **extra}
    return Step(after, log, notice, [after.write()])


def start(settings, *, created_ms, starting_time=None, turn=0, round=0):
    """Return the ``clock_start`` Step of a new story.

    It starts at the world's ``starting_time`` (read in the campaign's time
    zone; simulated mode only), else at the campaign's creation floored to
    the minute. A real clock starts at the creation time: it follows the wall.
    """
    settings.check()
    if starting_time and settings.mode == "real":
        raise Refused("a real clock follows the wall clock and cannot start at a world's starting_time; "
                      "choose the simulated clock mode, or remove starting_time")
    if starting_time:
        at = instant(starting_time, "starting_time", now_ms=created_ms, tz=settings.time_zone)
    else:
        at = created_ms - created_ms % 60_000
    clock = Clock(at, settings.mode, settings.time_zone, simulated_used=bool(starting_time))
    return _step("clock_start", None, clock, turn=turn, round=round, starting_time=starting_time or "")


def elapse(clock, settings, *, seconds=None, travel_seconds=0, turn, round):
    """Return the ``elapse`` Step of one round in simulated mode.

    ``seconds`` is what the round took (the recorder's or the game master's
    ``elapsed_seconds``), the campaign's ``round_seconds`` when None; more than
    a day is refused, not clamped. A round is never shorter than the travel
    along the exits it crossed: a shorter one is lengthened, and the step
    says so.
    """
    if clock.mode != "simulated":
        raise Refused("the clock is in real mode: a round takes the wall clock's time (a 'real' step), not "
                      "elapsed seconds")
    given = settings.round_seconds if seconds is None else _whole(seconds, "elapsed_seconds")
    if given < 0:
        raise Refused(f"elapsed_seconds is {given}; story time never runs backwards")
    if given > MAX_ROUND_SECONDS:
        raise Refused(f"elapsed_seconds is {given:,}; a round lasts at most one day ({MAX_ROUND_SECONDS:,} s); "
                      "skip time between rounds for longer")
    travel = _whole(travel_seconds, "travel_seconds")
    taken, notice, extra = given, "", {}
    if travel > given:
        if travel > MAX_ROUND_SECONDS:
            raise Refused(f"the journey takes {calendar.describe_duration(travel)}, more than the one day a round may "
                          "last; skip time first, or break the journey")
        taken = travel
        notice = (f"The round was lengthened from {calendar.describe_duration(given)} to "
                  f"{calendar.describe_duration(travel)}: the journey takes that long.")
        extra = {"lengthened_from": given, "travel_seconds": travel}
    after = replace(clock, at=clock.at + taken * 1000, simulated_used=clock.simulated_used or taken > 0)
    return _step("elapse", clock, after, turn=turn, round=round, notice=notice, seconds=taken, **extra)


def round_travel(routes):
    """Return the travel time a round must cover: the longest of its moves, each the sum of its exits' seconds.

    ``routes`` holds one list of exit travel times per character moved in
    the round; people travel at the same time, so the longest journey counts.
    """
    return max((sum(route) for route in routes), default=0)


def skip(clock, settings, *, reason, by_minutes=None, until_time=None, days_later=0, turn, round):
    """Return the ``skip`` Step between rounds: ``by_minutes``, or ``until_time`` ``days_later`` days on.

    The reason is required and kept in the log; a skip of more than
    ``max_skip_days`` is refused; a real clock cannot skip. ``until_time``
    with ``days_later`` 0 is the next such time (at 22:00, "07:00" is
    tomorrow morning); with 1 or more it is that time on the day that many
    days on.
    """
    if clock.mode == "real":
        raise Refused("the clock is in real mode and follows the wall clock: time cannot be skipped; switch the "
                      "clock to simulated mode first")
    reason = " ".join(str(reason or "").split())
    if not reason:
        raise Refused("a skip needs a reason (why the time passes: 'they rest', 'the voyage')")
    if (by_minutes is None) == (not until_time):
        raise Refused("give either by_minutes or until_time (with days_later), not both and not neither")
    if by_minutes is not None:
        minutes = _whole(by_minutes, "by_minutes")
        if minutes <= 0:
            raise Refused(f"by_minutes is {minutes}; a skip moves time forwards by at least one minute")
        target = clock.at + minutes * 60_000
    else:
        target = calendar.next_time_of_day(clock.at, clock.time_zone, until_time, _whole(days_later, "days_later"))
    limit = settings.max_skip_days * calendar.DAY_MS
    if target - clock.at > limit:
        raise Refused(f"the skip is {calendar.describe_duration((target - clock.at) // 1000)}; a skip is at most "
                      f"clock.maxSkipDays ({settings.max_skip_days} days): skip in steps, or raise max_skip_days")
    after = replace(clock, at=target, simulated_used=True)
    extra = {"by_minutes": by_minutes} if by_minutes is not None else {"until_time": until_time,
                                                                        "days_later": days_later}
    return _step("skip", clock, after, turn=turn, round=round, reason=reason,
                 seconds=(target - clock.at) // 1000, **extra)


def turn_start(clock, *, wall_ms, last_seen_ms=None, turn, round=0):
    """Return the ``resync`` Step that brings a real clock up to the wall at the start of a turn, or None.

    A real clock never goes back: a wall clock behind the story changes
    nothing, and a simulated clock never resyncs (None). On a tree the line's
    clock may trail the wall for two reasons, and the step records both
    (decision D7): the person was away, and undo or a branch switch left this
    line behind. ``last_seen_ms`` is when the person last played the campaign
    (on any line); an absence of five minutes or more since then (or since
    the clock, when never seen) comes with a notice the narrator must account
    for. Time a line only trailed by is not an absence.
    """
    if clock.mode != "real" or wall_ms <= clock.at:
        return None
    seen = clock.at if last_seen_ms is None else max(last_seen_ms, clock.at)
    away = max(0, wall_ms - seen) // 1000
    notice = ""
    if away >= ABSENCE_SECONDS:
        notice = (f"The player was away for {calendar.describe_duration(away - away % 60)}; the story's clock "
                  "follows the wall, so that much time has passed: account for what changed meanwhile.")
    after = replace(clock, at=wall_ms)
    return _step("resync", clock, after, turn=turn, round=round, notice=notice, seconds=(wall_ms - clock.at) // 1000,
                 away_seconds=away, trailed_seconds=(seen - clock.at) // 1000)


def real(clock, *, wall_ms, turn, round):
    """Return the ``real`` Step of one round in real mode (the wall clock's elapsed time), or None when the wall
    is not ahead of the story (a real clock never goes back)."""
    if clock.mode != "real":
        raise Refused("the clock is simulated: a round takes elapsed seconds, not the wall clock's time")
    if wall_ms <= clock.at:
        return None
    after = replace(clock, at=wall_ms)
    return _step("real", clock, after, turn=turn, round=round, seconds=(wall_ms - clock.at) // 1000)


def switch_mode(clock, mode, *, wall_ms, turn, round):
    """Return the ``clock_mode`` Step that switches the clock to ``mode``.

    Real to simulated continues from the later of story time and wall time.
    Simulated to real is refused once the story has used simulated dates of
    its own; before that it continues from the later of the two as well.
    """
    if mode not in MODES:
        raise Refused(f"clock mode {mode!r} is not simulated or real")
    if mode == clock.mode:
        raise Refused(f"the clock is already {mode}")
    if mode == "real" and clock.simulated_used:
        raise Refused("this story has used simulated dates of its own, so its clock can never follow the wall clock "
                      "again; it stays simulated")
    after = replace(clock, at=max(clock.at, wall_ms), mode=mode)
    return _step("clock_mode", clock, after, turn=turn, round=round, mode=mode)


def apply(clock, settings, event, *, wall_ms, created_ms=None, turn, round):
    """Return the Step a clock event asks for: the one entry point for the event pipeline's clock handlers.

    ``event`` is the payload: ``{"type": "clock_start", "starting_time"?}``,
    ``{"type": "elapse", "seconds"?, "travel_seconds"?}``, ``{"type": "skip",
    "reason", "by_minutes" | "until_time" (+ "days_later")}``, ``{"type":
    "real"}``, ``{"type": "resync", "last_seen_ms"?}`` or ``{"type":
    "clock_mode", "mode"}``. A clock that has not started refuses every
    event but ``clock_start``; ``real``/``resync`` with nothing to do refuse
    too (the caller skips them).
    """
    kind = event.get("type")
    if kind not in EVENT_TYPES:
        raise Refused(f"unknown clock event {kind!r}; expected one of {', '.join(EVENT_TYPES)}")
    if kind == "clock_start":
        if clock is not None:
            raise Refused("the clock has already started on this line")
        return start(settings, created_ms=created_ms if created_ms is not None else wall_ms,
                     starting_time=event.get("starting_time"), turn=turn, round=round)
    if clock is None:
        raise Refused("the story clock has not started on this line; start it first (clock_start)")
    if kind == "elapse":
        return elapse(clock, settings, seconds=event.get("seconds"), travel_seconds=event.get("travel_seconds") or 0,
                      turn=turn, round=round)
    if kind == "skip":
        return skip(clock, settings, reason=event.get("reason"), by_minutes=event.get("by_minutes"),
                    until_time=event.get("until_time"), days_later=event.get("days_later") or 0, turn=turn,
                    round=round)
    if kind == "clock_mode":
        return switch_mode(clock, event.get("mode"), wall_ms=wall_ms, turn=turn, round=round)
    step = (real(clock, wall_ms=wall_ms, turn=turn, round=round) if kind == "real"
            else turn_start(clock, wall_ms=wall_ms, last_seen_ms=event.get("last_seen_ms"), turn=turn, round=round))
    if step is None:
        raise Refused("the wall clock is not ahead of the story clock; a real clock never goes back")
    return step


def _whole(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise Refused(f"{name} must be a whole number, not {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise Refused(f"{name} must be a whole number, not {value!r}") from None
    if number != int(number):
        raise Refused(f"{name} must be a whole number, not {value!r}")
    return int(number)
