"""Rank the eligible memories for one turn (seed 000 §20-§22, as implemented in v1.1 WP-B.2).

    semantic = 0.6·cos(input, memory) + 0.4·cos(context, memory)   (either alone when the other is empty)
    lexical  = Σ w(t) over the input's terms the memory holds / Σ w(t) over all the input's terms
    w(t)     = ln((N + 1) / (df(t) + 1))     N eligible memories, df(t) of them holding t
    final    = semantic + 0.15·lexical

Pins come first and always, counted toward ``top_k``; the rest fill it best
first, ties by id, skipping a repeat of a memory already chosen. Everything
here is pure: the caller has already filtered eligibility (campaign, lineage,
not forgotten, enabled) and embedded the query.
"""

import re
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

INPUT_WEIGHT = 0.6
CONTEXT_WEIGHT = 0.4
# Chosen by sweep in seed 000 §20 (0 … 0.5): the smallest weight at which the
# lexical term alone lifts a planting-era memory into top_k, while no
# rare-word control lets an unrelated memory pass a semantically relevant one.
LEXICAL_WEIGHT = 0.15
MEMORY_TOP_K = 5

# nomic-embed-text: distinct facts stop appearing above 0.91 and restatements
# of one fact sit above 0.93 (seed 000 §22, M6 measurement). A property of the
# embedding model, not a universal constant; measured there, not on this
# machine, which has no embedding model.
REDUNDANT_SIMILARITY = 0.93

_NAME = re.compile(r"\b[A-Z][\w’'-]*")
# Function words: never a name, and no evidence that two texts are about the same thing.
FUNCTION_WORDS = frozenset("""a an and as at but by for from he her his i if in it its of on or she so that the their
then there these they this those to we when where while who you your""".split())


class Candidate(NamedTuple):
    """One eligible memory (a tuple: ten thousand are built per turn)."""

    id: int
    authority: str
    pinned: bool
    terms: frozenset  # folded meaningful terms of the memory's text
    names: frozenset = frozenset()  # the people, places and things it names (names_in)


class Scored(NamedTuple):
    id: int
    authority: str
    pinned: bool
    semantic: float | None  # None when the memory or the query has no vector
    lexical: float
    final: float


@dataclass
class Selection:
    used: list  # [Scored], pins first, then best first
    considered: int
    suppressed: list = field(default_factory=list)  # [{"id", "repeats", "cosine"}]
    weights: dict = field(default_factory=dict)  # input term -> rarity weight this turn


def fold_terms(words):
    """Return ``words`` with possessives dropped and a plural ``s`` folded, as a set (no stemmer)."""
    folded = set()
    for word in words:
        word = word.replace("’", "'").split("'")[0]
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        if word:
            folded.add(word)
    return frozenset(folded)


def names_in(text):
    """Return the capitalised words of ``text`` (who and what it names), lowercased and folded."""
    return fold_terms(w.lower() for w in _NAME.findall(text) if w.lower() not in FUNCTION_WORDS)


def semantic_scores(matrix, rows, input_vector=None, context_vector=None):
    """Return the semantic score of each candidate, NaN where it has no vector; None with no query vector.

    ``matrix`` holds unit vectors; ``rows[i]`` is candidate i's row in it, or -1.
    The query vectors are normalised here.
    """
    given = [(vector, weight) for vector, weight in ((input_vector, INPUT_WEIGHT), (context_vector, CONTEXT_WEIGHT))
             if vector is not None]
    if not given:
        return None
    queries = np.array([np.asarray(vector, dtype=np.float32) for vector, _ in given])
    queries /= np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    # Either cosine alone when the other text is empty. einsum, not @: BLAS's worker threads spin
    # after a product and slow whatever the turn does next on two cores (as knowledge.retrieval found).
    weights = np.array([weight for _, weight in given], dtype=np.float32) if len(given) == 2 else np.ones(1, np.float32)
    scores = np.einsum("ij,j->i", matrix, np.einsum("kj,k->j", queries, weights))
    rows = np.asarray(rows, dtype=np.int64)
    return np.where(rows >= 0, scores[np.maximum(rows, 0)], np.nan)


def rank(candidates, input_terms, *, semantic=None, matrix=None, rows=None, top_k=MEMORY_TOP_K):
    """Return the Selection for ``candidates``.

    ``semantic`` is semantic_scores() aligned with ``candidates`` (None: lexical
    only); ``matrix`` and ``rows`` their unit vectors, for redundancy.
    """
    ids = np.fromiter((c.id for c in candidates), dtype=np.int64, count=len(candidates))
    pinned = np.fromiter((c.pinned for c in candidates), dtype=bool, count=len(candidates))
    return rank_rows(ids, pinned, [c.authority for c in candidates], [c.names for c in candidates],
                     holders(input_terms, candidates), input_terms, semantic=semantic, matrix=matrix, rows=rows,
                     top_k=top_k)


def holders(input_terms, candidates):
    """Return, for each input term, the ascending indices of the candidates whose terms hold it."""
    found = [[] for _ in input_terms]
    row_of = {term: row for row, term in enumerate(input_terms)}
    wanted = frozenset(input_terms)
    for column, c in enumerate(candidates):
        if not wanted.isdisjoint(c.terms):  # most memories share no word with the input: one C-level test
            for term in wanted.intersection(c.terms):
                found[row_of[term]].append(column)
    return [np.array(columns, dtype=np.int64) for columns in found]


def rank_rows(ids, pinned, authority, names, holding, input_terms, *, semantic=None, matrix=None, rows=None,
              top_k=MEMORY_TOP_K):
    """Return the Selection for candidates given as arrays: what ``rank`` does, with no per-candidate Python.

    ``ids`` and ``pinned`` are arrays; ``authority[i]`` and ``names[i]`` are
    read only for the candidates the loop reaches; ``holding[t]`` holds the
    indices of the candidates that hold ``input_terms[t]`` (``holders``, or
    the turn's in-process index of the bank). Only candidates holding some
    input term get a lexical score; every other's is 0.
    """
    n = len(ids)
    counts = np.array([len(found) for found in holding], dtype=np.float64)
    weights = np.log((n + 1) / (counts + 1)) if n and len(holding) else np.zeros(len(holding))
    total = float(weights.sum())
    lexical = np.zeros(n)
    if total > 0:
        held = np.unique(np.concatenate(holding))
        small = np.zeros((len(holding), len(held)))
        for row, found in enumerate(holding):
            small[row, np.searchsorted(held, found)] = 1.0
        lexical[held] = (weights @ small) / total
    sem = np.zeros(n) if semantic is None else np.nan_to_num(np.asarray(semantic, np.float64))
    final = sem + LEXICAL_WEIGHT * lexical

    def scored(i):
        value = None if semantic is None or np.isnan(semantic[i]) else float(semantic[i])
        return Scored(int(ids[i]), authority[i], bool(pinned[i]), value, float(lexical[i]), float(final[i]))

    pins = _best_first(np.flatnonzero(pinned), final, ids).tolist()
    reach = 4 * top_k + 16  # how far down the loop usually goes; further only when repeats take it there
    while True:
        order = _best_first(None, final, ids, reach)
        chosen, suppressed = list(pins), []
        for i in order.tolist():
            if len(chosen) >= top_k:
                break
            if pinned[i]:
                continue
            repeat = _repeats(i, chosen, authority, names, matrix, rows, semantic)
            if repeat is not None:
                suppressed.append({"id": int(ids[i]), "repeats": int(ids[repeat[0]]), "cosine": repeat[1]})
                continue
            chosen.append(i)
        if len(chosen) >= top_k or len(order) == n:
            break
        reach *= 4
    return Selection([scored(i) for i in chosen], n, suppressed, dict(zip(input_terms, weights.tolist())))


def _best_first(among, final, ids, reach=None):
    """Return candidate indices (``among``, or all) best ``final`` first, ties by id: at least the first ``reach``.

    Only what can be among the best ``reach`` is sorted: a full sort of
    10,000 scores was a fifth of a memory retrieval (bench "overhead").
    """
    among = np.arange(len(final)) if among is None else among
    if reach is not None and reach < len(among):
        threshold = np.partition(final[among], len(among) - reach)[len(among) - reach]
        among = among[final[among] >= threshold]  # everything tied with the last one kept, too
    return among[np.lexsort((ids[among], -final[among]))]


def _repeats(i, chosen, authority, names, matrix, rows, semantic):
    """Return (index, cosine) of a chosen memory ``i`` repeats, or None.

    A repeat has the same authority (an inference never suppresses a record,
    nor the reverse), a cosine at REDUNDANT_SIMILARITY or above, and names
    nobody and nothing the chosen one does not: "Mara promised to return before
    dawn" and "Aldric promised to return before dawn" are two facts however
    close their vectors are.
    """
    if matrix is None or semantic is None or np.isnan(semantic[i]):
        return None
    for j in chosen:
        if authority[j] != authority[i] or np.isnan(semantic[j]) or names[j] != names[i]:
            continue
        cosine = float(matrix[rows[i]] @ matrix[rows[j]])
        if cosine >= REDUNDANT_SIMILARITY:
            return j, cosine
    return None
