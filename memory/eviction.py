"""Which memories go when the bank is over capacity (seed 000 §21, seed 004 §F).

Least-recently-used alone threw away the only memory of an early stretch first:
a fact nothing recent mentions is never retrieved, so it ages out. The order
here thins the bank where it is densest instead:

- each ranged memory is judged by the hole its removal would leave between
  the end of the memory before it and the start of the memory after it; the
  smallest hole goes first (a memory whose start another shares leaves none);
- the earliest and the latest memory by position are not candidates;
- among equal holes the least recently used goes first (last use, else
  creation), then the less used, then the lower id;
- pinned memories are never taken and count as coverage;
- rangeless memories and the two boundaries follow, least recently used first.

Pure: it reads no text and no vectors, and decides only ``forgotten``.
"""

import heapq
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

MEMORY_BANK_CAPACITY = 80


@dataclass(frozen=True, slots=True)
class Entry:
    id: int
    start: int | None
    end: int | None
    pinned: bool
    recency: float  # last use, else creation, as a timestamp
    uses: int


def to_evict(entries, capacity=MEMORY_BANK_CAPACITY, *, frozen=()):
    """Return the ids to mark forgotten so that ``entries`` (the unforgotten bank) fit ``capacity``.

    ``frozen`` ids (written by this pass) are never taken; pins never are. The
    bank may stay over capacity only when nothing else is left to take.
    """
    excess = len(entries) - capacity
    if excess <= 0:
        return []
    order = eviction_order(entries, frozen=frozen)
    return order[:excess]


def eviction_order(entries, *, frozen=()):
    """Return every evictable id, first to go first."""
    frozen = set(frozen)
    order = _by_coverage([e for e in entries if e.start is not None], frozen)
    taken = set(order)
    rest = [e for e in entries if e.id not in taken and not e.pinned and e.id not in frozen]
    rest.sort(key=attrgetter("recency", "uses", "id"))
    return order + [e.id for e in rest]


def _by_coverage(ranged, frozen):
    """Return the ids of the coverage candidates among ``ranged``, smallest hole first.

    The candidates are the ranged memories neither pinned, frozen, nor the
    earliest or latest by (start, end, id). A linked list over the positions,
    and the candidates in buckets by their current hole. Taking a memory
    changes only its two neighbours' holes, so those are recomputed there and
    then and the neighbour is filed under its new hole; an entry filed under
    a hole it no longer has is skipped. The smallest hole is taken first,
    its memories in tie order (ranks ascending). O(n log n) over the bank.

    Both sorts and the first holes are numpy over plain arrays; the loop runs
    on lists of ints indexed by tie rank (candidates 0..m-1 in tie order, the
    rest after). The heap this replaces re-checked a candidate only when it
    was popped: three heap operations per memory taken, about 1.5 times the
    time over 10,000 memories (bench "memory"), and a hole that a nested range
    shrank was noticed too late.
    """
    n = len(ranged)
    if n < 3:  # the earliest and the latest are never candidates
        return []
    ids, starts, ends = (np.fromiter(map(attrgetter(name), ranged), np.int64, n) for name in ("id", "start", "end"))
    at = np.lexsort((ids, ends, starts))  # position -> index into ranged
    candidate = ~np.fromiter(map(attrgetter("pinned"), ranged), bool, n)[at]
    if frozen:
        candidate &= ~np.isin(ids[at], np.fromiter(frozen, np.int64, len(frozen)))
    candidate[0] = candidate[-1] = False
    among = np.flatnonzero(candidate)  # positions of the candidates
    m = len(among)
    if not m:
        return []
    chosen = at[among]
    recency = np.fromiter(map(attrgetter("recency"), ranged), np.float64, n)[chosen]
    uses = np.fromiter(map(attrgetter("uses"), ranged), np.int64, n)[chosen]
    # The tie-break (least recently used, less used, lower id) never changes: ranked once.
    by_rank = np.concatenate((among[np.lexsort((ids[chosen], uses, recency))], np.flatnonzero(~candidate)))
    rank_at = np.empty(n, np.int64)  # position -> rank
    rank_at[by_rank] = np.arange(n)
    prev = np.full(n, -1, np.int64)
    nxt = np.full(n, -1, np.int64)
    prev[rank_at[1:]] = rank_at[:-1]
    nxt[rank_at[:-1]] = rank_at[1:]
    starts, ends, ids = starts[at][by_rank], ends[at][by_rank], ids[at][by_rank]
    # Boundaries are never candidates, so a candidate always has both neighbours.
    holes = np.maximum(starts[nxt[:m]] - ends[prev[:m]] - 1, 0)
    by_hole = np.argsort(holes, kind="stable")  # ranks by hole, in rank order within a hole
    cuts = (np.flatnonzero(np.diff(holes[by_hole])) + 1).tolist()
    levels = holes[by_hole][[0, *cuts]].tolist()  # ascending: already a heap
    buckets = dict(zip(levels, (part.tolist() for part in np.split(by_hole, cuts))))
    hole_of = holes.tolist()  # rank -> its hole now; -1 once taken
    after_end = (ends + 1).tolist()
    starts, ids, prev, nxt = starts.tolist(), ids.tolist(), prev.tolist(), nxt.tolist()
    order = []
    take, push = order.append, heapq.heappush
    while levels:
        level = heapq.heappop(levels)
        members = buckets.pop(level)
        members.sort()
        for index, rank in enumerate(members):
            if hole_of[rank] != level:
                continue  # taken, or its hole has changed since it was filed here
            hole_of[rank] = -1
            take(ids[rank])
            before, after = prev[rank], nxt[rank]
            nxt[before], prev[after] = after, before
            # The neighbours' holes now span the taken memory; each candidate neighbour is filed under its new
            # hole. Written out twice: a loop over the pair cost an eighth of the ordering (bench "memory").
            jumped = False
            if before < m:
                hole = starts[after] - after_end[prev[before]]
                if hole < 0:
                    hole = 0  # overlapping neighbours: no hole
                if hole != hole_of[before]:
                    hole_of[before] = hole
                    bucket = buckets.get(hole)
                    if bucket is None:
                        buckets[hole] = [before]
                        push(levels, hole)
                    else:
                        bucket.append(before)
                    jumped = hole <= level
            if after < m:
                hole = starts[nxt[after]] - after_end[before]
                if hole < 0:
                    hole = 0
                if hole != hole_of[after]:
                    hole_of[after] = hole
                    bucket = buckets.get(hole)
                    if bucket is None:
                        buckets[hole] = [after]
                        push(levels, hole)
                    else:
                        bucket.append(after)
                    jumped |= hole <= level
            if jumped:
                # A range nested in another can shrink a neighbour's hole to this level or below it:
                # file the rest of this level again so the smallest hole, then the lowest rank, still goes next.
                rest = members[index + 1:]
                if level in buckets:
                    buckets[level] += rest
                elif rest:
                    buckets[level] = rest
                    push(levels, level)
                break
    return order
