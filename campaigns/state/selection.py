"""Which parts of the state the narrator needs this turn (seed 000 §7), as plain lines.

Always: the protagonist, the current location and scene, who is present and
their key conditions, and any initial canon the story has overturned.
Conditionally: what the characters in the scene hold and feel about each
other, the facts about them, open threads, and anything named in the
player's input or the last reply. Pure: a State and some text in, lines out.
"""

from dataclasses import dataclass, field

from .reading import PROTAGONIST, words

# Enough for a busy scene (a dozen characters with their items, relations and
# facts) in roughly 1,000 tokens; beyond it the lines are reported as left out.
MAX_LINES = 60

# Entity names longer than this many words are not looked for in the text.
LONGEST_NAME = 6

# Names shorter than this ("I", "me", "Al") match inside ordinary words and
# pronouns too often to mean that the entity was mentioned.
MIN_NAME = 3


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


def mentioned(state, text):
    """Return the keys of the entities named (by name or alias) in ``text``.

    Names are matched as whole runs of words, up to ``LONGEST_NAME`` words
    long, by looking each run up: the cost follows the text, not the number
    of entities.
    """
    phrases = state.phrases()
    found = set()
    tokens = words(text)
    for start in range(len(tokens)):
        for end in range(start + 1, min(start + LONGEST_NAME, len(tokens)) + 1):
            phrase = " ".join(tokens[start:end])
            if phrase in phrases and len(phrase) >= MIN_NAME:
                found.add(phrases[phrase])
    return found


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
    kinds = {}
    for record in state.slots.values():
        kinds.setdefault(record.kind, []).append(record)
    newest_first = sorted(kinds.get("fact", []) + kinds.get("thread", []), key=lambda r: (-r.depth, -(r.id or 0)))
    candidates = []
    for key in present:
        candidates.append(_line(state.slots[f"location:{key}"], f"{state.name_of(key)} is present."))
    for key in sorted(focus - {PROTAGONIST}, key=state.name_of):
        entity = state.entity(key)
        if entity and entity.data.get("description"):
            candidates.append(_line(entity, describe(state, entity)))
    for record in kinds.get("condition", []):
        if record.subject in focus:
            candidates.append(_line(record, describe(state, record)))
    for record in kinds.get("holder", []):
        if record.value and (record.value in focus or record.subject in focus):
            candidates.append(_line(record, describe(state, record)))
    for record in kinds.get("location", []):
        if record.subject in named and record.subject not in present and record.subject != PROTAGONIST:
            candidates.append(_line(record, describe(state, record)))
    for record in kinds.get("relationship", []):
        if record.subject in focus or record.data.get("object", "") in focus:
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


def describe(state, record):
    """Return one record as the line the narrator and the state panel read."""
    name = state.name_of
    if record.kind == "entity":
        description = record.data.get("description")
        return f"{record.value} ({record.data.get('kind')})" + (f": {description}" if description else "")
    if record.kind == "condition":
        return f"{name(record.subject)} is {record.value}."
    if record.kind == "holder":
        return f"{name(record.value)} possesses {name(record.subject)}." if record.value else \
            f"Nobody has {name(record.subject)}."
    if record.kind == "location":
        return f"{name(record.subject)} is at {name(record.value) if record.value else 'an unknown place'}."
    if record.kind == "relationship":
        return f"{name(record.subject)} → {name(record.data.get('object', ''))}: {record.value}"
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
