"""Retrieve imported passages for a scene: admission first, then hybrid ranking (seed 003 §76).

Relevance is decided before authority and before any comparison between
candidates: a passage is admitted on a signal with meaning of its own (enough
distinct query terms, or a cosine over the embedding model's measured floor),
and only the admitted are ranked. So retrieval can return nothing, and on a
scene unrelated to the library it does. The class then multiplies relevance:
it orders what matched and never rescues what did not.

``rank`` and the admission rules are pure; ``retrieve`` is the edge that reads
FTS5 and the vectors, always within one campaign, and never writes.
"""

import re
import threading
from dataclasses import dataclass, field

import numpy as np
from asgiref.sync import async_to_sync
from django.db import connection
from django.db.models import Count, Max

from storyteller import llm

from .importer import embedding_model, prefixes
from .models import Passage, Source

CLASS_WEIGHTS = {"canon": 1.00, "reference": 0.85, "inspiration": 0.70}

# How much the weaker of the two paths adds: a passage both read and meant
# alike edges ahead of one that only one path found, never by more than 0.15
# (the weight seed 000 §20 chose by sweep for memories, reused by §76).
SECOND_PATH_WEIGHT = 0.15

# Raw cosine a passage needs to be admitted on meaning alone, per embedding
# model. Only a measured model gets semantic retrieval; any other is skipped
# with the reason reported, and lexical retrieval carries the library.
#   nomic-embed-text: seed 004 §K measured it against one story passage at
#   0.435 for an unrelated query and 0.593 for a paraphrase (0.866 direct);
#   the floor sits between unrelated and paraphrase. Measured there, not on
#   this machine, which has no embedding model: re-measure before changing.
SEMANTIC_FLOORS = {"nomic-embed-text": 0.50}

# A single matched term admits a passage only if it is a real part of the
# query: at least a quarter of its meaningful terms. A turn's query (input
# plus scene) has ten to forty, and one shared word among them ("road",
# "grey") says nothing — at 0.10 the fixtures' canon was admitted into a
# spaceship scene for "road" alone; a search for "dragon" has one term, and
# there the one word says everything.
SINGLE_TERM_MIN_SHARE = 0.25

# Lexical candidates read per query, best bm25 first. Admission and the
# budget keep far fewer; this only bounds the work on a large library.
LEXICAL_CANDIDATES = 40

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
STOPWORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before being below between
both but by can could did do does doing done down during each either else ever every few for from further get
gets got had has have having he her here hers herself him himself his how i if in into is it its itself just
let like may me might mine more most much must my myself no nor not now of off on once one only onto or other
our ours out over own per please same shall she should so some such than that the their theirs them then there
these they this those through thus to too under until up upon us very was we were what when where which while
who whom whose why will with within without would yet you your yours yourself
ask asks asked say says said tell tells told look looks looked see sees saw go goes going gone went come comes came
take takes took make makes made know knows knew think thinks thought want wants wanted try tries tried
s t don't i'm it's that's there's
""".split())


@dataclass(frozen=True)
class Query:
    """What to search for: the scene's text, the names that do not count alone, and its vector if embedded."""

    text: str
    standing_names: tuple = ()
    vector: tuple | None = None
    model: str = ""
    semantic_note: str = ""  # why there is no semantic retrieval, when there is none


@dataclass(frozen=True)
class Candidate:
    passage_id: int
    source_id: int
    classification: str
    lexical: float | None = None  # -bm25: larger is better, no fixed range
    terms: frozenset = frozenset()  # the distinct query terms the passage matched
    cosine: float | None = None


@dataclass(frozen=True)
class Hit:
    passage_id: int
    source_id: int
    classification: str
    lexical: float  # normalised against the best admitted lexical value (0 when not admitted lexically)
    semantic: float  # normalised against the best admitted cosine (0 when not admitted semantically)
    cosine: float | None
    relevance: float
    score: float
    terms: tuple
    reason: str


@dataclass
class Retrieval:
    query: str
    terms: tuple
    hits: list
    semantic: dict = field(default_factory=dict)  # {"used": bool, "model": str, "floor": float|None, "note": str}
    passages: dict = field(default_factory=dict)  # passage id -> Passage (with its source) for the hits


def meaningful_terms(text):
    """Return the distinct words of ``text`` that can carry meaning, lowercased, in first-seen order."""
    seen = {}
    for word in _WORD.findall(text.lower()):
        word = word.replace("’", "'")
        if len(word) > 2 and word not in STOPWORDS and not word.isdigit():
            seen.setdefault(word, None)
    return tuple(seen)


def admitted_lexically(matched, query_terms, standing_terms):
    """Return whether a passage matching ``matched`` of ``query_terms`` has earned a place on words alone."""
    if len(matched) >= 2:
        return True
    if len(matched) == 1:
        (term,) = matched
        return term not in standing_terms and 1 / max(len(query_terms), 1) >= SINGLE_TERM_MIN_SHARE
    return False


def rank(candidates, *, query_terms, standing_terms, floor):
    """Return the admitted candidates as Hits, best score first (ties by passage id).

    ``floor`` is the embedding model's semantic floor, or None when semantic
    admission is off.
    """
    lexical = [c for c in candidates if c.lexical is not None and admitted_lexically(c.terms, query_terms,
                                                                                       standing_terms)]
    semantic = [c for c in candidates if floor is not None and c.cosine is not None and c.cosine >= floor]
    best_lexical = max((c.lexical for c in lexical), default=0.0)
    best_cosine = max((c.cosine for c in semantic), default=0.0)
    lexical_ids = {c.passage_id for c in lexical}
    semantic_ids = {c.passage_id for c in semantic}
    hits = []
    for c in candidates:
        if c.passage_id not in lexical_ids and c.passage_id not in semantic_ids:
            continue
        lex = c.lexical / best_lexical if c.passage_id in lexical_ids and best_lexical > 0 else 0.0
        sem = c.cosine / best_cosine if c.passage_id in semantic_ids and best_cosine > 0 else 0.0
        relevance = max(lex, sem) + SECOND_PATH_WEIGHT * min(lex, sem)
        reasons = []
        if c.passage_id in lexical_ids:
            reasons.append("matched " + ", ".join(sorted(c.terms)))
        if c.passage_id in semantic_ids:
            reasons.append(f"meaning close (cosine {c.cosine:.3f} ≥ floor {floor:.2f})")
        hits.append(Hit(
            passage_id=c.passage_id, source_id=c.source_id, classification=c.classification,
            lexical=lex, semantic=sem, cosine=c.cosine,
            relevance=relevance, score=relevance * CLASS_WEIGHTS[c.classification],
            terms=tuple(sorted(c.terms)), reason="; ".join(reasons),
        ))
    hits.sort(key=lambda hit: (-hit.score, hit.passage_id))
    return hits


def semantic_floor(model):
    """Return the measured floor for embedding ``model``, or None when it has not been measured."""
    return SEMANTIC_FLOORS.get(model.split(":")[0].rsplit("/", 1)[-1]) if model else None


def embed_query(campaign, query):
    """Return ``query`` with its vector, or with the reason semantic retrieval is off. One model call at most."""
    model = embedding_model(campaign)
    if not Passage.objects.filter(campaign=campaign, embedding_model=model, source__enabled=True,
                                  source__semantic_state=Source.IndexState.READY).exists():
        detail = (Source.objects.filter(campaign=campaign, enabled=True).exclude(semantic_detail="")
                  .values_list("semantic_detail", flat=True).first())
        return _note(query, model, detail or f"no enabled source has vectors from {model}; lexical retrieval only")
    if semantic_floor(model) is None:
        return _note(query, model, f"{model} has no measured similarity floor, so its similarities are not trusted; "
                                   "lexical retrieval only")
    embedder = llm.embedder_for(model)
    try:
        (vector,) = async_to_sync(embedder.embed)([prefixes(model)[1] + query.text])
    except llm.NarratorError as error:
        return _note(query, model, f"the query could not be embedded ({error}); lexical retrieval only")
    return Query(query.text, query.standing_names, tuple(vector), model, "")


def retrieve(campaign, query, *, exclude_always_included=True):
    """Return the Retrieval for ``query`` in ``campaign``: enabled, ready sources of this campaign only."""
    query_terms = meaningful_terms(query.text)
    standing_terms = frozenset(term for name in query.standing_names for term in meaningful_terms(name))
    sources = Source.objects.filter(campaign=campaign, enabled=True)
    if exclude_always_included:
        sources = sources.filter(always_include=False)
    classes = dict(sources.values_list("id", "classification"))
    candidates = {}
    if query_terms and classes:
        for passage_id, source_id, score in _lexical(campaign.pk, query_terms, exclude_always_included):
            candidates[passage_id] = Candidate(passage_id, source_id, classes[source_id], lexical=score)
        for passage_id, terms in _matched_terms(query_terms, list(candidates)).items():
            candidates[passage_id] = _replace(candidates[passage_id], terms=frozenset(terms))
    floor = semantic_floor(query.model) if query.vector is not None else None
    semantic = {"used": floor is not None, "model": query.model, "floor": floor, "note": query.semantic_note}
    if floor is not None:
        ready = {pk for pk, state in sources.values_list("id", "semantic_state") if state == Source.IndexState.READY}
        for passage_id, source_id, cosine in _semantic(campaign.pk, query, ready, floor):
            existing = candidates.get(passage_id) or Candidate(passage_id, source_id, classes[source_id])
            candidates[passage_id] = _replace(existing, cosine=cosine)
    hits = rank(list(candidates.values()), query_terms=query_terms, standing_terms=standing_terms, floor=floor)
    passages = Passage.objects.select_related("source").in_bulk([hit.passage_id for hit in hits])
    return Retrieval(query.text, query_terms, hits, semantic, passages)


def _note(query, model, note):
    return Query(query.text, query.standing_names, None, model, note)


def _replace(candidate, **changes):
    return Candidate(**{**candidate.__dict__, **changes})


def _lexical(campaign_id, terms, exclude_always_included):
    expression = " OR ".join(_quoted(term) for term in terms)
    sql = f"""
        SELECT p.id, p.source_id, -bm25(knowledge_passage_fts)
        FROM knowledge_passage_fts
        JOIN knowledge_passage p ON p.id = knowledge_passage_fts.rowid
        JOIN knowledge_source s ON s.id = p.source_id
        WHERE knowledge_passage_fts MATCH %s AND p.campaign_id = %s AND s.enabled AND s.lexical_state = 'ready'
              {"AND NOT s.always_include" if exclude_always_included else ""}
        ORDER BY bm25(knowledge_passage_fts), p.id
        LIMIT %s
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [expression, campaign_id, LEXICAL_CANDIDATES])
        return cursor.fetchall()


def _matched_terms(terms, passage_ids):
    """Return {passage id: the query terms it matches}, through FTS5's own tokenizer (so stems agree)."""
    if not passage_ids:
        return {}
    ids = ",".join(str(int(pk)) for pk in passage_ids)
    parts = [f"SELECT rowid, {n} FROM knowledge_passage_fts WHERE knowledge_passage_fts MATCH %s AND rowid IN ({ids})"
             for n in range(len(terms))]
    matched = {}
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(parts), [_quoted(term) for term in terms])
        for passage_id, n in cursor.fetchall():
            matched.setdefault(passage_id, set()).add(terms[n])
    return matched


def _quoted(term):
    return '"' + term.replace('"', '""') + '"'


def _semantic(campaign_id, query, ready_sources, floor):
    ids, sources, matrix = _vectors(campaign_id, query.model)
    vector = np.asarray(query.vector, dtype=np.float32)
    if not len(ids) or matrix.shape[1] != vector.shape[0]:
        return []
    vector /= np.linalg.norm(vector) or 1.0
    cosines = matrix @ vector
    keep = (cosines >= floor) & np.isin(sources, np.fromiter(ready_sources, dtype=np.int64))
    return [(int(ids[i]), int(sources[i]), float(cosines[i])) for i in np.flatnonzero(keep)]


# The campaign's vectors as one normalised float32 matrix, kept between turns:
# reading 20,000 768-dim vectors out of SQLite costs far more than the 80 ms a
# hybrid retrieval may take. The stamp (count, newest id, newest vector time)
# changes whenever a vector is written or a passage deleted, and then the
# matrix is read again.
_cache = {}
_cache_lock = threading.Lock()


def _vectors(campaign_id, model):
    rows = Passage.objects.filter(campaign_id=campaign_id, embedding_model=model, embedding__isnull=False)
    stamp = tuple(rows.aggregate(n=Count("id"), top=Max("id"), at=Max("embedded_at")).values())
    key = (campaign_id, model)
    with _cache_lock:
        cached = _cache.get(key)
    if cached and cached[0] == stamp:
        return cached[1]
    data = list(rows.values_list("id", "source_id", "embedding"))
    if not data:
        value = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 0), np.float32))
    else:
        matrix = np.vstack([np.frombuffer(blob, dtype=np.float32) for _, _, blob in data])
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = matrix / np.where(norms == 0, 1, norms)
        value = (np.array([r[0] for r in data], np.int64), np.array([r[1] for r in data], np.int64), matrix)
    with _cache_lock:
        _cache[key] = (stamp, value)
    return value
