"""The typed event pipeline: the only way the story state changes.

An event is a small JSON object — ``{"type", "subject", "object", "value"}``
plus ``narrator_only``, ``aliases`` and a per-type ``data`` object (see
``registry``) — proposed by the recorder after a turn, written in a script,
read from a world file or made by a person correcting the state.
``validate`` checks one event against the state of the node it belongs to
and returns the records it would write, or the reason it cannot apply (an
unknown entity, a move with no open route, an item out of reach, a
contradiction of Level 1 canon, a name from an abandoned line). It is pure:
plain values in, plain values out. The types themselves are the domains'
(the story's own in ``world.story``, the world's in ``world.world``, story
time and rules in ``time.rulebook``, minds in ``minds.minds``); each
registers them, and what it adds to every batch, in the one table of
``registry`` this module dispatches on, so it imports none of them.
``apply_events`` runs a batch through it in order, inside one transaction,
and writes every event — applied or rejected — with its reason and what it
replaced.
"""

import json

from django.db import connection, transaction
from django.utils import timezone

from .. import lineage, locks, staging
from ..models import Campaign, Node, RecorderRun, StateEvent, StateRecord
from .reading import Record, state_at, state_for_events
from .registry import (HOOKS, MAX_NAME, MAX_TEXT, PROPOSERS, TYPES, Check, Outcome, Rejected, clean, precheck,
                       types_for)

__all__ = ["MAX_NAME", "MAX_TEXT", "Outcome", "Rejected", "apply_events", "clean", "correct", "record_failure",
           "store", "validate", "validate_batch"]


def validate(state, event, source, *, elsewhere=lambda key: False, env=None):
    """Return the Outcome of ``event`` (cleaned) against ``state``, updating ``state`` when it applies.

    ``elsewhere(key)`` says whether an entity is known on another line of the
    story, so a name from abandoned history is rejected as such rather than as
    merely unknown. ``env`` is where and when the batch is (``time.rulebook.Env``:
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
    things changed see it (the world's observer, ``world.observation``): what
    they now know and whom they have now met is one more event, ``observe``,
    written by the application and never proposable.
    """
    outcomes = [validate(state, event, source, elsewhere=elsewhere, env=env) for event in events]
    for observer in HOOKS.observers:
        seen = observer(state, outcomes)
        if seen is None:
            continue
        event = clean(seen)
        observed = _applied(state, event, source, TYPES[event["type"]].handler(Check(state, source, elsewhere, env),
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
    transaction (``HOOKS.after_batch``, story time's: a round lengthened to
    the journeys it made, then the world's triggers checked), as events of
    the engine. Each type's stateless check (``registry.precheck``: a dice
    check's bands, a calendar, triggers) runs before the transaction opens.
    Return the stored StateEvents.
    """
    cleaned = [precheck(clean(payload)) for payload in payloads]
    with transaction.atomic():
        locks.story(node.campaign_id)  # PostgreSQL: events of one campaign apply one batch at a time, as on SQLite
        if source in PROPOSERS and mark and not _mark_recorded(node, attempt, model):
            return []
        # Only what the state reader uses (bench "state": 0.1 ms where the whole row through the ORM took 0.8).
        fields = ", ".join(("id", "created_at", "protagonist", *HOOKS.campaign_fields))
        campaign = Campaign.objects.raw(f"SELECT {fields} FROM {Campaign._meta.db_table} WHERE id = %s",
                                        [node.campaign_id])[0]
        path = lineage.path_at(node.campaign_id, node.branch_id, node.depth)
        events = cleaned
        # A world file names thousands of things at once: read the (new) campaign's whole state instead.
        whole = source == StateEvent.Source.WORLD if whole is None else whole
        state = state_at(path, campaign) if whole else state_for_events(path, campaign, events)
        for slots in HOOKS.prefetch:  # what characters' minds records check, in one read
            state.prefetch(slots(state, events))
        env = HOOKS.environment(node, campaign, path) if HOOKS.environment else None
        outcomes = validate_batch(state, events, source, elsewhere=_elsewhere(path), env=env)
        for after in HOOKS.after_batch:
            outcomes += after(state, outcomes, source, env, elsewhere=_elsewhere(path))
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


def correct_together(campaign, user, payloads):
    """Apply ``payloads`` by ``user`` at the head in one batch, all or none; return the reasons of those refused.

    What a form makes of one thing (a character with its place, items and
    routine) is kept whole: when any part is refused, nothing is written, and
    each refused part's reason comes back, numbered as the parts were given.
    """
    with transaction.atomic():
        head = Campaign.objects.values_list("head_branch_id", "head_depth").get(pk=campaign.pk)
        node = Node.objects.get(campaign_id=campaign.pk, branch_id=head[0], depth=head[1])
        events = apply_events(node, payloads, source=StateEvent.Source.CORRECTION, author=user)[:len(payloads)]
        refused = [(payload, event.reason) for payload, event in zip(payloads, events)
                   if event.status == StateEvent.Status.REJECTED]
        if refused:
            transaction.set_rollback(True)
    return refused


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
