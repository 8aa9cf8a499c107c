"""Which parts of the state the narrator needs this turn (seed 000 §7), as plain lines.

Always: the protagonist, the current location and scene, who is present and
their key conditions, and any initial canon the story has overturned.
Conditionally: what the characters in the scene hold and feel about each
other, the facts about them, open threads, and anything named in the
player's input or the last reply. Pure: a State and some text in, lines out.
"""

from dataclasses import dataclass, field

from .reading import PROTAGONIST, mentioned
from .world import world

# Enough for a busy scene (a dozen characters with their items, relations and
# facts) in roughly 1,000 tokens; beyond it the lines are reported as left out.
MAX_LINES = 60


@dataclass(frozen=True)
class Line:
    slot: str
    kind: str
    text: str
    authority: str
    narrator_only: bool
    provenance: str
    record_id: int | None


@dataclass
class Selection:
    protagonist: str
    location: str
    scene: str
    lines: list[Line] = field(default_factory=list)
    superseded: list[Line] = field(default_factory=list)
    dropped: list[Line] = field(default_factory=list)
    # The scene's place as the protagonist sees it (seed 002 「地点」/「物品」 views): its description,
    # features, exits with their state and the visible items, each capped at 12, notable first; then,
    # for the narrator only, what is here unseen (hidden, or shut in a closed container).
    here: list[Line] = field(default_factory=list)


def select(state, text, *, limit=MAX_LINES):
    """Return the Selection of ``state`` relevant to a turn whose action and last reply are ``text``."""
    scene = state.scene()
    place = state.place()
    present = [key for key in state.present() if key != PROTAGONIST]
    named = mentioned(state, text)
    focus = {PROTAGONIST, *present, *named} | ({place} if place else set())
    protagonist = state.entity(PROTAGONIST)
    selection = Selection(
        protagonist=protagonist.data.get("description") or protagonist.value,
        location=state.name_of(place) if place else "",
        scene=scene.value if scene else "",
    )
    kinds = {kind: state.of_kind(kind) for kind in ("fact", "thread", "condition", "holder", "location",
                                                    "relationship", "superseded_canon")}
    newest_first = sorted(kinds.get("fact", []) + kinds.get("thread", []), key=lambda r: (-r.depth, -(r.id or 0)))
    candidates = []
    selection.here = here(state, place) if place else []
    listed = {line.slot.split(":", 1)[1] for line in selection.here if line.kind == "item"}
    for key in present:
        candidates.append(_line(state.slots[f"location:{key}"], f"{state.name_of(key)} is present."))
    for key in sorted(focus - {PROTAGONIST}, key=state.name_of):
        entity = state.entity(key)
        if entity and entity.data.get("description"):
            candidates.append(_line(entity, describe(state, entity)))
        if entity and entity.data.get("personality"):
            candidates.append(_line(entity, f"{entity.value}'s nature: {entity.data['personality']}"))
        if entity and entity.data.get("brief"):
            # The game master's brief of a character is the narrator's alone, whatever the player knows of them.
            candidates.append(_secret(_line(entity, f"How to play {entity.value}: {entity.data['brief']}")))
    for record in kinds.get("condition", []):
        if record.subject in focus:
            candidates.append(_line(record, describe(state, record)))
            if record.data.get("inner"):
                candidates.append(Line(record.slot, record.kind, f"{state.name_of(record.subject)} inside: "
                                       f"{record.data['inner']}", record.authority, True, record.provenance,
                                       record.id))
    for record in kinds.get("holder", []):
        # What people carry and wear; what lies in a place or a container is in ``here``.
        if (record.value and (record.value in focus or record.subject in focus) and record.subject not in listed
                and world.kind_of(state, record.value) == "character" and not _gone(state, record.subject)):
            candidates.append(_line(record, describe(state, record)))
    for record in kinds.get("location", []):
        if record.subject in named and record.subject not in present and record.subject != PROTAGONIST:
            candidates.append(_line(record, describe(state, record)))
    for record in kinds.get("relationship", []):
        # Meeting someone, or hearing of them, says nothing the narrator needs; a feeling or a tie does.
        if (record.subject in focus or record.data.get("object", "") in focus) and not _neutral(record):
            candidates.append(_line(record, describe(state, record)))
    # Newest first, so what a long story has just established survives the limit.
    for record in newest_first:
        if record.kind == "fact" and (not record.subject or record.subject in focus):
            candidates.append(_line(record, describe(state, record)))
        elif record.kind == "thread" and record.data.get("status") == "open":
            candidates.append(_line(record, describe(state, record)))
    selection.lines = candidates[:limit]
    selection.dropped = candidates[limit:]
    for record in kinds.get("superseded_canon", []):
        selection.superseded.append(_line(record, describe(state, record)))
    return selection


def here(state, place):
    """Return the lines of what is at ``place`` as the protagonist sees it, and what the narrator alone knows."""
    view = world.place_view(state, place, PROTAGONIST, everything=True)
    lines = []
    for record in view.features:
        line = _line(record, describe(state, record))
        lines.append(line if not record.data.get("hidden") else _secret(line))
    for exit in view.exits:
        line = _line(state.slots[exit.slot], describe(state, state.slots[exit.slot]))
        lines.append(line if not exit.hidden else _secret(line))
    for item in view.items:
        lines.append(_item_line(state, item, f"Here: {_item_text(state, item)}."))
    for item in view.unseen:
        lines.append(_secret(_item_line(state, item, f"Unseen here: {world.obstacle(state, item.key, PROTAGONIST)}.")))
    return lines


def _item_line(state, item, text):
    record = state.get(f"item:{item.key}") or state.get(f"holder:{item.key}") or state.entity(item.key)
    return Line(record.slot, "item", text, record.authority, False, record.provenance, record.id)


def _secret(line):
    return Line(line.slot, line.kind, line.text, line.authority, True, line.provenance, line.record_id)


def _item_text(state, item):
    """Return an item as a phrase: its count, name, container state, condition and who has it or what it is in."""
    text = f"{item.quantity} {item.name}" if item.quantity != 1 else item.name
    notes = [note for note in (item.container, item.condition) if note]
    if notes:
        text += f" ({', '.join(notes)})"
    holder = item.holder
    kind = world.kind_of(state, holder)
    if kind == "character":
        text += f", worn by {state.name_of(holder)}" if item.mode == "worn" else f", carried by {state.name_of(holder)}"
    elif kind == "item":
        text += f", in the {state.name_of(holder)}"
    return text


def _neutral(record):
    data = record.data
    return (not record.value and data.get("label", "") in ("", world.ACQUAINTANCE, world.HEARD_OF)
            and not any(data.get(axis) for axis in world.AXES))


def _gone(state, item):
    record = state.get(f"item:{item}")
    return record is not None and record.data.get("quantity", 1) <= 0


def describe(state, record):
    """Return one record as the line the narrator and the state panel read."""
    name = state.name_of
    if record.kind == "entity":
        description = record.data.get("description")
        return f"{record.value} ({record.data.get('kind')})" + (f": {description}" if description else "")
    if record.kind == "condition":
        data = record.data
        more = "; ".join(f"{field}: {data[field]}" for field in ("activity", "mood") if data.get(field))
        public = f"{name(record.subject)} is {record.value}" if record.value else name(record.subject)
        return public + (f" ({more})" if more else "") + "."
    if record.kind == "holder":
        if not record.value:
            return f"Nobody has {name(record.subject)}."
        mode = record.data.get("mode", "")
        if mode == "worn":
            return f"{name(record.value)} wears {name(record.subject)} (on the {record.data.get('slot', '')})."
        if mode == "in":
            return f"{name(record.subject)} is in the {name(record.value)}."
        if mode == "at":
            return f"{name(record.subject)} is at {name(record.value)}."
        return f"{name(record.value)} possesses {name(record.subject)}."
    if record.kind == "location":
        return f"{name(record.subject)} is at {name(record.value) if record.value else 'an unknown place'}."
    if record.kind == "relationship":
        data = record.data
        axes = ", ".join(f"{axis} {data[axis]:g}" for axis in world.AXES if data.get(axis))
        label = "; ".join(part for part in (data.get("label", ""), axes) if part)
        head = f"{name(record.subject)} → {name(data.get('object', ''))}" + (f" ({label})" if label else "")
        return f"{head}: {record.value}" if record.value else head
    if record.kind == "exit":
        exit = world.exit_of(record)
        notes = [exit.state]
        if exit.state == "locked" and exit.opener:
            notes.append(f"the {name(exit.opener)} opens it")
        if exit.travel_seconds:
            notes.append(f"{exit.travel_seconds} s")
        via = f" through the {exit.label}" if exit.label else ""
        return f"Exit from {name(exit.origin)} to {name(exit.to)}{via}: {', '.join(notes)}."
    if record.kind == "feature":
        label = record.data.get("name", "")
        return f"Feature of {name(record.subject)}: {label}" + (f" — {record.value}" if record.value != label else "")
    if record.kind == "knows":
        kind, target = record.slot.split(":", 3)[2:]
        what = target if kind in ("exit", "lore") else name(target)
        return f"{name(record.subject)} knows of the {kind} {what} ({record.data.get('how', '')})."
    if record.kind == "item":
        item = world.item_of(state, record.subject)
        return f"{_item_text(state, item)}." if item else record.value
    if record.kind == "thread":
        status = "Open thread" if record.data.get("status") == "open" else "Resolved thread"
        outcome = record.data.get("outcome")
        return f"{status}: {record.value}" + (f" ({outcome})" if outcome else "")
    if record.kind == "superseded_canon":
        now = f" The current state: {record.value}" if record.value else ""
        return f"\"{record.data.get('canon', '')}\" no longer holds.{now}"
    if record.kind == "scene":
        return record.value
    return record.value


def _line(record, text):
    return Line(record.slot, record.kind, text, record.authority, record.narrator_only, record.provenance, record.id)
