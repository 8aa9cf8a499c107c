"""Story time and world rules in the dynamic tail: what the clock, agendas, variables, triggers and dice say now.

After the current state (seed 002 时间, 日程, 故事变量, 骰子, 世界触发器): the
date and time in words, and what the narrator must account for (a skip, an
absence, a lengthened round); engagements due within half an hour or
overdue (at most six); who moved by their routine since the last reply and
who present should be elsewhere; the variables, the scene's first (at most
fourteen lines); announced triggers with their audience and pending beats;
the dice rolled since the last reply, as fixed outcomes. A trigger that is
neither announced nor fired contributes nothing, not even its id. The
section is protected and changes every turn, so it sits in the tail, after
everything a prompt cache can reuse.
"""

import time

from campaigns.state import PROTAGONIST
from campaigns.state.time import agenda, calendar, clock, rulebook, triggers, variables
from campaigns.state.world import world

from .layers import DYNAMIC_TAIL, Section

# The label only; what it is is said once, in the stable prefix (layers.NARRATOR_RULES, issue 27).
HEADER = "Story time and world rules:"
ROLLS = "Dice rolled since the last reply (fixed outcomes: narrate them as they fell; never roll again):"


def section(campaign, path, state):
    """Return the rules Section for a turn after ``path`` on ``state`` (a turn's partial state), or None."""
    lines = narrator_lines(campaign, path, state)
    if not lines:
        return None
    return Section("rules", "Story time and world rules", "Level 2 accepted state", DYNAMIC_TAIL,
                   "\n".join([HEADER, *lines]), protected=True,
                   components=[{"type": "rules", "text": line} for line in lines])


def narrator_lines(campaign, path, state, *, wall_ms=None):
    """Return the narrator's lines of story time and world rules at the head of ``path``."""
    tz = campaign.time_zone
    current = rulebook.clock_of(state)
    lines = []
    at = None
    present = [key for key in state.present() if key != PROTAGONIST]
    if current is not None:
        at, notice = _now(campaign, current, wall_ms)
        record = state.get("clock")
        if not notice and record.depth == path.head_depth and record.data.get("notice"):
            notice = record.data["notice"]
        cal = rulebook.calendar_of(state)
        lines.append(f"Now: {calendar.describe_instant(at, tz, cal)}.")
        if notice:
            lines.append(notice)
        shown, more = agenda.due(rulebook.engagements_of(state), at)
        lines += [f"Due: {agenda.describe_engagement(e, at, tz, state.name_of)}" for e in shown]
        if more:
            lines.append(f"({more} more engagements are due or overdue.)")
        moved = state.get("catch_up")
        if moved is not None and moved.depth == path.head_depth:
            lines += [f"Schedule: {line}." for line in moved.data.get("lines", [])]
        hints = agenda.elsewhere_hints(present, calendar.moment(at, tz), routines=rulebook.routines_of(state),
                                       locations={key: state.location_of(key) for key in present}, cal=cal,
                                       name_of=state.name_of)
        lines += [f"Schedule: {hint}." for hint in hints if f"Schedule: {hint}." not in lines]
    lines += _variables(state, present)
    entries = rulebook.triggers_of(state)
    if entries or state.of_kind("trigger_note"):
        lines += triggers.narrator_lines(entries, rulebook.notes_of(state), now_ms=at or 0, tz=tz,
                                         name_of=state.name_of)
    rolled = [r for r in rulebook.rolls_of_turns(state, [path.head_depth // 2]) if r.depth == path.head_depth]
    if rolled:
        lines += [ROLLS, *[f"- {_rolled(state, r)}" for r in rolled]]
    return lines


def _now(campaign, current, wall_ms):
    """Return (the story time the turn starts at, what the narrator must account for).

    A real clock is read as the turn will write it at commit (decision D7:
    ``resync`` to the wall), so the narrator already hears of an absence.
    """
    if current.mode != "real":
        return current.at, ""
    seen = campaign.last_played_at
    step = clock.turn_start(current, wall_ms=wall_ms or int(time.time() * 1000),
                            last_seen_ms=int(seen.timestamp() * 1000) if seen else None, turn=0)
    return (step.clock.at, step.notice) if step is not None else (current.at, "")


def _variables(state, present):
    defs = rulebook.definitions_of(state)
    values = rulebook.values_of(state)
    if not values and not any(d.always for d in defs.values()):
        return []
    place = state.place()
    view = variables.view(defs=defs, values=values, kind_of=lambda key: world.kind_of(state, key) or None,
                          scene=[key for key in (variables.WORLD, place) if key], present=present,
                          temperaments=rulebook.temperaments_of(state), name_of=state.name_of)
    if not view.lines:
        return []
    lines = ["Variables:", *[f"- {line}" for line in view.lines]]
    if view.left_out:
        lines.append(f"({view.left_out} more with variables set are not listed.)")
    return lines


def _rolled(state, record):
    who = record.data.get("who")
    reason = record.data.get("reason")
    return (f"{state.name_of(who) + ': ' if who else ''}{record.value}"
            + (f" — for {reason}" if reason else ""))


def recorder_types(state):
    """Return the rules' event types the recorder is offered on this line: elapsed time always, the rest when the
    line has what they change (agendas, variables, checks, pending beats)."""
    names = {"elapse"}
    if state.of_kind("routine") or state.of_kind("engagement") or state.of_kind("intent"):
        names |= {"engagement", "engagement_edit", "intent_add", "intent_edit"}
    if state.of_kind("variable_def"):
        names.add("variable_change")
    if state.of_kind("dice_check"):
        names.add("roll")
    if any(n.kind == "beat" and n.status == "pending" for n in rulebook.notes_of(state)):
        names.add("beat_addressed")
    return names


def recorder_lines(state):
    """Return what the recorder is shown of the rules: the time, what is pending, and what it may name."""
    lines = []
    current = rulebook.clock_of(state)
    if current is not None:
        lines.append(f"Story time at the start of the turn: {current.describe(rulebook.calendar_of(state))}")
    pending = [e for e in rulebook.engagements_of(state) if e.status == "pending"]
    if pending:
        at, tz = (current.at, current.time_zone) if current else (0, "UTC")
        lines.append("Pending engagements (id: what):")
        lines += [f"- {e.id}: {agenda.describe_engagement(e, at, tz, state.name_of)}" for e in pending[:agenda.MAX_DUE]]
    intents = agenda.top_intents(rulebook.intents_of(state), limit=10)
    if intents:
        lines.append("Active intents (who — id: plan):")
        lines += [f"- {state.name_of(i.who)} — {i.id}: {i.plan}" for i in intents]
    values = rulebook.values_of(state)
    if values:
        lines.append("Variables not at their default:")
        lines += [f"- {state.name_of(obj)}: {name} {value}" for (obj, name), value in sorted(values.items())[:20]]
    defs = [d for d in rulebook.definitions_of(state).values() if not d.builtin]
    if defs:
        lines.append("Variables (name: what it is): " + "; ".join(
            f"{d.name}: {d.description or d.type}" for d in defs[:20]))
    checks = rulebook.checks_of(state)
    if checks:
        lines.append("Dice checks (key — name: when to use):")
        lines += [f"- {key} — {check.name}: {check.use_text}" for key, check in sorted(checks.items())]
    beats = [n for n in rulebook.notes_of(state) if n.kind == "beat" and n.status == "pending"]
    if beats:
        lines.append("Pending beats (trigger id: beat; record beat_addressed when the reply takes one up):")
        lines += [f"- {n.trigger}: {n.text}" for n in beats]
    return lines
