"""The typed event pipeline: the only way the story state changes.

An event is a small JSON object — ``{"type", "subject", "object", "value"}``
plus a few optional fields — proposed by the recorder after a turn or by a
person correcting the state. ``validate`` checks one event against the state
of the node it belongs to and returns the records it would write, or the
reason it cannot apply (an unknown entity, an impossible transfer, a
contradiction of Level 1 canon, a name from an abandoned line). It is pure:
plain values in, plain values out. ``apply_events`` runs a batch through it in
order, inside one transaction, and writes every event — applied or rejected —
with its reason and what it replaced.
"""

import json
import re
from dataclasses import dataclass, field

from django.db import connection, transaction
from django.utils import timezone

from .. import lineage
from ..models import Campaign, Node, RecorderRun, StateEvent, StateRecord
from .reading import ENTITY_KINDS, PROTAGONIST, Record, fact_slot, key_for, normalize, state_for_events, thread_slot

# What the recorder may propose after a turn (seed 000 §6 and issue 3).
RECORDER_TYPES = (
    "introduce", "move", "arrive", "leave", "acquire", "lose", "give", "add_fact", "retract_fact",
    "relationship", "open_thread", "resolve_thread", "set_condition", "scene",
)
# A person may also rewrite an entity, set who holds an item outright, retract
# any line and mark a line narrator-only.
CORRECTION_TYPES = RECORDER_TYPES + ("entity", "set_holder", "retract", "mark")

# Long enough for a sentence of state; anything longer is prose, not a fact.
MAX_TEXT = 500


class Rejected(Exception):
    """The event cannot apply; the message is the reason recorded beside it."""


@dataclass
class Outcome:
    payload: dict
    status: str  # "applied" | "rejected"
    reason: str = ""
    writes: list = field(default_factory=list)
    previous: list = field(default_factory=list)


def clean(payload):
    """Return the event as plain, bounded values, whatever the model or the form sent."""
    if not isinstance(payload, dict):
        return {"type": "", "subject": "", "object": "", "value": "", "narrator_only": False, "aliases": [],
                "invalid": repr(payload)[:200]}
    event = {name: str(payload.get(name) or "").strip()[:MAX_TEXT] for name in ("type", "subject", "object", "value")}
    event["type"] = event["type"].lower()
    event["narrator_only"] = payload.get("narrator_only") is True
    aliases = payload.get("aliases") or []
    if isinstance(aliases, str):
        aliases = aliases.split(",")
    event["aliases"] = [str(a).strip()[:120] for a in aliases if str(a).strip()][:20]
    return event


def validate(state, event, source, *, elsewhere=lambda key: False):
    """Return the Outcome of ``event`` against ``state``, updating ``state`` when it applies.

    ``elsewhere(key)`` says whether an entity is known on another line of the
    story, so a name from abandoned history is rejected as such rather than as
    merely unknown.
    """
    allowed = RECORDER_TYPES if source == StateEvent.Source.RECORDER else CORRECTION_TYPES
    try:
        if event["type"] not in allowed:
            raise Rejected(f"unknown event type {event['type']!r}; expected one of {', '.join(allowed)}")
        handler = _HANDLERS[event["type"]]
        writes = handler(_Check(state, source, elsewhere), event)
    except Rejected as error:
        return Outcome(event, StateEvent.Status.REJECTED, str(error))
    previous = []
    for write in writes:
        old = state.get(write["slot"])
        previous.append({"slot": write["slot"], "value": old.value if old else None,
                         "data": old.data if old else None, "authority": old.authority if old else None})
        if write.get("retracted"):
            state.forget(write["slot"])
        else:
            state.slots[write["slot"]] = Record(
                id=None, slot=write["slot"], kind=write["kind"], subject=write.get("subject", ""),
                value=write.get("value", ""), data=write.get("data", {}),
                narrator_only=write.get("narrator_only", False), authority=_authority(source), depth=0, source=source,
            )
    entities = [w for w in writes if w["kind"] == "entity"]
    if entities and event["type"] == "introduce":
        state.introduce(state.slots[entities[0]["slot"]])
    elif entities:
        state.reindex()
    return Outcome(event, StateEvent.Status.APPLIED, "", writes, previous)


def apply_events(node, payloads, *, source, author=None, attempt=0, model=""):
    """Validate ``payloads`` in order against the state after ``node`` and write them in one transaction.

    Every event is stored, applied or rejected with its reason. For the
    recorder, the node's RecorderRun becomes "applied" in the same transaction,
    and a node already recorded is left alone (a retry that raced a success).
    Return the stored StateEvents.
    """
    with transaction.atomic():
        if source == StateEvent.Source.RECORDER and not _mark_recorded(node, attempt, model):
            return []
        # Only what the state reader uses (bench "state": 0.1 ms where the whole row through the ORM took 0.8).
        campaign = Campaign.objects.raw(f"SELECT id, created_at, protagonist FROM {Campaign._meta.db_table}"
                                        " WHERE id = %s", [node.campaign_id])[0]
        path = lineage.path_at(node.campaign_id, node.branch_id, node.depth)
        events = [clean(payload) for payload in payloads]
        state = state_for_events(path, campaign, events)
        outcomes = [validate(state, event, source, elsewhere=_elsewhere(path)) for event in events]
        events = _write_events(node, source, author, attempt, outcomes)
        _write_records(node, _authority(source), [
            (event.pk, w["slot"], w["kind"], w.get("subject", ""), w.get("value", ""), json.dumps(w.get("data", {})),
             w.get("narrator_only", False), w.get("retracted", False))
            for event, outcome in zip(events, outcomes) for w in outcome.writes
        ])
    return events


def _mark_recorded(node, attempt, model):
    """Make the RecorderRun of ``node`` "applied" unless it already is; return whether it was not.

    One upsert in the batch's own transaction, written out because the ORM's
    read then save cost about 1.5 ms of a batch's 10 ms (bench "state"); a
    batch that finds the node already recorded (a retry that raced a success)
    writes nothing.
    """
    table = RecorderRun._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (node_id, status, error, attempts, model, updated_at) VALUES (%s, %s, '', %s, %s, %s)"
            f" ON CONFLICT (node_id) DO UPDATE SET status = excluded.status, error = '', attempts = excluded.attempts,"
            f" model = excluded.model, updated_at = excluded.updated_at WHERE {table}.status != excluded.status",
            [node.pk, RecorderRun.Status.APPLIED, attempt, model,
             connection.ops.adapt_datetimefield_value(timezone.now())])
        return cursor.rowcount == 1


# Rows per INSERT: 12 parameters each stays far below SQLite's 32,766.
RECORDS_PER_INSERT = 500


def _write_events(node, source, author, attempt, outcomes):
    """Insert one StateEvent per outcome, in order, and return them with their ids.

    Written out as one INSERT like ``_write_records``: bulk_create spent about
    4 ms preparing the 20 events of a batch (bench "state"). SQLite numbers
    the rows of one INSERT in the order they are listed, so the ids, sorted,
    are the events' in order.
    """
    created = timezone.now()
    author_id = author.pk if author is not None else None
    rows = [(node.campaign_id, node.pk, source, author_id, o.payload, o.status, o.reason, o.previous, attempt, created)
            for o in outcomes]
    # The model's field order after the id, which is what from_db expects below.
    columns = ("campaign_id", "node_id", "source", "author_id", "payload", "status", "reason", "previous", "attempt",
               "created_at")
    stamp = connection.ops.adapt_datetimefield_value(created)
    events = []
    with connection.cursor() as cursor:
        for start in range(0, len(rows), RECORDS_PER_INSERT):
            chunk = rows[start:start + RECORDS_PER_INSERT]
            values = ", ".join([f"({', '.join(['%s'] * len(columns))})"] * len(chunk))
            cursor.execute(
                f"INSERT INTO {StateEvent._meta.db_table} ({', '.join(columns)}) VALUES {values} RETURNING id",
                [value for row in chunk
                 for value in (*row[:4], json.dumps(row[4]), row[5], row[6], json.dumps(row[7]), attempt, stamp)])
            ids = sorted(row[0] for row in cursor.fetchall())
            events += [StateEvent.from_db(connection.alias, ("id", *columns), (pk, *row))
                       for pk, row in zip(ids, chunk)]
    return events


def _write_records(node, authority, rows):
    """Insert the StateRecords of a batch, anchored at ``node``: (event id, slot, kind, subject, value, data JSON,
    narrator_only, retracted) each.

    Written out as one INSERT because bulk_create spent about 3 ms preparing
    the 25 records of a 20-event batch, a third of the batch's 10 ms budget;
    nothing is read back (records carry no defaults the database sets).
    """
    columns = ("campaign_id", "branch_id", "depth", "authority", "event_id", "slot", "kind", "subject", "value",
               "data", "narrator_only", "retracted")
    anchor = (node.campaign_id, node.branch_id, node.depth, authority)
    with connection.cursor() as cursor:
        for start in range(0, len(rows), RECORDS_PER_INSERT):
            chunk = rows[start:start + RECORDS_PER_INSERT]
            values = ", ".join([f"({', '.join(['%s'] * len(columns))})"] * len(chunk))
            cursor.execute(f"INSERT INTO {StateRecord._meta.db_table} ({', '.join(columns)}) VALUES {values}",
                           [value for row in chunk for value in (*anchor, *row)])


def record_failure(node, error, *, attempt, model=""):
    """Record that the recorder failed for ``node``; a write of its own, after the failed one rolled back."""
    with transaction.atomic():
        RecorderRun.objects.update_or_create(
            node=node, defaults={"status": RecorderRun.Status.FAILED, "error": str(error)[:2000], "attempts": attempt,
                                 "model": model}
        )


def correct(campaign, user, payload):
    """Apply one correction by ``user`` at the campaign's head node; return its StateEvent.

    A correction is anchored at the head like any other state change, so it
    belongs to this line of the story from here on: undoing past it, or
    retrying the reply it was made on, shows the state without it.
    """
    with transaction.atomic():
        head = Campaign.objects.values_list("head_branch_id", "head_depth").get(pk=campaign.pk)
        node = Node.objects.get(campaign_id=campaign.pk, branch_id=head[0], depth=head[1])
        [event] = apply_events(node, [payload], source=StateEvent.Source.CORRECTION, author=user)
    return event


def _authority(source):
    return StateRecord.Authority.CORRECTION if source == StateEvent.Source.CORRECTION else StateRecord.Authority.STATE


def _elsewhere(path):
    def known_elsewhere(key):
        return StateRecord.objects.filter(campaign_id=path.campaign_id, slot=f"entity:{key}").exclude(
            path.clause()).exists()
    return known_elsewhere


class _Check:
    """The state an event is checked against, with the lookups every handler needs."""

    def __init__(self, state, source, elsewhere):
        self.state = state
        self.source = source
        self.elsewhere = elsewhere

    @property
    def by_recorder(self):
        return self.source == StateEvent.Source.RECORDER

    def entity(self, name, role="subject", kinds=None):
        if not name:
            raise Rejected(f"the event names no {role}")
        key = self.state.resolve(name)
        if key is None:
            if self.elsewhere(key_for(name)):
                raise Rejected(f"{name!r} exists only on another line of the story (abandoned history), "
                               "not on this turn's line")
            raise Rejected(f"unknown entity {name!r}; introduce it first")
        kind = self.state.entity(key).data.get("kind")
        if kinds and kind not in kinds:
            raise Rejected(f"{name!r} is a {kind}, not a {' or '.join(kinds)}")
        return key

    def text(self, event, what):
        if not event["value"]:
            raise Rejected(f"the event gives no {what}")
        return event["value"]

    def guard(self, slot):
        """Refuse a recorder change to a slot a person set by correction (it outranks accepted state)."""
        current = self.state.get(slot)
        if self.by_recorder and current is not None and current.authority == StateRecord.Authority.CORRECTION:
            raise Rejected(f"{current.value!r} was set by a manual correction ({current.provenance}); "
                           "only another correction changes it")

    def against_canon(self, text):
        """Raise when ``text`` contradicts an invariant canon rule; return initial rules it contradicts."""
        superseded = []
        for rule in self.state.canon:
            if _contradicts(text, rule.text):
                if rule.scope == "invariant":
                    raise Rejected(f"contradicts campaign canon (Level 1): {rule.text!r}")
                superseded.append(rule)
        return superseded


def _introduce(check, event):
    name = event["subject"]
    if not name:
        raise Rejected("the event names no entity to introduce")
    kind = (event["object"] or "character").lower()
    if kind not in ENTITY_KINDS:
        raise Rejected(f"unknown kind {kind!r}; an entity is a {', '.join(ENTITY_KINDS)}")
    existing = check.state.resolve(name)
    if existing is not None:
        raise Rejected(f"{name!r} is already known as {check.state.name_of(existing)!r}")
    key = key_for(name)
    if check.state.entity(key) is not None:
        raise Rejected(f"{name!r} is too close to the existing {check.state.name_of(key)!r}; use that name")
    return [_entity_write(key, name, kind, event["aliases"], event["value"], event["narrator_only"])]


def _entity(check, event):
    """A correction: create or rewrite an entity, keeping what the form leaves blank."""
    key = check.state.resolve(event["subject"]) if event["subject"] else None
    if key is None:
        return _introduce(check, event)
    current = check.state.entity(key)
    kind = (event["object"] or current.data.get("kind", "character")).lower()
    if kind not in ENTITY_KINDS:
        raise Rejected(f"unknown kind {kind!r}; an entity is a {', '.join(ENTITY_KINDS)}")
    aliases = event["aliases"] or current.data.get("aliases", [])
    return [_entity_write(key, current.value, kind, aliases, event["value"] or current.data.get("description", ""),
                          event["narrator_only"])]


def _entity_write(key, name, kind, aliases, description, narrator_only):
    return {"slot": f"entity:{key}", "kind": "entity", "subject": key, "value": name,
            "data": {"kind": kind, "aliases": list(aliases), "description": description},
            "narrator_only": narrator_only}


def _place(check, name):
    return check.entity(name, "place", kinds=("place",))


def _move(check, event):
    who = check.entity(event["subject"])
    where = _place(check, event["object"])
    if check.state.location_of(who) == where:
        raise Rejected(f"{check.state.name_of(who)} is already at {check.state.name_of(where)}")
    return [_location(who, where)]


def _location(who, where):
    return {"slot": f"location:{who}", "kind": "location", "subject": who, "value": where}


def _arrive(check, event):
    who = check.entity(event["subject"])
    if event["object"]:
        where = _place(check, event["object"])
    else:
        scene = check.state.scene()
        where = scene.data.get("location", "") if scene else ""
        if not where:
            raise Rejected("arrive names no place and the scene has no location")
    return [_location(who, where)]


def _leave(check, event):
    who = check.entity(event["subject"])
    where = _place(check, event["object"]) if event["object"] else ""
    if not where and not check.state.location_of(who):
        raise Rejected(f"{check.state.name_of(who)} is not anywhere to leave")
    return [_location(who, where)]


def _item(check, event):
    return check.entity(event["object"], "item", kinds=("item",))


def _holding(who, item):
    return {"slot": f"holder:{item}", "kind": "holder", "subject": item, "value": who}


def _acquire(check, event):
    who = check.entity(event["subject"])
    item = _item(check, event)
    holder = check.state.holder_of(item)
    if holder == who:
        raise Rejected(f"{check.state.name_of(who)} already has {check.state.name_of(item)}")
    if holder:
        raise Rejected(f"impossible transfer: {check.state.name_of(item)} is held by {check.state.name_of(holder)}; "
                       "a transfer between people is a give")
    return [_holding(who, item)]


def _lose(check, event):
    who = check.entity(event["subject"])
    item = _item(check, event)
    if check.state.holder_of(item) != who:
        raise Rejected(f"impossible transfer: {check.state.name_of(who)} does not have {check.state.name_of(item)}")
    return [_holding("", item)]


def _give(check, event):
    giver = check.entity(event["subject"])
    item = _item(check, event)
    receiver = check.entity(event["value"], "receiver")
    if check.state.holder_of(item) != giver:
        raise Rejected(f"impossible transfer: {check.state.name_of(giver)} does not have {check.state.name_of(item)}")
    if receiver == giver:
        raise Rejected("a give needs a receiver other than the giver")
    return [_holding(receiver, item)]


def _set_holder(check, event):
    item = _item(check, event)
    who = check.entity(event["subject"], "holder") if event["subject"] else ""
    return [_holding(who, item)]


def _add_fact(check, event):
    text = check.text(event, "fact")
    subject = check.entity(event["subject"]) if event["subject"] else ""
    if check.state.find_fact(text):
        raise Rejected(f"already recorded: {text!r}")
    writes = []
    if event["object"]:
        writes += _end_fact(check, event["object"], replacing=text)
    for rule in check.against_canon(text):
        writes.append(_supersede(rule, text))
    writes.append({"slot": fact_slot(text), "kind": "fact", "subject": subject, "value": text,
                   "narrator_only": event["narrator_only"]})
    return writes


def _retract_fact(check, event):
    return _end_fact(check, check.text(event, "fact to retract"))


def _end_fact(check, text, replacing=None):
    """Return the writes that end ``text``: a live fact, or an initial-state canon rule."""
    for rule in check.state.canon:
        if normalize(rule.text) == normalize(text):
            if rule.scope == "invariant":
                raise Rejected(f"{rule.text!r} is campaign canon (Level 1); edit the canon rules to change it")
            if check.state.superseded(rule.id):
                raise Rejected(f"the initial canon {rule.text!r} no longer holds on this line already")
            return [_supersede(rule, replacing or "")]
    fact = check.state.find_fact(text)
    if fact is None:
        raise Rejected(f"no such fact in the current state: {text!r}")
    check.guard(fact.slot)
    return [{"slot": fact.slot, "kind": "fact", "subject": fact.subject, "value": fact.value, "retracted": True}]


def _supersede(rule, text):
    return {"slot": f"canon:{rule.id}", "kind": "superseded_canon", "subject": str(rule.id), "value": text,
            "data": {"canon": rule.text}}


def _relationship(check, event):
    one = check.entity(event["subject"])
    other = check.entity(event["object"], "other party")
    text = check.text(event, "relationship")
    return [{"slot": f"relationship:{one}:{other}", "kind": "relationship", "subject": one, "value": text,
             "data": {"object": other}, "narrator_only": event["narrator_only"]}]


def _open_thread(check, event):
    text = check.text(event, "thread")
    current = check.state.find_thread(text)
    if current and current.data.get("status") == "open":
        raise Rejected(f"the thread {text!r} is already open")
    return [{"slot": thread_slot(text), "kind": "thread", "value": text, "data": {"status": "open"},
             "narrator_only": event["narrator_only"]}]


def _resolve_thread(check, event):
    text = check.text(event, "thread")
    current = check.state.find_thread(text)
    if current is None or current.data.get("status") != "open":
        raise Rejected(f"no open thread {text!r} to resolve")
    return [{"slot": current.slot, "kind": "thread", "value": current.value,
             "data": {"status": "resolved", "outcome": event["object"]}, "narrator_only": current.narrator_only}]


def _set_condition(check, event):
    who = check.entity(event["subject"])
    text = check.text(event, "condition")
    return [{"slot": f"condition:{who}", "kind": "condition", "subject": who, "value": text,
             "narrator_only": event["narrator_only"]}]


def _scene(check, event):
    summary = check.text(event, "scene summary")
    where = _place(check, event["object"]) if event["object"] else ""
    writes = [{"slot": "scene", "kind": "scene", "value": summary, "data": {"location": where}}]
    if where and check.state.location_of(PROTAGONIST) != where:
        writes.append(_location(PROTAGONIST, where))
    return writes


def _retract(check, event):
    """A correction: end whatever line ``object`` (a slot) holds."""
    current = check.state.get(event["object"])
    if current is None or current.source == "campaign":
        raise Rejected("that line is not in the current state (or comes from the campaign settings)")
    return [{"slot": current.slot, "kind": current.kind, "subject": current.subject, "value": current.value,
             "retracted": True}]


def _mark(check, event):
    """A correction: make a line narrator-only, or known to the player again."""
    current = check.state.get(event["object"])
    if current is None or current.source == "campaign":
        raise Rejected("that line is not in the current state (or comes from the campaign settings)")
    return [{"slot": current.slot, "kind": current.kind, "subject": current.subject, "value": current.value,
             "data": current.data, "narrator_only": event["narrator_only"]}]


_HANDLERS = {
    "introduce": _introduce,
    "entity": _entity,
    "move": _move,
    "arrive": _arrive,
    "leave": _leave,
    "acquire": _acquire,
    "lose": _lose,
    "give": _give,
    "set_holder": _set_holder,
    "add_fact": _add_fact,
    "retract_fact": _retract_fact,
    "relationship": _relationship,
    "open_thread": _open_thread,
    "resolve_thread": _resolve_thread,
    "set_condition": _set_condition,
    "scene": _scene,
    "retract": _retract,
    "mark": _mark,
}

# Negation words and the positive form of contracted negatives: "cannot" and
# "can" differ only in polarity, which is what a contradiction of canon is
# (as do the words of ``_OPPOSITES`` below).
_NEGATIONS = {"not", "never", "no"}
_CONTRACTIONS = {
    "cannot": "can", "can't": "can", "won't": "will", "isn't": "is", "aren't": "are", "wasn't": "was",
    "weren't": "were", "doesn't": "does", "don't": "do", "didn't": "did", "hasn't": "has", "haven't": "have",
    "hadn't": "had", "couldn't": "could", "wouldn't": "would", "shouldn't": "should", "mustn't": "must",
}
_AUXILIARIES = {"does", "do", "did"}
# Words that deny their partner: "dead" reads as "not alive", so "Mara is dead"
# contradicts "Mara is alive" and agrees with "Mara is not alive". Only pairs
# with no third state worth telling apart; "shut" and "closed" both deny "open".
_OPPOSITES = {
    "dead": "alive", "closed": "open", "shut": "open", "unlocked": "locked", "asleep": "awake",
    "absent": "present", "false": "true", "unarmed": "armed", "mortal": "immortal", "unbroken": "broken",
}


def _polarity(text):
    """Return ``text`` without its negations and opposites (lightly stemmed) and whether it was negated."""
    words = re.findall(r"[a-z0-9']+", normalize(text))
    negated = False
    kept = []
    previous = ""
    for word in words:
        if word in _CONTRACTIONS:
            negated = not negated
            word = _CONTRACTIONS[word]
        elif word in _OPPOSITES:
            negated = not negated
            word = _OPPOSITES[word]
        elif word in _NEGATIONS:
            negated = not negated
            previous = word
            continue
        if (word == "longer" and previous == "no") or word in _AUXILIARIES:
            previous = word
            continue
        previous = word
        kept.append(word[:-1] if len(word) > 3 and word.endswith("s") else word)
    return " ".join(kept), negated


def _contradicts(text, rule):
    """Return whether ``text`` says the opposite of ``rule``: the same claim with the other polarity."""
    claim, negated = _polarity(text)
    canon, canon_negated = _polarity(rule)
    return bool(claim) and claim == canon and negated != canon_negated
