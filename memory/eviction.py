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
    earliest or latest by (start, end, id). A linked list over the positions
    and a heap of holes. A hole only grows (a removal widens its
    neighbours'), so an entry is re-checked when it is popped and pushed back
    with its current hole if that grew: each memory sits in the heap once.
    O(n log n) over the bank.

    Both sorts and the first holes are numpy over plain arrays; the loop runs
    on lists of ints indexed by tie rank (candidates 0..m-1 in tie order, the
    rest after), so a heap key ``hole << shift | rank`` names its memory directly.
    Python sort keys over 10,000 Entry objects and a rank-to-position lookup
    per step cost 76 ms where this takes 31 (10,000 memories, bench "memory").
    """
    n = len(ranged)
    if n < 3:  # the earliest and the latest are never candidates
        return []
    ids = np.fromiter((e.id for e in ranged), np.int64, n)
    starts = np.fromiter((e.start for e in ranged), np.int64, n)
    ends = np.fromiter((e.end for e in ranged), np.int64, n)
    at = np.lexsort((ids, ends, starts))  # position -> index into ranged
    candidate = np.fromiter((not e.pinned for e in ranged), bool, n)[at]
    if frozen:
        candidate &= ~np.isin(ids[at], np.fromiter(frozen, np.int64, len(frozen)))
    candidate[0] = candidate[-1] = False
    among = np.flatnonzero(candidate)  # positions of the candidates
    m = len(among)
    if not m:
        return []
    chosen = at[among]
    recency = np.fromiter((ranged[i].recency for i in chosen.tolist()), np.float64, m)
    uses = np.fromiter((ranged[i].uses for i in chosen.tolist()), np.int64, m)
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
    shift = n.bit_length()  # a key is hole << shift | rank: ordered by hole, then rank
    heap = np.sort(holes << shift | np.arange(m)).tolist()  # sorted: already a heap
    mask = (1 << shift) - 1
    after_end = (ends + 1).tolist()
    starts, ids, prev, nxt = starts.tolist(), ids.tolist(), prev.tolist(), nxt.tolist()
    pop, replace = heapq.heappop, heapq.heapreplace
    order = []
    take = order.append
    while heap:
        key = heap[0]
        rank = key & mask
        before, after = prev[rank], nxt[rank]
        hole = starts[after] - after_end[before]
        fresh = (hole << shift | rank) if hole > 0 else rank  # overlapping neighbours: no hole
        if fresh != key:
            replace(heap, fresh)
            continue
        pop(heap)
        take(ids[rank])
        nxt[before], prev[after] = after, before
    return order
