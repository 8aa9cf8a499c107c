"""world_lint: what is wrong with a world, on a world file before import or on a running campaign's state.

Seed 002 「扩展世界」 and 「物品」: places that cannot be entered or left, places
unreachable from the player, characters with no place, duplicate character
or place names, new characters without relationships, one-way passages,
one-sided relationships, locks nobody can open, and same-named items in one
place; and of story time and world rules (seed 002 日程, 骰子, 世界触发器):
routines that send someone to a place that is gone, engagements of
people who are gone, checks that add an undefined variable, and triggers
that name what no longer exists or can never fire. Errors make a world file unimportable (and will stop the world author
from finishing); warnings are reported and may be intended — a one-way drop
into a pit, or a relationship someone was only told of. Pure: a State in,
findings out.
"""

from collections import deque
from dataclasses import dataclass

from ..reading import PROTAGONIST, normalize
from ..time import rulebook, triggers
from . import world


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" | "warning" | "note" (how a world file was read: the doors it joined)
    check: str  # which check: "unreachable", "unplaced", "duplicate", ...
    text: str
    subjects: tuple = ()

    def __str__(self):
        return f"{self.severity}: {self.text}"


def lint(state, *, new=()):
    """Return every Finding of ``state``'s world, errors first; ``new`` are characters just created (WP4's author)."""
    findings = [*_places(state), *_characters(state, new), *_names(state), *_locks(state), *_items(state),
                *_passages(state), *_relationships(state), *_rules(state)]
    return sorted(findings, key=lambda f: (f.severity != "error", f.check, f.text))


def _places(state):
    name = state.name_of
    out, into = world.graph(state)
    if not out:
        return []  # a story with no exits at all is not mapped: moves there are free, and nothing is sealed
    start = state.location_of(PROTAGONIST)
    reached = _reachable(out, start) if start else None
    findings = []
    for place in world.places(state):
        if not out.get(place) and not into.get(place):
            findings.append(Finding("error", "sealed", f"{name(place)} is joined to no other place: it cannot be "
                                    "entered or left", (place,)))
        elif reached is not None and place not in reached:
            findings.append(Finding("error", "unreachable", f"{name(place)} cannot be reached from {name(start)}, "
                                    "where the protagonist is", (place,)))
        elif not out.get(place):
            findings.append(Finding("error", "sealed", f"{name(place)} cannot be left: no exit leads out of it",
                                    (place,)))
    return findings


def _reachable(out, start):
    """Every place some exit leads to from ``start``, whatever state it is in (a lock has a key; rubble moves)."""
    seen = {start}
    queue = deque([start])
    while queue:
        for exit in out.get(queue.popleft(), ()):
            if exit.to not in seen:
                seen.add(exit.to)
                queue.append(exit.to)
    return seen


def _characters(state, new):
    findings = []
    for key in world.characters(state):
        if not state.location_of(key):
            findings.append(Finding("error", "unplaced", f"{state.name_of(key)} has no place", (key,)))
    for key in new:
        if not world.relationships_of(state, key):
            findings.append(Finding("warning", "no_relationships",
                                    f"{state.name_of(key)} is new and has no relationship to anyone", (key,)))
    return findings


def _names(state):
    by_name = {}
    for record in state.entities():
        kind = record.data.get("kind")
        if kind in ("character", "place"):
            by_name.setdefault((kind, normalize(record.value)), []).append(record.subject)
    return [Finding("error", "duplicate", f"{len(keys)} {kind}s are called {state.name_of(keys[0])!r} "
                    f"({', '.join(sorted(keys))})", tuple(sorted(keys)))
            for (kind, _), keys in sorted(by_name.items()) if len(keys) > 1]


def _locks(state):
    findings = []

    def opens(opener):
        return opener and world.kind_of(state, opener) == "item"

    for record in state.of_kind("exit"):
        exit = world.exit_of(record)
        if exit.state == "locked" and not opens(exit.opener):
            findings.append(Finding("error", "lock", f"the exit {world.describe_exit(state, exit)} is locked and no "
                                    "known item opens it", (exit.slot,)))
    for record in state.of_kind("item"):
        item = world.item_of(state, record.subject)
        if item is not None and item.container == "locked" and not opens(item.opener):
            findings.append(Finding("error", "lock", f"the {item.name} is locked and no known item opens it",
                                    (item.key,)))
    return findings


def _items(state):
    findings, lying = [], {}
    for record in state.entities():
        if record.data.get("kind") != "item":
            continue
        item = world.item_of(state, record.subject)
        if item.gone:
            continue
        if not item.holder or not world.kind_of(state, item.holder):
            findings.append(Finding("error", "unheld", f"the {item.name} ({item.key}) is held by nothing", (item.key,)))
            continue
        if world.holding_character(state, item.key):
            continue  # what people carry is told apart by who carries it
        place = world.place_of(state, item.key)
        if place:
            lying.setdefault((place, normalize(item.name)), []).append(item.key)
    for (place, _), keys in sorted(lying.items()):
        if len(keys) > 1:
            findings.append(Finding("error", "same_named_items", f"{len(keys)} items called "
                                    f"{state.name_of(keys[0])!r} are at {state.name_of(place)} ({', '.join(keys)}): "
                                    "nobody can tell which is meant", tuple(keys)))
    return findings


def _passages(state):
    out, _ = world.graph(state)
    findings = []
    for origin, exits in sorted(out.items()):
        for exit in exits:
            if not any(back.to == origin for back in out.get(exit.to, ())):
                findings.append(Finding("warning", "one_way", f"{world.describe_exit(state, exit)} is a one-way "
                                        f"passage: no exit leads back from {state.name_of(exit.to)}", (exit.slot,)))
    return findings


def _relationships(state):
    findings = []
    for record in sorted(state.of_kind("relationship"), key=lambda r: r.slot):
        other = record.data.get("object", "")
        if record.data.get("label") == world.HEARD_OF or world.kind_of(state, other) != "character":
            continue  # being told of someone is one-sided by nature (seed 「认知图」); factions do not answer
        if state.get(f"relationship:{other}:{record.subject}") is None:
            findings.append(Finding("warning", "one_sided", f"{state.name_of(record.subject)} → "
                                    f"{state.name_of(other)} has no relationship back", (record.slot,)))
    return findings


def _rules(state):
    """Story time and world rules that point at nothing: what a place's or a character's removal leaves behind."""
    name = state.name_of
    places = {key for key in world.places(state)}
    people = set(world.characters(state))
    findings = []
    for who, routine in rulebook.routines_of(state).items():
        for slot in routine.slots:
            if slot.place and slot.place not in places:
                findings.append(Finding("error", "routine", f"{name(who)}'s routine sends them to {slot.place!r}, "
                                        "which is not a place", (who, slot.place)))
    for engagement in rulebook.engagements_of(state):
        gone = [key for key in engagement.who if key not in people]
        if engagement.status == "pending" and (gone or (engagement.place and engagement.place not in places)):
            what = ", ".join(repr(key) for key in gone) or repr(engagement.place)
            findings.append(Finding("error", "engagement", f"engagement {engagement.id!r} names {what}, which is not "
                                    "in the world", (engagement.id,)))
    numbers = {n for n, d in rulebook.definitions_of(state).items() if d.type == "number"}
    for key, check in rulebook.checks_of(state).items():
        if check.variable and check.variable not in numbers:
            findings.append(Finding("warning", "dice", f"check {key!r} adds the variable {check.variable!r}, which "
                                    "is not defined", (key,)))
    kinds = {"who": people, "place": places}
    for trigger, status in rulebook.triggers_of(state):
        for leaf in trigger.condition.leaves():
            for field in ("who", "place"):
                value = getattr(leaf, field, "")
                if value and value not in kinds[field]:
                    findings.append(Finding("error", "trigger", f"trigger {trigger.id!r} waits on {value!r}, which "
                                            "is not in the world", (trigger.id,)))
            if isinstance(leaf, triggers.After) and trigger.expires is not None and leaf.at >= trigger.expires:
                findings.append(Finding("warning", "trigger", f"trigger {trigger.id!r} expires before its time "
                                        "comes: it can never fire", (trigger.id,)))
    return findings
