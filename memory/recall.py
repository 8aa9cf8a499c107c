"""What a character recalls now: seed 002 角色如何回忆 and 淡忘 (digest A.6-A.8, WP3). Pure.

The seed's pipeline, in its order, over one character's own perceptions and
beliefs (or the game master's events, owner ""):

1. three searches — scene cues (people and aliases weighted by relationship
   strength, the current place, shared tags and items), words (FTS5 over the
   text, gist, keywords and CJK pairs; the index passes its bm25 scores in) and
   vectors (cosine, counted only from the model's measured floor up);
2. ``fuse`` — each channel divided by its best, then ``Σ w·s / Σ w`` over the
   channels that ran, weights 1 / 1 / 1.5;
3. over-retrieval — ``over_retrieve × recall`` candidates (4 × 12), at most 60,
   by relevance, importance and recency; items faded below 5% are not kept;
4. rerank — ``0.7·r + 0.3·f`` when a reranker is given, the fused score alone
   (and the reason) when it fails;
5. selection — relevance, importance and recency weighed by retention, with
   maximal marginal relevance (``score − diversity · max similarity`` to those
   already chosen; cosine, or word overlap without vectors); a perception that
   supports a chosen belief is folded into it and never chosen beside it;
6. association — at most ``associate`` more items of importance ≥ 3 sharing a
   person, tag or place with a direct hit; none without a direct hit.

The result comes in story order, each item in the wording its retention
leaves it (exact, or its gist), with a report of every score. Nothing here
reads the database or calls a model: the index (``memory.recall_index``)
passes in the owner's items (as a ``Pool``, which it caches), the words
channel's scores and the cosines, and a reranker is any callable.
"""

import math
import re
import zlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np

from .ranking import FUNCTION_WORDS, fold_terms

# Seed 002 settings, with the seed's defaults (memory.recall, memory.overRetrieve,
# memory.diversity, memory.associate, memory.foldedFade).
RECALL = 12
OVER_RETRIEVE = 4
MAX_CANDIDATES = 60
DIVERSITY = 0.3
ASSOCIATE = 2
ASSOCIATE_MIN_IMPORTANCE = 3
FOLDED_FADE = 0.5

# "线索与词语权重为 1，语义权重为 1.5": a channel that did not run takes no part.
CHANNEL_WEIGHTS = {"cue": 1.0, "words": 1.0, "vectors": 1.5}

# "最终相关度由 70% 重排序分和 30% 融合检索分组成".
RERANK_WEIGHT = 0.7

# Raw cosine from which a vector counts, per embedding model (D5). The seed says
# "about 0.3"; this project gives semantic search only to a measured model.
#   nomic-embed-text: seed 004 §K measured 0.435 for an unrelated query against a
#   story passage and 0.593 for a paraphrase; 0.50 sits between (the floor
#   knowledge.retrieval uses). Measured on passages, not yet on perception-length
#   texts, and not on this machine (it has no embedding model): re-measure.
SEMANTIC_FLOORS = {"nomic-embed-text": 0.50}

# ▶ How relevance, importance and recency combine (the seed names the three, not
# their weights): relevance leads, so any hit outranks an unrelated memory of
# the same importance; importance and recency let "recent important memories"
# appear when nothing is cued, as the seed says they may.
RELEVANCE_WEIGHT = 0.6
IMPORTANCE_WEIGHT = 0.25
RECENCY_WEIGHT = 0.15

# ▶ Cue points before normalisation: a person present or named counts 1 plus the
# recaller's relationship strength toward them (0..1), the current place 1, each
# shared tag or item 1.
PERSON_CUE = 1.0
PLACE_CUE = 1.0
TAG_CUE = 1.0
ITEM_CUE = 1.0

# Fading (淡忘): R = 0.5 ^ (story days / half-life), half-life 6 days at
# importance 1, doubling per level, ×4 for beliefs.
DAY_MS = 86_400_000
BASE_HALF_LIFE_DAYS = 6.0
BELIEF_HALF_LIFE_FACTOR = 4.0
# ▶ D13, each to be re-measured: +50% half-life per earlier recall on the line;
# ±5% by record id; the wording gives way to the gist below R 0.5; an item below
# R 0.05 is "completely faded" and not kept, except importance 5 (at least its
# gist, as the seed says); a cue restores half of what was lost, for the wording.
RECALL_EXTENSION = 0.5
JITTER = 0.05
GIST_BELOW = 0.5
DROP_BELOW = 0.05
ALWAYS_KEPT_IMPORTANCE = 5
CUE_RESTORE = 0.5

# ▶ A query word held by more than half of the owner's memories is not searched
# (its weight ln(2) or less; it is function words in practice).
COMMON_TERM_SHARE = 0.5
COMMON_TERM_MIN_ITEMS = 20  # below this, a shared word may still be the one that tells two memories apart

KINDS = ("event", "perception", "belief")

# Scripts written without spaces: Han (with its extensions and compatibility
# block), kana. Korean is written with spaces, so unicode61 already splits it.
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\u31f0-\u31ff\U00020000-\U0002ffff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")


class Item(NamedTuple):
    """One recallable record of one owner, as the index holds it (a tuple: two thousand per recall)."""

    id: int
    slot: str  # the record's slot: its id for jitter, evidence and the report
    kind: str  # event | perception | belief
    text: str  # the owner's own wording
    gist: str  # what is left after fading
    importance: int  # 1-5 (a perception's is its event's)
    people: frozenset  # keys of the people involved
    tags: frozenset
    location: str  # place key, "" when unknown
    items: frozenset  # item keys
    at_ms: int | None  # story time (a perception's is its event's); None before the clock started
    depth: int  # the record's depth on the line
    terms: frozenset  # terms(text + gist): for diversity and the words worth searching
    uses: int = 0  # earlier recalls on this line
    supports: frozenset = frozenset()  # a belief's supporting perceptions (slots)
    contradicts: frozenset = frozenset()  # a belief's contradicting perceptions (slots)


@dataclass(frozen=True)
class Situation:
    """What the moment offers as cues; built by the caller from the state and the words of the scene."""

    text: str = ""
    people: frozenset = frozenset()  # keys of those present or named, not the one recalling
    strength: dict = field(default_factory=dict)  # person key -> relationship strength 0..1
    location: str = ""
    tags: frozenset = frozenset()
    items: frozenset = frozenset()  # item keys present or named

    @cached_property
    def terms(self):
        return terms(self.text)

    @property
    def cued(self):
        """Whether the moment offers a person, a place, a tag or an item (else the cue search does not run).

        Words alone are the words channel's search; they still match tags once the cue search runs.
        """
        return bool(self.people or self.location or self.tags or self.items)


class Recalled(NamedTuple):
    id: int
    slot: str
    kind: str
    text: str  # the wording the character recalls: exact, or the gist
    wording: str  # "exact" | "gist"
    disputed: bool  # a belief with contradicting evidence
    associated: bool  # brought by association, not by the search
    hit: bool  # matched a cue, a word or a vector (False: recalled for importance and recency alone)
    score: float
    retention: float


@dataclass
class Recall:
    memories: list  # [Recalled] in story order
    report: dict


def bigrams(text):
    """Return the two-character pairs of every run of CJK text (a run of one character stays itself)."""
    pairs = []
    for run in _CJK_RUN.findall(text):
        pairs.extend([run] if len(run) == 1 else [run[i:i + 2] for i in range(len(run) - 1)])
    return pairs


def terms(text):
    """Return the folded words of ``text`` that carry meaning, and the pairs of its CJK runs."""
    lowered = text.lower()
    words = []
    for word in _WORD.findall(_CJK_RUN.sub(" ", lowered)):
        word = word.replace("’", "'")
        if len(word) > 2 and word not in FUNCTION_WORDS and not word.isdigit():
            words.append(word)
    return fold_terms(words) | frozenset(bigrams(lowered))


def mentioned(text, aliases):
    """Return the keys whose name or alias ``text`` mentions; ``aliases`` maps a lowercased name to its key.

    Latin names match as whole words; a CJK name anywhere in the text.
    """
    lowered = text.lower()
    found = set()
    for name, key in aliases.items():
        if not name:
            continue
        if _CJK_RUN.search(name):
            if name in lowered:
                found.add(key)
        elif re.search(rf"(?<![^\W_]){re.escape(name)}(?![^\W_])", lowered):
            found.add(key)
    return frozenset(found)


def strength(familiarity, closeness):
    """Return relationship strength 0..1 from familiarity and closeness (each -1..1): ▶ their sum, halved."""
    return min(1.0, max(0.0, (familiarity + closeness) / 2))


def semantic_floor(model):
    """Return the measured floor of embedding ``model``, or None when it has not been measured."""
    return SEMANTIC_FLOORS.get(model.split(":")[0].rsplit("/", 1)[-1]) if model else None


def cue_scores(items, situation):
    """Return each item's raw cue points (see PERSON_CUE …) as an array (``items``: a list or a Pool)."""
    pool = items if isinstance(items, Pool) else Pool(items)
    scores = np.zeros(len(pool.items))
    for person in situation.people:
        found = pool.by_person.get(person)
        if found is not None:
            scores[found] += PERSON_CUE + situation.strength.get(person, 0.0)
    if situation.location and situation.location in pool.by_place:
        scores[pool.by_place[situation.location]] += PLACE_CUE
    for tag in situation.tags | situation.terms:
        found = pool.by_tag.get(tag)
        if found is not None:
            scores[found] += TAG_CUE
    for key in situation.items:
        found = pool.by_item.get(key)
        if found is not None:
            scores[found] += ITEM_CUE
    return scores


def normalised(raw):
    """Return ``raw`` divided by its best value (▶ as knowledge.retrieval.rank does); all zeros when none is > 0."""
    raw = np.nan_to_num(np.asarray(raw, dtype=np.float64), nan=0.0)
    raw = np.maximum(raw, 0.0)
    best = raw.max(initial=0.0)
    return raw / best if best > 0 else np.zeros_like(raw)


def vector_scores(cosines, floor):
    """Return the vector channel: cosines under ``floor`` (or missing) count 0, the rest divided by the best."""
    cosines = np.nan_to_num(np.asarray(cosines, dtype=np.float64), nan=-1.0)
    return normalised(np.where(cosines >= floor, cosines, 0.0))


def fuse(channels):
    """Return ``Σ w·s / Σ w`` over the channels that ran; ``channels`` maps a name to its normalised scores.

    A channel that did not run is absent (or None) and takes no part in the average.
    """
    ran = {name: scores for name, scores in channels.items() if scores is not None}
    if not ran:
        return None
    total = sum(CHANNEL_WEIGHTS[name] for name in ran)
    return sum(CHANNEL_WEIGHTS[name] * np.asarray(scores, dtype=np.float64) for name, scores in ran.items()) / total


def candidate_count(recall=RECALL, over_retrieve=OVER_RETRIEVE):
    """Return how many candidates to keep before the final choice: ``over_retrieve × recall``, at most 60."""
    return min(over_retrieve * recall, MAX_CANDIDATES)


def jitter(key):
    """Return the record's deterministic half-life factor, within ±JITTER (the seed's "slight variation by id")."""
    return 1 + JITTER * (2 * (zlib.crc32(key.encode()) / 0xFFFFFFFF) - 1)


def half_life_days(kind, importance, *, uses=0, folded=False, key=""):
    """Return the half-life in story days: 6·2^(i−1), ×4 for a belief, ×0.5 folded, +50% per recall, jittered."""
    days = BASE_HALF_LIFE_DAYS * 2 ** (min(max(int(importance), 1), 5) - 1)
    if kind == "belief":
        days *= BELIEF_HALF_LIFE_FACTOR
    if folded:
        days *= FOLDED_FADE
    days *= 1 + RECALL_EXTENSION * uses
    return days * jitter(key)


def retention(item, now_ms, *, flaky=True, folded=False):
    """Return (retention 0..1, half-life in days or None): 1 when flaky is off or story time is unknown."""
    if not flaky or now_ms is None or item.at_ms is None:
        return 1.0, None
    days = max(0.0, (now_ms - item.at_ms) / DAY_MS)
    life = half_life_days(item.kind, item.importance, uses=item.uses, folded=folded, key=item.slot)
    return 0.5 ** (days / life), life


def faded(item, value):
    """Return whether an item at retention ``value`` is completely faded (not kept)."""
    return value < DROP_BELOW and item.importance < ALWAYS_KEPT_IMPORTANCE


def rerank(reranker, query, documents):
    """Return (scores 0..1 or None, note): the reranker's judgement, or None and why it is not used."""
    if reranker is None:
        return None, "no reranker is configured; fused scores only"
    if not documents:
        return None, "nothing to rerank"
    try:
        scores = list(reranker(query, documents))
    except Exception as error:  # any failure of the service: the seed falls back to the fused score
        return None, f"the reranker failed ({error}); fused scores only"
    if len(scores) != len(documents):
        return None, (f"the reranker returned {len(scores)} scores for {len(documents)} candidates; "
                      "fused scores only")
    try:
        scores = [float(score) for score in scores]
    except (TypeError, ValueError):
        return None, "the reranker returned a score that is not a number; fused scores only"
    if any(not 0.0 <= score <= 1.0 for score in scores):
        return None, "the reranker returned a score outside 0-1; fused scores only"
    return scores, ""


def combined(rerank_scores, fused):
    """Return final relevance: ``0.7·rerank + 0.3·fused`` (the fused score alone without a rerank)."""
    fused = np.asarray(fused, dtype=np.float64)
    if rerank_scores is None:
        return fused
    return RERANK_WEIGHT * np.asarray(rerank_scores, dtype=np.float64) + (1 - RERANK_WEIGHT) * fused


def jaccard(a, b):
    """Return the word overlap of two term sets (diversity's similarity without vectors)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def mmr(scores, similarity, k, *, diversity=DIVERSITY, allowed=lambda chosen, i: True):
    """Return the indices chosen greedily by ``score − diversity · max similarity`` to those already chosen.

    Also return each chosen index's penalty. ``similarity(i, j)`` compares two
    indices; ``allowed(chosen, i)`` may refuse a candidate given the chosen.
    Ties go to the lower index.
    """
    scores = np.asarray(scores, dtype=np.float64)
    open_ = np.ones(len(scores), dtype=bool)
    best_similarity = np.zeros(len(scores))
    chosen, penalties = [], {}
    while open_.any() and len(chosen) < k:
        value = np.where(open_, scores - diversity * best_similarity, -np.inf)
        pick = int(np.argmax(value))  # the first of equal values: the lower index
        open_[pick] = False
        if not allowed(chosen, pick):
            continue
        chosen.append(pick)
        penalties[pick] = float(diversity * best_similarity[pick])
        for i in np.flatnonzero(open_).tolist():
            best_similarity[i] = max(best_similarity[i], similarity(i, pick))
    return chosen, penalties


class Pool:
    """One owner's items with what every recall of them needs, computed once.

    The index caches a Pool per owner and line while the items stay the same,
    so a recall over two thousand items does its per-item work in numpy: cue
    lookups through inverted indices, fading and preselection as arrays.
    """

    def __init__(self, items):
        self.items = items = list(items)
        n = len(items)
        self.by_slot = {item.slot: i for i, item in enumerate(items)}
        self.row_of_id = {item.id: i for i, item in enumerate(items)}
        self.folded_into = {}  # perception slot -> the beliefs it supports
        for item in items:
            if item.kind == "belief":
                for slot in item.supports:
                    self.folded_into.setdefault(slot, set()).add(item.slot)
        levels = np.array([min(max(int(item.importance), 1), 5) for item in items], dtype=np.float64)
        self.importance = (levels - 1) / 4 if n else np.zeros(0)
        self.always_kept = levels >= ALWAYS_KEPT_IMPORTANCE
        self.at_ms = np.array([np.nan if item.at_ms is None else item.at_ms for item in items], dtype=np.float64)
        self.uses = np.array([item.uses for item in items], dtype=np.float64)
        life = BASE_HALF_LIFE_DAYS * 2 ** (levels - 1)
        life *= np.array([BELIEF_HALF_LIFE_FACTOR if item.kind == "belief" else 1.0 for item in items])
        self.folded = np.array([item.slot in self.folded_into for item in items], dtype=bool)
        life *= np.where(self.folded, FOLDED_FADE, 1.0)
        self.base_life = life * np.array([jitter(item.slot) for item in items])
        order = sorted(range(n), key=lambda i: _story_order(items[i]))
        self.recency = np.zeros(n)
        self.recency[order] = np.linspace(0.0, 1.0, n) if n > 1 else 1.0
        self.by_person, self.by_tag, self.by_place, self.by_item = ({}, {}, {}, {})
        for i, item in enumerate(items):
            for person in item.people:
                self.by_person.setdefault(person, []).append(i)
            for tag in item.tags:
                self.by_tag.setdefault(tag, []).append(i)
            if item.location:
                self.by_place.setdefault(item.location, []).append(i)
            for key in item.items:
                self.by_item.setdefault(key, []).append(i)
        self.document_frequency = {}  # term -> how many items hold it
        for item in items:
            for term in item.terms:
                self.document_frequency[term] = self.document_frequency.get(term, 0) + 1
        for index in (self.by_person, self.by_tag, self.by_place, self.by_item):
            for key, found in index.items():
                index[key] = np.array(found, dtype=np.int64)

    def __len__(self):
        return len(self.items)

    def searchable(self, query_terms):
        """Return the query terms worth a full-text search: held by some item, and by at most half of them.

        A term no item holds cannot match; one in most of them says nothing
        about which (and its long posting list is most of a search's cost).
        """
        n = len(self.items)
        limit = n if n < COMMON_TERM_MIN_ITEMS else COMMON_TERM_SHARE * n
        return [term for term in query_terms if 0 < self.document_frequency.get(term, 0) <= limit]

    def retention(self, now_ms, *, flaky=True, uses=None):
        """Return (retention, half-life in days or NaN) of every item; ``uses`` maps slot -> earlier recalls."""
        n = len(self.items)
        if not flaky or now_ms is None:
            return np.ones(n), np.full(n, np.nan)
        counts = self.uses
        if uses:
            counts = counts.copy()
            for slot, count in uses.items():
                if slot in self.by_slot:
                    counts[self.by_slot[slot]] = count
        life = self.base_life * (1 + RECALL_EXTENSION * counts)
        days = np.maximum(0.0, (now_ms - self.at_ms) / DAY_MS)
        timed = ~np.isnan(self.at_ms)
        value = np.where(timed, 0.5 ** (np.where(timed, days, 0.0) / life), 1.0)
        return value, np.where(timed, life, np.nan)


def rank(items, situation, *, now_ms=None, words=None, cosines=None, floor=None, model="", vectors=None,
         recall=RECALL, over_retrieve=OVER_RETRIEVE, diversity=DIVERSITY, associate=ASSOCIATE, flaky=True,
         reranker=None, vector_note="", uses=None):
    """Return the Recall of ``items`` (one owner's, on one line; a list or a Pool) for ``situation``.

    ``words`` maps item id to the words channel's raw score (−bm25, larger is
    better) or is None when that search did not run; ``cosines`` is aligned with
    ``items`` (NaN without a vector) or None; ``floor`` the model's measured
    floor (None: no semantic channel); ``vectors`` is ``(unit matrix, rows)``
    for diversity. ``now_ms`` is the story clock (None: not started, nothing
    fades). ``reranker(query, documents)`` returns a score 0..1 per document.
    """
    pool = items if isinstance(items, Pool) else Pool(items)
    items = pool.items
    n = len(items)
    report = {
        "channels": {
            "cue": {"ran": situation.cued, "weight": CHANNEL_WEIGHTS["cue"]},
            "words": {"ran": words is not None, "weight": CHANNEL_WEIGHTS["words"]},
            "vectors": {"ran": False, "weight": CHANNEL_WEIGHTS["vectors"], "model": model, "floor": floor,
                        "note": vector_note},
        },
        "considered": n, "faded": 0, "candidate_limit": candidate_count(recall, over_retrieve), "candidates": 0,
        "rerank": {"used": False, "note": ""}, "flaky": flaky, "clock": now_ms is not None,
        "scores": [], "chosen": [], "associated": [],
    }
    if cosines is not None and floor is None and not vector_note:
        report["channels"]["vectors"]["note"] = (f"{model or 'the embedding model'} has no measured similarity floor, "
                                                 "so its similarities are not trusted; no semantic search")
    if not n:
        return Recall([], report)
    cue = normalised(cue_scores(pool, situation)) if situation.cued else None
    word = None
    if words is not None:
        word = np.zeros(n)
        for pk, score in words.items():
            i = pool.row_of_id.get(pk)
            if i is not None:
                word[i] = score
        word = normalised(word)
    vec = None
    if cosines is not None and floor is not None:
        vec = vector_scores(cosines, floor)
        report["channels"]["vectors"]["ran"] = True
    fused = fuse({"cue": cue, "words": word, "vectors": vec})
    if fused is None:
        fused = np.zeros(n)

    folded_into = pool.folded_into
    importance, recency = pool.importance, pool.recency
    kept_retention, lives = pool.retention(now_ms, flaky=flaky, uses=uses)
    dropped = (kept_retention < DROP_BELOW) & ~pool.always_kept
    report["faded"] = int(dropped.sum())
    kept = np.flatnonzero(~dropped)

    pre = RELEVANCE_WEIGHT * fused + IMPORTANCE_WEIGHT * importance + RECENCY_WEIGHT * recency
    limit = report["candidate_limit"]
    candidates = kept[np.lexsort((kept, -pre[kept]))][:limit].tolist()
    report["candidates"] = len(candidates)

    rerank_scores, note = rerank(reranker, situation.text, [items[i].text for i in candidates])
    report["rerank"] = {"used": rerank_scores is not None, "note": note}
    relevance = combined(rerank_scores, fused[candidates]) if candidates else np.zeros(0)

    cue_norm = cue if cue is not None else np.zeros(n)
    effective = [_restored(kept_retention[i], cue_norm[i]) for i in candidates]
    score = [(RELEVANCE_WEIGHT * relevance[c] + IMPORTANCE_WEIGHT * importance[i] + RECENCY_WEIGHT * recency[i])
             * effective[c] for c, i in enumerate(candidates)]
    similarity = _similarity(items, candidates, vectors)
    by_slot = {items[i].slot: c for c, i in enumerate(candidates)}
    outcome = {}

    def allowed(chosen, c):
        item = items[candidates[c]]
        beliefs = folded_into.get(item.slot, ())
        if any(by_slot.get(belief) in chosen for belief in beliefs):
            outcome[c] = "folded into a chosen belief"
            return False
        for slot in item.supports:  # a belief replaces its own evidence already chosen
            evidence = by_slot.get(slot)
            if evidence in chosen:
                chosen.remove(evidence)
                outcome[evidence] = "folded into a chosen belief"
        return True

    picked, penalties = mmr(score, similarity, recall, diversity=diversity, allowed=allowed)
    hits = [c for c in picked if fused[candidates[c]] > 0]

    associated = []
    if associate > 0 and hits:
        chosen_items = [items[candidates[c]] for c in picked]
        chosen_slots = {item.slot for item in chosen_items}
        blocked = {slot for item in chosen_items for slot in item.supports}
        hit_items = [items[candidates[c]] for c in hits]
        reached = np.zeros(n, dtype=bool)  # shares a person, a tag or a place with a hit
        for index, keys in ((pool.by_person, [p for hit in hit_items for p in hit.people]),
                            (pool.by_tag, [t for hit in hit_items for t in hit.tags]),
                            (pool.by_place, [hit.location for hit in hit_items if hit.location])):
            for key in set(keys):
                if key in index:
                    reached[index[key]] = True
        reached &= ~dropped & (pool.importance >= (ASSOCIATE_MIN_IMPORTANCE - 1) / 4)
        found = np.flatnonzero(reached)
        strength_of = (IMPORTANCE_WEIGHT * importance[found] + RECENCY_WEIGHT * recency[found]) * kept_retention[found]
        for i in found[np.lexsort((found, -strength_of))].tolist():
            slot = items[i].slot
            if slot in chosen_slots or slot in blocked or any(b in chosen_slots for b in folded_into.get(slot, ())):
                continue
            associated.append(i)
            if len(associated) == associate:
                break

    memories = [(_story_order(items[candidates[c]]),
                 _recalled(items[candidates[c]], effective[c], flaky, now_ms, score[c], kept_retention[candidates[c]],
                           associated=False, hit=bool(fused[candidates[c]] > 0))) for c in picked]
    memories += [(_story_order(items[i]),
                  _recalled(items[i], _restored(kept_retention[i], cue_norm[i]), flaky, now_ms, 0.0,
                            kept_retention[i], associated=True, hit=False)) for i in associated]
    memories = [recalled for _, recalled in sorted(memories, key=lambda pair: pair[0])]
    chosen_set = set(picked)
    for c, i in enumerate(candidates):
        item = items[i]
        report["scores"].append({
            "id": item.id, "slot": item.slot, "kind": item.kind, "importance": item.importance,
            "cue": _round(cue[i] if cue is not None else None),
            "words": _round(word[i] if word is not None else None),
            "vectors": _round(vec[i] if vec is not None else None),
            "cosine": _round(None if cosines is None or np.isnan(cosines[i]) else float(cosines[i])),
            "fused": _round(fused[i]), "rerank": _round(rerank_scores[c] if rerank_scores else None),
            "relevance": _round(relevance[c]), "recency": _round(recency[i]),
            "retention": _round(kept_retention[i]), "half_life_days": _round(lives[i]),
            "effective_retention": _round(effective[c]), "score": _round(score[c]),
            "diversity_penalty": _round(penalties.get(c)),
            "outcome": "chosen" if c in chosen_set else outcome.get(c, "not chosen"),
        })
    for i in associated:
        report["scores"].append({
            "id": items[i].id, "slot": items[i].slot, "kind": items[i].kind, "importance": items[i].importance,
            "retention": _round(kept_retention[i]), "half_life_days": _round(lives[i]), "outcome": "associated",
        })
    report["chosen"] = [items[candidates[c]].id for c in picked]
    report["associated"] = [items[i].id for i in associated]
    return Recall(memories, report)


def _story_order(item):
    """Occurrence order: story time first (items from before the clock started come first), then depth, id."""
    return (-1 if item.at_ms is None else item.at_ms, item.depth, item.id)


def _restored(value, cue):
    """Return retention after a cue brings back part of what faded (the seed's "线索可带回一部分")."""
    return value + CUE_RESTORE * cue * (1 - value) if cue > 0 else value


def _recalled(item, effective, flaky, now_ms, score, value, *, associated, hit):
    exact = not flaky or now_ms is None or item.at_ms is None or effective >= GIST_BELOW
    wording = "exact" if exact or not item.gist else "gist"
    return Recalled(item.id, item.slot, item.kind, item.text if wording == "exact" else item.gist, wording,
                    item.kind == "belief" and bool(item.contradicts), associated, hit, float(score), float(value))


def _similarity(items, candidates, vectors):
    """Return similarity(c1, c2) between candidates: cosine when both have vectors, word overlap otherwise."""
    matrix, rows = vectors if vectors is not None else (None, None)

    def similarity(a, b):
        i, j = candidates[a], candidates[b]
        if matrix is not None and rows[i] >= 0 and rows[j] >= 0:
            return float(matrix[rows[i]] @ matrix[rows[j]])
        return jaccard(items[i].terms, items[j].terms)

    return similarity


def _round(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), 4)
