"""Reading the story state of one node: a fold of the records on its lineage.

The state after a node is, for every slot, the deepest record on the node's
lineage (the later record wins at equal depth); a retracted record ends its
slot. SQLite does the fold with one window query through ``Path.clause``, so
the state of any node — the head after an undo, a save point, another branch
— is read the same way and an abandoned line's records are never eligible.
"""

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import F, Window
from django.db.models.functions import RowNumber

from storyteller import vendors

from ..models import CanonRule, StateEvent, StateRecord

User = get_user_model()

ENTITY_KINDS = ("character", "place", "item", "faction")

# The player's character exists from the first line of every story, under these
# names as well as its own, so the recorder can say "protagonist" or "you".
PROTAGONIST = "protagonist"
PROTAGONIST_ALIASES = ("protagonist", "player", "you", "i", "me")


@dataclass(frozen=True)
class Record:
    """One live slot value, with where it came from."""

    id: int | None
    slot: str
    kind: str
    subject: str
    value: str
    data: dict
    narrator_only: bool
    authority: str  # "correction" | "state" | "campaign"
    depth: int
    source: str = ""  # "recorder" | "script" | "correction" | "world" | "engine" | "judge" | "campaign"
    author: str = ""
    event_id: int | None = None

    @property
    def provenance(self):
        """Return who set this and where, in words for the inspector and the panel."""
        if self.source == "campaign":
            return "campaign settings"
        turn = f" at turn {self.depth // 2}" if self.depth else " at the opening"
        if self.source == "correction":
            return f"correction by {self.author or 'a person'}{turn} (event {self.event_id})"
        if self.source == "world":
            return f"world file{turn} (event {self.event_id})"
        if self.source == "script":
            return f"scripted{turn} (event {self.event_id})"
        if self.source == "engine":
            return f"story time and world rules{turn} (event {self.event_id})"
        if self.source == "judge":
            return f"judged after turn {self.depth // 2} (event {self.event_id})"
        return f"recorded after turn {self.depth // 2} (event {self.event_id})"


@dataclass(frozen=True)
class Canon:
    id: int
    text: str
    scope: str  # "invariant" | "initial"


@dataclass
class _Index:
    """Every name and alias of a set of entities -> entity key, and (made when first asked) the same as word phrases.

    Shared between States (the cached base hands its index to every read):
    never changed once made, except to fill in ``phrases``.
    """

    names: dict
    phrases: dict | None = None

    @classmethod
    def of(cls, records):
        names = {}
        for record in records:
            _name(names, record)
        return cls(names)

    def adding(self, records):
        """Return a copy with ``records`` (new entities) indexed after this index's own."""
        names = dict(self.names)
        for record in records:
            _name(names, record)
        phrases = None
        if self.phrases is not None:
            phrases = dict(self.phrases)
            for record in records:
                for name in _names_of(record):
                    phrase = " ".join(words(name))
                    if phrase:
                        phrases.setdefault(phrase, names[normalize(name)])
        return _Index(names, phrases)


def _names_of(record):
    return (record.value, *record.data.get("aliases", ()), record.subject)


def _name(names, record):
    for name in _names_of(record):
        names.setdefault(normalize(name), record.subject)


@dataclass
class _Derived:
    """A value derived from the slots of some kinds (State.cached), and how it follows their changes."""

    kinds: frozenset
    value: object
    update: object = None  # update(value, old Record | None, new Record | None): change ``value`` in place
    copy: object = None  # copy(value): a copy ``update`` may change (the original is shared)
    owned: bool = False


def _by_kind(slots):
    index = {}
    for slot, record in slots.items():
        index.setdefault(record.kind, {})[slot] = record
    return index


@dataclass
class State:
    """The live records of one lineage, by slot, plus the campaign canon they are checked against.

    A state read for one turn holds only the slots that turn can need
    (``complete`` is False); any other slot is folded from the database the
    first time it is asked for, through ``fetch``.
    """

    slots: dict[str, Record]
    canon: list[Canon] = field(default_factory=list)
    complete: bool = True
    fetch: object = None  # fetch(slots) -> {slot: Record}, for a partial state
    checked: set = field(default_factory=set)  # slots known to be empty (or ended in this batch)
    index: _Index | None = None  # the names of exactly the entities in ``slots``, when the reader has them
    fetch_where: object = None  # fetch_where(sql, params) -> {slot: Record}: the slots of the matching records
    fetch_live: object = None  # fetch_live(slots) -> the set of those slots that hold a live record
    loaded: set = field(default_factory=set)  # (kind, subject) pairs whose every slot a partial state holds
    # Values derived from the slots (the exit graph, who holds what), by name: (kinds they read, value).
    # ``shared`` is the cached base's own dict, so what one read derives from the base the next reuses.
    caches: dict = field(default_factory=dict)
    shared: dict | None = None
    dirty: set = field(default_factory=set)  # kinds this state has written since it was read
    # The slots by kind (kind -> {slot: Record}), made when first asked for; a partial state starts from the
    # cached base's and copies a kind's dict before changing it (``own_kinds``).
    by_kind: dict | None = None
    own_kinds: set = field(default_factory=set)

    def __post_init__(self):
        if self.index is None:
            self.reindex()

    @property
    def names(self):
        """Every name and alias -> entity key."""
        return self.index.names

    def reindex(self):
        """Index every entity's names again (after an entity was rewritten or removed)."""
        self.index = _Index.of(self.entities())

    def introduce(self, record):
        """Add a new entity's names to this state's index (a copy: indexes are shared between states)."""
        self.index = self.index.adding([record])

    def get(self, slot):
        """Return the live record of ``slot``, or None."""
        if slot in self.slots:
            return self.slots[slot]
        if not self.complete and slot not in self.checked:
            parts = slot.split(":", 2)
            if parts[0] not in BASE_PREFIXES and (parts[0], parts[1] if len(parts) > 1 else "") not in self.loaded:
                self.prefetch([slot])
        return self.slots.get(slot)

    def existing(self, slots):
        """Return which of ``slots`` hold a live record, reading (for a partial state) only whether they do."""
        here = {slot for slot in slots if slot in self.slots}
        if self.complete:
            return here
        ask = []
        for slot in slots:
            if slot not in self.slots and slot not in self.checked:
                parts = slot.split(":", 2)
                if parts[0] not in BASE_PREFIXES and (parts[0], parts[1] if len(parts) > 1 else "") not in self.loaded:
                    ask.append(slot)
        return here | (self.fetch_live(ask) if ask else set())

    def prefetch(self, slots):
        """Read ``slots`` from the database in one query (a partial state only)."""
        wanted = [slot for slot in slots if slot not in self.slots and slot not in self.checked]
        if wanted and not self.complete:
            self.add(self.fetch(wanted))
            self.checked.update(wanted)

    def add(self, records):
        """Add records read from the database (a partial state's lazy reads)."""
        entities = False
        for slot, record in records.items():
            if self.slots.get(slot) == record:
                continue
            self._changed(self.slots.get(slot), record)
            self.slots[slot] = record
            entities = entities or record.kind == "entity"
        if entities:
            self.reindex()

    def load(self, kind, subjects):
        """Make sure a partial state holds every live ``kind`` slot of each of ``subjects`` (one read)."""
        wanted = sorted({s for s in subjects if s and (kind, s) not in self.loaded})
        if self.complete or not wanted:
            return
        for start in range(0, len(wanted), SLOTS_PER_QUERY):
            chunk = wanted[start:start + SLOTS_PER_QUERY]
            found = self.fetch_where(f"kind = %s AND subject IN ({', '.join(['%s'] * len(chunk))})", [kind, *chunk])
            self.add({slot: record for slot, record in found.items() if slot not in self.checked})
        self.loaded.update((kind, s) for s in wanted)

    def load_occupants(self, places):
        """Make sure a partial state holds the location of everyone now at any of ``places`` (one read)."""
        wanted = sorted({p for p in places if p and ("at", p) not in self.loaded})
        if self.complete or not wanted:
            return
        found = self.fetch_where(f"kind = 'location' AND value IN ({', '.join(['%s'] * len(wanted))})", wanted)
        self.add({slot: record for slot, record in found.items()
                  if slot not in self.slots and slot not in self.checked})
        self.loaded.update(("at", p) for p in wanted)

    def put(self, record):
        """Set a slot in this copy of the state (an event earlier in the batch applied)."""
        self._changed(self.slots.get(record.slot), record)
        self.slots[record.slot] = record
        self.dirty.add(record.kind)

    def forget(self, slot):
        """End ``slot`` in this copy of the state (a retraction earlier in the batch)."""
        old = self.slots.pop(slot, None)
        self.checked.add(slot)
        if old is not None:
            self.dirty.add(old.kind)
            self._changed(old, None)

    def cached(self, name, kinds, build, update=None, copy=None):
        """Return the value ``build(state)`` derives from the slots of ``kinds``, made once.

        With ``update(value, old, new)`` (and ``copy(value)`` for a value this
        state shares) the value follows every change of a slot of those kinds;
        without, a change drops it and the next call builds it again.
        """
        entry = self.caches.get(name)
        if entry is None:
            entry = _Derived(frozenset(kinds), build(self), update, copy, owned=True)
            self.caches[name] = entry
            if self.shared is not None and entry.kinds <= _SHAREABLE and not entry.kinds & self.dirty:
                entry.owned = False
                self.shared[name] = _Derived(entry.kinds, entry.value, update, copy, owned=False)
        return entry.value

    def _changed(self, old, new):
        """Keep the by-kind index and the derived values in step with one slot going from ``old`` to ``new``."""
        kinds = {record.kind for record in (old, new) if record is not None}
        if self.by_kind is not None:
            for kind in kinds - self.own_kinds:
                self.by_kind[kind] = dict(self.by_kind.get(kind, {}))
                self.own_kinds.add(kind)
            if old is not None:
                self.by_kind[old.kind].pop(old.slot, None)
            if new is not None:
                self.by_kind[new.kind][new.slot] = new
        for name, entry in list(self.caches.items()):
            if not entry.kinds & kinds:
                continue
            if entry.update is None:
                del self.caches[name]
                continue
            if not entry.owned:
                entry = _Derived(entry.kinds, entry.copy(entry.value), entry.update, entry.copy, owned=True)
                self.caches[name] = entry
            entry.update(entry.value, old, new)

    def entities(self):
        return self.of_kind("entity")

    def of_kind(self, kind):
        if self.by_kind is None:
            self.by_kind = _by_kind(self.slots)
            self.own_kinds = set(self.by_kind)
        return list(self.by_kind.get(kind, {}).values())

    def entity(self, key):
        return self.get(f"entity:{key}")

    def resolve(self, name):
        """Return the key of the entity called ``name`` (by name or alias), or None."""
        return self.names.get(normalize(name))

    def phrases(self):
        """Return every name and alias as its words joined by spaces -> entity key, for finding mentions."""
        if self.index.phrases is None:
            phrases = {}
            for name, key in self.names.items():
                phrase = " ".join(words(name))
                if phrase:
                    phrases.setdefault(phrase, key)
            self.index.phrases = phrases
        return self.index.phrases

    def name_of(self, key):
        record = self.entity(key)
        return record.value if record else key

    def location_of(self, key):
        record = self.get(f"location:{key}")
        return record.value if record else ""

    def holder_of(self, item_key):
        record = self.get(f"holder:{item_key}")
        return record.value if record else ""

    def scene(self):
        return self.get("scene")

    def place(self):
        """Return the key of where the scene is: its own location, else the protagonist's."""
        scene = self.scene()
        return (scene.data.get("location", "") if scene else "") or self.location_of(PROTAGONIST)

    def present(self):
        """Return the keys of the characters at the scene's place."""
        return self.at(self.place())

    def at(self, place):
        """Return the keys of the characters at ``place`` (of those a partial state holds), by key."""
        if not place:
            return []
        return [r.subject for r in self.of_kind("location") if r.value == place]

    def find_fact(self, text):
        return self.get(fact_slot(text))

    def find_thread(self, text):
        return self.get(thread_slot(text))

    def superseded(self, canon_id):
        return self.get(f"canon:{canon_id}")


def words(text):
    return _WORD.findall(str(text).lower())


_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})
_WORD = re.compile(r"[a-z0-9']+")


def normalize(text):
    """Return ``text`` as a matching key: lower case, single spaces, no outer punctuation or quotes."""
    return " ".join(str(text or "").translate(_QUOTES).lower().split()).strip(" .!?;:\"'")


def key_for(name):
    """Return the stable key of an entity name: ``"The Silver Key"`` -> ``"silver-key"``."""
    text = re.sub(r"^(the|a|an) ", "", normalize(name))
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:120] or "unnamed"


def _digest(text):
    return hashlib.sha1(normalize(text).encode()).hexdigest()[:16]


def fact_slot(text):
    return f"fact:{_digest(text)}"


def thread_slot(text):
    return f"thread:{_digest(text)}"


def protagonist_name(campaign):
    """Return the player's character's name: the campaign's protagonist line up to its first comma."""
    return re.split(r"[,;(\n]", campaign.protagonist, maxsplit=1)[0].strip()[:120] or "The protagonist"


# What every turn needs whatever it mentions: every entity (names are how
# events and mentions are resolved), the scene, the threads, overturned canon
# and where the protagonist is; and the world's shape, because a route needs
# every exit and a holding chain every holder on it (seed 002 「地点」, 「物品」):
# exits, features, items, who holds each item, and wear slots.
BASE_KINDS = ("entity", "scene", "thread", "superseded_canon", "exit", "feature", "item", "holder", "slot")
# The slot prefixes of the base kinds: absent from a partial state's base means absent.
BASE_PREFIXES = ("entity", "scene", "thread", "canon", "exit", "feature", "item", "holder", "slot")
# Story time and world rules (docs/rules.md): a round's catch-up asks every routine and cursor, a trigger check
# every trigger, its notes and judgments, and the narrator every due engagement and stored variable. Each is one
# slot per character, trigger or value (the roll log, which only grows, is read by its slots instead).
RULE_KINDS = ("clock", "calendar", "routine", "agenda_cursor", "consolidation", "engagement", "intent", "catch_up",
              "variable_def", "var", "temperament", "dice_check", "trigger", "trigger_note", "judgment")
BASE_KINDS += RULE_KINDS
BASE_PREFIXES += RULE_KINDS
# Derived values read from only these kinds may be kept with the cached base.
_SHAREABLE = frozenset(BASE_KINDS)
# For ``_rows``, with BASE_KINDS and the protagonist's location slot as its parameters.
_BASE_SQL = f"r.kind IN ({', '.join(['%s'] * len(BASE_KINDS))}) OR r.slot = %s"

# What characters perceived and believe (campaigns/state/minds/minds.py): read by the recall index and the
# whereabouts beliefs, never folded into the state the narrator's lines, the panels and ``story state`` show.
MIND_KINDS = ("event", "perception", "belief", "notice")

# The kinds whose slot belongs to one entity, the record's subject.
# (Who holds what is in the base: a holding chain may need any holder.)
SUBJECT_KINDS = ("location", "condition", "relationship", "fact")


# Entity names longer than this many words are not looked for in the text.
LONGEST_NAME = 6

# Names shorter than this ("I", "me", "Al") match inside ordinary words and
# pronouns too often to mean that the entity was mentioned.
MIN_NAME = 3


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


def state_at(path, campaign):
    """Return the whole State after the last node of ``path``."""
    return State(_fold(path, campaign), _canon(path))


def state_for_turn(path, campaign, text):
    """Return the part of the State after ``path`` that a turn about ``text`` can draw on (seed 000 §7).

    The base (entities, scene, threads) and, in one more read, what concerns
    the protagonist, whoever has been at the scene's place, the place itself,
    whatever ``text`` names, and facts about no one in particular.
    """
    state = _partial(path, campaign)
    place = state.place()
    focus = {PROTAGONIST, *mentioned(state, text)} | ({place} if place else set())
    state.add(_fold_focus(path, focus, place))
    return state


def state_for_events(path, campaign, payloads):
    """Return the part of the State after ``path`` that validating ``payloads`` can touch, read up front."""
    state = _partial(path, campaign)
    keys = {state.resolve(p.get(name, "")) for p in payloads if isinstance(p, dict)
            for name in ("subject", "object", "value")} - {None}
    # Names the batch may introduce: their slots are looked up (as empty) now too.
    keys |= {key_for(p.get("subject", "")) for p in payloads if isinstance(p, dict) and p.get("subject")}
    keys |= {PROTAGONIST, state.place()} - {""}
    texts = {str(p.get(name) or "") for p in payloads if isinstance(p, dict) for name in ("object", "value")}
    slots = [f"{kind}:{key}" for key in keys for kind in ("location", "condition")]
    # Only characters have relationships (and places and items, named by the dozen in a world, would square it).
    people = [key for key in keys if (state.entity(key) or _NOBODY).data.get("kind") in ("character", "faction", None)]
    slots += [f"relationship:{one}:{other}" for one in people for other in people if one != other]
    slots += [fact_slot(text) for text in texts if text]
    state.prefetch(slots)
    return state


_NOBODY = Record(None, "", "", "", "", {}, False, "", 0)


def _partial(path, campaign):
    def fetch(slots):
        return _fold_slots(path, slots)

    def fetch_where(where, params):
        return _fold_matching(path, where, params)

    def fetch_live(slots):
        return _live_slots(path, slots)

    base = _base(path, campaign)
    # A state's slots change as a batch is validated; the cached base's must not.
    return State(dict(base.slots), _canon(path), complete=False, fetch=fetch, index=base.index,
                 fetch_where=fetch_where, fetch_live=fetch_live, caches=dict(base.caches), shared=base.caches,
                 by_kind=dict(base.by_kind))


def _fold(path, campaign):
    """Return {slot: Record} for every live slot on ``path``."""
    slots = _fold_all(path)
    _add_protagonist(slots, campaign)
    return slots


_COLUMNS = ("id", "slot", "kind", "subject", "value", "data", "narrator_only", "authority", "depth",
            "event__source", "event__author__username", "event_id", "retracted", "branch_id")


def _record(row):
    return Record(*row[:9], source=row[9], author=row[10] or "", event_id=row[11])


def _fold_all(path):
    rows = (
        # A slot's records all share its kind, so leaving kinds out before the ranking leaves no slot half-read.
        StateRecord.objects.filter(path.clause(), campaign_id=path.campaign_id).exclude(kind__in=MIND_KINDS)
        .annotate(rank=Window(RowNumber(), partition_by=[F("slot")], order_by=[F("depth").desc(), F("id").desc()]))
        # Only the window condition may go here: a plain condition such as
        # retracted=False would be applied before ranking and revive the value
        # a retraction ended.
        .filter(rank=1)
        .values_list(*_COLUMNS)
    )
    return {row[1]: _record(row) for row in rows if not row[12]}


def _fold_focus(path, focus, place):
    """Fold the slots a turn about ``focus`` at ``place`` can need, in one statement.

    Candidates are chosen on every line and every record of them is read, so
    a later record that no longer matches (Mara has left the tavern) still
    wins; the lineage is applied here, which keeps SQLite on the slot index
    instead of scanning the whole line. The conditions are a UNION, not an
    OR, so each uses its own index. The statement is written out because the
    ORM spent about 10 ms building this UNION of subqueries (500 entities,
    5,000 facts) where SQLite runs it in 2.
    """
    table, campaign = StateRecord._meta.db_table, path.campaign_id
    kinds = ", ".join(["%s"] * len(SUBJECT_KINDS))
    keys = sorted(focus)
    named = ", ".join(["%s"] * len(keys))
    # Facts about no one have an empty subject, so "" joins the focus here.
    parts = [f"SELECT slot FROM {table} WHERE campaign_id = %s AND kind IN ({kinds}) AND subject IN ({named}, %s)",
             f"SELECT slot FROM {table} WHERE campaign_id = %s AND kind = 'relationship'"
             f" AND {vendors.json_text('data', 'object')} IN ({named})"]
    params = [campaign, *SUBJECT_KINDS, *keys, "", campaign, *keys]
    if place:
        # Anyone ever placed there is a candidate; the fold keeps who is there now.
        there = f"SELECT subject FROM {table} WHERE campaign_id = %s AND kind = 'location' AND value = %s"
        parts += [f"SELECT slot FROM {table} WHERE campaign_id = %s AND kind IN ({kinds}) AND subject IN ({there})",
                  f"SELECT slot FROM {table} WHERE campaign_id = %s AND kind = 'location' AND value = %s"]
        params += [campaign, *SUBJECT_KINDS, campaign, place, campaign, place]
    best = {}
    _keep(best, _rows(f"r.campaign_id = %s AND r.slot IN ({' UNION '.join(parts)})", [campaign, *params]), path)
    return {slot: _record(row) for slot, row in best.items() if not row[12]}


def _rows(where, params):
    """Return the ``_COLUMNS`` of the records ``r`` matching the SQL ``where``, converted as the ORM would."""
    table, events, users = StateRecord._meta.db_table, StateEvent._meta.db_table, User._meta.db_table
    sql = (f"SELECT r.id, r.slot, r.kind, r.subject, r.value, r.data, r.narrator_only, r.authority, r.depth,"
           f" e.source, u.username, r.event_id, r.retracted, r.branch_id"
           f" FROM {table} r INNER JOIN {events} e ON r.event_id = e.id LEFT OUTER JOIN {users} u ON e.author_id = u.id"
           f" WHERE {where}")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        # JSON text to dict and SQLite's 0/1 to bool, as JSONField and BooleanField convert them.
        return [(*row[:5], json.loads(row[5]), bool(row[6]), *row[7:12], bool(row[12]), row[13])
                for row in cursor.fetchall()]


def _fold_slots(path, slots):
    """Fold the named ``slots`` on ``path``, reading their records by the slot index."""
    best = {}
    for start in range(0, len(slots), SLOTS_PER_QUERY):
        chunk = slots[start:start + SLOTS_PER_QUERY]
        _keep(best, _rows(f"r.campaign_id = %s AND r.slot IN ({', '.join(['%s'] * len(chunk))})",
                          [path.campaign_id, *chunk]), path)
    return {slot: _record(row) for slot, row in best.items() if not row[12]}


def _live_slots(path, slots):
    """Return which of ``slots`` hold a live record on ``path``: the fold without reading the records' values."""
    live = set()
    for start in range(0, len(slots), SLOTS_PER_QUERY):
        chunk = slots[start:start + SLOTS_PER_QUERY]
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT slot, depth, id, retracted, branch_id FROM {StateRecord._meta.db_table}"
                           f" WHERE campaign_id = %s AND slot IN ({', '.join(['%s'] * len(chunk))})",
                           [path.campaign_id, *chunk])
            best = {}
            for slot, depth, pk, retracted, branch in cursor.fetchall():
                if path.contains(branch, depth) and (depth, pk) > best.get(slot, (-1, -1, False))[:2]:
                    best[slot] = (depth, pk, bool(retracted))
        live |= {slot for slot, (_, _, retracted) in best.items() if not retracted}
    return live


def _fold_matching(path, where, params):
    """Fold every slot that has a record matching the SQL ``where`` (on any line: a later record may not match)."""
    table = StateRecord._meta.db_table
    best = {}
    _keep(best, _rows(f"r.campaign_id = %s AND r.slot IN (SELECT slot FROM {table} WHERE campaign_id = %s"
                      f" AND {where})", [path.campaign_id, path.campaign_id, *params]), path)
    return {slot: _record(row) for slot, row in best.items() if not row[12]}


def _keep(best, rows, path):
    """Keep in ``best`` the deepest (then latest) row of each slot among ``rows`` on ``path``.

    Return the slots whose row was replaced.
    """
    changed = set()
    for row in rows:
        if not path.contains(row[13], row[8]):
            continue
        current = best.get(row[1])
        if current is None or (row[8], row[0]) > (current[8], current[0]):
            best[row[1]] = row
            changed.add(row[1])
    return changed


# SQLite allows 32,766 bound parameters; stay far below it.
SLOTS_PER_QUERY = 5000


@dataclass
class _Base:
    created: object
    path: object
    version: int
    rows: dict  # slot -> the winning row, retractions included (a later read may need to compare with them)
    slots: dict  # slot -> Record, the live ones, the protagonist included
    protagonist: str  # the campaign's protagonist line the protagonist's record was made from
    index: _Index  # the names of the entities in ``slots``
    by_kind: dict  # kind -> {slot: Record}, of ``slots``
    # Values derived from ``slots`` (State.cached), filled in by the reads that need them.
    caches: dict = field(default_factory=dict)


# The base of the state of the last path read, per campaign, with its name
# index. A turn extends the line it was read for, so the next read folds in
# only records written since (higher ids) or deeper than that path: every
# entity is not re-read, nor every name normalised again, every turn. The
# records themselves stay the truth: ids only grow, so the highest id is the
# version, and any other path is read afresh. A base is never changed once
# stored (a read makes a new one), so readers on other threads may hold it.
_bases: dict[int, _Base] = {}
_bases_lock = threading.Lock()


def _base(path, campaign):
    """Return the _Base of ``path``: from the campaign's cached one when ``path`` extends it, else read afresh."""
    table = StateRecord._meta.db_table
    # The version first: a record committed after it is read again next time, never missed.
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT MAX(id) FROM {table} WHERE campaign_id = %s", [campaign.pk])
        version = cursor.fetchone()[0] or 0
    base_params = [*BASE_KINDS, f"location:{PROTAGONIST}"]
    with _bases_lock:
        cached = _bases.get(campaign.pk)
    if (cached is not None and cached.created == campaign.created_at and cached.path.head_depth <= path.head_depth
            and path.capped(cached.path.head_depth) == cached.path):
        if cached.version == version and cached.path == path and cached.protagonist == campaign.protagonist:
            return cached
        rows = dict(cached.rows)
        # Two reads, not one OR, so each stays on its index: written since, and deeper than the cached path.
        changed = set()
        if cached.version != version:
            changed |= _keep(rows, _rows(f"r.campaign_id = %s AND r.id > %s AND ({_BASE_SQL})",
                                         [campaign.pk, cached.version, *base_params]), path)
        if cached.path != path:
            branches = sorted({segment.branch_id for segment in path.segments})
            changed |= _keep(rows, _rows(
                f"r.campaign_id = %s AND r.branch_id IN ({', '.join(['%s'] * len(branches))}) AND r.depth > %s"
                f" AND ({_BASE_SQL})", [campaign.pk, *branches, cached.path.head_depth, *base_params]), path)
        # Only the changed slots become Records again: rebuilding all 500-odd cost about 2 ms a batch.
        live = dict(cached.slots)
        ended = []
        for slot in changed:
            old = live.pop(slot, None)
            if old is not None and old.kind == "entity":
                ended.append(old)
            if not rows[slot][12]:
                live[slot] = _record(rows[slot])
        added = [live[slot] for slot in changed if slot in live and live[slot].kind == "entity"]
        made = live.get(f"entity:{PROTAGONIST}")
        if cached.protagonist != campaign.protagonist and made is not None and made.source == "campaign":
            ended.append(live.pop(made.slot))  # made from the old protagonist line; made again below
        _add_protagonist(live, campaign)
        # A new entity only adds names; a changed or ended one may free a name another entity holds.
        index = _Index.of(r for r in live.values() if r.kind == "entity") if ended else cached.index.adding(added)
        base = _Base(campaign.created_at, path, version, rows, live, campaign.protagonist, index,
                     *_follow(cached, live, changed | {f"entity:{PROTAGONIST}"}))
    else:
        rows = {}
        _keep(rows, _rows(f"r.campaign_id = %s AND ({_BASE_SQL})", [campaign.pk, *base_params]), path)
        live = _live(rows)
        _add_protagonist(live, campaign)
        index = _Index.of(r for r in live.values() if r.kind == "entity")
        base = _Base(campaign.created_at, path, version, rows, live, campaign.protagonist, index, _by_kind(live))
    with _bases_lock:
        _bases[campaign.pk] = base
    return base


def _follow(cached, live, changed):
    """Return the by-kind index and the derived values of a base made from ``cached`` by changing ``changed`` slots.

    A kind's dict is copied only when one of its slots changed; a derived
    value that knows how follows the changes (a copy, then each change), the
    others are dropped and made again when next needed.
    """
    by_kind = dict(cached.by_kind)
    changes = [(cached.slots.get(slot), live.get(slot)) for slot in changed]
    changes = [(old, new) for old, new in changes if old is not new]
    for kind in {r.kind for pair in changes for r in pair if r is not None}:
        by_kind[kind] = dict(by_kind.get(kind, {}))
    for old, new in changes:
        if old is not None:
            by_kind[old.kind].pop(old.slot, None)
        if new is not None:
            by_kind[new.kind][new.slot] = new
    caches = {}
    for name, entry in cached.caches.items():
        touched = [(old, new) for old, new in changes
                   if any(r is not None and r.kind in entry.kinds for r in (old, new))]
        if not touched:
            caches[name] = entry
        elif entry.update is not None:
            value = entry.copy(entry.value)
            for old, new in touched:
                entry.update(value, old, new)
            caches[name] = _Derived(entry.kinds, value, entry.update, entry.copy, owned=False)
    return by_kind, caches


def _live(rows):
    return {slot: _record(row) for slot, row in rows.items() if not row[12]}


def _canon(path):
    # Written out: the ORM spent about 0.8 ms building this one-table read (bench "state"), SQLite 0.05.
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, text, scope FROM {CanonRule._meta.db_table} WHERE campaign_id = %s AND enabled"
                       " ORDER BY position, id", [path.campaign_id])
        return [Canon(*row) for row in cursor.fetchall()]


def _add_protagonist(slots, campaign):
    slot = f"entity:{PROTAGONIST}"
    if slot in slots:
        return
    name = protagonist_name(campaign)
    # "Edrin Vale" is "Edrin" to most narrators and recorders.
    given = [name.split()[0]] if len(name.split()) > 1 else []
    slots[slot] = Record(
        id=None, slot=slot, kind="entity", subject=PROTAGONIST, value=name,
        data={"kind": "character", "aliases": [*given, *PROTAGONIST_ALIASES], "description": campaign.protagonist},
        narrator_only=False, authority="campaign", depth=0, source="campaign",
    )
