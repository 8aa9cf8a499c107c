"""World triggers: what the world deterministically does when the records say so (seed 002 世界触发器).

Plans, goals and engagements say what characters want; a trigger says what
the world does. Its condition reads records only — the time, where someone
is, a variable, who holds an item, where an item is, another trigger's
status, or a free-text condition a small post-turn judge decided — and it
fires on the condition's false → true edge, once by default, in priority
order, at most ``cap`` per check, with a seeded probability, a story-time
cooldown, an expiry and a maximum number of firings. Its effects are typed
event payloads the caller validates in the same transaction as the batch
that made it fire: when one fails, the trigger is marked failed with the
reason (``failed``) and none of its effects apply. A trigger with
``announce`` is known in advance to its audience; any other stays secret,
and its text never enters a prompt until it fires.
"""

import hashlib
import json
import random
from dataclasses import dataclass, field, replace
from datetime import timedelta
from functools import cached_property

from . import calendar, clock
from .rules import Refused, shown, write

STATUSES = ("dormant", "fired", "expired", "failed")
ORIGINS = ("world", "story")
OPERATORS = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
             "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
# ▶ Seed 002 names triggers.maxFires, beatTurns and cueTurns without values. maxFires is read as the cap on
# firings in one check; a beat waits three turns for the narrator to take it up; a cue is given once.
PER_CHECK = 3
BEAT_TURNS = 3
CUE_TURNS = 1
# Seed 002: announced triggers are shown to their audience "最近三项".
NEAREST = 3
MAX_TEXT = 500
MAX_EFFECTS = 20
# all/any/not inside each other: deeper is a puzzle, not a condition (and stored records stay shallow enough for a
# campaign bundle to carry them).
MAX_NESTING = 4
# Triggers one edit (or one world file) defines, and conditions one all/any lists.
MAX_TRIGGERS = 500
MAX_CONDITIONS = 50
# How many holders up a holding chain ``holds`` looks (a ring in a box in a chest in a cart is four).
MAX_CHAIN = 16
# How many days back a recurring time looks for an occurrence it passed (longer than any one skip).
MAX_EVERY_DAYS = 400


# --- conditions ---------------------------------------------------------------------------------------------------


@dataclass
class Context:
    """What a check reads: the world, the story time now and at the previous check, other triggers' statuses and
    the judge's decisions."""

    world: object
    now_ms: int
    since_ms: int
    tz: str = "UTC"
    cal: object = None
    statuses: dict = field(default_factory=dict)  # trigger id -> status at the start of the check (check sets it)
    judgments: dict = field(default_factory=dict)  # trigger id -> bool
    trigger: str = ""  # the trigger being evaluated (whose judgment a judged condition reads)

    @cached_property
    def moment(self):
        return calendar.moment(self.now_ms, self.tz)

    @cached_property
    def since_moment(self):
        return calendar.moment(self.since_ms, self.tz)


class Condition:
    pulse = False  # true for a moment, not a state: false again right after the check that saw it

    def value(self, ctx):
        raise NotImplementedError

    def leaves(self):
        yield self


@dataclass(frozen=True)
class After(Condition):
    at: int

    def value(self, ctx):
        return ctx.now_ms >= self.at


@dataclass(frozen=True)
class Before(Condition):
    at: int

    def value(self, ctx):
        return ctx.now_ms < self.at


@dataclass(frozen=True)
class During(Condition):
    window: calendar.Window

    def value(self, ctx):
        return self.window.contains(ctx.moment, ctx.cal)


@dataclass(frozen=True)
class Every(Condition):
    """A time of day that recurs (on ``days``/``on`` days): true when the story passed one since the last check.

    After a long skip it is true once, however many it passed (seed 002: after
    a long absence "每个触发器只会在下次检查时触发一次").
    """

    window: calendar.Window  # start = the time; the end is unused
    pulse = True

    def value(self, ctx):
        if ctx.now_ms <= ctx.since_ms:
            return False
        # Compared as local (day, minute): no instant is made for the days looked at.
        now, since, start = ctx.moment, ctx.since_moment, self.window.start
        day = now.day if now.minute >= start else now.day - timedelta(days=1)
        for _ in range(MAX_EVERY_DAYS):
            if (day, start) <= (since.day, since.minute):
                return False
            if self.window.on_day(day, ctx.cal):
                return True
            day -= timedelta(days=1)
        return False


@dataclass(frozen=True)
class At(Condition):
    who: str
    place: str

    def value(self, ctx):
        return ctx.world.location_of(self.who) == self.place


@dataclass(frozen=True)
class Holds(Condition):
    who: str
    item: str

    def value(self, ctx):
        holder = ctx.world.holder_of(self.item)
        for _ in range(MAX_CHAIN):
            if not holder:
                return False
            if holder == self.who:
                return True
            holder = ctx.world.holder_of(holder)
        return False


@dataclass(frozen=True)
class ItemAt(Condition):
    item: str
    place: str

    def value(self, ctx):
        return ctx.world.place_of(self.item) == self.place


@dataclass(frozen=True)
class Compare(Condition):
    obj: str
    name: str
    op: str
    operand: object

    def value(self, ctx):
        current = ctx.world.variable(self.obj, self.name)
        try:
            return current is not None and OPERATORS[self.op](current, self.operand)
        except TypeError:
            return False


@dataclass(frozen=True)
class StatusIs(Condition):
    trigger: str
    status: str

    def value(self, ctx):
        return ctx.statuses.get(self.trigger, "dormant") == self.status


@dataclass(frozen=True)
class Judged(Condition):
    text: str

    def value(self, ctx):
        return ctx.judgments.get(ctx.trigger) is True


@dataclass(frozen=True)
class All(Condition):
    parts: tuple

    @property
    def pulse(self):
        return any(part.pulse for part in self.parts)

    def value(self, ctx):
        return all(part.value(ctx) for part in self.parts)

    def leaves(self):
        for part in self.parts:
            yield from part.leaves()


@dataclass(frozen=True)
class AnyOf(All):
    def value(self, ctx):
        return any(part.value(ctx) for part in self.parts)


@dataclass(frozen=True)
class Not(Condition):
    part: Condition

    @property
    def pulse(self):
        return self.part.pulse

    def value(self, ctx):
        return not self.part.value(ctx)

    def leaves(self):
        yield from self.part.leaves()


@dataclass
class References:
    """What a trigger may name; None for a kind means it is not checked (a test, or a kind not yet built)."""

    characters: set | None = None
    places: set | None = None
    items: set | None = None
    variables: set | None = None
    triggers: set | None = None
    event_types: set | None = None


def _condition(data, refs, tz, now_ms, cal, reasons, where, depth=0):
    """Return (the Condition of ``data``, its normalised data), adding to ``reasons`` what is wrong."""
    if not isinstance(data, dict):
        reasons.append(f"{where}: a condition is an object, not {shown(data)}")
        return None, data
    if depth > MAX_NESTING and any(key in data for key in ("all", "any", "not")):
        reasons.append(f"{where}: conditions nest at most {MAX_NESTING} all/any/not deep; write it flatter")
        return None, data
    for key, build in (("all", All), ("any", AnyOf)):
        if key in data:
            items = data[key] if isinstance(data[key], list) else []
            if not items or len(items) > MAX_CONDITIONS:
                reasons.append(f"{where}: {key} needs a list of 1 to {MAX_CONDITIONS} conditions")
                return None, data
            built = [_condition(item, refs, tz, now_ms, cal, reasons, f"{where}.{key}[{i}]", depth + 1)
                     for i, item in enumerate(items)]
            return build(tuple(c for c, _ in built)), {key: [d for _, d in built]}
    if "not" in data:
        part, normal = _condition(data["not"], refs, tz, now_ms, cal, reasons, f"{where}.not", depth + 1)
        return Not(part), {"not": normal}
    kind = data.get("type")
    try:
        if not isinstance(kind, str):
            raise KeyError(kind)
        return _LEAVES[kind](data, refs, tz, now_ms, cal)
    except KeyError:
        reasons.append(f"{where}: unknown condition type {shown(kind)}; expected time, at, variable, holds, item_at, "
                       "trigger, judged, or all/any/not")
    except Refused as error:
        reasons.append(f"{where}: {error}")
    return None, data


def _time(data, refs, tz, now_ms, cal):
    normal = {"type": "time"}
    if data.get("every"):
        minute = calendar.parse_time(data["every"])
        window = calendar.parse_window({"start": data["every"], "end": calendar.format_time((minute + 1) % 1440),
                                        "days": data.get("days"), "on": data.get("on")}, cal)
        normal.update({key: data[key] for key in ("every", "days", "on") if data.get(key)})
        return Every(window), normal
    if data.get("window"):
        window = calendar.parse_window(data["window"], cal)
        normal["window"] = data["window"]
        return During(window), normal
    parts = []
    for key, build in (("after", After), ("before", Before)):
        if data.get(key) is not None:
            at = clock.instant(data[key], key, now_ms=now_ms, tz=tz, cal=cal)
            normal[key] = at
            parts.append(build(at))
    if not parts:
        raise Refused("a time condition gives after, before, window or every")
    return (parts[0] if len(parts) == 1 else All(tuple(parts))), normal


def _known(refs, kind, key, what):
    known = getattr(refs, kind)
    if not key:
        raise Refused(f"names no {what}")
    if not isinstance(key, str):
        raise Refused(f"names a {what} by its name or key (text), not {shown(key)}")
    if known is not None and key not in known:
        raise Refused(f"unknown {what} {key!r}")
    return key


def _at(data, refs, *_):
    who, place = _known(refs, "characters", data.get("who"), "character"), _known(refs, "places", data.get("place"),
                                                                                  "place")
    return At(who, place), {"type": "at", "who": who, "place": place}


def _holds(data, refs, *_):
    who, item = _known(refs, "characters", data.get("who"), "character"), _known(refs, "items", data.get("item"),
                                                                                 "item")
    return Holds(who, item), {"type": "holds", "who": who, "item": item}


def _item_at(data, refs, *_):
    item, place = _known(refs, "items", data.get("item"), "item"), _known(refs, "places", data.get("place"), "place")
    return ItemAt(item, place), {"type": "item_at", "item": item, "place": place}


def _variable(data, refs, *_):
    name = _known(refs, "variables", str(data.get("name") or "").lower(), "variable")
    op = data.get("op", "==")
    if not isinstance(op, str) or op not in OPERATORS:
        raise Refused(f"operator {op!r} is not one of {' '.join(OPERATORS)}")
    if "value" not in data:
        raise Refused(f"the comparison of {name} gives no value")
    if data["value"] is not None and not isinstance(data["value"], (str, int, float)):
        raise Refused(f"the comparison of {name} is with a number, text or true/false, not {shown(data['value'])}")
    obj = str(data.get("object") or "world")
    return Compare(obj, name, op, data["value"]), {"type": "variable", "object": obj, "name": name, "op": op,
                                                   "value": data["value"]}


def _status(data, refs, *_):
    ident = _known(refs, "triggers", data.get("id"), "trigger")
    status = data.get("status", "fired")
    if not isinstance(status, str) or status not in STATUSES:
        raise Refused(f"trigger status {status!r} is not one of {', '.join(STATUSES)}")
    return StatusIs(ident, status), {"type": "trigger", "id": ident, "status": status}


def _judged(data, *_):
    text = " ".join(str(data.get("text") or "").split())[:MAX_TEXT]
    if not text:
        raise Refused("a judged condition gives the text the judge decides")
    return Judged(text), {"type": "judged", "text": text}


def _event_tag(*_):
    raise Refused("event_tag conditions need recorded events with tags (character minds), which this story does not "
                  "keep yet; use a time, place, variable, item, trigger or judged condition")


_LEAVES = {"time": _time, "at": _at, "holds": _holds, "item_at": _item_at, "variable": _variable,
           "trigger": _status, "judged": _judged, "event_tag": _event_tag}


# --- definitions --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trigger:
    id: str
    condition: Condition
    definition: dict  # normalised: instants as UTC ms, what the ``trigger:<id>`` record stores
    effects: tuple = ()
    priority: int = 0
    probability: float = 1.0
    cooldown: int = 0  # seconds of story time
    expires: int | None = None
    max_fires: int = 1
    announce: dict | None = None
    beat: str = ""
    cue: dict | None = None
    origin: str = "world"

    @cached_property
    def digest(self):
        """Return a short hash of the definition: stored beside it, so a check knows an unchanged one at once."""
        text = json.dumps(self.definition, sort_keys=True)
        return hashlib.sha1(f"{self.origin}:{text}".encode()).hexdigest()[:16]

    @property
    def judged(self):
        """Return the text of this trigger's judged condition, or ""."""
        return next((leaf.text for leaf in self.condition.leaves() if isinstance(leaf, Judged)), "")


@dataclass(frozen=True)
class Status:
    status: str = "dormant"
    fires: int = 0
    last_fired: int | None = None
    last_value: bool = False
    failure: str = ""
    deferred: bool = False  # true when it was due but the per-check cap left it to the next check

    def data(self):
        return dict(self.__dict__)


def load_trigger(data, *, refs=None, tz="UTC", now_ms=0, cal=None, origin="world"):
    """Return the Trigger of a definition, or refuse with every reason at once.

    Instants in words are read in ``tz`` relative to ``now_ms`` and stored as
    UTC ms. ``refs`` names what may be referred to.
    """
    refs = refs or References()
    if not isinstance(data, dict):
        raise Refused(f"a trigger is an object, not {shown(data)}")
    reasons = []
    ident = str(data.get("id") or "").strip()[:MAX_TEXT]
    where = f"trigger {ident!r}" if ident else "a trigger"
    if not ident or ":" in ident:
        reasons.append(f"{where} needs an id without ':'")
    condition, when = _condition(data.get("when"), refs, tz, now_ms, cal, reasons, "when")
    if not reasons and sum(isinstance(leaf, Judged) for leaf in condition.leaves()) > 1:
        reasons.append("a trigger has at most one judged condition (the judge decides one per trigger)")
    effects = data.get("effects") or []
    if not isinstance(effects, list) or len(effects) > MAX_EFFECTS:
        reasons.append(f"effects is a list of at most {MAX_EFFECTS} events")
        effects = []
    for index, effect in enumerate(effects):
        kind = effect.get("type") if isinstance(effect, dict) else None
        if not isinstance(kind, str) or not kind or (refs.event_types is not None and kind not in refs.event_types):
            reasons.append(f"effect {index + 1}: unknown event type {shown(kind)}")
    normal = {"id": ident, "when": when, "effects": effects}
    numbers = {}
    for name, low, high, default in (("priority", -1000, 1000, 0), ("max_fires", 1, 10_000, 1),
                                     ("cooldown_seconds", 0, 10 * 366 * 86_400, 0)):
        value = data.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            reasons.append(f"{name} is {shown(value)}; a whole number from {low} to {high:,}")
            value = default
        numbers[name] = normal[name] = value
    probability = data.get("probability", 1)
    if isinstance(probability, bool) or not isinstance(probability, (int, float)) or not 0 < probability <= 1:
        reasons.append(f"probability is {shown(probability)}; a number above 0 and at most 1")
        probability = 1
    normal["probability"] = probability
    expires = None
    if data.get("expires") is not None:
        try:
            expires = clock.instant(data["expires"], "expires", now_ms=now_ms, tz=tz, cal=cal)
            normal["expires"] = expires
        except Refused as error:
            reasons.append(str(error))
    announce = _announce(data.get("announce"), refs, tz, now_ms, cal, reasons)
    if announce is not None:
        normal["announce"] = announce
    beat = " ".join(str(data.get("beat") or "").split())[:MAX_TEXT]
    if beat:
        normal["beat"] = beat
    cue = None
    if data.get("cue") and not isinstance(data["cue"], dict):
        reasons.append("cue is an object {audience, text}")
    elif data.get("cue"):
        cue = {"audience": _audience(data["cue"].get("audience", "everyone"), refs, reasons, "cue"),
               "text": " ".join(str(data["cue"].get("text") or "").split())[:MAX_TEXT]}
        if not cue["text"]:
            reasons.append("the cue has no text")
        normal["cue"] = cue
    if not effects and not beat and cue is None:
        reasons.append("a trigger does something: give effects, a beat or a cue")
    if origin not in ORIGINS:
        reasons.append(f"origin {origin!r} is not world or story")
    if reasons:
        raise Refused(f"{where} is refused: " + "; ".join(reasons))
    return Trigger(ident, condition, normal, tuple(effects), numbers["priority"], float(probability),
                   numbers["cooldown_seconds"], expires, numbers["max_fires"], announce, beat, cue, origin)


def _announce(data, refs, tz, now_ms, cal, reasons):
    if not data:
        return None
    if not isinstance(data, dict):
        reasons.append("announce is an object {audience, text, from, at}")
        return None
    text = " ".join(str(data.get("text") or "").split())[:MAX_TEXT]
    if not text:
        reasons.append("announce has no text (what its audience knows is coming)")
    announce = {"audience": _audience(data.get("audience", "everyone"), refs, reasons, "announce"), "text": text,
                "from": str(data.get("from") or "")}
    if data.get("at") is not None:
        try:
            announce["at"] = clock.instant(data["at"], "announce.at", now_ms=now_ms, tz=tz, cal=cal)
        except Refused as error:
            reasons.append(str(error))
    return announce


def _audience(audience, refs, reasons, what):
    """Return an audience as "everyone", a list of character keys, or {"place": key}."""
    if audience == "everyone":
        return audience
    if not isinstance(audience, (str, list, dict)):
        reasons.append(f"{what} audience is everyone, a list of characters, or {{\"place\": …}}, not {shown(audience)}")
        return "everyone"
    if isinstance(audience, dict) and audience.get("place"):
        try:
            _known(refs, "places", audience["place"], "place")
        except Refused as error:
            reasons.append(f"{what} audience: {error}")
        return {"place": audience["place"]}
    names = [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
    if not names:
        reasons.append(f"{what} audience is everyone, a list of characters, or {{\"place\": …}}")
    for name in names:
        try:
            _known(refs, "characters", name, "character")
        except Refused as error:
            reasons.append(f"{what} audience: {error}")
    return names


def load_triggers(items, *, refs=None, tz="UTC", now_ms=0, cal=None, origin="world"):
    """Return the Triggers of one edit or world file, or refuse with every reason at once.

    Triggers of the same edit may refer to each other.
    """
    refs = refs or References()
    if not isinstance(items, list) or len(items) > MAX_TRIGGERS:
        raise Refused(f"the triggers are refused: give a list of at most {MAX_TRIGGERS} triggers")
    ids = [str(item.get("id") or "")[:MAX_TEXT] for item in items if isinstance(item, dict)]
    duplicates = sorted({ident for ident in ids if ids.count(ident) > 1 and ident})
    if refs.triggers is not None:
        refs = replace(refs, triggers=set(refs.triggers) | set(ids))
    reasons = [f"trigger id {ident!r} is used twice" for ident in duplicates]
    loaded = []
    for item in items:
        try:
            loaded.append(load_trigger(item, refs=refs, tz=tz, now_ms=now_ms, cal=cal, origin=origin))
        except Refused as error:
            reasons.append(str(error))
    if reasons:
        raise Refused("the triggers are refused: " + "; ".join(reasons))
    return loaded


def from_record(data):
    """Return (Trigger, Status) from a ``trigger:<id>`` record's data (already validated when stored).

    Definitions are parsed once per digest: a check reads hundreds of
    records, and their statuses change far more often than their definitions.
    """
    key = data.get("digest")
    trigger = _parsed.get(key) if key else None
    if trigger is None:
        trigger = load_trigger(data["definition"], origin=data.get("origin", "world"), cal=calendar.STORED)
        if len(_parsed) > 4096:
            _parsed.clear()
        _parsed[trigger.digest] = trigger
    status = Status(data.get("status", "dormant"), data.get("fires", 0), data.get("last_fired"),
                    bool(data.get("last_value")), data.get("failure", ""), bool(data.get("deferred")))
    return trigger, status


# Parsed definitions by digest, shared by every campaign (a definition is the same trigger wherever it is stored).
_parsed = {}


def record(trigger, status):
    """Return the ``trigger:<id>`` record write: the definition and the status. Secret unless announced."""
    return write(f"trigger:{trigger.id}", "trigger", subject=trigger.id, value=status.status,
                 data={"definition": trigger.definition, "origin": trigger.origin, "digest": trigger.digest,
                       **status.data()},
                 narrator_only=trigger.announce is None)


# --- checking -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Firing:
    """A trigger that fired: its effects for the caller to validate, its status before and after."""

    trigger: Trigger
    before: Status
    after: Status

    @property
    def effects(self):
        return self.trigger.effects

    def writes(self, *, turn):
        """Return the writes of a firing whose effects all applied: the trigger's record and its notes."""
        notes = []
        if self.trigger.beat:
            notes.append(Note(self.trigger.id, self.after.fires, "beat", self.trigger.beat, "narrator", turn=turn))
        if self.trigger.cue:
            notes.append(Note(self.trigger.id, self.after.fires, "cue", self.trigger.cue["text"],
                              self.trigger.cue["audience"], turn=turn))
        return [record(self.trigger, self.after), *(note.write() for note in notes)]


def failed(firing, reason):
    """Return the write that marks a firing failed: an effect was refused, so none apply and the count stays."""
    status = replace(firing.before, status="failed", failure=str(reason)[:MAX_TEXT],
                     last_value=firing.after.last_value, deferred=False)
    return record(firing.trigger, status)


@dataclass
class Result:
    firings: list = field(default_factory=list)  # Firing, highest priority first
    writes: list = field(default_factory=list)  # status changes that are not firings (expiry, the last value)
    deferred: list = field(default_factory=list)  # ids left to the next check by the cap


def check(entries, ctx, *, seed, cap=PER_CHECK):
    """Check every trigger against ``ctx``; return what fires and what else changes.

    ``entries`` are (Trigger, Status) pairs, ``seed`` (campaign, node): the
    node whose batch is being checked (the player's action for a turn), so a
    replay draws the same probabilities. In priority order (then id), a
    trigger that can still fire fires on its condition's false → true edge
    unless it is cooling down or loses its draw (either uses up the edge);
    beyond ``cap`` firings it waits, edge kept, for the next check. Past its
    expiry a trigger becomes expired.
    """
    result = Result()
    ctx.statuses = {trigger.id: status.status for trigger, status in entries}
    order = sorted(entries, key=lambda entry: (-entry[0].priority, entry[0].id))
    for trigger, status in order:
        if status.status in ("expired", "failed") or status.fires >= trigger.max_fires:
            continue
        if trigger.expires is not None and ctx.now_ms >= trigger.expires:
            result.writes.append(record(trigger, replace(status, status="expired", deferred=False)))
            continue
        ctx.trigger = trigger.id
        value = trigger.condition.value(ctx) or (status.deferred and trigger.condition.pulse)
        # A moment (a recurring time) is over once seen, so the next one is an edge again.
        last = value and not trigger.condition.pulse
        if not value or status.last_value:
            if last != status.last_value or status.deferred:  # a wait for the cap ends when the condition does
                result.writes.append(record(trigger, replace(status, last_value=last, deferred=False)))
            continue
        cooling = status.last_fired is not None and ctx.now_ms - status.last_fired < trigger.cooldown * 1000
        if cooling or not _draw(trigger, status, seed):
            result.writes.append(record(trigger, replace(status, last_value=last, deferred=False)))
            continue
        if len(result.firings) >= cap:
            result.deferred.append(trigger.id)
            if not status.deferred:
                result.writes.append(record(trigger, replace(status, deferred=True)))
            continue
        after = replace(status, status="fired", fires=status.fires + 1, last_fired=ctx.now_ms, last_value=last,
                        deferred=False)
        result.firings.append(Firing(trigger, status, after))
    return result


def _draw(trigger, status, seed):
    if trigger.probability >= 1:
        return True
    campaign, node = seed
    return random.Random(f"trigger:{campaign}:{node}:{trigger.id}:{status.fires}").random() < trigger.probability


def settle(result, dry_run, *, turn):
    """Return every write of a check: each firing's effects and record when all its effects pass, else its failure.

    ``dry_run(effects)`` validates the effects in order, as the event
    pipeline validates a batch, against a copy of the state, and returns
    ``(writes, "")`` when every effect applies or ``([], reason)`` at the
    first that does not — so a failing trigger applies none of its effects.
    The caller applies the returned writes to the state itself.
    """
    writes = list(result.writes)
    for firing in result.firings:
        effect_writes, reason = dry_run(list(firing.effects))
        if reason:
            writes.append(failed(firing, reason))
        else:
            writes += effect_writes + firing.writes(turn=turn)
    return writes


# --- notes: beats and cues ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Note:
    """What a firing leaves: a beat for the narrator to take up, or a cue for its audience. Pending, then done
    or lapsed."""

    trigger: str
    n: int
    kind: str  # "beat" | "cue"
    text: str
    audience: object
    status: str = "pending"
    turn: int = 0

    @property
    def slot(self):
        return f"trigger_note:{self.trigger}:{self.n}:{self.kind}"

    @classmethod
    def from_record(cls, data):
        return cls(data["trigger"], data["n"], data["kind"], data["text"], data.get("audience", "everyone"),
                   data.get("status", "pending"), data.get("turn", 0))

    def write(self):
        return write(self.slot, "trigger_note", subject=self.trigger, value=self.status,
                     data={"trigger": self.trigger, "n": self.n, "kind": self.kind, "text": self.text,
                           "audience": self.audience, "status": self.status, "turn": self.turn},
                     narrator_only=True)


def address(note):
    """Return the write that marks a note done (the narrator took up the beat; the cue was given)."""
    if note.status != "pending":
        raise Refused(f"the {note.kind} of trigger {note.trigger!r} is already {note.status}")
    return replace(note, status="done").write()


def lapse(notes, *, turn, beat_turns=BEAT_TURNS, cue_turns=CUE_TURNS):
    """Return the writes that lapse pending notes older than their turns (beats ``beat_turns``, cues ``cue_turns``)."""
    writes = []
    for note in notes:
        limit = beat_turns if note.kind == "beat" else cue_turns
        if note.status == "pending" and turn - note.turn >= limit:
            writes.append(replace(note, status="lapsed").write())
    return writes


# --- what each voice sees -----------------------------------------------------------------------------------------


def _in_audience(audience, viewer, world):
    if audience == "everyone":
        return True
    if isinstance(audience, dict):
        return world.location_of(viewer) == audience.get("place")
    return viewer in audience


def _audience_words(audience, name_of):
    if audience == "everyone":
        return "everyone"
    if isinstance(audience, dict):
        return f"those at {name_of(audience['place'])}"
    return ", ".join(name_of(key) for key in audience)


def narrator_lines(entries, notes, *, now_ms, tz, name_of=lambda key: key):
    """Return what the narrator sees of triggers: announced ones still to come, with their audience, and pending
    beats. A secret trigger that has not fired contributes nothing, not even its id."""
    lines = []
    for trigger, status in sorted(entries, key=lambda e: (e[0].announce or {}).get("at") or 0):
        if trigger.announce is None or status.status != "dormant":
            continue
        lines.append(f"Announced to {_audience_words(trigger.announce['audience'], name_of)}: "
                     f"{trigger.announce['text']}{_when(trigger.announce, now_ms, tz)}")
    lines += [f"Pending beat: {note.text}" for note in notes if note.kind == "beat" and note.status == "pending"]
    return lines


def announcements_for(viewer, entries, *, world, now_ms, tz, limit=NEAREST):
    """Return the announced, still-dormant triggers ``viewer`` is in the audience of: the nearest ``limit``,
    with their date and the time left."""
    known = [(trigger.announce.get("at") or float("inf"), trigger) for trigger, status in entries
             if trigger.announce is not None and status.status == "dormant"
             and _in_audience(trigger.announce["audience"], viewer, world)]
    known.sort(key=lambda pair: (pair[0], pair[1].id))
    return [f"{trigger.announce['text']}{_when(trigger.announce, now_ms, tz)}" for _, trigger in known[:limit]]


def _when(announce, now_ms, tz):
    at = announce.get("at")
    if at is None:
        return ""
    if at <= now_ms:
        return f" (due since {calendar.describe_instant(at, tz)})"
    return f" ({calendar.describe_instant(at, tz)}, in {calendar.describe_duration((at - now_ms) // 1000)})"


def cues_for(viewer, notes, *, world):
    """Return the pending cues whose audience holds ``viewer`` (each given once, then addressed)."""
    return [note for note in notes if note.kind == "cue" and note.status == "pending"
            and _in_audience(note.audience, viewer, world)]


# --- the judge ----------------------------------------------------------------------------------------------------


def questions(entries):
    """Return [(trigger id, text)] of the judged conditions the post-turn judge decides: triggers that can fire."""
    return [(trigger.id, trigger.judged) for trigger, status in entries
            if trigger.judged and status.status in ("dormant", "fired") and status.fires < trigger.max_fires]


def judgment(trigger_id, holds, *, turn):
    """Return the ``judgment:<trigger>`` record write of the judge's decision."""
    if not isinstance(holds, bool):
        raise Refused(f"the judge answers true or false for {trigger_id!r}, not {holds!r}")
    return write(f"judgment:{trigger_id}", "judgment", subject=trigger_id, value="true" if holds else "false",
                 data={"holds": holds, "turn": turn}, narrator_only=True)
