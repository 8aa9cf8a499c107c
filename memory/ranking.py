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
    holding = _holding(input_terms, candidates)
    weights = _weights(holding, len(candidates))
    total = float(weights.sum())
    lexical = (weights @ holding) / total if total > 0 else np.zeros(len(candidates))
    sem = np.zeros(len(candidates)) if semantic is None else np.nan_to_num(np.asarray(semantic, np.float64))
    final = sem + LEXICAL_WEIGHT * lexical
    ids = np.fromiter((c.id for c in candidates), dtype=np.int64, count=len(candidates))
    order = np.lexsort((ids, -final)) if len(candidates) else np.zeros(0, np.int64)

    def scored(i):
        c = candidates[i]
        value = None if semantic is None or np.isnan(semantic[i]) else float(semantic[i])
        return Scored(c.id, c.authority, c.pinned, value, float(lexical[i]), float(final[i]))

    chosen = [i for i in order if candidates[i].pinned]
    suppressed = []
    for i in order:
        if len(chosen) >= top_k:
            break
        if candidates[i].pinned:
            continue
        repeat = _repeats(i, chosen, candidates, matrix, rows, semantic)
        if repeat is not None:
            suppressed.append({"id": candidates[i].id, "repeats": candidates[repeat[0]].id, "cosine": repeat[1]})
            continue
        chosen.append(i)
    return Selection([scored(i) for i in chosen], len(candidates), suppressed,
                     dict(zip(input_terms, weights.tolist())))


def _holding(input_terms, candidates):
    """Return a (terms × candidates) 0/1 matrix: which candidate holds which input term."""
    holding = np.zeros((len(input_terms), len(candidates)))
    row_of = {term: row for row, term in enumerate(input_terms)}
    wanted = frozenset(input_terms)
    for column, c in enumerate(candidates):
        if not wanted.isdisjoint(c.terms):  # most memories share no word with the input: one C-level test
            for term in wanted.intersection(c.terms):
                holding[row_of[term], column] = 1.0
    return holding


def _weights(holding, n):
    return np.log((n + 1) / (holding.sum(axis=1) + 1)) if holding.size else np.zeros(len(holding))


def _repeats(i, chosen, candidates, matrix, rows, semantic):
    """Return (index, cosine) of a chosen memory ``i`` repeats, or None.

    A repeat has the same authority (an inference never suppresses a record,
    nor the reverse), a cosine at REDUNDANT_SIMILARITY or above, and names
    nobody and nothing the chosen one does not: "Mara promised to return before
    dawn" and "Aldric promised to return before dawn" are two facts however
    close their vectors are.
    """
    if matrix is None or semantic is None or np.isnan(semantic[i]):
        return None
    candidate = candidates[i]
    for j in chosen:
        other = candidates[j]
        if other.authority != candidate.authority or np.isnan(semantic[j]) or other.names != candidate.names:
            continue
        cosine = float(matrix[rows[i]] @ matrix[rows[j]])
        if cosine >= REDUNDANT_SIMILARITY:
            return j, cosine
    return None
