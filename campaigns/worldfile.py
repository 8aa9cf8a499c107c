"""World files: a campaign's world as one JSON document (or a zip of several), imported whole or not at all.

A world file describes places with their features, directed exits,
factions, characters (where they are, their state, relationships, what
they know and their temperament), items with their holders, wear slots,
story time and world rules (when the story starts and how its clock runs,
the calendar, routines, engagements, intents, variables, dice checks and
triggers), and lore, which is checked for shape and stored as it is for the
part of the engine that reads it. docs/world-files.md is the format.

``read`` reads the bytes through the bounded reader bundles use
(``uploads``). ``build`` turns a document into typed events — the same
events the recorder and a person's corrections use — so a world means
exactly what those events mean; ``check`` validates them in order on the new
campaign's empty state and lints the result; ``prepare`` refuses a file with
any problem (every reason at once, nothing stored), and ``Prepared.write``
writes the campaign, its opening and its world at the opening node (depth
0), so the world belongs to every line of the story: staged, in short
transactions (``staging``), published once whole. ``create_campaign`` is the
two. ``export`` writes a state back as a world file.
"""

import copy
import io
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import PurePosixPath

from django.core.exceptions import ValidationError

from storyteller import tokens

from . import lineage, staging, story, uploads
from .models import Campaign, CanonRule, Node, StateEvent
from .state import validate_batch
from .state.events import store
from .state.reading import PROTAGONIST, Canon, State, _add_protagonist, key_for, normalize, protagonist_name
from .state.registry import MAX_ALIASES, MAX_NAME, MAX_TEXT, clean
from .state.time import calendar as story_calendar
from .state.time import clock, rulebook
from .state.time.rules import Refused
from .state.world import lint, lore, world

FORMAT = "storyteller-world"
VERSION = 1

# A world of a thousand places, four thousand exits and two thousand items is
# about 1.5 MiB of JSON; this bounds what an import reads, zipped or inflated.
MAX_BYTES = 10 * 1024 * 1024
# The files of one world zip (a world.json and a file per character is the largest layout docs/world-files.md
# shows); a zip of 60,000 members cost 109 s of CPU before it was refused (issue 22).
MAX_FILES = 1_000
# The deepest a world file nests: a trigger's condition (four all/any/not deep) inside its section.
MAX_DEPTH = 24
LIMITS = uploads.Limits("world file", MAX_BYTES, max_members=MAX_FILES, max_depth=MAX_DEPTH)
# What one world file may hold, section by section; each is named in the refusal and in the README's limits.
# The largest accepted file (every section at its limit) imports in seconds in under 300 MiB, and no write
# transaction of it holds SQLite's lock for 200 ms (bench "limits"; a 20,000-place file took 89 s).
MAX_ENTRIES = {"places": 2_000, "exits": 8_000, "items": 4_000, "characters": 500, "factions": 200, "facts": 2_000,
               "slots": 50, "dice": 200, "routines": 500, "engagements": 1_000, "intents": 1_000, "triggers": 500,
               "lore": 2_000, "variables": 60}
# Within one entry: a place's features, a character's relationships, each of a character's knowledge lists,
# an entry's aliases.
MAX_FEATURES = 50
MAX_RELATIONSHIPS = 200
MAX_KNOWN = 2_000
# Every event a file becomes (each place, exit, item, relationship, piece of knowledge…).
MAX_EVENTS = 60_000

# The campaign fields a world file may fill in (the new-campaign form's own values win).
CAMPAIGN_FIELDS = ("title", "genre", "protagonist", "opening", "pacing", "style_notes", "narrator_rules")

# The world's own sections, story time and world rules (docs/rules.md), and those later parts of seed 002
# read, stored as they are after a check of their shape (what each entry must name). A stored section's
# ``kind`` is the JSON it must be.
WORLD_SECTIONS = ("format", "version", "campaign", "slots", "places", "exits", "factions", "characters", "items",
                  "facts", "starting_time", "clock", "calendar", "routines", "engagements", "intents", "variables",
                  "dice", "triggers")
STORED_SECTIONS = {"lore": "list"}
# For each stored list section: the fields every entry needs, and which of its fields name a character or a place.
STORED_ENTRIES = {"lore": (("id", "title", "text"), {})}
# The ``clock`` section's fields and the Campaign fields they fill in (the new-campaign form has none of them).
CLOCK_FIELDS = {"mode": "clock_mode", "time_zone": "time_zone", "round_seconds": "round_seconds",
                "max_skip_days": "max_skip_days"}


@dataclass
class Problem:
    """One thing wrong with a world file, in words with its JSON path, and the problems that follow from it
    (an item held by no one known leaves the items inside it unknown too): fixing it fixes them."""

    text: str
    knock_ons: list = field(default_factory=list)

    def lines(self):
        return [self.text, *self.knock_ons]


class WorldRefused(Exception):
    """The world file cannot be imported; ``problems`` lists every problem found, each with what follows from it,
    and ``reasons`` every line of them."""

    def __init__(self, problems):
        self.problems = [p if isinstance(p, Problem) else Problem(str(p)) for p in problems]
        self.reasons = [line for problem in self.problems for line in problem.lines()]
        shown = [problem.text + (f" (and {_follow(len(problem.knock_ons))})" if problem.knock_ons else "")
                 for problem in self.problems[:40]]
        listed = "; ".join(shown) + (f"; and {len(self.problems) - 40} more" if len(self.problems) > 40 else "")
        count = len(self.problems)
        super().__init__(f"The world file was not imported ({count} problem{'s' if count != 1 else ''}): "
                         f"{listed}. Nothing was stored.")


def _follow(count):
    return "1 that follows from it" if count == 1 else f"{count} that follow from it"


def read(data):
    """Return the world document in ``data`` (JSON, or a zip of JSON files), or raise WorldRefused.

    Read by the bounded reader bundles use (``uploads``): at most MAX_BYTES
    zipped or inflated, MAX_FILES files, MAX_DEPTH levels deep.
    """
    if len(data) > MAX_BYTES:
        raise WorldRefused([f"the file is {len(data):,} bytes; a world file may be at most {MAX_BYTES:,}"])
    try:
        if uploads.is_zip(data[:4]):
            return _read_zip(data)
        return _parse(data, "the file")
    except uploads.UploadRefused as refusal:
        raise WorldRefused([str(refusal).rstrip(".")]) from None


def _parse(data, name):
    return uploads.parse(uploads.decode(data, LIMITS, name), LIMITS, name)


def _wanted(name):
    path = PurePosixPath(name)
    return path.suffix.lower() == ".json" and not path.name.startswith(".") and "__MACOSX" not in path.parts


def _read_zip(data):
    parts = uploads.unzip(io.BytesIO(data), len(data), LIMITS, wanted=_wanted)
    document, problems = {}, []
    for name, content in sorted(parts):
        path = PurePosixPath(name)
        try:
            part = _parse(content, name)
        except uploads.UploadRefused as refusal:
            problems.append(str(refusal).rstrip("."))
            continue
        if path.stem == "character" or path.parent.name == "characters":
            document.setdefault("characters", []).append(part)
        elif isinstance(part, dict) and (set(part) & (set(WORLD_SECTIONS) | set(STORED_SECTIONS))):
            for section, value in part.items():
                _merge(document, section, value, name, problems)
        elif path.stem in STORED_SECTIONS or path.stem in WORLD_SECTIONS:
            _merge(document, path.stem, part, name, problems)
        else:
            problems.append(f"{name}: not a world document (no known section) and not named after one "
                            f"({', '.join(sorted({*WORLD_SECTIONS, *STORED_SECTIONS} - {'format', 'version'}))})")
    if problems:
        raise WorldRefused(problems)
    if not document:
        raise WorldRefused(["the zip holds no .json world file"])
    return document


def _merge(document, section, value, name, problems):
    if section not in document:
        document[section] = value
    elif isinstance(document[section], list) and isinstance(value, list):
        document[section] = document[section] + value
    elif section in ("format", "version") and document[section] == value:
        return
    else:
        problems.append(f"{name}: the section {section!r} is given twice in the zip")


@dataclass
class Built:
    """A world document as typed events, with where in the file each came from and what could not be read."""

    events: list = field(default_factory=list)
    where: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    notes: list = field(default_factory=list)  # what world_lint says of how the file was read (doors it joined)
    lore: set = field(default_factory=set)  # the keys of the file's own lore entries, which knowledge may name
    declared: dict = field(default_factory=dict)  # key -> the entry that declares it, for knock-ons

    def add(self, where, type, subject="", object="", value="", **extra):
        self.events.append({"type": type, "subject": subject, "object": object, "value": value, **extra})
        self.where.append(where)


class _Names:
    """The entities a file declares: their keys, and the names and ids by which the file refers to them."""

    def __init__(self):
        self.kinds = {}  # key -> kind
        self.by_name = {}  # normalized name or alias -> [keys]
        self.where = {}  # key -> the entry that declares it ("items[3]")

    def declare(self, kind, key, names):
        self.kinds[key] = kind
        for name in names:
            if name:
                keys = self.by_name.setdefault(normalize(name), [])
                if key not in keys:
                    keys.append(key)

    def new_key(self, wanted):
        base = key = key_for(wanted)
        number = 2
        while key in self.kinds:
            key, number = f"{base}-{number}", number + 1
        return key

    def find(self, reference, kinds, where, problems):
        """Return the key ``reference`` names (an id first, then a unique name or alias), or None with a problem."""
        if not isinstance(reference, str) or not reference.strip():
            problems.append(f"{where}: names no {' or '.join(kinds)}")
            return None
        key = key_for(reference)
        if key in self.kinds and self.kinds[key] in kinds:
            return key
        keys = [k for k in self.by_name.get(normalize(reference), []) if self.kinds[k] in kinds]
        if len(keys) == 1:
            return keys[0]
        if keys:
            problems.append(f"{where}: {reference!r} names {len(keys)} {kinds[0]}s; refer to one by its id "
                            f"({', '.join(keys)})")
        else:
            problems.append(f"{where}: unknown {' or '.join(kinds)} {reference!r}")
        return None


def build(document, protagonist=""):
    """Return the Built events of a world ``document`` for a campaign whose protagonist line is ``protagonist``.

    References (an exit's places, an item's holder, a relationship's other
    party) are an id or a name; every reference that names nothing, or more
    than one thing, is a problem, as is a section of the wrong shape. The
    world's one character marked ``"protagonist": true`` is the campaign's
    protagonist.
    """
    out = Built()
    problems = out.problems
    document = copy.deepcopy(document)  # each entry is given its key while building; the caller's stays as it was
    if not isinstance(document, dict):
        problems.append(f"a world file is a JSON object with sections, not a {type(document).__name__}")
        return out
    if document.get("format", FORMAT) != FORMAT:
        problems.append(f"format is {document.get('format')!r}; a world file says \"format\": \"{FORMAT}\"")
    if document.get("version", VERSION) != VERSION:
        problems.append(f"version {document.get('version')!r} is not one this Storyteller reads (it reads {VERSION})")
    for section in document:
        if section not in WORLD_SECTIONS and section not in STORED_SECTIONS:
            known = [s for s in (*WORLD_SECTIONS, *STORED_SECTIONS) if s not in ("format", "version")]
            problems.append(f"unknown section {section!r}; a world file has {', '.join(known)}")
    names = _Names()
    names.declare("character", PROTAGONIST, [protagonist_name_of(protagonist)] if protagonist else [])
    out.lore = {entry.key for entry in lore.world_entries(document.get("lore") if isinstance(document.get("lore"),
                                                                                               list) else [])}
    sections = {name: _list(document, name, problems) for name in ("slots", "places", "exits", "factions",
                                                                   "characters", "items", "facts")}
    if "campaign" in document and not isinstance(document["campaign"], dict):
        problems.append("campaign must be an object (title, genre, protagonist, opening, canon)")
    _declare(names, sections, problems)
    out.declared = names.where
    for number, entry in enumerate(sections["slots"]):
        where = f"slots[{number}]"
        if _entry(entry, where, ("name",), problems):
            out.add(where, "slot", _text(entry["name"]), data=_only(entry, {"capacity"}))
    for number, entry in enumerate(sections["places"]):
        _place(out, names, entry, f"places[{number}]")
    for number, entry in enumerate(sections["factions"]):
        if isinstance(entry, dict) and entry.get("_key"):
            out.add(f"factions[{number}]", "introduce", _text(entry["name"]), "faction",
                    _text(entry.get("description"), MAX_TEXT), aliases=_aliases(entry),
                    narrator_only=entry.get("narrator_only") is True, data={"id": entry["_key"]})
    characters = [(number, entry) for number, entry in enumerate(sections["characters"])
                  if isinstance(entry, dict) and entry.get("_key")]
    for number, entry in characters:
        _character(out, entry, f"characters[{number}]", protagonist)
    _items(out, names, sections["items"])
    _exits(out, names, sections["exits"])
    for number, entry in characters:
        _character_state(out, names, entry, f"characters[{number}]")
    for number, entry in enumerate(sections["facts"]):
        if isinstance(entry, str) and entry.strip():
            out.add(f"facts[{number}]", "add_fact", value=_text(entry, MAX_TEXT))
        else:
            problems.append(f"facts[{number}] must be a sentence")
    _rules(out, names, document, characters)
    for section, kind in STORED_SECTIONS.items():
        if section in document:
            _stored(out, names, section, kind, document[section])
    if len(out.events) > MAX_EVENTS:
        problems.append(f"the file makes {len(out.events):,} events (each place, exit, item, relationship and piece "
                        f"of knowledge is one); a world file makes at most {MAX_EVENTS:,}")
    return out


def protagonist_name_of(line):
    return protagonist_name(type("Line", (), {"protagonist": line})())


def _list(document, name, problems):
    return _bounded(document.get(name, []), name, MAX_ENTRIES.get(name, MAX_KNOWN), problems)


def _bounded(value, where, most, problems):
    """Return ``value`` when it is a list of at most ``most`` entries; else [] and a problem naming ``where``."""
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(f"{where} must be a list")
        return []
    if len(value) > most:
        problems.append(f"{where} holds {len(value):,} entries; a world file holds at most {most:,} there")
        return []
    return value


def _entry(entry, where, required, problems):
    if not isinstance(entry, dict):
        problems.append(f"{where} must be an object")
        return False
    missing = [name for name in required if not isinstance(entry.get(name), str) or not entry[name].strip()]
    if missing:
        problems.append(f"{where} has no {' or '.join(missing)}")
        return False
    return True


def _text(value, limit=MAX_NAME):
    return str(value if value is not None else "").strip()[:limit]


def _aliases(entry):
    aliases = entry.get("aliases") or []
    return [_text(a) for a in aliases[:MAX_ALIASES] if isinstance(a, str)] if isinstance(aliases, list) else []


def _only(entry, names):
    return {name: entry[name] for name in names if name in entry}


def _declare(names, sections, problems):
    """Give every place, faction, character and item of the file its key, before any reference is read."""
    for section, kind in (("places", "place"), ("factions", "faction"), ("characters", "character"),
                          ("items", "item")):
        for number, entry in enumerate(sections[section]):
            where = f"{section}[{number}]"
            if not _entry(entry, where, ("name",), problems):
                continue
            if kind == "character" and entry.get("protagonist") is True:
                if any(e.get("_key") == PROTAGONIST for e in sections["characters"] if isinstance(e, dict)):
                    problems.append(f"{where}: only one character can be the protagonist")
                    continue
                key = PROTAGONIST
            else:
                key = names.new_key(entry.get("id") or entry["name"])
            entry["_key"] = key
            names.where[key] = where
            names.declare(kind, key, [entry["name"], *_aliases(entry), entry.get("id", "")])


def _place(out, names, entry, where):
    if not isinstance(entry, dict) or not entry.get("_key"):
        return
    out.add(where, "introduce", _text(entry["name"]), "place", _text(entry.get("description"), MAX_TEXT),
            aliases=_aliases(entry), narrator_only=entry.get("narrator_only") is True, data={"id": entry["_key"]})
    for number, feature in enumerate(_bounded(entry.get("features"), f"{where}.features", MAX_FEATURES,
                                              out.problems)):
        spot = f"{where}.features[{number}]"
        if _entry(feature, spot, ("name",), out.problems):
            out.add(spot, "feature", entry["_key"], _text(feature["name"]),
                    _text(feature.get("text") or feature["name"], MAX_TEXT),
                    data=_only(feature, {"notable", "hidden"}))


def _character(out, entry, where, protagonist):
    key = entry["_key"]
    told = _only(entry, {"personality", "brief"})
    if key == PROTAGONIST:
        name = protagonist_name_of(protagonist) if protagonist else ""
        aliases = [a for a in [entry["name"], *_aliases(entry)] if normalize(a) != normalize(name)]
        if aliases or entry.get("description") or told:
            out.add(where, "entity", PROTAGONIST, "character", _text(entry.get("description"), MAX_TEXT),
                    aliases=aliases, data=told)
        return
    out.add(where, "introduce", _text(entry["name"]), "character", _text(entry.get("description"), MAX_TEXT),
            aliases=_aliases(entry), narrator_only=entry.get("narrator_only") is True, data={"id": key})
    if told:
        out.add(where, "entity", key, "character", narrator_only=entry.get("narrator_only") is True, data=told)


ITEM_KEYS = {"quantity", "unique", "condition", "notable", "hidden", "wear_slot", "container", "owner", "stack",
             "mode", "slot"}


def _items(out, names, entries):
    """Introduce the items holders first (a ring after the box it is in), then give each its opener."""
    problems = out.problems
    pending = {}
    for number, entry in enumerate(entries):
        if isinstance(entry, dict) and entry.get("_key"):
            where = f"items[{number}]"
            holder = names.find(entry.get("holder"), ("place", "character", "item"), f"{where}.holder", problems)
            pending[entry["_key"]] = (where, entry, holder)
    order = _holders_first(pending, problems)
    for key in order:
        where, entry, holder = pending[key]
        if holder is None:
            continue
        data = {"id": key, "holder": holder, **_only(entry, ITEM_KEYS)}
        if "owner" in data:
            data["owner"] = names.find(data["owner"], ("character", "faction"), f"{where}.owner", problems) or ""
        out.add(where, "introduce", _text(entry["name"]), "item", _text(entry.get("description"), MAX_TEXT),
                aliases=_aliases(entry), narrator_only=entry.get("narrator_only") is True, data=data)
    for key in order:
        where, entry, _ = pending[key]
        if entry.get("opener"):
            opener = names.find(entry["opener"], ("item",), f"{where}.opener", problems)
            if opener:
                out.add(where, "item_edit", key, data={"opener": opener})


def _holders_first(pending, problems):
    """Return the keys of ``pending`` items ordered so each comes after the item holding it.

    Iterative, and a chain deeper than an item may be held (world.MAX_CHAIN)
    or one going round in a circle is a problem: a file's chain of 1,200
    boxes once recursed past Python's stack (issue 22).
    """
    done, order = set(), []
    for start in pending:
        trail = []
        key = start
        while key in pending and key not in done and key not in trail:
            trail.append(key)
            key = pending[key][2]
        if key in trail:
            circle = trail[trail.index(key):]
            problems.append(f"{pending[key][0]}: its holders go round in a circle "
                            f"({' in '.join(circle[:8])}{' …' if len(circle) > 8 else ''})")
        elif len(trail) + _depth_of(key, pending, done) > world.MAX_CHAIN:
            problems.append(f"{pending[start][0]}: it is held {len(trail)} items deep; an item sits at most "
                            f"{world.MAX_CHAIN} containers down")
        for key in reversed(trail):
            done.add(key)
            order.append(key)
    return order


def _depth_of(key, pending, done):
    """Return how many items deep ``key`` (already ordered, or not an item) sits."""
    depth = 0
    while key in pending and key in done and depth <= world.MAX_CHAIN:
        depth += 1
        key = pending[key][2]
    return depth


def _exits(out, names, entries):
    """Add the exits, each door's two sides joined (``_doors``), in the file's order."""
    read = []
    for number, entry in enumerate(entries):
        where = f"exits[{number}]"
        if not _entry(entry, where, ("from", "to"), out.problems):
            continue
        origin = names.find(entry["from"], ("place",), f"{where}.from", out.problems)
        to = names.find(entry["to"], ("place",), f"{where}.to", out.problems)
        data = _only(entry, {"label", "state", "travel_seconds", "hidden", "both_ways"})
        if entry.get("opener"):
            data["opener"] = names.find(entry["opener"], ("item",), f"{where}.opener", out.problems) or ""
        if "door" in entry:
            if not isinstance(entry["door"], str) or not entry["door"].strip():
                out.problems.append(f"{where}.door must be the door's name (the iron door)")
            else:
                data["door"] = _text(entry["door"])
        if origin and to:
            read.append((where, origin, to, data))
    _doors(out, read)
    for where, origin, to, data in read:
        out.add(where, "exit_change", origin, to, data=data)


def _doors(out, exits):
    """Join each door's two sides in ``exits`` ([(where, from, to, data)]), giving both the door; note the joins.

    An exit naming a door is joined with the way back that names the same
    door, or else with the way back of the same label that names none; with
    neither, the way back is made through it (``both_ways``). Two ways back
    that name no door and the same opener are one door too, and world_lint
    says so (``Built.notes``). A door's sides must agree on its state.
    """
    joined = set()
    between = {}  # (from, to) -> the indices of the exits that way: a file's 8,000 exits are not compared pairwise
    for index, (_, start, end, _) in enumerate(exits):
        between.setdefault((start, end), []).append(index)

    def way_back(index, fits):
        _, origin, to, _ = exits[index]
        return next((i for i in between.get((to, origin), ()) if i not in joined and i != index and fits(exits[i][3])),
                    None)

    for index, (where, origin, to, data) in enumerate(exits):
        if index in joined or data.get("both_ways"):
            continue
        door, opener = data.get("door", ""), data.get("opener", "")
        if door:
            back = way_back(index, lambda b: key_for(b.get("door", "")) == key_for(door))
            if back is None:
                back = way_back(index, lambda b: not b.get("door") and key_for(b.get("label", "")) == key_for(
                    data.get("label") or door))
        elif opener:
            back = way_back(index, lambda b: not b.get("door") and b.get("opener") == opener)
        else:
            continue
        if back is None:
            # A door named on one side alone: its way back is made, unless the file gives that exit otherwise.
            label = key_for(data.get("label") or door)
            data["both_ways"] = bool(door) and not any(
                key_for(exits[i][3].get("label") or exits[i][3].get("door", "")) == label
                for i in between.get((to, origin), ()))
            continue
        joined |= {index, back}
        other = exits[back]
        if not door:  # a door the file does not name leaves the exits their own labels
            for side in (data, other[3]):
                side.setdefault("label", "")
        name = door or data.get("label") or other[3].get("label") or world.door_key("", origin, to)
        data["door"] = other[3]["door"] = name
        differ = [field for field in ("state", "hidden") if data.get(field, _SIDE[field]) != other[3].get(
            field, _SIDE[field])]
        if differ or data.get("opener", "") != other[3].get("opener", ""):
            out.problems.append(f"{where} and {other[0]} are the two sides of one door ({name}) and a door's sides "
                                f"share its state, but they differ in {' and '.join(differ or ['opener'])}: give "
                                "both the same, or name a different door on each")
        elif not door:
            out.notes.append(f"{where} and {other[0]} both open with the same key: read as the two sides of one "
                             f"door ({name}), locked and unlocked together; name a different door on each to keep "
                             "them apart")


# A door side's state as the file leaves it out.
_SIDE = {"state": "open", "hidden": False}


def _character_state(out, names, entry, where):
    """Place a character, and give it its condition, relationships and knowledge."""
    problems = out.problems
    key = entry["_key"]
    if entry.get("place"):
        place = names.find(entry["place"], ("place",), f"{where}.place", problems)
        if place:
            out.add(where, "move", key, place, data={"ignore_exits": True})
    condition = entry.get("condition") or {}
    if isinstance(condition, str):
        condition = {"public": condition}
    if not isinstance(condition, dict):
        problems.append(f"{where}.condition must be an object (public, inner, activity, mood)")
    elif any(condition.values()):
        out.add(f"{where}.condition", "set_condition", key, value=_text(condition.get("public"), MAX_TEXT),
                data=_only(condition, {"inner", "activity", "mood"}))
    relationships = _bounded(entry.get("relationships"), f"{where}.relationships", MAX_RELATIONSHIPS, problems)
    for number, relation in enumerate(relationships):
        spot = f"{where}.relationships[{number}]"
        if not _entry(relation, spot, ("to",), problems):
            continue
        other = names.find(relation["to"], ("character", "faction"), f"{spot}.to", problems)
        if other:
            out.add(spot, "relationship", key, other, _text(relation.get("summary"), MAX_TEXT),
                    data={"label": relation.get("label") or "", **_only(relation, set(world.AXES))})
    knowledge = entry.get("knowledge") or {}
    if not isinstance(knowledge, dict):
        problems.append(f"{where}.knowledge must be an object (locations, items, exits, lore)")
        return
    for section, kind in (("locations", "place"), ("items", "item"), ("exits", "exit"), ("lore", "lore")):
        listed = _bounded(knowledge.get(section), f"{where}.knowledge.{section}", MAX_KNOWN, problems)
        for number, known in enumerate(listed):
            _known(out, names, key, section, kind, known, f"{where}.knowledge.{section}[{number}]")


def _known(out, names, key, section, kind, known, where):
    how = "world"
    if isinstance(known, dict):
        how = known.get("how", "world")
    if kind == "exit":
        if not _entry(known, where, ("from", "to"), out.problems):
            return
        origin = names.find(known["from"], ("place",), f"{where}.from", out.problems)
        if origin:
            out.add(where, "know", key, _text(known.get("label") or known["to"]),
                    data={"kind": "exit", "from": origin, "how": how})
        return
    target = known.get("name") if isinstance(known, dict) else known
    if kind == "lore":
        if not isinstance(target, str) or not target.strip():
            out.problems.append(f"{where}: names no lore entry")
            return
        entry = lore.lore_key(target)
        if entry.startswith(f"{lore.WORLD_BOOK}:") and entry not in out.lore:
            out.problems.append(f"{where}: no entry {target!r} in the file's lore section (a lorebook's entry is "
                                "named \"<book>:<id>\")")
            return
        out.add(where, "know", key, entry, data={"kind": "lore", "how": how})
        return
    found = names.find(target, (kind,), where, out.problems)
    if found:
        out.add(where, "know", key, found, data={"kind": kind, "how": how})


def _rules(out, names, document, characters):
    """Story time and world rules as their events, after the world they refer to (docs/rules.md).

    The clock starts at the opening (at ``starting_time``, else the
    campaign's creation); the calendar, variables and checks come before
    the routines, engagements, intents and triggers that may name them, and
    the triggers last, all in one event, since those of one edit may refer
    to each other.
    """
    problems = out.problems
    start = document.get("starting_time")
    if start is not None and (not isinstance(start, str) or not start.strip()):
        problems.append("starting_time must be a date and time like \"2031-03-14T08:00\"")
        start = None
    out.add("starting_time" if start else "clock", "clock_start", data={"starting_time": start} if start else {})
    if "calendar" in document:
        if isinstance(document["calendar"], dict):
            out.add("calendar", "calendar_set", data={"calendar": document["calendar"]})
        else:
            problems.append("calendar must be an object {hemisphere, festivals, markers}")
    for number, entry in characters:
        if entry.get("temperament") is not None:
            if isinstance(entry["temperament"], dict):
                out.add(f"characters[{number}].temperament", "temperament", entry["_key"],
                        data=_only(entry["temperament"], {"valence", "arousal", "dominance"}))
            else:
                problems.append(f"characters[{number}].temperament must be an object (valence, arousal, dominance)")
    values = []
    for number, entry in enumerate(_list(document, "variables", problems)):
        where = f"variables[{number}]"
        if not isinstance(entry, dict):
            problems.append(f"{where} must be an object")
            continue
        definition = {key: value for key, value in entry.items() if key != "values"}
        out.add(where, "variable_define", data={"definition": definition})
        given = entry.get("values") or {}
        if not isinstance(given, dict):
            problems.append(f"{where}.values must be an object {{character, item, place or world: value}}")
            continue
        for target, value in given.items():
            found = "world" if target == "world" else names.find(target, ("character", "item", "place"),
                                                                  f"{where}.values", problems)
            if found:
                values.append((f"{where}.values.{target}", found, entry.get("name", ""), value))
    for where, target, name, value in values:
        out.add(where, "variable_change", target, str(name), data={"to": value})
    for number, entry in enumerate(_list(document, "dice", problems)):
        where = f"dice[{number}]"
        if _entry(entry, where, ("key",), problems):
            out.add(where, "dice_check_define", entry["key"],
                    data=_only(entry, {"name", "use_text", "definition"}))
    for number, entry in enumerate(_list(document, "routines", problems)):
        where = f"routines[{number}]"
        if _entry(entry, where, ("who",), problems):
            who = names.find(entry["who"], ("character",), f"{where}.who", problems)
            if who:
                out.add(where, "routine_set", who, data={"windows": entry.get("windows")})
    for number, entry in enumerate(_list(document, "engagements", problems)):
        where = f"engagements[{number}]"
        if not isinstance(entry, dict):
            problems.append(f"{where} must be an object")
            continue
        who = entry.get("who")
        who = [who] if isinstance(who, str) else who if isinstance(who, list) else []
        keys = [names.find(person, ("character",), f"{where}.who", problems) for person in who]
        data = {**_only(entry, {"id", "at", "what"}), "who": [key for key in keys if key]}
        if entry.get("place"):
            data["place"] = names.find(entry["place"], ("place",), f"{where}.place", problems) or ""
        out.add(where, "engagement", data=data)
    for number, entry in enumerate(_list(document, "intents", problems)):
        where = f"intents[{number}]"
        if _entry(entry, where, ("who",), problems):
            who = names.find(entry["who"], ("character",), f"{where}.who", problems)
            if who:
                out.add(where, "intent_add", who,
                        data=_only(entry, {"id", "type", "priority", "urgency", "deadline", "plan"}))
    triggers = _list(document, "triggers", problems)
    if triggers:
        out.add("triggers", "trigger_define", data={"triggers": triggers})


def clock_settings(document):
    """Return (the Campaign fields the ``clock`` section gives, problems with them)."""
    section = document.get("clock") if isinstance(document, dict) else None
    if section is None:
        return {}, []
    if not isinstance(section, dict):
        return {}, ["clock must be an object {mode, time_zone, round_seconds, max_skip_days}"]
    unknown = sorted(set(section) - set(CLOCK_FIELDS))
    problems = [f"clock.{name} is not a clock setting (they are {', '.join(CLOCK_FIELDS)})" for name in unknown]
    fields = {CLOCK_FIELDS[name]: section[name] for name in CLOCK_FIELDS if name in section}
    defaults = clock.Settings()
    try:
        clock.Settings(fields.get("clock_mode", defaults.mode), fields.get("time_zone", defaults.time_zone),
                       fields.get("round_seconds", defaults.round_seconds),
                       fields.get("max_skip_days", defaults.max_skip_days)).check()
    except (Refused, TypeError) as error:
        problems.append(f"clock: {error}")
    return fields, problems


def _stored(out, names, section, kind, value):
    """Check a later section's shape and what its entries name; store it as it is."""
    problems = out.problems
    if kind == "object":
        if not isinstance(value, dict):
            problems.append(f"{section} must be an object")
            return
    else:
        if not isinstance(value, list) or len(value) > MAX_ENTRIES.get(section, MAX_KNOWN):
            problems.append(f"{section} must be a list of at most {MAX_ENTRIES.get(section, MAX_KNOWN):,} entries")
            return
        required, references = STORED_ENTRIES[section]
        before = len(problems)
        seen = {}
        for number, entry in enumerate(value):
            where = f"{section}[{number}]"
            if not isinstance(entry, dict):
                problems.append(f"{where} must be an object")
                continue
            missing = [name for name in required if entry.get(name) in (None, "", [], {})]
            if missing:
                problems.append(f"{where} has no {' or '.join(missing)}")
            for name, referred in references.items():
                if entry.get(name):
                    names.find(entry[name], (referred,), f"{where}.{name}", problems)
            if section == "lore" and entry.get("scope", lore.LISTED) not in lore.SCOPES:
                problems.append(f"{where}.scope must be {' or '.join(lore.SCOPES)}, not {entry.get('scope')!r}")
            if section == "lore" and entry.get("id"):
                key = lore.lore_key(str(entry["id"]))
                if key in seen:
                    problems.append(f"{where}.id {entry['id']!r} is the id of {seen[key]} too; give each entry its "
                                    "own id (knowledge names an entry by it)")
                seen.setdefault(key, where)
        if len(problems) > before:
            return
    out.add(section, "world_section", section, data={"content": value})


@dataclass
class Checked:
    """What importing a document would do: its events, the outcomes, the problems that refuse it, the lint."""

    built: Built
    state: State
    outcomes: list
    problems: list
    findings: list
    report: list = field(default_factory=list)  # the problems and lint errors as Problems, knock-ons folded

    @property
    def errors(self):
        return [line for problem in self.report for line in problem.lines()]


def check(document, protagonist="", *, created_ms=None):
    """Return what importing ``document`` would do, without storing anything (pure).

    The protagonist's line is the campaign's (or, when not given, the file's own); ``created_ms`` is when the
    campaign is made (now, by default), where a clock without a starting_time starts. A file over the limits
    is not validated further: its size is the problem.
    """
    fields, canon = campaign_fields(document)
    protagonist = protagonist or fields.get("protagonist", "")
    built = build(document, protagonist)
    built.problems[:0] = campaign_problems(document)
    state = fresh_state(protagonist, canon)
    timing, problems = clock_settings(document)
    defaults = clock.Settings()
    settings = clock.Settings(timing.get("clock_mode", defaults.mode), timing.get("time_zone", defaults.time_zone),
                              timing.get("round_seconds", defaults.round_seconds),
                              timing.get("max_skip_days", defaults.max_skip_days)) if not problems else defaults
    now = int(datetime.now().timestamp() * 1000) if created_ms is None else created_ms
    if len(built.events) > MAX_EVENTS:
        problems = list(built.problems) + problems
        return Checked(built, state, [], problems, [], [Problem(_named(document, p)) for p in problems])
    outcomes = validate_batch(state, [clean(event) for event in built.events], "world",
                              env=rulebook.Env(settings=settings, created_ms=now, wall_ms=now))
    found = [_Found(_named(document, p)) for p in [*built.problems, *problems]]
    for index, (where, outcome) in enumerate(zip(built.where, outcomes)):
        if outcome.status != "applied":
            found += _located(where, outcome.reason, document, built.events[index], built.declared)
    problems = [f.text for f in found]
    findings = lint.lint(state) + [lint.Finding("note", "door", text) for text in built.notes]
    report = _fold(found, findings, built, state, document)
    return Checked(built, state, outcomes, problems, findings, report)


@dataclass
class _Found:
    """A problem as it was found: its text (path first), and the keys of the world its entry touches."""

    text: str
    touches: frozenset = frozenset()


# An event refused for naming what the file declared but could not make: a knock-on of why it could not.
_UNKNOWN = re.compile(r"unknown entity '([^']+)'; introduce it first")
_MADE = re.compile(r"names '([^']+)', which could not be made")
# The JSON path a problem starts with: section[0].field[2]...
_PATH = re.compile(r"^([a-z_]+)\[(\d+)\]((?:\.[a-z_]+|\[\d+\])*)")


def _located(where, reason, document, event, declared):
    """Return the Found problems of one refused event: a refusal of the file's triggers (one event) is split into
    one per trigger, at its place in the file."""
    touches = frozenset(key for key in (event.get("subject"), event.get("object")) if isinstance(key, str) and key)
    if where == "triggers" and reason.startswith("the triggers are refused: "):
        entries = document.get("triggers") or []
        starts = sorted((reason.find(f"trigger {str(entry.get('id'))!r} is refused: "), index)
                        for index, entry in enumerate(entries) if isinstance(entry, dict) and entry.get("id"))
        starts = [(at, index) for at, index in starts if at >= 0]
        if starts:
            parts, rest = [], reason[:starts[0][0]].removeprefix("the triggers are refused: ").rstrip("; ")
            for number, (at, index) in enumerate(starts):
                end = starts[number + 1][0] if number + 1 < len(starts) else len(reason)
                text = reason[at:end].rstrip("; ")
                text = text.split(" is refused: ", 1)[1]
                parts.append(_Found(_named(document, f"triggers[{index}]: {text}"), touches))
            return ([_Found(f"triggers: {rest}", touches)] if rest else []) + parts
    field = _DATA_FIELD.match(reason)
    if field:  # the event's data field is the entry's own field in the file
        return [_Found(_named(document, f"{where}.{field.group(1)}{reason[field.end():]}"), touches)]
    unknown = _UNKNOWN.fullmatch(reason)
    if unknown and key_for(unknown.group(1)) in declared:  # the file declared it but it could not be made: why,
        # is a problem of its own, which this one follows from
        reason = f"names {unknown.group(1)!r}, which could not be made"
    return [_Found(_named(document, f"{where}: {reason}"), touches)]


_DATA_FIELD = re.compile(r"data\.([a-z_]+)(?= )")


def _fold(found, findings, built, state, document):
    """Return the file's problems and lint errors as Problems, each knock-on folded under the problem it follows.

    A thing the file declares but that could not be made (an item held by
    no one known) has its first problem as the cause; an event refused for
    naming such a thing, and a lint error about a place, an exit or an item
    a refused entry touched, follow from that problem.
    """
    failed = {key: where for key, where in built.declared.items() if state.entity(key) is None}
    cause = {}  # index in found -> index of the problem it follows from
    first_at = {}
    for index, problem in enumerate(found):
        path = _PATH.match(problem.text)
        if path:
            first_at.setdefault(f"{path.group(1)}[{path.group(2)}]", index)
    for index, problem in enumerate(found):
        unknown = _MADE.search(problem.text)
        key = key_for(unknown.group(1)) if unknown else None
        origin = first_at.get(failed.get(key, ""), index) if key in failed else index
        if origin != index:
            cause[index] = origin
    def root(index):
        seen = set()
        while index in cause and index not in seen:
            seen.add(index)
            index = cause[index]
        return index
    touched = {}
    for index, problem in enumerate(found):
        keys = set(problem.touches)
        path = _PATH.match(problem.text)
        if path:
            keys |= {key for key, where in failed.items() if where == f"{path.group(1)}[{path.group(2)}]"}
        for key in keys:
            touched.setdefault(key, root(index))
    report = {}
    for index, problem in enumerate(found):
        if root(index) == index:
            report[index] = Problem(problem.text)
    for index, problem in enumerate(found):
        if root(index) != index:
            report[root(index)].knock_ons.append(problem.text)
    loose = []
    for finding in (f for f in findings if f.severity == "error"):
        text = f"world_lint: {finding.text}"
        parts = {part for subject in finding.subjects for part in str(subject).split(":")}
        origin = next((touched[part] for part in parts if part in touched), None) if found else None
        if origin is None:
            loose.append(Problem(text))
        else:
            report[origin].knock_ons.append(text)
    return [*report.values(), *loose]


def _named(document, text):
    """Return ``text`` with the name of the entry its path begins in after the path: "items[3].holder (chest): …"."""
    path = _PATH.match(text)
    if not path or not isinstance(document, dict):
        return text
    entries = document.get(path.group(1))
    index = int(path.group(2))
    entry = entries[index] if isinstance(entries, list) and index < len(entries) else None
    name = _entry_name(path.group(1), entry)
    return f"{path.group(0)} ({name}){text[path.end():]}" if name else text


def _entry_name(section, entry):
    """Return what a person calls an entry of ``section``: its name, its id, or what it joins."""
    if isinstance(entry, str):
        return entry[:40] + ("…" if len(entry) > 40 else "") if section == "facts" else ""
    if not isinstance(entry, dict):
        return ""
    if section == "exits" and isinstance(entry.get("from"), str) and isinstance(entry.get("to"), str):
        return f"{entry['from']} → {entry['to']}"[:80]
    for field in ("name", "id", "key", "who"):
        value = entry.get(field)
        if isinstance(value, str) and value.strip():
            return value.strip()[:60]
    return ""


def fresh_state(protagonist, canon=()):
    """Return the state of a new campaign's opening: the protagonist and the canon rules, nothing else."""
    slots = {}
    _add_protagonist(slots, type("Campaign", (), {"protagonist": protagonist})())
    return State(slots, [Canon(-number, text, scope) for number, (text, scope) in enumerate(canon, 1)])


def campaign_fields(document):
    """Return the campaign fields and canon rules a world file gives (``campaign`` and ``clock`` sections).

    Only text is taken; ``campaign_problems`` says what of the section is wrong.
    """
    section = document.get("campaign") if isinstance(document, dict) else None
    section = section if isinstance(section, dict) else {}
    fields = {name: section[name].strip() for name in CAMPAIGN_FIELDS if isinstance(section.get(name), str)
              and section[name].strip()}
    timing, problems = clock_settings(document)
    if not problems:
        fields.update(timing)
    canon = []
    rules = section.get("canon") or []
    for rule in rules[:MAX_CANON] if isinstance(rules, list) else []:
        if isinstance(rule, str) and rule.strip():
            canon.append((rule.strip(), CanonRule.Scope.INVARIANT))
        elif isinstance(rule, dict) and isinstance(rule.get("text"), str) and rule["text"].strip():
            scope = rule.get("scope") if rule.get("scope") in CanonRule.Scope.values else CanonRule.Scope.INVARIANT
            canon.append((rule["text"].strip(), scope))
    return fields, canon


# Canon rules a world file may give (each sits in every prompt).
MAX_CANON = 100


def campaign_problems(document, fields=None):
    """Return what is wrong with a file's ``campaign`` section, checked by the Campaign and CanonRule models'
    own validators (the limits the forms, the admin and bundles hold too), each naming its field.

    ``fields`` are the campaign's values as they will be stored (a form's over the file's); by default the
    file's own.
    """
    section = document.get("campaign") if isinstance(document, dict) else None
    if not isinstance(section, dict):
        return []
    problems = [f"campaign.{name} must be text" for name in CAMPAIGN_FIELDS
                if section.get(name) is not None and not isinstance(section[name], str)]
    unknown = sorted(set(section) - {*CAMPAIGN_FIELDS, "canon"})
    problems += [f"campaign.{name[:40]} is not a campaign field (they are {', '.join(CAMPAIGN_FIELDS)}, canon)"
                 for name in unknown[:5]]
    given, canon = campaign_fields(document)
    values = {name: value for name, value in (fields if fields is not None else given).items()
              if name in CAMPAIGN_FIELDS}
    problems += _model_problems(Campaign(**values), "campaign", values)
    rules = section.get("canon") or []
    if not isinstance(rules, list) or len(rules) > MAX_CANON:
        problems.append(f"campaign.canon must be a list of at most {MAX_CANON} rules (text, or {{text, scope}})")
        return problems
    for number, rule in enumerate(rules):
        where = f"campaign.canon[{number}]"
        text = rule if isinstance(rule, str) else rule.get("text") if isinstance(rule, dict) else None
        if not isinstance(text, str):
            problems.append(f"{where} must be a rule's text, or {{text, scope}}")
            continue
        scope = rule.get("scope", CanonRule.Scope.INVARIANT) if isinstance(rule, dict) else CanonRule.Scope.INVARIANT
        if scope not in CanonRule.Scope.values:
            problems.append(f"{where}.scope must be {' or '.join(CanonRule.Scope.values)}, not {str(scope)[:40]!r}")
            continue
        problems += _model_problems(CanonRule(text=text.strip(), scope=scope), where, {"text": text})
    return problems


def _model_problems(instance, where, values):
    """Return the model's own validation of the fields in ``values``, as ``where.field: message`` lines."""
    try:
        instance.clean_fields(exclude=[f.name for f in type(instance)._meta.fields if f.name not in values])
    except ValidationError as error:
        return [f"{where}.{name}: {' '.join(messages)}".rstrip(".") for name, messages in error.message_dict.items()]
    return []


def create_campaign(owner, document, *, progress=None, writes=None, **fields):
    """Create a campaign whose world is ``document``; return (campaign, lint findings), or raise WorldRefused.

    ``fields`` are the campaign's own (a form's); what they leave out comes
    from the file's ``campaign`` section. A file with any problem stores
    nothing; otherwise the world is written in short transactions
    (``staging``), ``progress(rows)`` told what each wrote (``Prepared.rows``
    in all), and the campaign appears only once all of it is written.
    """
    prepared = prepare(owner, document, **fields)
    return prepared.write(progress=progress, writes=writes), prepared.checked.findings


def prepare(owner, document, **fields):
    """Return the Prepared import of ``document`` for ``owner``, every check done, or raise WorldRefused (pure)."""
    given, canon = campaign_fields(document)
    values = {**given, **{name: value for name, value in fields.items() if value not in (None, "")}}
    missing = [name for name in ("title", "protagonist", "opening") if not values.get(name)]
    created_ms = int(datetime.now().timestamp() * 1000)
    checked = check(document, values.get("protagonist", ""), created_ms=created_ms)
    problems = checked.report
    if missing:
        problems = [Problem(f"the campaign needs a {', '.join(missing)} (give them in the form or the file's "
                            "campaign section)"), *problems]
    if problems:
        raise WorldRefused(problems)
    tokens.count(values["opening"])  # the tokenizer loads once, before the first transaction rather than inside it
    return Prepared(owner, values, canon, checked, created_ms)


@dataclass
class Prepared:
    """A world file checked whole, ready to be written: the campaign's values, its canon, the validated events."""

    owner: object
    values: dict
    canon: list
    checked: Checked
    created_ms: int

    @property
    def rows(self):
        """Return how many rows the write stores, events and records (the progress's total)."""
        return sum(1 + len(outcome.writes) for outcome in self.checked.outcomes)

    def write(self, *, progress=None, writes=None, then=None):
        """Write the campaign staged, its world in batches at the opening node, then publish it; return it.

        The events were validated before anything was written (``check``);
        the engine's own work after them (the first trigger check) runs here
        on the same state, once the campaign and its opening exist. ``then``
        (an import that brings more than a world: a character card's story)
        writes the rest while the campaign is still staged, and returns the
        campaign fields to publish it with (its head).
        """
        campaign = staging.transact(self._begin, writes)
        try:
            opening = Node.objects.get(campaign=campaign, depth=0)
            env = rulebook.env_for(opening, campaign)
            outcomes = self.checked.outcomes + rulebook.after_batch(self.checked.state, self.checked.outcomes,
                                                                    StateEvent.Source.WORLD, env)
            _renumber_canon(outcomes, list(campaign.canon_rules.order_by("position").values_list("pk", flat=True)))
            store(opening, outcomes, source=StateEvent.Source.WORLD, writes=writes, progress=progress)
            return staging.publish(campaign, **(then(campaign) if then is not None else {}))
        except BaseException:
            staging.discard(campaign.pk, writes)
            raise

    def _begin(self):
        campaign = Campaign.objects.create(owner=self.owner, staged=True, **self.values)
        created = datetime.fromtimestamp(self.created_ms / 1000, tz=timezone.utc)
        Campaign.every.filter(pk=campaign.pk).update(created_at=created)
        campaign.created_at = created
        CanonRule.objects.bulk_create([CanonRule(campaign=campaign, text=text, scope=scope, position=position)
                                       for position, (text, scope) in enumerate(self.canon)])
        return story.start_campaign(campaign)


def _renumber_canon(outcomes, ids):
    """Give the writes that supersede a canon rule the rule's row id (the check numbered rules -1, -2, …)."""
    for outcome in outcomes:
        for change in [*outcome.writes, *outcome.previous]:
            slot = change.get("slot", "")
            if slot.startswith("canon:-"):
                pk = ids[int(slot.removeprefix("canon:-")) - 1]
                change["slot"] = f"canon:{pk}"
                if "subject" in change:
                    change["subject"] = str(pk)


def lint_campaign(campaign):
    """Return world_lint's findings on the campaign's state at its head."""
    from .state import state_at

    return lint.lint(state_at(lineage.path_of(campaign), campaign))


def export(state, campaign=None):
    """Return ``state``'s world as a world document that ``build`` reads back into the same world."""
    snap = world.snapshot(state)
    document = {"format": FORMAT, "version": VERSION}
    if campaign is not None:
        document["campaign"] = {
            **{name: getattr(campaign, name) for name in CAMPAIGN_FIELDS if getattr(campaign, name)},
            "canon": [{"text": rule.text, "scope": rule.scope} for rule in campaign.canon_rules.filter(enabled=True)],
        }
    entities = {e["key"]: e for e in snap["entities"]}
    custom = {slot: capacity for slot, capacity in snap["slots"].items() if world.DEFAULT_SLOTS.get(slot) != capacity}
    document["slots"] = [{"name": slot, "capacity": capacity} for slot, capacity in sorted(custom.items())]
    document["places"] = [{
        "id": place["key"], "name": place["name"], **_described(entities[place["key"]]),
        "features": [{key: value for key, value in feature.items() if value not in (False, "")}
                     for feature in place["features"]],
    } for place in snap["places"]]
    document["factions"] = [{"id": e["key"], "name": e["name"], **_described(e)} for e in snap["entities"]
                            if e["kind"] == "faction"]
    relationships = {}
    for relation in snap["relationships"]:
        relationships.setdefault(relation["from"], []).append({
            "to": relation["to"], **{k: relation[k] for k in ("label", "summary") if relation[k]},
            **{axis: relation[axis] for axis in world.AXES if relation[axis]}})
    document["characters"] = []
    for character in snap["characters"]:
        key = character["key"]
        entry = {"id": key, "name": character["name"], **_described(entities[key])}
        if key == PROTAGONIST:
            entry = {"protagonist": True, **entry}
        if character["place"]:
            entry["place"] = character["place"]
        condition = {k: v for k, v in character["condition"].items() if v}
        if condition:
            entry["condition"] = condition
        if relationships.get(key):
            entry["relationships"] = relationships[key]
        known = snap["knowledge"].get(key, {})
        knowledge = {}
        for section, kind in (("locations", "place"), ("items", "item"), ("lore", "lore")):
            if known.get(kind):
                knowledge[section] = [{"name": target, "how": how} for target, how in known[kind].items()]
        if known.get("exit"):
            exits = {f"{e['from']}:{e['key']}": e for e in snap["exits"]}
            knowledge["exits"] = [{"from": exits[t]["from"], "to": exits[t]["label"] or exits[t]["to"], "how": how}
                                  for t, how in known["exit"].items() if t in exits]
        if knowledge:
            entry["knowledge"] = knowledge
        temperament = state.get(f"temperament:{key}")
        if temperament is not None:
            entry["temperament"] = dict(temperament.data)
        document["characters"].append(entry)
    document["items"] = [{
        "id": item["key"], "name": item["name"], **_described(entities[item["key"]]),
        "holder": item["holder"],
        **{k: item[k] for k in ("mode", "slot", "condition", "wear_slot", "container", "opener", "owner", "stack")
           if item[k]},
        **{k: item[k] for k in ("unique", "notable", "hidden") if item[k]},
        **({"quantity": item["quantity"]} if item["quantity"] != 1 else {}),
    } for item in snap["items"] if item["holder"] and item["quantity"] > 0]
    document["exits"] = _exported_exits(snap["exits"])
    document["facts"] = snap["facts"]
    for record in state.of_kind("world_section"):
        document[record.value] = record.data.get("content")
    document.update(_rule_sections(state, campaign))
    return document


def _exported_exits(exits):
    """Return the exits as world file entries: a door whose sides differ only in direction as one, both ways."""
    sides = {(e["from"], e["to"], e["door"]): e for e in exits if e["door"]}
    entries, done = [], set()
    for exit in exits:
        if (exit["from"], exit["key"]) in done:
            continue
        entry = {"from": exit["from"], "to": exit["to"], "state": exit["state"],
                 **{k: exit[k] for k in ("label", "opener", "travel_seconds", "hidden") if exit[k]}}
        if exit["door"]:
            back = sides.get((exit["to"], exit["from"], exit["door"]))
            if back is not None and (back["label"], back["travel_seconds"]) == (exit["label"], exit["travel_seconds"]):
                done.add((back["from"], back["key"]))
                entry["both_ways"] = True
            if back is None or not entry.get("both_ways") or exit["door"] != world.door_key(
                    exit["label"], exit["from"], exit["to"]):
                entry.update(label=exit["label"], door=exit["door"])  # the label given, or the door would name it
        entries.append(entry)
    return entries


def _rule_sections(state, campaign):
    """Return story time and world rules as world file sections: the clock at ``state`` is the new start.

    What a new story starts with: pending engagements, active intents,
    triggers that can still fire (dormant, with their definitions as stored:
    instants in UTC ms), variables with the values that differ from their
    defaults (the built-in emotions rest at each character's temperament).
    """
    sections = {}
    now = rulebook.clock_of(state)
    tz = campaign.time_zone if campaign is not None else (now.time_zone if now else "UTC")
    if now is not None:
        sections["starting_time"] = _iso(now.at, tz)
    if campaign is not None:
        sections["clock"] = {name: getattr(campaign, field) for name, field in CLOCK_FIELDS.items()}
    record = state.get("calendar")
    if record is not None:
        sections["calendar"] = record.data
    values = {}
    for (target, name), value in rulebook.values_of(state).items():
        values.setdefault(name, {})[target] = value
    sections["variables"] = [{**definition.data(), **({"values": values[name]} if values.get(name) else {})}
                             for name, definition in rulebook.definitions_of(state).items() if not definition.builtin]
    sections["dice"] = [{"key": key, **check.data()} for key, check in sorted(rulebook.checks_of(state).items())]
    sections["routines"] = [{"who": r.subject, "windows": r.data.get("windows", [])}
                            for r in sorted(state.of_kind("routine"), key=lambda r: r.subject)]
    sections["engagements"] = [
        {"id": e.id, "who": list(e.who), "at": _iso(e.at, tz), **({"place": e.place} if e.place else {}),
         "what": e.what} for e in sorted(rulebook.engagements_of(state), key=lambda e: (e.at, e.id))
        if e.status == "pending"]
    sections["intents"] = [
        {"who": i.who, "id": i.id, **({"type": i.type} if i.type else {}), "priority": i.priority,
         "urgency": i.urgency, **({"deadline": _iso(i.deadline, tz)} if i.deadline is not None else {}), "plan": i.plan}
        for i in sorted(rulebook.intents_of(state), key=lambda i: (i.who, i.id)) if i.status == "active"]
    sections["triggers"] = [trigger.definition for trigger, status in rulebook.triggers_of(state)
                            if status.status in ("dormant", "fired") and status.fires < trigger.max_fires]
    return {name: value for name, value in sections.items() if value not in ([], None)}


def _iso(ms, tz):
    """Return the instant ``ms`` as local ISO text in ``tz``, which a world file reads back in that time zone."""
    return story_calendar.local(ms, tz).replace(tzinfo=None).isoformat(timespec="seconds")


def _described(entity):
    extra = {}
    if entity["aliases"]:
        extra["aliases"] = entity["aliases"]
    if entity["description"]:
        extra["description"] = entity["description"]
    if entity["narrator_only"]:
        extra["narrator_only"] = True
    extra.update({name: entity[name] for name in ("personality", "brief") if entity.get(name)})
    return extra
