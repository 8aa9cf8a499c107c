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

import asyncio
import re
import threading
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np
from asgiref.sync import async_to_sync, sync_to_async
from django.db import connection

from storyteller import llm, vendors

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

# FTS5 ranks this many of its matches before the campaign's conditions are
# applied (four times what is kept, for disabled sources and other
# campaigns); joining every match first cost 60 ms of the 110 ms a lexical
# retrieval took over 20,000 passages (bench "knowledge").
FTS_WINDOW = 160

# Admitted passages returned, best first. A knowledge budget of a third of
# what an 8,192-token window leaves holds about eight passages; twenty
# leaves the inspector plenty to show as "no budget for".
MAX_HITS = 20

# What a hit's passage is shown with (prompt, inspector, search page); any
# other field still loads, one query later, when something asks for it.
HIT_FIELDS = ("id", "source_id", "index", "heading_path", "text", "tokens",
              "source__id", "source__title", "source__filename", "source__classification", "source__hidden")

# The player's words come first in the query, then the scene: a long reply
# standing in for the scene adds terms whose only effect is cost.
MAX_QUERY_TERMS = 32

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


def query_texts(campaign, query):
    """Return (``query``, the texts to embed for it): no texts, and the reason on the query, when none are needed.

    Read-only and model-free: the caller embeds the texts (with
    ``query.model``), off the database's thread, and hands the vectors to
    ``embedded``.
    """
    model = embedding_model(campaign)
    if not Passage.objects.filter(campaign=campaign, embedding_model=model, source__enabled=True,
                                  source__semantic_state=Source.IndexState.READY).exists():
        detail = (Source.objects.filter(campaign=campaign, enabled=True).exclude(semantic_detail="")
                  .values_list("semantic_detail", flat=True).first())
        return _note(query, model, detail or f"no enabled source has vectors from {model}; lexical retrieval only"), []
    if semantic_floor(model) is None:
        return _note(query, model, f"{model} has no measured similarity floor, so its similarities are not trusted; "
                                   "lexical retrieval only"), []
    return replace(query, model=model), [prefixes(model)[1] + query.text]


def embedded(query, vectors=None, *, error=None):
    """Return ``query`` with its vector (``vectors``: one per text ``query_texts`` gave), or with why it has none."""
    if error is not None:
        return _note(query, query.model, f"the query could not be embedded ({error}); lexical retrieval only")
    (vector,) = vectors
    return Query(query.text, query.standing_names, tuple(vector), query.model, "")


async def aembed_query(campaign, query):
    """Return ``query`` with its vector, or with the reason semantic retrieval is off. One model call at most.

    The database is read on its own thread and the model is asked from the
    event loop, so a slow model server holds up nobody else.
    """
    query, texts = await sync_to_async(query_texts)(campaign, query)
    if not texts:
        return query
    embedder = await asyncio.to_thread(llm.embedder_for, query.model)
    try:
        return embedded(query, await embedder.embed(texts))
    except llm.NarratorError as error:
        return embedded(query, error=error)


def embed_query(campaign, query):
    """See aembed_query(); it waits for the model on the calling thread: for commands and tests only."""
    query, texts = query_texts(campaign, query)
    if not texts:
        return query
    embedder = llm.embedder_for(query.model)
    try:
        return embedded(query, async_to_sync(embedder.embed)(texts))
    except llm.NarratorError as error:
        return embedded(query, error=error)


def retrieve(campaign, query, *, exclude_always_included=True):
    """Return the Retrieval for ``query`` in ``campaign``: enabled, ready sources of this campaign only."""
    query_terms = meaningful_terms(query.text)[:MAX_QUERY_TERMS]
    standing_terms = frozenset(term for name in query.standing_names for term in meaningful_terms(name))
    library = library_index(campaign.pk)
    sources = {pk: source for pk, source in library.sources.items()
               if source.enabled and not (exclude_always_included and source.always_include)}
    candidates = {}
    if query_terms and sources:
        found = _lexical(campaign.pk, query_terms, exclude_always_included)
        matched = library.terms_in([pk for pk, _, _ in found], {_stem(term): term for term in query_terms})
        for passage_id, source_id, score in found:
            candidates[passage_id] = Candidate(passage_id, source_id, sources[source_id].classification,
                                               lexical=score, terms=matched[passage_id])
    floor = semantic_floor(query.model) if query.vector is not None else None
    semantic = {"used": floor is not None, "model": query.model, "floor": floor, "note": query.semantic_note}
    if floor is not None:
        ready = [pk for pk, source in sources.items() if source.semantic_state == Source.IndexState.READY]
        for passage_id, source_id, cosine in library.semantic(query.model, query.vector, ready, floor):
            existing = candidates.get(passage_id) or Candidate(passage_id, source_id,
                                                               sources[source_id].classification)
            candidates[passage_id] = replace(existing, cosine=cosine)
    hits = rank(list(candidates.values()), query_terms=query_terms, standing_terms=standing_terms,
                floor=floor)[:MAX_HITS]
    # Only what a hit shows: never the source's text (up to 1 MiB each) nor
    # the vectors, and none of the bookkeeping columns, whose conversion into
    # model fields cost a third of this read (bench "knowledge").
    passages = (Passage.objects.select_related("source").only(*HIT_FIELDS).order_by()
                .in_bulk([hit.passage_id for hit in hits]))
    return Retrieval(query.text, query_terms, hits, semantic, passages)


def _note(query, model, note):
    return Query(query.text, query.standing_names, None, model, note)


def _lexical(campaign_id, terms, exclude_always_included):
    """Return [(passage id, source id, -bm25)] best first: this campaign's enabled, indexed passages only.

    FTS5 ranks its own matches first (cheap: no join), then the campaign and
    source conditions keep what is eligible. When other campaigns' passages
    crowd the window, the full query with the conditions inside it runs
    instead, so isolation never costs recall.
    """
    if vendors.is_postgres():
        return _lexical_postgres(campaign_id, terms, exclude_always_included)
    expression = vendors.fts5_any(terms)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT rowid, rank FROM knowledge_passage_fts WHERE knowledge_passage_fts MATCH %s "
            "ORDER BY rank, rowid LIMIT %s", [expression, FTS_WINDOW])
        ranked = cursor.fetchall()
        eligible = _eligible(cursor, campaign_id, [pk for pk, _ in ranked], exclude_always_included)
        found = [(pk, eligible[pk], -rank) for pk, rank in ranked if pk in eligible][:LEXICAL_CANDIDATES]
        if len(found) == LEXICAL_CANDIDATES or len(ranked) < FTS_WINDOW:
            return found
        cursor.execute(f"""
            SELECT p.id, p.source_id, -bm25(knowledge_passage_fts)
            FROM knowledge_passage_fts
            JOIN knowledge_passage p ON p.id = knowledge_passage_fts.rowid
            JOIN knowledge_source s ON s.id = p.source_id
            WHERE knowledge_passage_fts MATCH %s AND p.campaign_id = %s AND s.enabled AND s.lexical_state = 'ready'
                  {"AND NOT s.always_include" if exclude_always_included else ""}
            ORDER BY bm25(knowledge_passage_fts), p.id
            LIMIT %s
        """, [expression, campaign_id, LEXICAL_CANDIDATES])
        return cursor.fetchall()


def _lexical_postgres(campaign_id, terms, exclude_always_included):
    """``_lexical`` on PostgreSQL: one statement, the campaign's conditions beside the GIN index's match.

    ts_rank_cd (cover density) stands for bm25: larger is better, no fixed range, divided by the best admitted
    score in ``rank`` like bm25's. FTS5's window before the join is not needed: PostgreSQL's planner filters
    the matches by campaign and source itself.
    """
    query, params = vendors.tsquery_any(terms)
    with connection.cursor() as cursor:
        cursor.execute(f"""
            SELECT p.id, p.source_id, ts_rank_cd(p.search, q.query) AS score
            FROM knowledge_passage p JOIN knowledge_source s ON s.id = p.source_id, (SELECT {query} AS query) q
            WHERE p.search @@ q.query AND p.campaign_id = %s AND s.enabled AND s.lexical_state = 'ready'
                  {"AND NOT s.always_include" if exclude_always_included else ""}
            ORDER BY score DESC, p.id
            LIMIT %s
        """, [*params, campaign_id, LEXICAL_CANDIDATES])
        return cursor.fetchall()


def _eligible(cursor, campaign_id, passage_ids, exclude_always_included):
    if not passage_ids:
        return {}
    ids = ",".join(str(int(pk)) for pk in passage_ids)
    cursor.execute(f"""
        SELECT p.id, p.source_id FROM knowledge_passage p JOIN knowledge_source s ON s.id = p.source_id
        WHERE p.id IN ({ids}) AND p.campaign_id = %s AND s.enabled AND s.lexical_state = 'ready'
              {"AND NOT s.always_include" if exclude_always_included else ""}
    """, [campaign_id])
    return dict(cursor.fetchall())


# Stems already computed, by word: a plain dict read is a third of the cost of
# an lru_cache hit, and the 40 candidates' 3,500 distinct words are looked up
# on every retrieval. Emptied when full, so it stays bounded.
_STEMS = {}
_STEMS_MAX = 65536


def _stem(word):
    """Return a crude stem, enough to map a marked token back to the query word FTS5 matched it for."""
    stem = _STEMS.get(word)
    if stem is None:
        if len(_STEMS) >= _STEMS_MAX:
            _STEMS.clear()
        stem = _STEMS[word] = _stem_of(word)
    return stem


def _stem_of(word):
    word = "".join(c for c in unicodedata.normalize("NFKD", word.lower()) if not unicodedata.combining(c))
    word = word.replace("’", "'").split("'")[0]
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""), ("ly", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            return word[: -len(suffix)] + keep
    return word


def _quoted(term):
    return '"' + term.replace('"', '""') + '"'


@dataclass(frozen=True)
class _SourceRow:
    updated_at: object
    classification: str
    enabled: bool
    always_include: bool
    semantic_state: str


class LibraryIndex:
    """One campaign's library as retrieval needs it, held between turns (bench "overhead", issue 16).

    The sources' settings come from one read per retrieval; each source's
    vectors are a unit matrix read once and kept while the source's
    ``updated_at`` stands (every write of vectors or passages goes through
    the importer, which touches it), so an import reads only the new source
    and a turn's cosines are one product per source. Each passage's word
    stems are kept once a search has read its text: they are what admission
    and the inspector compare with the query's terms.
    """

    def __init__(self, campaign_id, sources, previous=None):
        self.campaign_id, self.sources = campaign_id, sources
        self.stamp = tuple(sorted((pk, source.updated_at) for pk, source in sources.items()))
        kept = previous is not None and previous.stamp == self.stamp
        self._stems = previous._stems if kept else OrderedDict()
        self._blocks = {} if previous is None else {
            key: block for key, block in previous._blocks.items()
            if key[0] in sources and sources[key[0]].updated_at == key[1]}

    def terms_in(self, passage_ids, by_stem):
        """Return {passage id: the query terms it contains as whole words}; ``by_stem`` maps stem -> query term.

        FTS5 has already said the passages match; this says which terms, for
        admission and for the inspector. Asking FTS5 term by term cost 40 ms
        a query over 20,000 passages; comparing the stems of 40 passages,
        kept from their first reading, costs a set intersection each.
        """
        with _cache_lock:
            missing = [pk for pk in passage_ids if pk not in self._stems]
        if missing:
            rows = Passage.objects.filter(pk__in=missing).order_by().values_list("id", "heading_path", "text")
            words = {pk: set(_WORD.findall(f"{heading}\n{text}".lower())) for pk, heading, text in rows}
            # Prose shares most of its words between passages: each distinct word is stemmed once.
            stem_of = {word: _stem(word) for word in set().union(*words.values())}
            read = {pk: frozenset(map(stem_of.__getitem__, own)) for pk, own in words.items()}
            with _cache_lock:
                self._stems.update(read)
                while len(self._stems) > CACHED_PASSAGES:
                    self._stems.popitem(last=False)
        with _cache_lock:
            stems = {pk: self._stems.get(pk, frozenset()) for pk in passage_ids}
        return {pk: frozenset(by_stem[stem] for stem in by_stem.keys() & own) for pk, own in stems.items()}

    def semantic(self, model, vector, sources, floor):
        """Return [(passage id, source id, cosine)] at or over ``floor`` in ``sources``, source by source."""
        vector = np.asarray(vector, dtype=np.float32)
        vector /= np.linalg.norm(vector) or 1.0
        found = []
        for pk in sorted(sources):
            ids, matrix = self._block(pk, model)
            if not len(ids) or matrix.shape[1] != vector.shape[0]:
                continue
            # einsum, not @: BLAS's worker threads spin after a product and slowed the
            # next query's FTS5 search threefold on two cores (bench "knowledge").
            cosines = np.einsum("ij,j->i", matrix, vector)
            found += [(int(ids[i]), pk, float(cosines[i])) for i in np.flatnonzero(cosines >= floor)]
        return found

    def warm(self, model):
        """Read every source's vectors from ``model`` now, so the next turn finds them in memory."""
        for pk in self.sources:
            self._block(pk, model)

    def sample_vector(self, model):
        """Return one stored unit vector from ``model`` (for a warm-up's rehearsal), or None."""
        for pk in self.sources:
            ids, matrix = self._block(pk, model)
            if len(ids):
                return tuple(matrix[0].tolist())
        return None

    def _block(self, source_id, model):
        key = (source_id, self.sources[source_id].updated_at, model)
        block = self._blocks.get(key)
        if block is None:
            with _loading(self.campaign_id):  # a turn waits for the warm-up instead of doubling it
                block = self._blocks.get(key) or self._read_block(key)
        return block

    def _read_block(self, key):
        source_id, _, model = key
        rows = Passage.objects.filter(source_id=source_id, embedding_model=model, embedding__isnull=False)
        data = list(rows.order_by().values_list("id", "embedding"))
        dims = max((len(blob) // 4 for _, blob in data), default=0)
        data = [(pk, blob) for pk, blob in data if len(blob) // 4 == dims]
        matrix = np.zeros((0, dims), np.float32)
        if data:
            matrix = np.vstack([np.frombuffer(blob, dtype=np.float32) for _, blob in data])
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            matrix = matrix / np.where(norms == 0, 1, norms)
        block = self._blocks[key] = (np.array([pk for pk, _ in data], np.int64), matrix)
        return block


def library_index(campaign_id):
    """Return the campaign's LibraryIndex, its sources read now and its vectors and stems kept where unchanged."""
    # Through the cursor: a turn reads the sources up to three times (whether there is knowledge, the
    # always-included canon, retrieval), and the ORM took longer to build this read than SQLite to answer it.
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, updated_at, classification, enabled, always_include, semantic_state "
                       "FROM knowledge_source WHERE campaign_id = %s", [campaign_id])
        sources = {pk: _SourceRow(updated, cls, bool(enabled), bool(always), state)
                   for pk, updated, cls, enabled, always, state in cursor.fetchall()}
    with _cache_lock:
        previous = _libraries.get(campaign_id)
        if previous is not None and previous.sources == sources:
            _libraries.move_to_end(campaign_id)
            return previous
        index = _libraries[campaign_id] = LibraryIndex(campaign_id, sources, previous)
        _libraries.move_to_end(campaign_id)
        while len(_libraries) > CACHED_CAMPAIGNS:
            _libraries.popitem(last=False)
    return index


def _loading(campaign_id):
    """Return the lock held while ``campaign_id``'s vectors are read."""
    with _cache_lock:
        return _locks.setdefault(campaign_id, threading.RLock())


def forget():
    """Drop every cached library (tests do, since a rolled-back test's ids come back with other rows)."""
    with _cache_lock:
        _libraries.clear()
        _STEMS.clear()


# The libraries of the campaigns played lately, least recently used first. Reading 20,000
# 768-dim vectors out of SQLite takes about 750 ms, far more than a retrieval may take.
_libraries = OrderedDict()
CACHED_CAMPAIGNS = 8
CACHED_PASSAGES = 20_000  # stems kept per campaign: a few megabytes
_cache_lock = threading.RLock()
_locks = {}  # campaign id -> the lock held while its vectors are read
