"""The typed event pipeline: the only way the story state changes.

An event is a small JSON object — ``{"type", "subject", "object", "value"}``
plus ``narrator_only``, ``aliases`` and a per-type ``data`` object (see
``registry``) — proposed by the recorder after a turn, written in a script,
read from a world file or made by a person correcting the state.
``validate`` checks one event against the state of the node it belongs to
and returns the records it would write, or the reason it cannot apply (an
unknown entity, a move with no open route, an item out of reach, a
contradiction of Level 1 canon, a name from an abandoned line). It is pure:
plain values in, plain values out. The story's own types are here; the
world's (moves, exits, items, relationships, knowledge) in ``world``; both
register in the one table ``validate`` dispatches on. ``apply_events`` runs a
batch through it in order, inside one transaction, and writes every event —
applied or rejected — with its reason and what it replaced.
"""

import json
import re

from django.db import connection, transaction
from django.utils import timezone

from .. import lineage, staging
from ..models import Campaign, Node, RecorderRun, StateEvent, StateRecord
from . import minds, world  # noqa: F401 — each registers its event types in the one table
from . import rulebook  # registers story time and world rules in the one table, and checks triggers after a batch
from .reading import (ENTITY_KINDS, PROTAGONIST, Record, fact_slot, key_for, normalize, state_at, state_for_events,
                      thread_slot)
from .registry import (STORY, EVERYONE, MAX_NAME, MAX_TEXT, PEOPLE, PROPOSERS, TYPES, Check, Outcome, Rejected, clean,
                       precheck, register, types_for)

__all__ = ["CORRECTION_TYPES", "MAX_NAME", "MAX_TEXT", "RECORDER_TYPES", "Outcome", "Rejected", "apply_events",
           "clean", "correct", "record_failure", "store", "validate", "validate_batch"]


def validate(state, event, source, *, elsewhere=lambda key: False, env=None):
    """Return the Outcome of ``event`` (cleaned) against ``state``, updating ``state`` when it applies.

    ``elsewhere(key)`` says whether an entity is known on another line of the
    story, so a name from abandoned history is rejected as such rather than as
    merely unknown. ``env`` is where and when the batch is (``rulebook.Env``:
    the campaign's clock settings, the node, the wall clock), which story time
    and world rules read; without one they use the defaults.
    """
    try:
        if event.get("invalid"):
            raise Rejected(f"an event must be a JSON object, not {event['invalid']}")
        kind = TYPES.get(event["type"])
        if kind is None or source not in kind.sources:
            allowed = types_for(source)
            raise Rejected(f"unknown event type {event['type']!r}; expected one of {', '.join(allowed)}")
        if event.get("problems"):
            raise Rejected("; ".join(event["problems"]))
        writes = kind.handler(Check(state, source, elsewhere, env), event)
    except Rejected as error:
        return Outcome(event, StateEvent.Status.REJECTED, str(error))
    return _applied(state, event, source, writes)


def _applied(state, event, source, writes):
    previous = []
    authority = _authority(source, event)
    for write in writes:
        old = state.get(write["slot"])
        previous.append({"slot": write["slot"], "value": old.value if old else None,
                         "data": old.data if old else None, "authority": old.authority if old else None})
        if write.get("retracted"):
            state.forget(write["slot"])
        else:
            state.put(Record(
                id=None, slot=write["slot"], kind=write["kind"], subject=write.get("subject", ""),
                value=write.get("value", ""), data=write.get("data", {}),
                narrator_only=write.get("narrator_only", False), authority=authority, depth=0, source=source,
            ))
    entities = [w for w in writes if w["kind"] == "entity"]
    if entities and not any(w.get("retracted") for w in entities) and all(
            previous[i]["value"] is None for i, w in enumerate(writes) if w["kind"] == "entity"):
        for write in entities:
            state.introduce(state.slots[write["slot"]])
    elif entities:
        state.reindex()
    return Outcome(event, StateEvent.Status.APPLIED, "", writes, previous)


def validate_batch(state, events, source, *, elsewhere=lambda key: False, env=None):
    """Return the Outcomes of ``events`` (cleaned) validated in order, then what the characters saw.

    Each event sees the ones before it; a rejected one changes nothing and
    the others still apply. After the batch, whoever moved and everyone where
    things changed see it (``world.observation``): what they now know and
    whom they have now met is one more event, ``observe``, written by the
    application and never proposable.
    """
    outcomes = [validate(state, event, source, elsewhere=elsewhere, env=env) for event in events]
    seen = world.observation(state, outcomes)
    if seen is not None:
        event = clean({"type": "observe", "data": seen})
        observed = _applied(state, event, source, TYPES["observe"].handler(Check(state, source, elsewhere, env),
                                                                           event))
        if observed.writes:
            outcomes.append(observed)
    return outcomes


def apply_events(node, payloads, *, source, author=None, attempt=0, model="", mark=True, whole=None):
    """Validate ``payloads`` in order against the state after ``node`` and write them in one transaction.

    Every event is stored, applied or rejected with its reason. For the
    recorder, the node's RecorderRun becomes "applied" in the same transaction,
    and a node already recorded is left alone (a retry that raced a success);
    with ``mark`` False (the recorder's second call, whose run is its own) the
    RecorderRun is not touched. ``whole`` reads the whole state first (by
    default for a world file's batch, which names thousands of things; a game
    master's round, with the world's rights but a turn's few events, passes
    False). After the batch the application keeps its own rules in the same
    transaction (``rulebook.after_batch``: a round lengthened to the journeys
    it made, then the world's triggers checked), as events of the engine.
    Each type's stateless check (``registry.precheck``: a dice check's bands, a calendar, triggers) runs
    before the transaction opens. Return the stored StateEvents.
    """
    cleaned = [precheck(clean(payload)) for payload in payloads]
    with transaction.atomic():
        if source in PROPOSERS and mark and not _mark_recorded(node, attempt, model):
            return []
        # Only what the state reader uses (bench "state": 0.1 ms where the whole row through the ORM took 0.8).
        campaign = Campaign.objects.raw(f"SELECT id, created_at, protagonist, {', '.join(rulebook.CAMPAIGN_FIELDS)}"
                                        f" FROM {Campaign._meta.db_table} WHERE id = %s", [node.campaign_id])[0]
        path = lineage.path_at(node.campaign_id, node.branch_id, node.depth)
        events = cleaned
        # A world file names thousands of things at once: read the (new) campaign's whole state instead.
        whole = source == StateEvent.Source.WORLD if whole is None else whole
        state = state_at(path, campaign) if whole else state_for_events(path, campaign, events)
        state.prefetch(minds.slots_for(state, events))  # what characters' minds records check, in one read
        env = rulebook.env_for(node, campaign, path)
        outcomes = validate_batch(state, events, source, elsewhere=_elsewhere(path), env=env)
        outcomes += rulebook.after_batch(state, outcomes, source, env, elsewhere=_elsewhere(path))
        events = _write_events(node, source, author, attempt, outcomes)
        _write_records(node, [
            (_authority(outcome.source or source, outcome.payload), event.pk, w["slot"], w["kind"], w.get("subject", ""),
             w.get("value", ""), json.dumps(w.get("data", {})), w.get("narrator_only", False),
             w.get("retracted", False))
            for event, outcome in zip(events, outcomes) for w in outcome.writes
        ])
    return events


def store(node, outcomes, *, source, writes=None, progress=None):
    """Write already validated ``outcomes`` at ``node`` in short transactions (``staging.in_batches``).

    For a staged import only: its world was validated whole before anything
    was written (``worldfile.check``), and nobody sees the campaign until it
    is published, so no batch needs to read or check the state again. The
    batches count rows, not events: one event (the observation after a world,
    a world's triggers) may write thousands of records, which then span
    several transactions.
    """
    rows = []
    for number, outcome in enumerate(outcomes):
        rows.append((number, None))
        rows += [(number, w) for w in outcome.writes]
    ids = {}

    def batch(chunk):
        starting = [number for number, w in chunk if w is None]
        events = _write_events(node, source, None, 0, [outcomes[number] for number in starting])
        ids.update({number: event.pk for number, event in zip(starting, events)})
        _write_records(node, [
            (_authority(outcomes[number].source or source, outcomes[number].payload), ids[number], w["slot"],
             w["kind"], w.get("subject", ""), w.get("value", ""), json.dumps(w.get("data", {})),
             w.get("narrator_only", False), w.get("retracted", False))
            for number, w in chunk if w is not None])
    staging.in_batches(rows, batch, writes=writes, progress=progress)


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
    rows = [(node.campaign_id, node.pk, o.source or source, author_id if not o.source else None, o.payload, o.status,
             o.reason, o.previous, attempt, created) for o in outcomes]
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


def _write_records(node, rows):
    """Insert the StateRecords of a batch, anchored at ``node``: (authority, event id, slot, kind, subject, value,
    data JSON, narrator_only, retracted) each.

    Written out as one INSERT because bulk_create spent about 3 ms preparing
    the 25 records of a 20-event batch, a third of the batch's 10 ms budget;
    nothing is read back (records carry no defaults the database sets).
    """
    columns = ("campaign_id", "branch_id", "depth", "authority", "event_id", "slot", "kind", "subject", "value",
               "data", "narrator_only", "retracted")
    anchor = (node.campaign_id, node.branch_id, node.depth)
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
        # What the people there now see is written after it, as an observation of its own.
        event, *_ = apply_events(node, [payload], source=StateEvent.Source.CORRECTION, author=user)
    return event


def _authority(source, event=None):
    """A person's correction outranks accepted state; what the application observes never does."""
    if source == StateEvent.Source.CORRECTION and not (event and event.get("type") == "observe"):
        return StateRecord.Authority.CORRECTION
    return StateRecord.Authority.STATE


def _elsewhere(path):
    def known_elsewhere(key):
        return StateRecord.objects.filter(campaign_id=path.campaign_id, slot=f"entity:{key}").exclude(
            path.clause()).exists()
    return known_elsewhere


@register(STORY, "introduce", sources=EVERYONE, fields=world.ITEM_FIELDS, aliases=True,
          help="name / kind (character, place, item or faction) / a one-line description: someone or something "
               "new; an item says in data.holder who or what holds it (empty: the scene's place)")
def _introduce(check, event):
    name = event["subject"]
    if not name:
        raise Rejected("the event names no entity to introduce")
    kind = (event["object"] or "character").lower()
    if kind not in ENTITY_KINDS:
        raise Rejected(f"unknown kind {kind!r}; an entity is a {', '.join(ENTITY_KINDS)}")
    data = event["data"]
    if kind != "item" and set(data) - {"id"}:
        raise Rejected(f"only an item's introduction carries {', '.join(sorted(set(data) - {'id'}))}; introduce "
                       f"the {kind} without it")
    key = _new_key(check, name, kind, data.get("id", ""))
    writes = [_entity_write(key, name, kind, event["aliases"], event["value"], event["narrator_only"])]
    if kind == "item":
        writes += world.introduce_item(check, key, name, data)
    return writes


def _new_key(check, name, kind, wanted):
    """Return the key of a new entity called ``name``: its own, or (a world file's or a person's) ``wanted`` one.

    Only a person or a world file may give an item the name of another item
    (same-named stacks in different places); the recorder naming a known
    thing again is a mistake, refused with the name it should use.
    """
    state = check.state
    if wanted:
        key = key_for(wanted)
        if state.entity(key) is not None:
            raise Rejected(f"the key {key!r} is taken by {state.name_of(key)!r}")
        return key
    existing = state.resolve(name)
    if existing is not None and not (kind == "item" and not check.by_recorder
                                     and world.kind_of(state, existing) == "item"):
        raise Rejected(f"{name!r} is already known as {state.name_of(existing)!r}")
    key = key_for(name)
    if existing is None and state.entity(key) is not None:
        raise Rejected(f"{name!r} is too close to the existing {state.name_of(key)!r}; use that name")
    number = 2
    base = key
    while state.entity(key) is not None:
        key, number = f"{base}-{number}", number + 1
    return key


@register(STORY, "entity", sources=PEOPLE, aliases=True,
          help="name / kind / description: create or rewrite an entity, keeping what is left blank")
def _entity(check, event):
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


@register(STORY, "arrive", sources=EVERYONE, help="who / place (or \"\" for the scene's place) / \"\": someone comes")
def _arrive(check, event):
    who = check.entity(event["subject"])
    if event["object"]:
        where = _place(check, event["object"])
    else:
        scene = check.state.scene()
        where = scene.data.get("location", "") if scene else ""
        if not where:
            raise Rejected("arrive names no place and the scene has no location")
    return [world.relocate(check, who, where)]


@register(STORY, "leave", sources=EVERYONE, help="who / place they go to (or \"\") / \"\": someone goes")
def _leave(check, event):
    who = check.entity(event["subject"])
    where = _place(check, event["object"]) if event["object"] else ""
    if not where and not check.state.location_of(who):
        raise Rejected(f"{check.state.name_of(who)} is not anywhere to leave")
    return [world.relocate(check, who, where)]


@register(STORY, "add_fact", sources=EVERYONE,
          help="who it is about (or \"\") / the fact it replaces (or \"\") / the fact, one sentence")
def _add_fact(check, event):
    text = check.text(event, "fact")
    subject = check.entity(event["subject"]) if event["subject"] else ""
    if check.state.find_fact(text):
        raise Rejected(f"already recorded: {text!r}")
    writes = []
    if event["object"]:
        writes += _end_fact(check, event["object"], replacing=text)
    for rule in _against_canon(check, text):
        writes.append(_supersede(rule, text))
    writes.append({"slot": fact_slot(text), "kind": "fact", "subject": subject, "value": text,
                   "narrator_only": event["narrator_only"]})
    return writes


def _against_canon(check, text):
    """Raise when ``text`` contradicts an invariant canon rule; return initial rules it contradicts."""
    superseded = []
    for rule in check.state.canon:
        if _contradicts(text, rule.text):
            if rule.scope == "invariant":
                raise Rejected(f"contradicts campaign canon (Level 1): {rule.text!r}")
            superseded.append(rule)
    return superseded


@register(STORY, "retract_fact", sources=EVERYONE, help="\"\" / \"\" / the exact fact that is no longer true")
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


@register(STORY, "open_thread", sources=EVERYONE, help="\"\" / \"\" / the unresolved question or goal")
def _open_thread(check, event):
    text = check.text(event, "thread")
    current = check.state.find_thread(text)
    if current and current.data.get("status") == "open":
        raise Rejected(f"the thread {text!r} is already open")
    return [{"slot": thread_slot(text), "kind": "thread", "value": text, "data": {"status": "open"},
             "narrator_only": event["narrator_only"]}]


@register(STORY, "resolve_thread", sources=EVERYONE, help="\"\" / outcome / the exact thread")
def _resolve_thread(check, event):
    text = check.text(event, "thread")
    current = check.state.find_thread(text)
    if current is None or current.data.get("status") != "open":
        raise Rejected(f"no open thread {text!r} to resolve")
    return [{"slot": current.slot, "kind": "thread", "value": current.value,
             "data": {"status": "resolved", "outcome": event["object"]}, "narrator_only": current.narrator_only}]


@register(STORY, "scene", sources=EVERYONE, help="\"\" / place (or \"\") / one line saying where the scene stands now "
                                          "(the protagonist goes to the place along open exits)")
def _scene(check, event):
    summary = check.text(event, "scene summary")
    where = _place(check, event["object"]) if event["object"] else ""
    writes = [{"slot": "scene", "kind": "scene", "value": summary, "data": {"location": where}}]
    if where and check.state.location_of(PROTAGONIST) != where:
        writes.append(world.relocate(check, PROTAGONIST, where))
    return writes


@register(STORY, "retract", sources=PEOPLE, help="\"\" / slot / \"\": end whatever line a slot holds")
def _retract(check, event):
    current = check.state.get(event["object"])
    if current is None or current.source == "campaign":
        raise Rejected("that line is not in the current state (or comes from the campaign settings)")
    return [{"slot": current.slot, "kind": current.kind, "subject": current.subject, "value": current.value,
             "retracted": True}]


@register(STORY, "mark", sources=PEOPLE,
          help="\"\" / slot / \"\": make a line narrator-only, or known to the player again")
def _mark(check, event):
    current = check.state.get(event["object"])
    if current is None or current.source == "campaign":
        raise Rejected("that line is not in the current state (or comes from the campaign settings)")
    return [{"slot": current.slot, "kind": current.kind, "subject": current.subject, "value": current.value,
             "data": current.data, "narrator_only": event["narrator_only"]}]


# What the recorder (and a script) may propose after a turn, and what a person may also do by correction.
# (The state call's; events, perceptions and beliefs have a call of their own: decision D11.)
RECORDER_TYPES = tuple(name for name in types_for("recorder") if TYPES[name].call == "")
CORRECTION_TYPES = types_for("correction")


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
