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
from dataclasses import dataclass

import numpy as np
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection
from django.db.models import Count, Max

from campaigns import state
from knowledge import retrieval
from knowledge.importer import embedding_model, prefixes
from memory import bank, ranking
from memory.models import Memory, MemoryVector

from .. import llm, tokens
from .layers import DYNAMIC_TAIL, Section

INPUT_TOKENS = 200
SCENE_TOKENS = 60
NARRATION_TOKENS = 120

HEADER = ("Memories from earlier in this story (what happened on this line, beyond the recent story). "
          "Lines marked [inferred] are interpretation, not established fact — do not treat them as settled truth; "
          "the current story state and canon outrank every memory.")
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


def query_for(campaign, path, action, current=None):
    """Return the memory Query for ``action`` after ``path`` (not yet embedded).

    A continue has no input: the context alone is searched. A retry passes
    the path before the discarded reply, so that reply is not in the context.
    ``current`` is the turn's part of the state, when the caller has read it.
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
    narration = (path.nodes().exclude(role="player").order_by("-depth").values_list("text", flat=True).first()
                 or "")
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
    if not bank.eligible(campaign.pk, path).filter(vector__model=model).exists():
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
    candidates = _eligible(campaign.pk, path)
    report = {
        "query": {"input": query.input, "context": query.context, "input_terms": list(query.input_terms)},
        "semantic": {"used": query.input_vector is not None or query.context_vector is not None,
                     "model": query.model, "note": query.note},
        "used": [], "considered": len(candidates), "suppressed": 0, "suppressed_ids": [], "without_vectors": 0,
    }
    if not candidates:
        return None, report
    semantic = matrix = positions = None
    if report["semantic"]["used"]:
        matrix, positions = _matrix_for(campaign.pk, query.model, [c.id for c in candidates])
        dims = len(query.input_vector or query.context_vector)
        if matrix.shape[1] == dims:
            semantic = ranking.semantic_scores(matrix, positions, query.input_vector, query.context_vector)
            report["without_vectors"] = int((positions < 0).sum())
        else:
            matrix = None
            report["semantic"].update(used=False, note=f"the stored vectors are not {dims}-dimensional like the "
                                                       "query's; rebuild the memory embeddings")
    chosen = ranking.rank(candidates, query.input_terms, semantic=semantic, matrix=matrix, rows=positions,
                          top_k=top_k)
    by_id = {row[0]: row for row in Memory.objects.filter(pk__in=[s.id for s in chosen.used]).values_list(
        "id", "text", "authority", "pinned", "source_start", "source_end", "branch_id", "depth", "origin")}
    used = []
    for scored in chosen.used:
        pk, text, authority, pinned, start, end, branch_id, depth, origin = by_id[scored.id]
        used.append({
            "type": "memory", "id": pk, "text": text, "authority": authority, "pinned": pinned,
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


def _eligible(campaign_id, path):
    """Return the ranking Candidate of every eligible memory, in no particular order (ties go by id).

    Read through the cursor, unsorted: over 10,000 memories Django's row
    handling cost more than the query itself, and an ORDER BY doubled the
    query (a temporary B-tree after the index search; bench "memory").
    """
    query = bank.eligible(campaign_id, path).order_by().values_list("id", "revision", "authority", "pinned")
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    # The eligible set is the same turn after turn until a memory is written, edited, flagged or the head
    # moves: comparing the rows (one C-level pass) is far cheaper than building 10,000 candidates again.
    with _cache_lock:
        last = _candidates.get(campaign_id)
    if last is not None and last[0] == rows:
        return last[1]
    with _cache_lock:
        missing = [pk for pk, revision, _, _ in rows if _words.get(pk, (None,))[0] != revision]
    for start in range(0, len(missing), WORDS_BATCH):
        texts = Memory.objects.filter(pk__in=missing[start:start + WORDS_BATCH]).values_list("id", "revision", "text")
        found = {pk: (revision, *_words_of(text)) for pk, revision, text in texts}
        with _cache_lock:
            _words.update(found)
    with _cache_lock:
        # A memory whose campaign went between the two reads has no words: it is gone, not eligible.
        candidates = [ranking.Candidate(pk, authority, bool(pinned), *_words[pk][1:])
                      for pk, _, authority, pinned in rows if pk in _words]
        _candidates[campaign_id] = (rows, candidates)
    return candidates


def _words_of(text):
    return ranking.fold_terms(retrieval.meaningful_terms(text)), ranking.names_in(text)


def _note(query, model, note):
    return Query(query.input, query.context, None, None, model, note)


def _rounded(value):
    return None if value is None else round(value, 4)


# The campaign's memory vectors as one normalised float32 matrix, kept between
# turns: reading 10,000 768-dim vectors out of SQLite costs far more than the
# 100 ms a retrieval may take. Every vector written carries its time and an
# edit deletes the memory's vector, so (count, newest) says when it is stale.
_cache = {}
_positions = {}
# Each memory's folded terms and names by id, with the text revision they were read from. A text
# changes only through bank.edit_text, which bumps the revision, so the words are read once.
_words = {}
# Each campaign's last eligible rows (id, revision, authority, pinned) and the candidates built from them.
_candidates = {}
WORDS_BATCH = 900  # ids per query, under SQLite's parameter limit
_cache_lock = threading.Lock()


def _matrix_for(campaign_id, model, ids):
    """Return (the campaign's cached unit-vector matrix, each of ``ids``' row in it or -1)."""
    # The (campaign, model, created_at) index answers the stamp without reading a vector: COUNT(*), since
    # SQLite reads every row (3 KiB of vector each) to count a named column, 21 ms over 10,000 against 2.
    vectors = MemoryVector.objects.filter(campaign_id=campaign_id, model=model)
    stamp = tuple(vectors.aggregate(n=Count("*"), newest=Max("created_at")).values())
    key = (campaign_id, model)
    with _cache_lock:
        cached = _cache.get(key)
    if not cached or cached[0] != stamp:
        data = list(vectors.values_list("memory_id", "vector"))
        dims = max((len(blob) // 4 for _, blob in data), default=0)
        data = [(pk, blob) for pk, blob in data if len(blob) // 4 == dims]
        if data:
            matrix = np.vstack([np.frombuffer(blob, dtype=np.float32) for _, blob in data])
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            matrix = matrix / np.where(norms == 0, 1, norms)
        else:
            matrix = np.zeros((0, 0), np.float32)
        cached = (stamp, ({pk: i for i, (pk, _) in enumerate(data)}, matrix))
        with _cache_lock:
            _cache[key] = cached
    row_of, matrix = cached[1]
    ids = np.fromiter(ids, dtype=np.int64, count=len(ids))
    # The eligible memories are the same turn after turn until one is written or the head moves.
    with _cache_lock:
        last = _positions.get(key)
    if last is not None and last[0] is cached and np.array_equal(last[1], ids):
        return matrix, last[2]
    positions = np.fromiter((row_of.get(pk, -1) for pk in ids.tolist()), dtype=np.int64, count=len(ids))
    with _cache_lock:
        _positions[key] = (cached, ids, positions)
    return matrix, positions
