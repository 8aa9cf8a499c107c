"""Story memories in the prompt: the retrieval query, the ranking edge and the section (seed 000 §14, §18-§22).

The query is two short texts (v1.1 WP-B.2): the player's own input (its last
200 tokens) and the scene (the state's scene line, place and who is present,
60 tokens, then the end of the newest narration, 120), embedded together in
one call before the build, so a one-line recall question is not drowned by
recent prose. Eligibility is the lineage chokepoint (``memory.bank.eligible``);
ranking is ``memory.ranking``. The section is protected, first in the dynamic
tail, and marks heuristic memories ``[inferred]`` with what that means.
Everything here but ``embed_query`` is read-only and model-free.
"""

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection

from campaigns import state
from knowledge import retrieval
from knowledge.importer import embedding_model, prefixes
from memory import ranking
from memory.models import Memory, MemoryVector

from .. import llm, tokens
from .layers import DYNAMIC_TAIL, Section, newest_narration

INPUT_TOKENS = 200
SCENE_TOKENS = 60
NARRATION_TOKENS = 120

# The label only: what a memory is and how far it is trusted is said once, in the stable prefix
# (layers.NARRATOR_RULES), so the tail the server reads again every turn stays short (issue 27).
HEADER = "Memories from earlier in this story:"
INFERRED = "[inferred]"
NOT_EMBEDDED = "the query was not embedded; ranked on words only"


@dataclass(frozen=True)
class Query:
    input: str
    context: str
    input_vector: tuple | None = None
    context_vector: tuple | None = None
    model: str = ""
    note: str = ""  # why ranking is lexical only, when it is

    @property
    def input_terms(self):
        return tuple(sorted(ranking.fold_terms(retrieval.meaningful_terms(self.input))))


def query_for(campaign, path, action, current=None, narration=None):
    """Return the memory Query for ``action`` after ``path`` (not yet embedded).

    A continue has no input: the context alone is searched. A retry passes
    the path before the discarded reply, so that reply is not in the context.
    ``current`` is the turn's part of the state and ``narration`` the newest
    reply's text, when the caller has read them.
    """
    # The turn's part of the state is enough to name the scene, its place and
    # who is there; the full fold costs 100-200 ms at 5,000 facts.
    if current is None:
        current = state.state_for_turn(path, campaign, action.text)
    scene = current.scene()
    place = (scene.data.get("location", "") if scene else "") or current.location_of(state.PROTAGONIST)
    present = [current.name_of(key) for key in current.present() if key != state.PROTAGONIST]
    scene_text = "\n".join(part for part in (scene.value if scene else "", current.name_of(place) if place else "",
                                              ", ".join(present)) if part)
    if narration is None:
        narration = newest_narration(path)
    context = "\n".join(part for part in (tokens.cut(scene_text, SCENE_TOKENS),
                                          tokens.cut_end(narration, NARRATION_TOKENS)) if part.strip())
    text = action.text if action.mode != "continue" else ""
    return Query(tokens.cut_end(text.strip(), INPUT_TOKENS), context, note=NOT_EMBEDDED)


def query_texts(campaign, path, query):
    """Return (``query``, the texts to embed for it): no texts, and the reason on the query, when none are needed.

    Nothing is embedded when no eligible memory has a vector from the
    campaign's embedding model (nothing to compare with). Read-only and
    model-free: the caller embeds the texts with ``query.model`` and hands the
    vectors to ``embedded``.
    """
    model = embedding_model(campaign)
    index = bank_index(campaign.pk)
    if not (index.vectors(model)[1][index.eligible(path)] >= 0).any():
        return _note(query, model, f"no memory on this line has a vector from {model}; ranked on words only"), []
    texts = [text for text in (query.input, query.context) if text]
    if not texts:
        return _note(query, model, "nothing to search for"), []
    return Query(query.input, query.context, model=model, note=query.note), [prefixes(model)[1] + t for t in texts]


def embedded(query, vectors=None, *, error=None, embedder=""):
    """Return ``query`` with its vectors (one per text ``query_texts`` gave), or with the reason it has none.

    ``embedder`` names the model that could not embed, when ``error`` is
    that no embedding model is available.
    """
    if isinstance(error, llm.EmbeddingUnavailable):
        return _note(query, query.model, f"no embedding model is available ({embedder}); ranked on words only")
    if error is not None:
        return _note(query, query.model, f"the query could not be embedded ({error}); ranked on words only")
    vectors = iter(vectors)
    return Query(query.input, query.context,
                 tuple(next(vectors)) if query.input else None,
                 tuple(next(vectors)) if query.context else None, query.model, "")


def embed_query(campaign, path, query):
    """Return ``query`` with its vectors, or with the reason ranking is lexical only: one model call at most.

    For commands and diagnostics: it asks the model server from the calling
    thread, so never call it on the database's shared thread (a turn embeds
    its queries with ``storyteller.turns.queries_embedded``).
    """
    query, texts = query_texts(campaign, path, query)
    if not texts:
        return query
    embedder = llm.embedder_for(query.model)
    try:
        return embedded(query, async_to_sync(embedder.embed)(texts))
    except llm.NarratorError as error:
        return embedded(query, error=error, embedder=embedder.model)


def memory_top_k():
    """Return how many memories a turn may use, pins included (``memory_top_k``)."""
    return getattr(settings, "STORYTELLER_MEMORY_TOP_K", ranking.MEMORY_TOP_K)


def candidate(pk, authority, pinned, text):
    """Return the ranking Candidate of one memory, its words read as retrieval reads them."""
    return ranking.Candidate(pk, authority, bool(pinned), *_words_of(text))


def section(campaign, path, query, *, top_k=None):
    """Return (Section or None, report) for the memories this turn uses (``top_k`` of them, pins first)."""
    top_k = top_k or memory_top_k()
    index = bank_index(campaign.pk)
    eligible = index.eligible(path)
    report = {
        "query": {"input": query.input, "context": query.context, "input_terms": list(query.input_terms)},
        "semantic": {"used": query.input_vector is not None or query.context_vector is not None,
                     "model": query.model, "note": query.note},
        "used": [], "considered": len(eligible), "suppressed": 0, "suppressed_ids": [], "without_vectors": 0,
    }
    if not len(eligible):
        return None, report
    semantic = matrix = positions = None
    if report["semantic"]["used"]:
        matrix, rows = index.vectors(query.model)
        positions = rows[eligible]
        dims = len(query.input_vector or query.context_vector)
        if matrix.shape[1] == dims:
            semantic = ranking.semantic_scores(matrix, positions, query.input_vector, query.context_vector)
            report["without_vectors"] = int((positions < 0).sum())
        else:
            matrix = None
            report["semantic"].update(used=False, note=f"the stored vectors are not {dims}-dimensional like the "
                                                       "query's; rebuild the memory embeddings")
    chosen = ranking.rank_rows(index.ids[eligible], index.pinned[eligible], _Picked(index.authority, eligible),
                               _Picked(index.names, eligible), index.holders(query.input_terms, eligible),
                               query.input_terms, semantic=semantic, matrix=matrix, rows=positions, top_k=top_k)
    by_id = _shown([s.id for s in chosen.used])
    used = []
    for scored in chosen.used:
        pk, text, authority, pinned, start, end, branch_id, depth, origin = by_id[scored.id]
        used.append({
            "type": "memory", "id": pk, "text": text, "authority": authority, "pinned": bool(pinned),
            "source_start": start, "source_end": end, "branch": branch_id, "depth": depth, "origin": origin,
            "semantic": _rounded(scored.semantic), "lexical": round(scored.lexical, 4),
            "final": round(scored.final, 4), "similarity": _rounded(scored.semantic),
        })
    report.update(used=used, suppressed=len(chosen.suppressed), suppressed_ids=chosen.suppressed)
    report["query"]["weights"] = {term: round(weight, 4) for term, weight in chosen.weights.items()}
    lines = [HEADER, *(f"- {INFERRED + ' ' if entry['authority'] == Memory.Authority.HEURISTIC else ''}{entry['text']}"
                       for entry in used)]
    authority = "Level 3 accepted history; [inferred] lines Level 4 heuristic memory"
    return Section("memories", "Story memories", authority, DYNAMIC_TAIL, "\n".join(lines), protected=True,
                   components=used), report


def _shown(ids):
    """Return {id: the fields the section and the report show} for memories ``ids``, read through the cursor.

    The ORM took longer to build this read than SQLite to answer it: a
    third of a retrieval over 1,000 memories (bench "memory").
    """
    if not ids:
        return {}
    marks = ",".join(["%s"] * len(ids))
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, text, authority, pinned, source_start, source_end, branch_id, depth, origin "
                       f"FROM memory_memory WHERE id IN ({marks})", ids)
        return {row[0]: row for row in cursor.fetchall()}


class _Picked:
    """``values[rows[i]]`` for candidate ``i``: per-row data read only for the candidates ranking reaches."""

    def __init__(self, values, rows):
        self.values, self.rows = values, rows

    def __getitem__(self, i):
        return self.values[self.rows[i]]


def _words_of(text):
    return ranking.fold_terms(retrieval.meaningful_terms(text)), ranking.names_in(text)


def _note(query, model, note):
    return Query(query.input, query.context, None, None, model, note)


def _rounded(value):
    return None if value is None else round(value, 4)


class BankIndex:
    """One campaign's memories, held between turns as arrays (bench "overhead", issue 16).

    Every memory of the campaign, in id order: its anchor, whether it is live
    (not forgotten, enabled), pinned, its authority and the names it holds,
    and an inverted index from each folded term to the memories holding it.
    A turn's eligibility is then one numpy pass over the anchors (the path's
    segments), its rarity weights and lexical scores touch only the memories
    holding the input's terms, and its cosines are one product over the
    vectors of the campaign's embedding model, kept as a unit matrix. The
    database's ``BankStamp`` says, in one indexed read, when anything
    retrieval sees has changed; only then are the rows read again, and only
    new or edited texts and new vectors are read in full.
    """

    def __init__(self, campaign_id, generation, rows, previous=None):
        self.campaign_id, self.generation = campaign_id, generation
        rows.sort()
        words = _words_for([(row[0], row[5]) for row in rows])
        # A memory deleted between the two reads has no words: it is gone, not eligible.
        self.rows = rows = [row for row in rows if row[0] in words]
        self.ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
        self.branch = np.fromiter((row[1] for row in rows), dtype=np.int64, count=len(rows))
        self.depth = np.fromiter((row[2] for row in rows), dtype=np.int64, count=len(rows))
        self.live = np.fromiter((not row[3] and row[4] for row in rows), dtype=bool, count=len(rows))
        self.pinned = np.fromiter((bool(row[7]) for row in rows), dtype=bool, count=len(rows))
        self.authority = [row[6] for row in rows]
        self.revisions = [(row[0], row[5]) for row in rows]
        # The inverted index depends only on each memory's text: when the memories read before are all
        # still here with the same revisions (a new memory, a flag, a vector), only the new ones are added.
        kept = 0
        if previous is not None and self.revisions[:len(previous.revisions)] == previous.revisions:
            kept = len(previous.revisions)
        self.names = previous.names[:kept] if kept else []
        postings = dict(previous._postings) if kept else {}
        arrays = dict(previous._arrays) if kept else {}
        grown = set()
        for position in range(kept, len(rows)):
            terms, names = words[rows[position][0]]
            self.names.append(names)
            for term in terms:
                if term in grown:
                    postings[term].append(position)
                else:  # copied before the first append: the previous index may still be serving a turn
                    postings[term] = [*postings.get(term, ()), position]
                    grown.add(term)
                    arrays.pop(term, None)
        self._postings = postings
        self._arrays = arrays
        self._vectors = {}

    def eligible(self, path):
        """Return the positions of the memories eligible on ``path``, in id order (``bank.eligible``'s rule)."""
        on_path = np.zeros(len(self.ids), dtype=bool)
        for segment in path.segments:
            on_path |= (self.branch == segment.branch_id) & (self.depth > segment.low) & (self.depth <= segment.high)
        return np.flatnonzero(on_path & self.live)

    def holders(self, terms, eligible):
        """Return, for each of ``terms``, the indices into ``eligible`` of the memories holding it."""
        where = np.full(len(self.ids), -1, dtype=np.int64)
        where[eligible] = np.arange(len(eligible))
        found = []
        for term in terms:
            positions = self._arrays.get(term)
            if positions is None:
                positions = self._arrays[term] = np.array(self._postings.get(term, ()), dtype=np.int64)
            held = where[positions]
            found.append(held[held >= 0])
        return found

    def vectors(self, model):
        """Return (the unit vectors from ``model``, each memory's row in them or -1), read once per change."""
        cached = self._vectors.get(model)
        if cached is None:
            with _loading(self.campaign_id):
                cached = self._vectors.get(model)
                if cached is None:
                    cached = self._vectors[model] = _vectors_for(self.campaign_id, model, self.ids)
        return cached[:2]


def bank_index(campaign_id):
    """Return the campaign's BankIndex, read again only when its BankStamp has moved since."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT generation FROM memory_bankstamp WHERE campaign_id = %s", [campaign_id])
        found = cursor.fetchone()
    generation = found[0] if found else 0
    index = _kept(campaign_id, generation)
    if index is not None:
        return index
    with _loading(campaign_id):  # one reader at a time: a turn waits for the warm-up instead of doubling it
        return _kept(campaign_id, generation) or _read_bank(campaign_id, generation)


def _kept(campaign_id, generation):
    with _cache_lock:
        index = _banks.get(campaign_id)
        if index is not None and index.generation == generation:
            _banks.move_to_end(campaign_id)
            return index
    return None


def _read_bank(campaign_id, generation):
    query = (Memory.objects.filter(campaign_id=campaign_id).order_by()
             .values_list("id", "branch_id", "depth", "forgotten", "enabled", "revision", "authority", "pinned"))
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        # Unsorted, answered from the covering eligibility index: an ORDER BY adds a temporary B-tree.
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    previous = _banks.get(campaign_id)
    index = BankIndex(campaign_id, generation, rows, previous)
    for model in previous._vectors if previous is not None else ():
        index._vectors[model] = _vectors_for(campaign_id, model, index.ids, previous._vectors[model])
    with _cache_lock:
        _banks[campaign_id] = index
        _banks.move_to_end(campaign_id)
        while len(_banks) > CACHED_CAMPAIGNS:
            _banks.popitem(last=False)
    return index


def _loading(campaign_id):
    """Return the lock held while ``campaign_id``'s bank is read."""
    with _cache_lock:
        return _locks.setdefault(campaign_id, threading.RLock())


def forget():
    """Drop every cached index and word (tests do, since a rolled-back test's ids come back with other rows)."""
    with _cache_lock:
        _banks.clear()
        _words.clear()


def _words_for(revisions):
    """Return {id: (terms, names)} for ``revisions`` of (id, revision), reading only texts not read before."""
    with _cache_lock:
        missing = [pk for pk, revision in revisions if _words.get(pk, (None,))[0] != revision]
    for start in range(0, len(missing), WORDS_BATCH):
        texts = Memory.objects.filter(pk__in=missing[start:start + WORDS_BATCH]).values_list("id", "revision", "text")
        found = {pk: (revision, *_words_of(text)) for pk, revision, text in texts}
        with _cache_lock:
            _words.update(found)
    with _cache_lock:
        return {pk: _words[pk][1:] for pk, _ in revisions if pk in _words}


class _Vectors:
    """One model's unit vectors of a campaign's memories, with room to append new ones in place."""

    def __init__(self, dims, capacity):
        self.matrix = np.zeros((capacity, dims), np.float32)
        self.count = 0
        self.row_of = {}  # memory id -> row
        self.made = {}  # memory id -> when its vector was written

    def append(self, pairs, made):
        vectors = np.vstack([np.frombuffer(blob, dtype=np.float32) for _, blob in pairs])
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.where(norms == 0, 1, norms)
        if self.count + len(pairs) > len(self.matrix):
            grown = np.zeros((2 * (self.count + len(pairs)), self.matrix.shape[1]), np.float32)
            grown[:self.count] = self.matrix[:self.count]
            self.matrix = grown
        self.matrix[self.count:self.count + len(pairs)] = vectors
        for offset, (pk, _) in enumerate(pairs):
            self.row_of[pk] = self.count + offset
            self.made[pk] = made[pk]
        self.count += len(pairs)


def _vectors_for(campaign_id, model, ids, previous=None):
    """Return (unit matrix, row per id or -1) for ``model``'s vectors, reusing ``previous`` when it only grew.

    Which vectors exist, and when each was written, comes from the stamp
    index without reading a vector; only vectors not in ``previous`` are
    read. A vector deleted or rewritten (an edit, a rebuild) reads them all.
    """
    vectors = MemoryVector.objects.filter(campaign_id=campaign_id, model=model).order_by()
    with connection.cursor() as cursor:
        # Through the cursor, as SQLite stores them: turning 10,000 times into datetimes took longer than the read.
        cursor.execute("SELECT memory_id, created_at FROM memory_memoryvector WHERE campaign_id = %s AND model = %s",
                       [campaign_id, model])
        made = dict(cursor.fetchall())
    store = previous[2] if previous is not None else None
    if store is not None and (store.made.keys() - made.keys()
                              or any(made[pk] != at for pk, at in store.made.items())):
        store = None
    new = [pk for pk in made if store is None or pk not in store.row_of]
    pairs = []
    for start in range(0, len(new), WORDS_BATCH):
        pairs += vectors.filter(memory_id__in=new[start:start + WORDS_BATCH]).values_list("memory_id", "vector")
    if store is not None and pairs and any(len(blob) // 4 != store.matrix.shape[1] for _, blob in pairs):
        return _vectors_for(campaign_id, model, ids)
    if store is None:
        dims = max((len(blob) // 4 for _, blob in pairs), default=0)
        pairs = [(pk, blob) for pk, blob in pairs if len(blob) // 4 == dims]
        store = _Vectors(dims, len(pairs) + 64)
    elif pairs:
        # Rows already handed to a turn are never written: the new ones go after them (or into a copy).
        grown = _Vectors(store.matrix.shape[1], 0)
        grown.matrix, grown.count = store.matrix, store.count
        grown.row_of, grown.made = dict(store.row_of), dict(store.made)
        store = grown
    if pairs:
        store.append(sorted(pairs), made)
    rows = np.fromiter((store.row_of.get(pk, -1) for pk in ids.tolist()), dtype=np.int64, count=len(ids))
    return store.matrix[:store.count], rows, store


# Each memory's folded terms and names by id, with the text revision they were read from. A text
# changes only through bank.edit_text, which bumps the revision, so the words are read once.
_words = {}
# The BankIndex of the campaigns played lately, least recently used first.
_banks = OrderedDict()
CACHED_CAMPAIGNS = 8
WORDS_BATCH = 900  # ids per query, under SQLite's parameter limit
_cache_lock = threading.RLock()
_locks = {}  # campaign id -> the lock held while its bank is read
