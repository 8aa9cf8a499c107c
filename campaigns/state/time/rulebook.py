"""Story time and world rules in the event pipeline: their event types, what the records hold, and the engine's
work after every batch (seed 002 时间, 日程, 故事变量, 骰子, 世界触发器; docs/rules.md).

The rules themselves are the pure modules ``clock``, ``calendar``, ``agenda``,
``variables``, ``dice`` and ``triggers``. This module joins them to the one
table ``validate`` dispatches on: each handler reads the records it needs
from the batch's ``State``, calls the pure rule, turns ``Refused`` into
``Rejected`` and returns the writes. ``Env`` is where and when a batch
happens (the campaign's clock settings, the node, the wall clock); the
readers (``now_of``, ``triggers_of``…) are what the pages, the narrator's
tail and ``story state`` read. After every batch, ``after_batch`` keeps the
rules in the same transaction, as events of the engine: a round is made as
long as the journeys it held, then the world's triggers are checked and
their effects settled all or nothing. ``env_for`` and ``after_batch`` are
registered as the registry's hooks, which ``events.apply_events`` calls.
"""

import dataclasses
import time
from dataclasses import dataclass, field
from functools import cached_property

from ..events import validate
from ..reading import PROTAGONIST, key_for
from ..registry import (CORRECTION, ENGINE, EVERYONE, JUDGE, PROPOSERS, RECORDER, RULES_RANK, SCRIPT, TYPES, WORLD,
                        Check, Field, Rejected, clean, hook, register)
from ..world import world
from . import agenda, calendar, clock, dice, triggers, variables
from .rules import Refused, write

# The Campaign fields a batch reads (beside its id and creation time).
CAMPAIGN_FIELDS = ("clock_mode", "time_zone", "round_seconds", "max_skip_days", "trigger_cap", "beat_turns",
                   "cue_turns", "last_played_at")
# Durations in seconds and minutes: far more room than the registry's default bound (the clock's own rules
# refuse a round over a day and a skip past max_skip_days, naming them).
MAX_MS = 10 ** 15
# Instants are UTC milliseconds within story time's one range (``clock.within``).
INSTANT = {"minimum": clock.EARLIEST_MS, "maximum": clock.LATEST_MS}
# A turn's rolls: more than this in one turn is a loop, not a story.
MAX_ROLLS = 50


@dataclass
class Env:
    """Where and when a batch happens: what the rules read beside the state."""

    campaign: int = 0
    node: int = 0
    depth: int = 0
    settings: clock.Settings = field(default_factory=clock.Settings)
    created_ms: int = 0
    wall_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    trigger_cap: int = triggers.PER_CHECK
    beat_turns: int = triggers.BEAT_TURNS
    cue_turns: int = triggers.CUE_TURNS
    last_seen_ms: int | None = None
    find_anchor: object = None  # () -> (node id, depth) of the turn's player action, read when a roll needs it

    @property
    def turn(self):
        return self.depth // 2

    @cached_property
    def anchor(self):
        """Return (node id, depth) of the node rolls and draws are seeded by: a reply's player action (D8).

        A retry of a reply shares its player action, so it draws the same
        dice and the same trigger probabilities: nothing is rolled again.
        """
        if self.find_anchor is not None:
            return self.find_anchor()
        return self.node, self.depth


@hook("environment", campaign_fields=CAMPAIGN_FIELDS)
def env_for(node, campaign, path=None):
    """Return the Env of a batch at ``node`` of ``campaign`` (a row holding ``CAMPAIGN_FIELDS``)."""
    def player_action():
        if node.depth % 2 == 1 or node.depth == 0 or path is None:
            return node.pk, node.depth
        row = path.nodes().filter(depth=node.depth - 1).values_list("pk", flat=True).first()
        return (row, node.depth - 1) if row else (node.pk, node.depth)

    seen = campaign.last_played_at
    return Env(campaign=campaign.pk, node=node.pk, depth=node.depth,
               settings=clock.Settings(campaign.clock_mode, campaign.time_zone, campaign.round_seconds,
                                       campaign.max_skip_days),
               created_ms=int(campaign.created_at.timestamp() * 1000),
               trigger_cap=campaign.trigger_cap, beat_turns=campaign.beat_turns, cue_turns=campaign.cue_turns,
               last_seen_ms=int(seen.timestamp() * 1000) if seen else None, find_anchor=player_action)


def _env(check):
    if check.env is None:
        check.env = Env()
    return check.env


def _refused(call, *args, **kwargs):
    try:
        return call(*args, **kwargs)
    except Refused as error:
        raise Rejected(str(error)) from None


# --------------------------------------------------------------------------------------------- reading the records


def clock_of(state):
    """Return the line's Clock, or None before it has started."""
    record = state.get("clock")
    return clock.Clock.from_record(record.value, record.data) if record else None


def now_of(state):
    """Return the story time of ``state`` in UTC milliseconds, or None while its clock has not started.

    The one question other parts of the story ask of the clock (character
    minds fade memories by it): the ``clock`` record's value.
    """
    record = state.get("clock")
    return int(record.value) if record else None


def calendar_of(state):
    """Return the campaign calendar (``calendar.Calendar``), or None when the world gave none."""
    return state.cached("rules:calendar", ("calendar",), _read_calendar)


def _read_calendar(state):
    record = state.get("calendar")
    return calendar.load_calendar(record.data) if record else None


def routines_of(state):
    """Return {character: agenda.Routine} of every routine on the line."""
    return state.cached("rules:routines", ("routine", "calendar"), _read_routines)


def _read_routines(state):
    return {r.subject: agenda.parse_routine(r.subject, r.data, cal=calendar.STORED)
            for r in state.of_kind("routine")}


def engagements_of(state):
    return [agenda.Engagement.from_record(r.data) for r in state.of_kind("engagement")]


def intents_of(state):
    return [agenda.Intent.from_record(r.data) for r in state.of_kind("intent")]


def definitions_of(state):
    """Return {name: variables.Definition}, the built-in emotions after the story's own."""
    return state.cached("rules:variables", ("variable_def",), _read_definitions)


def _read_definitions(state):
    defs = {r.subject: variables.parse_definition(r.data) for r in state.of_kind("variable_def")}
    return variables.with_builtins(dict(sorted(defs.items())))


def values_of(state):
    """Return {(object, name): value} of every stored variable value (those that differ from the default)."""
    return {(r.subject, r.data.get("name", "")): r.data.get("value") for r in state.of_kind("var")}


def temperaments_of(state):
    return {r.subject: dict(r.data) for r in state.of_kind("temperament")}


def variable_value(state, obj, name):
    """Return the value of variable ``name`` on ``obj``: the stored one, else its default; None when unknown."""
    definition = definitions_of(state).get(name)
    if definition is None:
        return None
    record = state.get(variables.slot_of(obj, name))
    if record is not None:
        return record.data.get("value")
    temperament = state.get(f"temperament:{obj}")
    return definition.default_for(obj, {obj: temperament.data} if temperament else None)


def checks_of(state):
    """Return {key: dice.Check} of the named dice checks."""
    return state.cached("rules:checks", ("dice_check",), _read_checks)


def _read_checks(state):
    return {r.subject: dice.parse_check(r.subject, r.data) for r in state.of_kind("dice_check")}


def triggers_of(state):
    """Return [(triggers.Trigger, triggers.Status)] of every trigger on the line, by id.

    Read once per line and kept with the cached base, following each status
    change: a check after every batch reads hundreds of them.
    """
    entries = state.cached("rules:triggers", ("trigger",), _read_triggers, _follow_triggers, dict)
    return [entries[ident] for ident in sorted(entries)]


def _read_triggers(state):
    return {r.subject: triggers.from_record(r.data) for r in state.of_kind("trigger")}


def _follow_triggers(entries, old, new):
    if old is not None:
        entries.pop(old.subject, None)
    if new is not None:
        entries[new.subject] = triggers.from_record(new.data)


def _watched(state):
    """Return (the people, the items) the triggers' conditions ask where they are: made once per set of triggers."""
    return state.cached("rules:watched", ("trigger",), _read_watched)


def _read_watched(state):
    people, items = set(), set()
    for trigger, _ in triggers_of(state):
        for leaf in trigger.condition.leaves():
            if isinstance(leaf, triggers.At):
                people.add(leaf.who)
            elif isinstance(leaf, triggers.ItemAt):
                items.add(leaf.item)
    return frozenset(people), frozenset(items)


def notes_of(state):
    """Return the beats and cues fired triggers left (``triggers.Note``), oldest first."""
    notes = [triggers.Note.from_record(r.data) for r in state.of_kind("trigger_note")]
    return sorted(notes, key=lambda n: (n.turn, n.trigger, n.n, n.kind))


def judgments_of(state):
    return {r.subject: bool(r.data.get("holds")) for r in state.of_kind("judgment")}


def rolls_of(state):
    """Return the roll log's records on the line, oldest first (a complete state: every ``roll:`` slot)."""
    return sorted(state.of_kind("roll"), key=lambda r: (r.data.get("turn") or 0, r.data.get("index") or 0))


def rolls_of_turns(state, turns):
    """Return the roll records of ``turns`` (a partial state reads only their slots), oldest first."""
    slots = [f"roll:{turn}:{index}" for turn in turns for index in range(1, MAX_ROLLS + 1)]
    state.prefetch(slots)
    return [state.slots[slot] for slot in slots if slot in state.slots]


class StateWorld:
    """The story State as the ``rules.World`` triggers and views ask."""

    def __init__(self, state):
        self.state = state

    def location_of(self, who):
        return self.state.location_of(who)

    def holder_of(self, item):
        return self.state.holder_of(item)

    def place_of(self, item):
        return world.place_of(self.state, item)

    def variable(self, obj, name):
        return variable_value(self.state, obj, name)


def _characters(state):
    return {r.subject for r in state.entities() if r.data.get("kind") == "character"}


def _of_kind(state, kind):
    return {r.subject for r in state.entities() if r.data.get("kind") == kind}


def _now(state, env):
    """Return the story time, or (before the clock starts) the campaign's creation to the minute."""
    now = now_of(state)
    return now if now is not None else env.created_ms - env.created_ms % 60_000


def _key(check, name, role, kinds):
    """Return the key of entity ``name`` (one of ``kinds``), or refuse naming it."""
    return check.entity(name, role, kinds=kinds)


# --------------------------------------------------------------------------------------------- the clock

_CLOCK_HELP = ("\"\" / \"\" / \"\": the story clock starts (at data.starting_time, else the campaign's creation to "
               "the minute); at the opening of a world file's story, else with the first turn")


def _clock_write(step, *, round=None):
    """Return the ``clock`` record write of ``step``, with the round it timed and the notice for the narrator."""
    record = step.clock.write()
    record["data"].update({"notice": step.notice, "round": round})
    return record


def _step(check, event, request):
    env = _env(check)
    state = check.state
    step = _refused(clock.apply, clock_of(state), env.settings, request, wall_ms=env.wall_ms,
                    created_ms=env.created_ms, turn=env.turn, round=0)
    event["data"]["log"] = step.log
    return step


@register(RULES_RANK, "clock_start", sources=(WORLD, CORRECTION, ENGINE), fields={
    "starting_time": Field("text", "when the story starts, in the campaign's time zone (2031-03-14T08:00)")},
    help=_CLOCK_HELP)
def _clock_start(check, event):
    step = _step(check, event, {"type": "clock_start", "starting_time": event["data"].get("starting_time") or None})
    return [_clock_write(step)]


@register(RULES_RANK, "elapse", sources=(RECORDER, SCRIPT, CORRECTION, ENGINE), fields={
    "seconds": Field("int", "how long the turn took in story time (at most a day; longer is a skip)",
                     maximum=MAX_MS),
    "travel_seconds": Field("int", "the longest journey along exits this round (the application's)",
                            recorder=False, maximum=MAX_MS)},
    help="\"\" / \"\" / \"\": how long this turn took in story time (data.seconds; 30 s when nobody says)")
def _elapse(check, event):
    """Time one round: a second word on the same turn's round re-times it from its start."""
    env, state = _env(check), check.state
    current = clock_of(state)
    if current is None:
        raise Rejected("the story clock has not started on this line; it starts with the first turn")
    data = event["data"]
    record = state.get("clock")
    timed = (record.data.get("round") or {}) if record else {}
    if timed and timed.get("depth") == env.depth and env.depth > 0:
        base = dataclasses.replace(current, at=timed["from"])
        seconds = data.get("seconds", timed.get("seconds"))
        travel = max(timed.get("travel", 0), data.get("travel_seconds", 0))
    else:
        base, seconds, travel = current, data.get("seconds"), data.get("travel_seconds", 0)
    step = _refused(clock.elapse, base, env.settings, seconds=seconds, travel_seconds=travel, turn=env.turn, round=0)
    event["data"]["log"] = step.log
    given = env.settings.round_seconds if seconds is None else seconds
    return [_clock_write(step, round={"depth": env.depth, "from": base.at, "seconds": given, "travel": travel})]


@register(RULES_RANK, "skip", sources=(CORRECTION,), fields={
    "reason": Field("text", "why the time passes (they rest, the voyage)"),
    "by_minutes": Field("int", "skip this many minutes", maximum=MAX_MS),
    "until_time": Field("name", "or skip to this time of day (07:00)"),
    "days_later": Field("int", "with until_time: that many days on (0: the next such time)", maximum=366)},
    help="\"\" / \"\" / \"\": time passes between turns (the Skip time control; a reason is required)")
def _skip(check, event):
    data = event["data"]
    step = _step(check, event, {"type": "skip", "reason": data.get("reason"), "by_minutes": data.get("by_minutes"),
                                "until_time": data.get("until_time"), "days_later": data.get("days_later", 0)})
    notice = (f"Time was skipped by {calendar.describe_duration(step.seconds)} ({step.log['reason']}): "
              "account for what the characters did meanwhile.")
    return [_clock_write(dataclasses.replace(step, notice=notice))]


@register(RULES_RANK, "real", sources=(ENGINE,), fields={
    "wall_ms": Field("int", "the wall clock the round ended at (UTC ms)", **INSTANT)},
    help="written by the application: a round of a real clock takes the wall clock's time")
def _real(check, event):
    env = _env(check)
    step = _refused(clock.apply, clock_of(check.state), env.settings, {"type": "real"},
                    wall_ms=event["data"].get("wall_ms") or env.wall_ms, turn=env.turn, round=0)
    event["data"]["log"] = step.log
    return [_clock_write(step)]


@register(RULES_RANK, "resync", sources=(ENGINE,), fields={
    "last_seen_ms": Field("int", "when the person last played (UTC ms)", **INSTANT),
    "wall_ms": Field("int", "the wall clock at the turn's start (UTC ms)", **INSTANT)},
    help="written by the application at a turn's start: a real clock catches up with the wall (decision D7)")
def _resync(check, event):
    env, data = _env(check), event["data"]
    step = _refused(clock.apply, clock_of(check.state), env.settings,
                    {"type": "resync", "last_seen_ms": data.get("last_seen_ms")},
                    wall_ms=data.get("wall_ms") or env.wall_ms, turn=env.turn, round=0)
    event["data"]["log"] = step.log
    return [_clock_write(step)]


@register(RULES_RANK, "clock_mode", sources=(CORRECTION,), fields={
    "mode": Field("choice", "simulated or real", choices=clock.MODES)},
    help="\"\" / \"\" / \"\": the clock switches between simulated and real time (data.mode)")
def _clock_mode(check, event):
    step = _step(check, event, {"type": "clock_mode", "mode": event["data"].get("mode")})
    return [_clock_write(step)]


def _precheck_calendar(event):
    data = event["data"].get("calendar")
    if not isinstance(data, dict):
        raise Rejected("data.calendar must be an object {hemisphere, festivals, markers}")
    _refused(calendar.load_calendar, data)


@register(RULES_RANK, "calendar_set", sources=(WORLD, CORRECTION), fields={
    "calendar": Field("json", "{hemisphere, festivals: [{name, rule, except}], markers: [...]}")},
    help="\"\" / \"\" / \"\": the campaign calendar: hemisphere, festivals and markers (data.calendar)",
    precheck=_precheck_calendar)
def _calendar_set(check, event):
    data = event["data"].get("calendar")
    if not isinstance(data, dict):
        raise Rejected("data.calendar must be an object {hemisphere, festivals, markers}")
    loaded = _refused(calendar.load_calendar, data)
    return [write("calendar", "calendar", value=loaded.hemisphere, data=data)]


# --------------------------------------------------------------------------------------------- agendas


@register(RULES_RANK, "routine_set", sources=(WORLD, CORRECTION, ENGINE), fields={
    "windows": Field("json", "[{start, end, days, on, place, activity}], matched in order (empty: no routine)")},
    help="who / \"\" / \"\": a character's daily routine (data.windows)")
def _routine_set(check, event):
    state = check.state
    who = _key(check, event["subject"], "character", ("character",))
    windows = event["data"].get("windows")
    if windows in (None, []):
        current = state.get(f"routine:{who}")
        if current is None:
            raise Rejected(f"{state.name_of(who)} has no routine to remove")
        return [write(current.slot, "routine", subject=who, value=current.value, retracted=True)]
    if not isinstance(windows, list):
        raise Rejected("data.windows must be a list of {start, end, days, on, place, activity}")
    keyed, reasons = [], []
    for index, window in enumerate(windows, 1):
        if not isinstance(window, dict):
            reasons.append(f"window {index} is not an object")
            continue
        window = dict(window)
        if window.get("place"):
            place = state.resolve(str(window["place"]))
            if place is None or world.kind_of(state, place) != "place":
                reasons.append(f"window {index}: unknown place {window['place']!r}")
            else:
                window["place"] = place
        keyed.append(window)
    if reasons:
        raise Rejected(f"the routine of {state.name_of(who)} is refused: " + "; ".join(reasons))
    _refused(agenda.parse_routine, who, {"windows": keyed}, cal=calendar_of(state))
    return [agenda.routine_write(who, {"windows": keyed})]


ENGAGEMENT_FIELDS = {
    "id": Field("name", "its id (made from what, when not given)"),
    "who": Field("names", "the characters who are to meet"),
    "at": Field("text", "when, in words or ISO (tomorrow at 19:00, 2031-03-14T19:00)"),
    "place": Field("name", "where"),
    "what": Field("text", "what is to happen"),
}


@register(RULES_RANK, "engagement", sources=EVERYONE, fields=ENGAGEMENT_FIELDS,
          help="\"\" / \"\" / \"\": an appointment characters made (data: who, at, place, what); pending until "
               "the recorder or a person says it was kept, missed or cancelled")
def _engagement(check, event):
    env, state, data = _env(check), check.state, event["data"]
    who = [_key(check, name, "character", ("character",)) for name in data.get("who", []) if name]
    place = _key(check, data["place"], "place", ("place",)) if data.get("place") else ""
    ident = key_for(data.get("id") or data.get("what") or "")[:60]
    if data.get("id") and state.get(f"engagement:{ident}") is not None:
        raise Rejected(f"engagement {ident!r} exists; change it with engagement_edit")
    base, number = ident, 2
    while state.get(f"engagement:{ident}") is not None:
        ident, number = f"{base}-{number}", number + 1
    made = _refused(agenda.new_engagement, {"id": ident, "who": who, "at": data.get("at"), "place": place,
                                            "what": data.get("what")},
                    now_ms=_now(state, env), tz=env.settings.time_zone, cal=calendar_of(state))
    return [made.write()]


@register(RULES_RANK, "engagement_edit", sources=EVERYONE, fields={
    "id": Field("name", "the engagement's id"),
    "status": Field("choice", "kept, missed or cancelled (or pending again)", choices=agenda.ENGAGEMENT_STATUSES),
    "at": Field("text", "a new time"), "place": Field("name", "a new place"), "what": Field("text", "new wording")},
    help="\"\" / \"\" / \"\": an engagement was kept, missed, cancelled or moved (data.id and what changed)")
def _engagement_edit(check, event):
    env, state, data = _env(check), check.state, event["data"]
    record = state.get(f"engagement:{key_for(data.get('id', ''))}") if data.get("id") else None
    if record is None:
        known = ", ".join(sorted(r.subject for r in state.of_kind("engagement"))[:10]) or "none"
        raise Rejected(f"no engagement {data.get('id', '')!r} (the engagements: {known})")
    change = dict(data)
    if change.get("place"):
        change["place"] = _key(check, change["place"], "place", ("place",))
    source = RECORDER if check.source in PROPOSERS else check.source
    edited = _refused(agenda.edit_engagement, agenda.Engagement.from_record(record.data), change, source=source,
                      now_ms=_now(state, env), tz=env.settings.time_zone, cal=calendar_of(state))
    return [edited.write()]


INTENT_FIELDS = {
    "id": Field("name", "its id (made from the plan, when not given)"),
    "type": Field("name", "what kind of goal (revenge, trade, love)"),
    "priority": Field("int", "how much it matters, 1 (least) to 5 (most)", minimum=1, maximum=5),
    "urgency": Field("int", "how pressing it is, 1 to 5", minimum=1, maximum=5),
    "deadline": Field("text", "by when, in words or ISO"),
    "plan": Field("text", "the plan, as the character would say it"),
}


@register(RULES_RANK, "intent_add", sources=EVERYONE, fields=INTENT_FIELDS,
          help="who / \"\" / \"\": a character takes up a goal (data: plan, type, priority, urgency, deadline)")
def _intent_add(check, event):
    env, state, data = _env(check), check.state, event["data"]
    who = _key(check, event["subject"], "character", ("character",))
    ident = key_for(data.get("id") or data.get("plan") or "")[:60]
    if state.get(f"intent:{who}:{ident}") is not None:
        raise Rejected(f"{state.name_of(who)} already has the intent {ident!r}; change it with intent_edit")
    made = _refused(agenda.new_intent, {**data, "who": who, "id": ident}, now_ms=_now(state, env),
                    tz=env.settings.time_zone, cal=calendar_of(state))
    return [made.write()]


@register(RULES_RANK, "intent_edit", sources=EVERYONE, fields={
    **INTENT_FIELDS, "status": Field("choice", "active, done or dropped", choices=agenda.INTENT_STATUSES)},
    help="who / \"\" / \"\": a character's goal changes, is done or dropped (data.id and what changed)")
def _intent_edit(check, event):
    env, state, data = _env(check), check.state, event["data"]
    who = _key(check, event["subject"], "character", ("character",))
    record = state.get(f"intent:{who}:{key_for(data.get('id', ''))}") if data.get("id") else None
    if record is None:
        known = ", ".join(sorted(r.data.get("id", "") for r in state.of_kind("intent") if r.subject == who)) or "none"
        raise Rejected(f"{state.name_of(who)} has no intent {data.get('id', '')!r} (theirs: {known})")
    edited = _refused(agenda.edit_intent, agenda.Intent.from_record(record.data), data, now_ms=_now(state, env),
                      tz=env.settings.time_zone, cal=calendar_of(state))
    return [edited.write()]


@register(RULES_RANK, "catch_up", sources=(ENGINE,), fields={
    "skipping": Field("bool", "time was skipped (routine-less characters off stage are queued for a routine)")},
    help="written by the application when time passes: characters away from the protagonist follow their "
         "routines, ignoring exits; no model is asked")
def _catch_up(check, event):
    env, state = _env(check), check.state
    now = now_of(state)
    if now is None:
        raise Rejected("the story clock has not started on this line")
    routines = routines_of(state)
    skipping = event["data"].get("skipping", False)
    people = sorted(_characters(state) - {PROTAGONIST})
    if not skipping:
        people = [who for who in people if who in routines]
    state.load("location", people)
    cal = calendar_of(state)
    queue = state.of_kind("consolidation")
    plan = agenda.catch_up_plan(
        people, calendar.moment(now, env.settings.time_zone), routines=routines,
        locations={who: state.location_of(who) for who in people},
        cursors={r.subject: r.value for r in state.of_kind("agenda_cursor")},
        protagonist_place=state.location_of(PROTAGONIST), cal=cal, skipping=skipping,
        # The world author's creations share the queue's slots (``consolidation:<key>``): one of them already waits
        # for the author, so it is not queued again, and only story time's own (no routine) fill its three places.
        queued=[r.subject for r in queue if r.data.get("reason") == "no routine"],
        excluded=frozenset(r.subject for r in queue if r.data.get("reason") != "no routine"), name_of=state.name_of)
    writes = [world.relocate(check, move.who, move.place, ignore_exits=True) for move in plan.moves]
    for who, activity in plan.activities.items():
        current = state.get(f"condition:{who}")
        fields = {"inner": "", "activity": "", "mood": "", **(current.data if current else {})}
        if activity and fields["activity"] != activity:
            fields["activity"] = activity
            writes.append({"slot": f"condition:{who}", "kind": "condition", "subject": who,
                           "value": current.value if current else "", "data": fields,
                           "narrator_only": current.narrator_only if current else False})
    writes += plan.writes
    lines = plan.lines(state.name_of)
    event["data"].update({"moves": [dataclasses.asdict(move) for move in plan.moves], "queued": plan.queued,
                          "waiting": plan.waiting})
    if lines or plan.queued:
        writes.append(write("catch_up", "catch_up", value=f"{len(plan.moves)} moves",
                            data={"lines": lines, "queued": plan.queued, "turn": env.turn, "at": now}))
    return writes


# --------------------------------------------------------------------------------------------- variables


@register(RULES_RANK, "variable_define", sources=(WORLD, CORRECTION, ENGINE), fields={
    "definition": Field("json", "{name, type, applies_to, range, options, default, visibility, always, bands, "
                                "baseline, description}")},
    help="\"\" / \"\" / \"\": a story variable (mood, injury, debt, a flag, reputation) is defined (at most 60)")
def _variable_define(check, event):
    defs = {name: d for name, d in definitions_of(check.state).items() if not d.builtin}
    definition = _refused(variables.define, defs, event["data"].get("definition"))
    return [definition.write()]


@register(RULES_RANK, "variable_change", sources=EVERYONE, fields={
    "to": Field("text", "the new value (out of range is refused)"),
    "by": Field("number", "a number's change, kept within its range", minimum=-10 ** 9, maximum=10 ** 9),
    "baseline": Field("bool", "return it to its resting value"),
    "reason": Field("text", "why it changed")},
    help="object (a character, item or place, or \"world\") / the variable / \"\": a story variable changes "
         "(data: to, by or baseline)")
def _variable_change(check, event):
    state, data = check.state, event["data"]
    name = event["object"].strip().lower()
    obj = event["subject"].strip()
    if obj and obj.lower() != variables.WORLD:
        obj = state.resolve(obj) or obj
    elif obj:
        obj = variables.WORLD
    item = {"object": obj, "name": name, "to": data.get("to") if data.get("to") != "" else None,
            "by": data.get("by"), "baseline": data.get("baseline", False)}
    defs = definitions_of(state)
    stored = state.get(variables.slot_of(obj, name)) if obj else None
    temperament = state.get(f"temperament:{obj}") if obj else None
    made = _refused(variables.change, item, defs=defs,
                    values={(obj, name): stored.data.get("value")} if stored else {},
                    kind_of=lambda key: world.kind_of(state, key) or None,
                    temperaments={obj: temperament.data} if temperament else None)
    if made.note:
        event["data"]["note"] = made.note
    return [made.write] if made.write is not None else []


@register(RULES_RANK, "temperament", sources=(WORLD, CORRECTION), fields={
    name: Field("axis", f"the resting {name}, from -1 to 1") for name in variables.BUILTINS},
    help="who / \"\" / \"\": a character's temperament: where their valence, arousal and dominance rest")
def _temperament(check, event):
    who = _key(check, event["subject"], "character", ("character",))
    current = check.state.get(f"temperament:{who}")
    data = {**(current.data if current else {}), **event["data"]}
    if not data:
        raise Rejected("the event gives no valence, arousal or dominance")
    return [write(f"temperament:{who}", "temperament", subject=who, value=", ".join(
        f"{name} {value:g}" for name, value in sorted(data.items())), data=data)]


# --------------------------------------------------------------------------------------------- dice


def _precheck_dice(event):
    """Parse the check and its bands' coverage before the transaction; only its variable is left to check."""
    key = event["subject"].strip().lower()
    _refused(dice.parse_check, key, {**event["data"], "name": event["data"].get("name") or key})


@register(RULES_RANK, "dice_check_define", sources=(WORLD, CORRECTION), precheck=_precheck_dice, fields={
    "name": Field("name", "what the check is called"),
    "use_text": Field("text", "when to use it"),
    "definition": Field("json", "{dice, read, compare, target, variable, bands: [{label, outcome, min, max}]}")},
    help="key / \"\" / \"\": a named dice check whose bands cover every possible roll")
def _dice_check_define(check, event):
    key = event["subject"].strip().lower()
    numbers = {name for name, d in definitions_of(check.state).items()
               if d.type == "number" and "character" in d.applies_to}
    made = _refused(dice.parse_check, key, {**event["data"], "name": event["data"].get("name") or key},
                    variables=numbers)
    return [made.write()]


@register(RULES_RANK, "roll", sources=EVERYONE, fields={
    "check": Field("name", "the named check (its key), or"),
    "expression": Field("name", "dice notation: 2d6, 4d6kh3, 1d20+5, 10d10>=7"),
    "reason": Field("text", "why the dice are rolled"),
    "target": Field("int", "the difficulty, for a check that compares with one", minimum=-100_000,
                    maximum=100_000)},
    help="who rolls (or \"\") / \"\" / \"\": dice are rolled, by a named check or notation, with a reason")
def _roll(check, event):
    env, state, data = _env(check), check.state, event["data"]
    who = _key(check, event["subject"], "roller", ("character",)) if event["subject"] else ""
    reason = " ".join(str(data.get("reason") or "").split())
    if not reason:
        raise Rejected("a roll says why the dice are rolled (data.reason)")
    if bool(data.get("check")) == bool(data.get("expression")):
        raise Rejected("a roll names a check (data.check) or gives dice notation (data.expression), not both")
    subject, bonus = data.get("expression"), 0
    if data.get("check"):
        checks = checks_of(state)
        subject = checks.get(data["check"].strip().lower())
        if subject is None:
            known = ", ".join(sorted(checks)) or "none"
            raise Rejected(f"unknown dice check {data['check']!r}; the checks are {known}")
        if subject.variable:
            if not who:
                raise Rejected(f"check {subject.key!r} adds {subject.variable}: say who rolls")
            bonus = variable_value(state, who, subject.variable) or 0
    anchor, anchor_depth = env.anchor
    turn = (anchor_depth + 1) // 2
    taken = state.existing([f"roll:{turn}:{index}" for index in range(1, MAX_ROLLS + 1)])
    index = 1 + max((int(slot.rsplit(":", 1)[1]) for slot in taken), default=0)
    if index > MAX_ROLLS:
        raise Rejected(f"turn {turn} already has {MAX_ROLLS} rolls")
    rolled = _refused(dice.roll, subject, seed=(env.campaign, anchor, index), bonus=bonus, target=data.get("target"),
                      reason=reason, who=who,
                      initiator="player" if check.source in (CORRECTION, SCRIPT) else "agent")
    result = rolled.data(turn=turn, anchor=anchor, index=index)
    event["data"]["result"] = result
    return [write(f"roll:{turn}:{index}", "roll", subject=who, value=rolled.describe(), data=result)]


# --------------------------------------------------------------------------------------------- triggers


def _keyed(value, state):
    """Return a trigger definition with the names it gives (who, place, item, audiences) as entity keys."""
    if isinstance(value, list):
        return [_keyed(item, state) for item in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for name, item in value.items():
        if name in ("who", "place", "item", "audience") and isinstance(item, str) and item != "everyone":
            out[name] = state.resolve(item) or item
        elif name == "audience" and isinstance(item, list):
            out[name] = [state.resolve(str(each)) or each for each in item]
        elif name == "object" and isinstance(item, str) and item and item != variables.WORLD:
            out[name] = state.resolve(item) or item
        elif name == "effects":
            out[name] = item  # event payloads, read with their names when they apply
        else:
            out[name] = _keyed(item, state)
    return out


def _context(state, env, since=None):
    now = _now(state, env)
    return triggers.Context(StateWorld(state), now, now if since is None else since, env.settings.time_zone,
                            calendar_of(state), judgments=judgments_of(state))


def _prefetch(state, entries=None):
    """Read at once what the triggers' conditions ask of a partial state: where the people they name are, and
    those carrying the items they name (who holds what is in the cached base; where people are is not).

    ``entries`` are triggers not stored yet (a definition being checked); by default, the line's.
    """
    if entries is None:
        people, items = _watched(state)
    else:
        people = {leaf.who for trigger, _ in entries for leaf in trigger.condition.leaves()
                  if isinstance(leaf, triggers.At)}
        items = {leaf.item for trigger, _ in entries for leaf in trigger.condition.leaves()
                 if isinstance(leaf, triggers.ItemAt)}
    carriers = {_carrier(state, item) for item in items}
    state.prefetch([f"location:{who}" for who in sorted((set(people) | carriers) - {""})])


def _carrier(state, item):
    """Return the character at the top of ``item``'s holders (a place: ""), reading only the holders."""
    holder = state.holder_of(item)
    for _ in range(world.MAX_CHAIN):
        kind = world.kind_of(state, holder)
        if kind != "item":
            return holder if kind == "character" else ""
        holder = state.holder_of(holder)
    return ""


def _precheck_triggers(event):
    """Read the triggers' shape, conditions and instants before the transaction (what they name: inside it)."""
    items = event["data"].get("triggers")
    items = [items] if isinstance(items, dict) else items
    if not isinstance(items, list) or not items:
        raise Rejected("data.triggers must be a trigger definition or a list of them")
    _refused(triggers.load_triggers, items, now_ms=int(time.time() * 1000), cal=calendar.STORED)


@register(RULES_RANK, "trigger_define", sources=(WORLD, CORRECTION), precheck=_precheck_triggers, fields={
    "triggers": Field("json", "one trigger definition or a list (those of one edit may refer to each other)")},
    help="\"\" / \"\" / \"\": world triggers are defined: what the world does when the records say so")
def _trigger_define(check, event):
    env, state = _env(check), check.state
    items = event["data"].get("triggers")
    items = [items] if isinstance(items, dict) else items
    if not isinstance(items, list) or not items:
        raise Rejected("data.triggers must be a trigger definition or a list of them")
    existing = {trigger.id: (trigger, status) for trigger, status in triggers_of(state)}
    refs = triggers.References(
        characters=_characters(state), places=_of_kind(state, "place"), items=_of_kind(state, "item"),
        variables=set(definitions_of(state)), triggers=set(existing), event_types=set(TYPES))
    loaded = _refused(triggers.load_triggers, _keyed(items, state), refs=refs, tz=env.settings.time_zone,
                      now_ms=_now(state, env), cal=calendar_of(state),
                      origin="world" if check.source == WORLD else "story")
    entries = [(trigger, existing.get(trigger.id, (None, triggers.Status()))[1]) for trigger in loaded]
    _prefetch(state, entries)
    ctx = _context(state, env)
    ctx.statuses = {ident: status.status for ident, (_, status) in existing.items()}
    writes = []
    for trigger, status in entries:
        # What already holds when a trigger is made is where it starts, not an edge: it fires when it next becomes true.
        ctx.trigger = trigger.id
        holds = not trigger.condition.pulse and trigger.condition.value(ctx)
        writes.append(triggers.record(trigger, dataclasses.replace(status, last_value=holds, deferred=False)))
    return writes


def _trigger(check, ident):
    record = check.state.get(f"trigger:{ident}")
    if record is None:
        known = ", ".join(sorted(r.subject for r in check.state.of_kind("trigger"))[:10]) or "none"
        raise Rejected(f"no trigger {ident!r} (the triggers: {known})")
    return triggers.from_record(record.data)


@register(RULES_RANK, "trigger_reset", sources=(CORRECTION,),
          help="trigger id / \"\" / \"\": a failed, expired or spent trigger is made dormant again, to fire anew")
def _trigger_reset(check, event):
    trigger, _ = _trigger(check, event["subject"].strip())
    return [triggers.record(trigger, triggers.Status())]


@register(RULES_RANK, "beat_addressed", sources=(RECORDER, SCRIPT, CORRECTION), fields={
    "n": Field("int", "which firing's note (empty: the oldest pending)"),
    "kind": Field("choice", "beat (the narrator's) or cue (the characters')", choices=("beat", "cue"))},
    help="trigger id / \"\" / \"\": the narration took up a fired trigger's pending beat")
def _beat_addressed(check, event):
    ident, data = event["subject"].strip(), event["data"]
    kind = data.get("kind") or "beat"
    pending = [note for note in notes_of(check.state)
               if note.trigger == ident and note.kind == kind and note.status == "pending"
               and (not data.get("n") or note.n == data["n"])]
    if not pending:
        raise Rejected(f"trigger {ident!r} has no pending {kind}")
    return [_refused(triggers.address, pending[0])]


@register(RULES_RANK, "judgment", sources=(JUDGE, CORRECTION), fields={
    "holds": Field("bool", "whether the trigger's judged condition is true now")},
    help="trigger id / \"\" / \"\": the judge (or a person) decides a trigger's free-text condition")
def _judgment(check, event):
    trigger, _ = _trigger(check, event["subject"].strip())
    if not trigger.judged:
        raise Rejected(f"trigger {trigger.id!r} has no judged condition")
    return [_refused(triggers.judgment, trigger.id, event["data"].get("holds", False), turn=_env(check).turn)]


@register(RULES_RANK, "trigger_check", sources=(ENGINE,), fields={
    "since": Field("int", "the story time of the previous check (UTC ms)", **INSTANT)},
    help="written by the application after every batch: the world's triggers are checked, and each that fires "
         "applies all its effects or none")
def _trigger_check(check, event):
    env, state = _env(check), check.state
    entries = triggers_of(state)
    _prefetch(state)
    ctx = _context(state, env, since=event["data"].get("since"))
    drawn = any(trigger.probability < 1 for trigger, _ in entries)
    result = triggers.check(entries, ctx, seed=(env.campaign, env.anchor[0] if drawn else env.node),
                            cap=env.trigger_cap)
    writes = list(result.writes)
    report = {"now": ctx.now_ms, "fired": [], "failed": {}, "deferred": result.deferred}
    accepted = _copy(state) if result.firings else state
    done = []
    for firing in result.firings:
        trial = _copy(accepted)
        outcomes, reason = _dry_run(trial, firing.effects, env, check.elsewhere)
        if reason:
            writes.append(triggers.failed(firing, reason))
            report["failed"][firing.trigger.id] = reason
            continue
        accepted = trial
        done += outcomes
        writes += [w for outcome in outcomes for w in outcome.writes] + firing.writes(turn=env.turn)
        report["fired"].append(firing.trigger.id)
    seen = world.observation(accepted, done) if done else None
    if seen is not None:
        looked = clean({"type": "observe", "data": seen})
        writes += TYPES["observe"].handler(Check(accepted, ENGINE, check.elsewhere, env), looked)
    writes += triggers.lapse(notes_of(state), turn=env.turn, beat_turns=env.beat_turns, cue_turns=env.cue_turns)
    event["data"]["report"] = report
    return writes


def _copy(state):
    """Return a copy of ``state`` that validating events changes without touching ``state`` (a dry run)."""
    return dataclasses.replace(state, slots=dict(state.slots), checked=set(state.checked), loaded=set(state.loaded),
                               caches={}, shared=None, dirty=set(state.dirty), by_kind=None, own_kinds=set())


def _dry_run(state, effects, env, elsewhere):
    """Validate a firing's effects in order on ``state`` (a copy); return (outcomes, "") or ([], the first reason)."""
    outcomes = []
    for number, effect in enumerate(effects, 1):
        outcome = validate(state, clean(effect), ENGINE, elsewhere=elsewhere, env=env)
        if outcome.status != "applied":
            return [], f"effect {number} ({effect.get('type', '?')}): {outcome.reason}"
        outcomes.append(outcome)
    return outcomes, ""


# --------------------------------------------------------------------------------------------- after a batch


@hook("after_batch")
def after_batch(state, outcomes, source, env, *, elsewhere=lambda key: False):
    """Return the engine's Outcomes after a batch: its round lengthened to its journeys, then the trigger check.

    Both are validated like any event (source ``engine``) against the
    batch's state, in the batch's transaction. The check sees the clock
    before the batch as the previous check's time, so a skip past 20:00
    fires what 20:00 fires; a batch that leaves every trigger and note as it
    was adds nothing.
    """
    extra = []
    applied = [outcome for outcome in outcomes if outcome.status == "applied"]
    if source in PROPOSERS:
        journeys = [[w["data"]["travel_seconds"]] for outcome in applied for w in outcome.writes
                    if w["kind"] == "location" and (w.get("data") or {}).get("travel_seconds")]
        travel = clock.round_travel(journeys)
        record = state.get("clock")
        timed = (record.data.get("round") or {}) if record else {}
        if travel and timed.get("depth") == env.depth and int(record.value) - timed["from"] < travel * 1000:
            extra.append(_engine(validate(state, clean({"type": "elapse", "data": {"travel_seconds": travel}}),
                                          ENGINE, elsewhere=elsewhere, env=env)))
    if state.of_kind("trigger") or state.of_kind("trigger_note"):
        since = next((change["value"] for outcome in [*applied, *extra] for change in outcome.previous
                      if change["slot"] == "clock" and change["value"] is not None), None)
        # Midnight of 1 January 1970 is 0 ms: a previous time, not none.
        data = {"since": int(since)} if since is not None else {}
        checked = validate(state, clean({"type": "trigger_check", "data": data}), ENGINE, elsewhere=elsewhere, env=env)
        if checked.writes or checked.status != "applied":
            extra.append(_engine(checked))
    return extra


def _engine(outcome):
    outcome.source = ENGINE
    return outcome


# --------------------------------------------------------------------------------------------- as plain values


def snapshot(state, tz=None):
    """Return story time and world rules of ``state`` as JSON-ready values (``story state``; keys only added)."""
    current = clock_of(state)
    tz = tz or (current.time_zone if current else "UTC")
    cal = calendar_of(state)
    now = current.at if current else None
    calendar_record = state.get("calendar")
    return {
        "clock": None if current is None else {
            "at": current.at, "local": calendar.local(current.at, tz).replace(tzinfo=None).isoformat(),
            "text": calendar.describe_instant(current.at, tz, cal), "mode": current.mode, "time_zone": tz,
            "simulated_used": current.simulated_used},
        "calendar": calendar_record.data if calendar_record else None,
        "agendas": {
            "routines": {r.subject: r.data.get("windows", []) for r in sorted(state.of_kind("routine"),
                                                                             key=lambda r: r.subject)},
            "cursors": {r.subject: r.value for r in sorted(state.of_kind("agenda_cursor"), key=lambda r: r.subject)},
            "engagements": [{**e.data(), "overdue": now is not None and e.overdue(now)}
                            for e in sorted(engagements_of(state), key=lambda e: (e.at, e.id))],
            "intents": [i.data() for i in sorted(intents_of(state), key=lambda i: (i.who, i.id))],
            "consolidation": sorted(r.subject for r in state.of_kind("consolidation")),
        },
        "variables": {
            "definitions": [d.data() for d in definitions_of(state).values() if not d.builtin],
            "values": [{"object": obj, "name": name, "value": value}
                       for (obj, name), value in sorted(values_of(state).items())],
            "temperaments": {r.subject: dict(r.data) for r in sorted(state.of_kind("temperament"),
                                                                     key=lambda r: r.subject)},
        },
        "dice_checks": [{"key": key, **check.data()} for key, check in sorted(checks_of(state).items())],
        "rolls": [dict(r.data) for r in rolls_of(state)],
        "triggers": [{"id": t.id, **status.data(), "origin": t.origin, "announced": t.announce is not None,
                      "definition": t.definition} for t, status in triggers_of(state)],
        "trigger_notes": [{"trigger": n.trigger, "n": n.n, "kind": n.kind, "text": n.text, "status": n.status,
                           "turn": n.turn} for n in notes_of(state)],
        "judgments": dict(sorted(judgments_of(state).items())),
    }
