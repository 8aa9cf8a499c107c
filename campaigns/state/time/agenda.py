"""Agendas: routines, engagements and intents, and the catch-up that moves people when time passes (seed 002 日程).

A character's agenda merges three layers. Its *routine* is ordered windows
(``{start, end, days, on, place, activity}``) matched in the story's time
zone, the first match winning. *Engagements* are dated appointments whose
status only the recorder or a person changes — code never decides one was
kept; a pending one past its time is shown overdue. *Intents* are goals,
active ones sorted by priority, then urgency, then the nearest deadline.

When story time moves, ``catch_up_plan`` says — by code, with no model — who
follows their routine: a character away from the protagonist whose routine
window changed goes to the window's place ignoring exits and takes up its
activity; one with the protagonist stays, and the narrator is told where
they should be; routine-less characters off stage during a skip are queued
(at most three) for the world author to give a routine.
"""

from dataclasses import dataclass, field

from . import calendar, clock
from .rules import Refused, write

ENGAGEMENT_STATUSES = ("pending", "kept", "missed", "cancelled")
INTENT_STATUSES = ("active", "done", "dropped")
# Seed 002 日程: "代码不自行判断是否履约" — only these sources change an engagement's status.
STATUS_SOURCES = ("recorder", "correction")
# Seed 002 日程: the game master sees "半小时内到期或已经逾期的最多六项约定".
DUE_WITHIN_SECONDS = 1800
MAX_DUE = 6
# The brief shows "前三个目标".
TOP_INTENTS = 3
# Seed 002 日程: the consolidation queue holds "最多同时三个".
MAX_QUEUED = 3
# ▶ Priority and urgency are 1 (least) to 5 (most); 3 when not given.
LEVELS = range(1, 6)
DEFAULT_LEVEL = 3
MAX_TEXT = 500


# --- routines -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """One window of a routine: when, and where the character is and what they do then."""

    index: int
    window: calendar.Window
    place: str = ""
    activity: str = ""


@dataclass(frozen=True)
class Routine:
    who: str
    slots: tuple

    def at(self, moment, cal=None):
        """Return (the first Slot holding the Moment, the day its occurrence started), or (None, None)."""
        for slot in self.slots:
            day = slot.window.start_day(moment, cal)
            if day is not None:
                return slot, day
        return None, None

    def next_after(self, moment, cal=None):
        """Return (the next Slot to begin after the Moment, its start in UTC ms), or (None, None)."""
        best, chosen = None, None
        for slot in self.slots:
            day = slot.window.next_start_day(moment, cal)
            # Local (day, minute) order is time order: only the winner is converted to an instant.
            if day is not None and (best is None or (day, slot.window.start) < best):
                best, chosen = (day, slot.window.start), slot
        if chosen is None:
            return None, None
        return chosen, calendar.at_local(best[0], best[1], moment.tz)


def parse_routine(who, data, *, cal=None, places=None):
    """Return the Routine of ``data`` (``{"windows": [...]}`` or the list itself), or refuse with every reason.

    ``places``, when given, is the set of known place keys a window may name.
    """
    windows = data.get("windows") if isinstance(data, dict) else data
    if not isinstance(windows, list) or not windows:
        raise Refused(f"the routine of {who!r} has no windows; give a list of {{start, end, place, activity}}")
    reasons, slots = [], []
    for index, item in enumerate(windows):
        where = f"window {index + 1}"
        if not isinstance(item, dict):
            reasons.append(f"{where} is not an object")
            continue
        try:
            window = calendar.parse_window(item, cal)
        except Refused as error:
            reasons.append(f"{where}: {error}")
            continue
        place = str(item.get("place") or "").strip()
        if place and places is not None and place not in places:
            reasons.append(f"{where}: unknown place {place!r}")
        slots.append(Slot(index, window, place, str(item.get("activity") or "").strip()[:MAX_TEXT]))
    if reasons:
        raise Refused(f"the routine of {who!r} is refused: " + "; ".join(reasons))
    return Routine(who, tuple(slots))


def routine_write(who, data):
    """Return the ``routine:<who>`` record write of routine ``data`` (already checked by ``parse_routine``)."""
    windows = data.get("windows") if isinstance(data, dict) else data
    return write(f"routine:{who}", "routine", subject=who, value=f"{len(windows)} windows", data={"windows": windows})


# --- engagements --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Engagement:
    id: str
    who: tuple
    at: int
    place: str = ""
    what: str = ""
    status: str = "pending"

    @classmethod
    def from_record(cls, data):
        return cls(data["id"], tuple(data.get("who") or ()), int(data["at"]), data.get("place", ""),
                   data.get("what", ""), data.get("status", "pending"))

    def data(self):
        return {"id": self.id, "who": list(self.who), "at": self.at, "place": self.place, "what": self.what,
                "status": self.status}

    def write(self):
        return write(f"engagement:{self.id}", "engagement", subject=self.who[0] if self.who else "",
                     value=self.status, data=self.data())

    def overdue(self, now_ms):
        """Return whether this is still pending past its time: shown overdue until the recorder judges it."""
        return self.status == "pending" and self.at < now_ms


def new_engagement(data, *, now_ms, tz, cal=None, known=None):
    """Return the Engagement an ``engagement`` event creates (pending), or refuse with every reason.

    ``data``: ``{"id", "who" (a key or a list), "at" (UTC ms or words), "place", "what"}``.
    ``known``, when given, answers whether a key names a known entity.
    """
    reasons = []
    ident = str(data.get("id") or "").strip()
    if not ident or ":" in ident:
        reasons.append("an engagement needs an id without ':'")
    who = _keys(data.get("who"))
    if not who:
        reasons.append("an engagement names no one (who)")
    at = None
    try:
        at = _instant(data.get("at"), "at", now_ms, tz, cal)
    except Refused as error:
        reasons.append(str(error))
    place = str(data.get("place") or "").strip()
    if known is not None:
        reasons += [f"unknown {role} {key!r}" for role, key in [*(("character", k) for k in who), ("place", place)]
                    if key and not known(key)]
    what = " ".join(str(data.get("what") or "").split())[:MAX_TEXT]
    if not what:
        reasons.append("an engagement says what it is (what)")
    if reasons:
        raise Refused("; ".join(reasons))
    return Engagement(ident, tuple(who), at, place, what)


def edit_engagement(current, change, *, source, now_ms, tz, cal=None):
    """Return ``current`` changed by an ``engagement_edit`` event, or refuse.

    A status change (kept, missed, cancelled, or back to pending) is taken
    only from the recorder or a person's correction (``source``): code never
    decides whether an engagement was kept. Time, place and wording may move
    from any source.
    """
    fields = {}
    status = change.get("status")
    if status is not None and status != current.status:
        if status not in ENGAGEMENT_STATUSES:
            raise Refused(f"engagement status {status!r} is not one of {', '.join(ENGAGEMENT_STATUSES)}")
        if source not in STATUS_SOURCES:
            raise Refused(f"only the recorder or a person marks an engagement {status}; code ({source}) never "
                          "decides whether one was kept")
        fields["status"] = status
    if change.get("at") is not None:
        fields["at"] = _instant(change["at"], "at", now_ms, tz, cal)
    if change.get("place") is not None:
        fields["place"] = str(change["place"]).strip()
    if change.get("what"):
        fields["what"] = " ".join(str(change["what"]).split())[:MAX_TEXT]
    if not fields:
        raise Refused(f"the edit changes nothing about engagement {current.id!r}")
    return Engagement(**{**current.__dict__, **fields})


def due(engagements, now_ms, *, within=DUE_WITHIN_SECONDS, limit=MAX_DUE):
    """Return (the pending engagements due within ``within`` seconds or overdue, soonest first, at most
    ``limit``; how many more there were)."""
    horizon = now_ms + within * 1000
    chosen = sorted((e for e in engagements if e.status == "pending" and e.at <= horizon), key=lambda e: (e.at, e.id))
    return chosen[:limit], max(0, len(chosen) - limit)


# --- intents ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Intent:
    who: str
    id: str
    type: str = ""
    priority: int = DEFAULT_LEVEL
    urgency: int = DEFAULT_LEVEL
    deadline: int | None = None
    plan: str = ""
    status: str = "active"

    @classmethod
    def from_record(cls, data):
        return cls(**{name: data.get(name, default) for name, default in _INTENT_DEFAULTS.items()})

    def data(self):
        return dict(self.__dict__)

    def write(self):
        return write(f"intent:{self.who}:{self.id}", "intent", subject=self.who, value=self.plan, data=self.data())


_INTENT_DEFAULTS = {"who": "", "id": "", "type": "", "priority": DEFAULT_LEVEL, "urgency": DEFAULT_LEVEL,
                    "deadline": None, "plan": "", "status": "active"}


def new_intent(data, *, now_ms, tz, cal=None):
    """Return the Intent an ``intent_add`` event creates, or refuse with every reason."""
    reasons = []
    who, ident = str(data.get("who") or "").strip(), str(data.get("id") or "").strip()
    if not who:
        reasons.append("an intent names whose it is (who)")
    if not ident or ":" in ident:
        reasons.append("an intent needs an id without ':'")
    plan = " ".join(str(data.get("plan") or "").split())[:MAX_TEXT]
    if not plan:
        reasons.append("an intent says its plan")
    fields = {}
    try:
        fields = _intent_fields(data, now_ms, tz, cal)
    except Refused as error:
        reasons.append(str(error))
    if reasons:
        raise Refused("; ".join(reasons))
    return Intent(who, ident, plan=plan, **fields)


def edit_intent(current, change, *, now_ms, tz, cal=None):
    """Return ``current`` changed by an ``intent_edit`` event (type, priority, urgency, deadline, plan, status)."""
    fields = _intent_fields(change, now_ms, tz, cal)
    if change.get("plan"):
        fields["plan"] = " ".join(str(change["plan"]).split())[:MAX_TEXT]
    status = change.get("status")
    if status is not None:
        if status not in INTENT_STATUSES:
            raise Refused(f"intent status {status!r} is not one of {', '.join(INTENT_STATUSES)}")
        fields["status"] = status
    if not fields:
        raise Refused(f"the edit changes nothing about intent {current.id!r}")
    return Intent(**{**current.__dict__, **fields})


def _intent_fields(data, now_ms, tz, cal):
    fields = {}
    for name in ("priority", "urgency"):
        if data.get(name) is not None:
            value = data[name]
            if isinstance(value, bool) or not isinstance(value, int) or value not in LEVELS:
                raise Refused(f"{name} is {value!r}; it is a whole number from 1 (least) to 5 (most)")
            fields[name] = value
    if data.get("deadline") is not None:
        fields["deadline"] = _instant(data["deadline"], "deadline", now_ms, tz, cal)
    if data.get("type"):
        fields["type"] = str(data["type"]).strip()[:120]
    return fields


def top_intents(intents, *, limit=TOP_INTENTS):
    """Return the active intents by priority, then urgency (both highest first), then the nearest deadline
    (none last), at most ``limit``."""
    active = [i for i in intents if i.status == "active"]
    active.sort(key=lambda i: (-i.priority, -i.urgency, i.deadline is None, i.deadline or 0, i.id))
    return active[:limit]


# --- one character's agenda ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Agenda:
    """What a character's day holds at one moment: the current and next routine window, what is due, the top goals."""

    who: str
    now: Slot | None
    next: Slot | None
    next_at: int | None
    due: list
    intents: list

    def lines(self, now_ms, tz, name_of=lambda key: key):
        """Return the agenda in words for a brief, goals stated as plans, not orders."""
        lines = []
        if self.now is not None:
            lines.append(f"Now: {_doing(self.now, name_of)}")
        if self.next is not None:
            lines.append(f"Next, from {calendar.describe_instant(self.next_at, tz)}: {_doing(self.next, name_of)}")
        for engagement in self.due:
            lines.append(describe_engagement(engagement, now_ms, tz, name_of))
        if self.intents:
            lines.append("Plans (not orders): " + "; ".join(i.plan for i in self.intents))
        return lines


def _doing(slot, name_of):
    where = f" at {name_of(slot.place)}" if slot.place else ""
    return f"{slot.activity or 'free'}{where}"


def describe_engagement(engagement, now_ms, tz, name_of=lambda key: key):
    """Return one engagement in words, "overdue" when it is pending past its time."""
    people = ", ".join(name_of(key) for key in engagement.who)
    where = f" at {name_of(engagement.place)}" if engagement.place else ""
    when = calendar.describe_instant(engagement.at, tz)
    state = " — overdue, not yet judged" if engagement.overdue(now_ms) else ""
    return f"{people}: {engagement.what}{where}, {when}{state}"


def agenda_at(who, at, *, routine=None, engagements=(), intents=(), cal=None):
    """Return the Agenda of ``who`` at the Moment ``at`` from their routine, engagements and intents."""
    now = next_slot = next_at = None
    if routine is not None:
        now, _ = routine.at(at, cal)
        next_slot, next_at = routine.next_after(at, cal)
    mine = [e for e in engagements if who in e.who]
    shown, _ = due(mine, at.ms)
    return Agenda(who, now, next_slot, next_at, shown, top_intents([i for i in intents if i.who == who]))


def elsewhere_hints(present, at, *, routines, locations, cal=None, name_of=lambda key: key):
    """Return "Mara should be at the Forge (working)" for each character present whose routine puts them elsewhere."""
    hints = []
    for who in present:
        routine = routines.get(who)
        slot = routine.at(at, cal)[0] if routine else None
        if slot is not None and slot.place and locations.get(who, "") != slot.place:
            doing = f" ({slot.activity})" if slot.activity else ""
            hints.append(f"{name_of(who)} should be at {name_of(slot.place)}{doing}")
    return hints


# --- catch-up -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Move:
    """A move a routine makes: to ``place`` from ``came_from``, ignoring exits."""

    who: str
    place: str
    came_from: str
    activity: str


@dataclass
class Plan:
    """What catching up on time does, for the caller to write in the same transaction as the time step."""

    moves: list = field(default_factory=list)  # Move: the routine's place, ignoring exits
    activities: dict = field(default_factory=dict)  # who -> the activity their window sets (moved or not)
    hints: list = field(default_factory=list)  # "Mara should be at the Forge", for those with the protagonist
    writes: list = field(default_factory=list)  # agenda_cursor:<who> and consolidation:<who> records
    queued: list = field(default_factory=list)  # routine-less characters queued for the world author now
    waiting: list = field(default_factory=list)  # those left for later: the queue was full

    def lines(self, name_of=lambda key: key):
        """Return this turn's schedule moves and hints in words, for the narrator."""
        moved = [f"{name_of(m.who)} went to {name_of(m.place)}" + (f" ({m.activity})" if m.activity else "")
                 for m in self.moves]
        return moved + self.hints


def cursor_of(slot, day):
    """Return the cursor value of a routine window's occurrence: which window, from which day."""
    return f"{slot.index}@{day.isoformat()}" if slot is not None else "none"


def catch_up_plan(characters, at, *, routines, locations, cursors, protagonist_place, cal=None, skipping=False,
                  excluded=frozenset(), queued=(), name_of=lambda key: key):
    """Return the Plan that brings ``characters`` up to the Moment ``at`` by their routines, by code alone.

    ``locations`` and ``cursors`` map a character to its place and its
    ``agenda_cursor`` value (``cursor_of``); ``protagonist_place`` is where
    the protagonist is. A character whose routine window occurrence differs
    from its cursor follows it: away from the protagonist it moves to the
    window's place (ignoring exits) and takes up its activity, and its cursor
    is saved; with the protagonist it stays, the narrator gets a hint, and
    the cursor is left so the move happens once they part. On a skip
    (``skipping``), characters with no routine, off stage and not in
    ``excluded`` (background and crowd) join the consolidation queue, which
    holds at most three with those already ``queued``.
    """
    plan = Plan()
    room = MAX_QUEUED - len(queued)
    for who in characters:
        place = locations.get(who, "")
        with_protagonist = bool(protagonist_place) and place == protagonist_place
        routine = routines.get(who)
        if routine is None:
            if skipping and not with_protagonist and who not in excluded and who not in queued:
                if room > 0:
                    plan.queued.append(who)
                    plan.writes.append(write(f"consolidation:{who}", "consolidation", subject=who, value=str(at.ms),
                                             data={"since": at.ms, "reason": "no routine"}))
                    room -= 1
                else:
                    plan.waiting.append(who)
            continue
        slot, day = routine.at(at, cal)
        cursor = cursor_of(slot, day)
        if cursor == cursors.get(who):
            continue
        if with_protagonist:
            if slot is not None and slot.place and slot.place != place:
                doing = f" ({slot.activity})" if slot.activity else ""
                plan.hints.append(f"{name_of(who)} should be at {name_of(slot.place)}{doing}")
            continue
        if slot is not None:
            if slot.place and slot.place != place:
                plan.moves.append(Move(who, slot.place, place, slot.activity))
            plan.activities[who] = slot.activity
        plan.writes.append(write(f"agenda_cursor:{who}", "agenda_cursor", subject=who, value=cursor,
                                 data={"window": slot.index if slot else None, "day": day.isoformat() if day else "",
                                       "at": at.ms}))
    return plan


def _keys(value):
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return [str(item).strip()[:MAX_TEXT] for item in items if str(item).strip()]


def _instant(value, what, now_ms, tz, cal):
    if value in (None, ""):
        raise Refused(f"{what}: no time given")
    return clock.instant(value, what, now_ms=now_ms, tz=tz, cal=cal)
