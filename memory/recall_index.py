"""The recall index: events, perceptions and beliefs as each owner searches them (seed 002 搜索索引与向量).

Derived, rebuildable data (ARCHITECTURE rule 3): ``index`` stores plain
record values (``Entry``, made from the StateRecords the typed event pipeline
writes by ``entries_from_records``), one row per record, anchored where the
record is; ``recall`` runs one owner's searches at a line of the story — words
(FTS5 within the owner's scope token), cues and, when vectors exist, cosines
from the owner's own matrix — and hands them to the pure ``memory.recall.rank``.

Partition: every read names the owner. The FTS5 search carries the owner's
scope token, the eligibility read filters on ``owner``, and each vector
matrix is built from one owner's rows only, cached in process under
``(campaign, owner, model)``. Lineage: rows are read through
``Path.clause`` and, per slot, the deepest row on the line wins (a
correction is a deeper row; a retraction a deeper row that ends the slot).

Vectors: the campaign's first batch pins its model and dimensions
(``RecallPin``); a batch from any other model is refused, with the reason,
until ``reset_vectors``. A row whose text changes loses its vector.
"""

import json
import threading
from dataclasses import dataclass

import numpy as np
from django.db import connection, transaction
from django.db.models import Count, Max
from django.utils import timezone

from storyteller import vendors

from .models import RecallItem, RecallPin, RecallSync, RecallUse, RecallVector
from .ranking import semantic_scores
from .recall import (
    ASSOCIATE,
    DIVERSITY,
    KINDS,
    OVER_RETRIEVE,
    RECALL,
    Item,
    Pool,
    bigrams,
    rank,
    semantic_floor,
    terms,
)

# The situation's words sent to FTS5, first seen first: a long scene adds only cost.
MAX_QUERY_TERMS = 32
# Rows fetched per query when reading texts, under SQLite's parameter limit.
BATCH = 900
# ▶ A belief carries no importance in the seed; it takes its evidence's highest,
# or this when it has none (a belief the recorder wrote is worth more than a trifle).
BELIEF_IMPORTANCE = 3
MAX_TEXT = 500


class InvalidEntry(ValueError):
    """An entry the index cannot hold; the message says what to change."""


@dataclass(frozen=True)
class Entry:
    """The plain values of one event, perception or belief record, as the index stores them."""

    slot: str
    kind: str  # event | perception | belief
    owner: str  # character key; "" for an event
    text: str
    anchor: tuple  # (branch id, depth) of the record
    gist: str = ""
    importance: int = 1
    tags: tuple = ()
    location: str = ""
    items: tuple = ()
    people: tuple = ()
    at_ms: int | None = None
    keywords: str = ""  # names to search by: the place's, the items', the people's
    supports: tuple = ()
    contradicts: tuple = ()
    retracted: bool = False


def scope_token(campaign_id, owner):
    """Return the one FTS5 token naming ``(campaign, owner)``: digits after letters, so no stemmer touches it."""
    digits = "".join(f"{byte:03d}" for byte in owner.encode()) or "000"
    return f"c{int(campaign_id)}o{digits}"


def validate(entry):
    """Return ``entry`` if the index can hold it, else raise InvalidEntry naming what to change."""
    if entry.kind not in KINDS:
        raise InvalidEntry(f"{entry.slot}: kind {entry.kind!r} is not one of {', '.join(KINDS)}")
    if (entry.kind == "event") != (entry.owner == ""):
        raise InvalidEntry(f"{entry.slot}: an event has no owner and a {entry.kind} needs one "
                           f"(got owner {entry.owner!r})")
    if not entry.retracted and not entry.text.strip():
        raise InvalidEntry(f"{entry.slot}: a {entry.kind} needs its text")
    if not 1 <= int(entry.importance) <= 5:
        raise InvalidEntry(f"{entry.slot}: importance {entry.importance} is outside 1-5")
    if len(entry.anchor) != 2:
        raise InvalidEntry(f"{entry.slot}: the anchor must be (branch id, depth)")
    return entry


def index(campaign_id, entries):
    """Store ``entries`` (one row per record, found again by slot and anchor); return (created, updated) counts.

    Indexing the same record again updates its row and counts a revision when
    anything changed; a changed text or gist drops the row's vector. All or
    nothing: an invalid entry stores none.
    """
    entries = [validate(entry) for entry in entries]
    created = updated = 0
    with transaction.atomic():
        for start in range(0, len(entries), BATCH):
            made, changed = _index_batch(campaign_id, entries[start:start + BATCH])
            created, updated = created + made, updated + changed
    return created, updated


def _index_batch(campaign_id, entries):
    # Unordered: the default ordering joins the campaign and sends SQLite to the campaign's whole index.
    existing = {(row.slot, row.branch_id, row.depth): row
                for row in RecallItem.objects.filter(campaign_id=campaign_id,
                                                     slot__in={entry.slot for entry in entries}).order_by()}
    new, changed, stale = [], [], []
    for entry in entries:
        values = _values(campaign_id, entry)
        row = existing.get((entry.slot, *entry.anchor))
        if row is None:
            new.append({"campaign_id": campaign_id, "branch_id": entry.anchor[0], "depth": entry.anchor[1],
                        "slot": entry.slot, "revision": 0, **values})
            continue
        if all(getattr(row, name) == value for name, value in values.items()):
            continue
        if row.text != values["text"] or row.gist != values["gist"]:
            stale.append(row.pk)
        for name, value in values.items():
            setattr(row, name, value)
        row.revision += 1
        changed.append(row)
    _insert(new)
    for row in changed:
        row.save()
    if stale:
        RecallVector.objects.filter(item_id__in=stale).delete()
    return len(new), len(changed)


def rebuild(campaign_id, entries):
    """Drop the campaign's whole index (items and vectors) and store ``entries``: derived data, nothing else moves."""
    with transaction.atomic():
        RecallItem.objects.filter(campaign_id=campaign_id).delete()
        created, _ = index(campaign_id, entries)
    return created


def entries_from_records(records, *, context=()):
    """Return the Entries of ``records`` — StateRecord-like values of kinds event, perception and belief.

    Each record has ``slot, kind, value, data, branch_id, depth, retracted``
    (see docs/minds.md for the data). A perception takes its event's
    importance, time, place, people, tags and items; a belief its evidence's
    highest importance: those events and perceptions are looked up among
    ``records`` and ``context`` (records on the line, not indexed again).
    Accuracy is never carried over. Other kinds are skipped.
    """
    records = list(records)
    known = [*context, *records]  # a record of this batch wins over an older one of the same slot
    events = {r.slot: r for r in known if r.kind == "event"}
    perceptions = {r.slot: r for r in known if r.kind == "perception"}
    entries = []
    for record in records:
        data = record.data or {}
        anchor = (record.branch_id, record.depth)
        if record.kind == "event":
            entries.append(Entry(
                record.slot, "event", "", record.value, anchor, gist=str(data.get("gist", "")),
                importance=int(data.get("importance", 1)), tags=tuple(data.get("tags", ())),
                location=str(data.get("location", "")), items=tuple(data.get("items", ())),
                people=tuple(data.get("participants", ())), at_ms=data.get("at_ms"),
                keywords=str(data.get("keywords", "")), retracted=record.retracted))
        elif record.kind == "perception":
            event_slot, owner = _perception_parts(record.slot)
            event = events.get(event_slot)
            event_data = (event.data or {}) if event is not None else {}
            entries.append(Entry(
                record.slot, "perception", owner, record.value, anchor, gist=str(data.get("gist", "")),
                importance=int(event_data.get("importance", 1)), tags=tuple(event_data.get("tags", ())),
                location=str(event_data.get("location", "")), items=tuple(event_data.get("items", ())),
                people=tuple(event_data.get("participants", ())), at_ms=event_data.get("at_ms"),
                keywords=str(event_data.get("keywords", "")), retracted=record.retracted))
        elif record.kind == "belief":
            owner = record.slot.split(":")[1]
            supports, contradicts = tuple(data.get("supports", ())), tuple(data.get("contradicts", ()))
            evidence = [events.get(_perception_parts(slot)[0]) for slot in supports + contradicts
                        if slot in perceptions]
            importance = max((int((event.data or {}).get("importance", 1)) for event in evidence if event),
                             default=BELIEF_IMPORTANCE)
            entries.append(Entry(
                record.slot, "belief", owner, record.value, anchor, gist=str(data.get("gist", "")),
                importance=importance, tags=tuple(data.get("tags", ())), people=tuple(data.get("about", ())),
                at_ms=data.get("formed_at_ms"), supports=supports, contradicts=contradicts,
                retracted=record.retracted))
    return entries


def eligible(campaign_id, path, owner):
    """Return the owner's index rows on ``path`` (every revision; ``items_at`` keeps the deepest per slot)."""
    return RecallItem.objects.filter(path.clause(), campaign_id=campaign_id, owner=owner)


def items_at(campaign_id, path, owner):
    """Return the owner's recallable Items on ``path``: per slot the deepest row, unless it ends the slot."""
    return pool_at(campaign_id, path, owner).items


def pool_at(campaign_id, path, owner):
    """Return the ``recall.Pool`` of the owner's recallable items on ``path`` (cached while the rows stay the same)."""
    rows = eligible(campaign_id, path, owner).order_by()
    # Rows are only added (a higher id) or rewritten by ``index`` (a higher revision) or all dropped by
    # ``rebuild``: (count, newest id, revisions) over the covering index says when the pool is stale,
    # where reading two thousand rows into Python to compare them cost as much as the rest of a recall.
    # Written out: the ORM took longer to build this one aggregate than SQLite to answer it (bench "minds").
    on_line, params = path.sql()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*), MAX(id), SUM(revision) FROM {RecallItem._meta.db_table}"
                       f" WHERE campaign_id = %s AND owner = %s AND ({on_line})", [campaign_id, owner, *params])
        stamp = tuple(cursor.fetchone())
    key = (campaign_id, owner)
    with _lock:
        last = _pools.get(key)
    if last is not None and last[0][1] == stamp and _grew(last[0][0], path.segments):
        return last[1]
    query = rows.values_list("id", "slot", "depth", "revision", "retracted")
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    deepest = {}
    for pk, slot, depth, revision, retracted in rows:
        held = deepest.get(slot)
        if held is None or (depth, pk) > (held[1], held[0]):
            deepest[slot] = (pk, depth, revision, retracted)
    wanted = [(pk, revision) for pk, _, revision, retracted in deepest.values() if not retracted]
    with _lock:
        missing = [pk for pk, revision in wanted if _items.get(pk, (None,))[0] != revision]
    for start in range(0, len(missing), BATCH):
        found = {}
        for row in RecallItem.objects.filter(pk__in=missing[start:start + BATCH]).values(
                "id", "revision", "slot", "kind", "text", "gist", "importance", "people", "tags", "location",
                "items", "at_ms", "depth", "keywords", "supports", "contradicts"):
            found[row["id"]] = (row["revision"], _item(row))
        with _lock:
            _items.update(found)
    with _lock:
        pool = Pool([_items[pk][1] for pk, _ in wanted if pk in _items])
        _pools[key] = ((path.segments, stamp), pool)
    return pool


def _grew(before, after):
    """Return whether the line ``after`` is the line ``before`` or it continued at its head (segments of a Path).

    With the same rows counted on both, such a line holds exactly the same rows.
    """
    if len(before) != len(after) or before[1:] != after[1:]:
        return False
    if not before:
        return True
    (old, new) = (before[0], after[0])
    return old.branch_id == new.branch_id and old.low == new.low and new.high >= old.high


def uses_at(campaign_id, path, owner):
    """Return ``{slot: earlier recalls}`` of the owner on ``path``."""
    on_line, params = path.sql()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT slot, COUNT(*) FROM {RecallUse._meta.db_table} WHERE campaign_id = %s AND owner = %s"
                       f" AND ({on_line}) GROUP BY slot", [campaign_id, owner, *params])
        return dict(cursor.fetchall())



def search_words(campaign_id, owner, text, *, pool=None):
    """Return ``{row id: −bm25}`` for the owner's rows matching the words of ``text`` (any line: filter after).

    With the owner's ``pool``, only the words it makes worth searching are sent (``Pool.searchable``).
    """
    query_terms = sorted(terms(text), key=text.lower().find)
    if pool is not None:
        query_terms = pool.searchable(query_terms)
    query_terms = query_terms[:MAX_QUERY_TERMS]
    if not query_terms:
        return {}
    if vendors.is_postgres():
        # The owner's rows by their columns (the recall_eligibility index), not a scope token; ts_rank_cd stands
        # for bm25 (both: larger is better, and rank() divides by the best).
        query, params = vendors.tsquery_any(query_terms)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT r.id, ts_rank_cd(r.search, q.query) FROM {RecallItem._meta.db_table} r,"
                           f" (SELECT {query} AS query) q WHERE r.campaign_id = %s AND r.owner = %s"
                           " AND r.search @@ q.query", [*params, campaign_id, owner])
            return dict(cursor.fetchall())
    expression = f'scope:"{scope_token(campaign_id, owner)}" AND (' + vendors.fts5_any(query_terms) + ")"
    with connection.cursor() as cursor:
        # The scope column weighs nothing: every row of the owner holds its token.
        cursor.execute("SELECT rowid, -bm25(memory_recallitem_fts, 1.0, 1.0, 1.0, 1.0, 0.0) "
                       "FROM memory_recallitem_fts WHERE memory_recallitem_fts MATCH %s", [expression])
        return dict(cursor.fetchall())


def recall(path, campaign, owner, situation, now_ms, *, vector=None, model="", reranker=None, flaky=True,
           recall=RECALL, over_retrieve=OVER_RETRIEVE, diversity=DIVERSITY, associate=ASSOCIATE):
    """Return the ``memory.recall.Recall`` of ``owner`` on ``path`` for ``situation`` (a ``recall.Situation``).

    ``vector`` is the situation embedded with ``model`` (None: words and cues
    only); ``now_ms`` the story clock (None: nothing fades). Read-only, no model call.
    """
    campaign_id = getattr(campaign, "pk", campaign)
    pool = pool_at(campaign_id, path, owner)
    items = pool.items
    words = None
    if situation.terms:
        words = search_words(campaign_id, owner, situation.text, pool=pool)  # rank keeps those in the pool
    cosines = vectors = floor = None
    note = ""
    if vector is None:
        note = "the situation was not embedded; words and cues only"
    else:
        floor = semantic_floor(model)
        pin = RecallPin.objects.filter(campaign_id=campaign_id).values_list("model", "dims").first()
        if pin is not None and (pin[0], pin[1]) != (model, len(vector)):
            floor, note = None, (f"the recall index holds {pin[0]} vectors ({pin[1]}-d), not {model} "
                                 f"({len(vector)}-d); words and cues only")
        elif floor is None:
            note = (f"{model} has no measured similarity floor, so its similarities are not trusted; "
                    "words and cues only")
        else:
            matrix, rows = _matrix_for(campaign_id, owner, model, [item.id for item in items])
            if (rows >= 0).any():
                cosines = semantic_scores(matrix, rows, vector)
                vectors = (matrix, rows)
            else:
                floor, note = None, f"none of these memories has a {model} vector yet; words and cues only"
    return rank(pool, situation, now_ms=now_ms, words=words, cosines=cosines, floor=floor, model=model,
                vectors=vectors, recall=recall, over_retrieve=over_retrieve, diversity=diversity,
                associate=associate, flaky=flaky, reranker=reranker, vector_note=note,
                uses=uses_at(campaign_id, path, owner))


def record_use(campaign_id, anchor, owner, slots):
    """Count one recall of each slot by ``owner`` at ``anchor`` (branch id, depth): call it in the turn's commit."""
    RecallUse.objects.bulk_create([RecallUse(campaign_id=campaign_id, branch_id=anchor[0], depth=anchor[1],
                                             owner=owner, slot=slot) for slot in slots])


def needing_vectors(campaign_id, model):
    """Return the campaign's unretracted rows without a vector from ``model`` (what the embedding step makes)."""
    made = RecallVector.objects.filter(campaign_id=campaign_id, model=model).values("item_id")
    return (RecallItem.objects.filter(campaign_id=campaign_id, retracted=False).exclude(pk__in=made)
            .order_by("id"))


def store_vectors(campaign_id, model, pairs):
    """Store float32 ``(row id, vector)`` pairs made by ``model``; return (stored, note).

    The campaign's first batch pins its model and dimensions; a batch from
    another model or of other dimensions is refused whole, with the reason,
    until ``reset_vectors``.
    """
    pairs = [(pk, np.asarray(vector, dtype=np.float32)) for pk, vector in pairs]
    if not pairs:
        return 0, ""
    dims = {len(vector) for _, vector in pairs}
    if len(dims) != 1:
        return 0, f"the batch mixes dimensions {sorted(dims)}; nothing stored"
    (size,) = dims
    now = timezone.now()
    with transaction.atomic():
        pin, _ = RecallPin.objects.get_or_create(campaign_id=campaign_id, defaults={"model": model, "dims": size})
        if (pin.model, pin.dims) != (model, size):
            return 0, (f"the recall index is pinned to {pin.model} ({pin.dims}-d) by its first vectors; "
                       f"{model} ({size}-d) vectors are refused until the index is reset")
        stored = 0
        for start in range(0, len(pairs), BATCH):
            batch = pairs[start:start + BATCH]
            owners = dict(RecallItem.objects.filter(campaign_id=campaign_id, pk__in=[pk for pk, _ in batch])
                          .order_by().values_list("id", "owner"))
            rows = [RecallVector(item_id=pk, campaign_id=campaign_id, owner=owners[pk], model=model, dims=size,
                                 vector=vector.tobytes(), created_at=now) for pk, vector in batch if pk in owners]
            RecallVector.objects.filter(item_id__in=[row.item_id for row in rows]).delete()
            RecallVector.objects.bulk_create(rows, batch_size=500)
            stored += len(rows)
    return stored, ""


def reset_vectors(campaign_id):
    """Drop every recall vector of the campaign and the model pin (derived: the next pass embeds again)."""
    with transaction.atomic():
        deleted = RecallVector.objects.filter(campaign_id=campaign_id).delete()[0]
        RecallPin.objects.filter(campaign_id=campaign_id).delete()
    return deleted


def forget_caches():
    """Empty the in-process caches (tests; ids are reused after a rollback)."""
    with _lock:
        _items.clear()
        _pools.clear()
        _matrices.clear()


_JSON_FIELDS = ("people", "tags", "items", "supports", "contradicts")
_INSERT_FIELDS = ("campaign_id", "branch_id", "depth", "slot", "owner", "kind", "text", "gist", "importance",
                  *_JSON_FIELDS, "location", "keywords", "bigrams", "scope", "at_ms", "retracted", "revision")


def _insert(rows):
    """Insert new rows (dicts of their fields) in one statement: a turn's records through the ORM's bulk_create spent
    more time preparing 1,100 parameters than SQLite spent storing and indexing them (bench "minds")."""
    if not rows:
        return
    table = RecallItem._meta.db_table
    sql = (f"INSERT INTO {table} ({', '.join(_INSERT_FIELDS)}) "
           f"VALUES ({', '.join(['%s'] * len(_INSERT_FIELDS))})")
    values = [[json.dumps(row[name]) if name in _JSON_FIELDS else row[name] for name in _INSERT_FIELDS]
              for row in rows]
    with connection.cursor() as cursor:
        cursor.executemany(sql, values)


def _values(campaign_id, entry):
    text, gist = entry.text.strip()[:MAX_TEXT], entry.gist.strip()[:MAX_TEXT]
    keywords = " ".join(part for part in (entry.keywords, " ".join(entry.tags), entry.location,
                                          " ".join(entry.items), " ".join(entry.people)) if part)
    return {
        "owner": entry.owner, "kind": entry.kind, "text": text, "gist": gist, "importance": int(entry.importance),
        "people": sorted(set(entry.people)), "tags": sorted(set(entry.tags)), "location": entry.location,
        "items": sorted(set(entry.items)), "supports": list(entry.supports), "contradicts": list(entry.contradicts),
        "keywords": keywords, "bigrams": " ".join(bigrams(f"{text}\n{gist}\n{keywords}")),
        "scope": scope_token(campaign_id, entry.owner), "at_ms": entry.at_ms, "retracted": entry.retracted,
    }


def _item(row):
    return Item(
        id=row["id"], slot=row["slot"], kind=row["kind"], text=row["text"], gist=row["gist"],
        importance=row["importance"], people=frozenset(row["people"]), tags=frozenset(row["tags"]),
        location=row["location"], items=frozenset(row["items"]), at_ms=row["at_ms"], depth=row["depth"],
        terms=terms(f"{row['text']}\n{row['gist']}"), supports=frozenset(row["supports"]),
        contradicts=frozenset(row["contradicts"]))


def _perception_parts(slot):
    """Return (event slot, owner) of ``perception:<event id>:<who>``."""
    _, event_id, owner = slot.split(":", 2)
    return f"event:{event_id}", owner


# Each row's Item by id, with the revision it was read at: a row changes only
# through ``index``, which counts a revision.
_items = {}
# Each (campaign, owner)'s last line and row stamp, and the Pool built from them.
_pools = {}
# Each (campaign, owner, model)'s unit-vector matrix, stamped by (count, newest):
# a vector is only ever added (with its time) or deleted, so the pair says when
# it is stale, through an index that never reads a vector.
_matrices = {}
_lock = threading.Lock()


def _matrix_for(campaign_id, owner, model, ids):
    """Return (the owner's cached unit-vector matrix, each of ``ids``' row in it or -1)."""
    vectors = RecallVector.objects.filter(campaign_id=campaign_id, owner=owner, model=model)
    stamp = tuple(vectors.aggregate(n=Count("*"), newest=Max("created_at")).values())
    key = (campaign_id, owner, model)
    with _lock:
        cached = _matrices.get(key)
    if not cached or cached[0] != stamp:
        data = list(vectors.values_list("item_id", "vector"))
        if data:
            matrix = np.vstack([np.frombuffer(blob, dtype=np.float32) for _, blob in data])
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            matrix = matrix / np.where(norms == 0, 1, norms)
        else:
            matrix = np.zeros((0, 0), np.float32)
        cached = (stamp, ({pk: i for i, (pk, _) in enumerate(data)}, matrix))
        with _lock:
            _matrices[key] = cached
    row_of, matrix = cached[1]
    return matrix, np.fromiter((row_of.get(pk, -1) for pk in ids), dtype=np.int64, count=len(ids))


def cached_owners(campaign_id, model):
    """Return {owner: row ids in its cached matrix} (the inspector's and the tests' view of the partition)."""
    with _lock:
        return {key[1]: set(value[1][0]) for key, value in _matrices.items()
                if key[0] == campaign_id and key[2] == model}


# ---------------------------------------------------------------- kept in step with the records


RECORD_KINDS = ("event", "perception", "belief")
_RECORD_FIELDS = ("id", "slot", "kind", "value", "data", "branch_id", "depth", "retracted")


class _Record:
    """The values of one StateRecord ``entries_from_records`` reads."""

    __slots__ = _RECORD_FIELDS

    def __init__(self, *values):
        for name, value in zip(_RECORD_FIELDS, values):
            setattr(self, name, value)


def sync(campaign_id):
    """Index the campaign's event, perception and belief records written since the last sync; return how many.

    The index is derived (ARCHITECTURE rule 3) and kept in step by every
    writer calling this after its records commit: the post-turn minds step,
    ``story append``, a person's correction, an import. A perception or belief
    takes its event's values (importance, time, place, people) from the line
    it was written on. Read-only on the records; writes only the index.
    """
    from campaigns import lineage
    from campaigns.models import StateRecord

    with transaction.atomic():
        stamp, _ = RecallSync.objects.select_for_update().get_or_create(campaign_id=campaign_id)
        rows = [_Record(*row) for row in StateRecord.objects.filter(
            campaign_id=campaign_id, kind__in=RECORD_KINDS, id__gt=stamp.record_id).order_by("id")
            .values_list(*_RECORD_FIELDS)]
        if not rows:
            return 0
        entries = []
        for anchor in sorted({(row.branch_id, row.depth) for row in rows}, key=lambda a: (a[1], a[0])):
            here = [row for row in rows if (row.branch_id, row.depth) == anchor]
            entries += entries_from_records(here, context=_referred(campaign_id, lineage.path_at(
                campaign_id, *anchor), here))
        index(campaign_id, entries)
        stamp.record_id = rows[-1].id
        stamp.save(update_fields=["record_id"])
    return len(rows)


def _referred(campaign_id, path, rows):
    """Return the records on ``path`` that ``rows``' perceptions and beliefs refer to: events and perceptions."""
    from campaigns.models import StateRecord

    wanted = set()
    for row in rows:
        if row.kind == "perception":
            wanted.add(_perception_parts(row.slot)[0])
        elif row.kind == "belief":
            evidence = [*(row.data or {}).get("supports", ()), *(row.data or {}).get("contradicts", ())]
            wanted.update(evidence)
            wanted.update(_perception_parts(slot)[0] for slot in evidence)
    if not wanted:
        return []
    deepest = {}
    for values in StateRecord.objects.filter(path.clause(), campaign_id=campaign_id, slot__in=wanted).values_list(
            *_RECORD_FIELDS):
        record = _Record(*values)
        held = deepest.get(record.slot)
        if held is None or (record.depth, record.id) > (held.depth, held.id):
            deepest[record.slot] = record
    return [record for record in deepest.values() if not record.retracted]


def rebuild_from_records(campaign_id):
    """Drop the campaign's recall index and read every record again ("Rebuild recall index"); return the rows made."""
    with transaction.atomic():
        RecallItem.objects.filter(campaign_id=campaign_id).delete()
        RecallSync.objects.filter(campaign_id=campaign_id).delete()
        sync(campaign_id)
    return RecallItem.objects.filter(campaign_id=campaign_id).count()
