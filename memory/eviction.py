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
    ranged = sorted((e for e in entries if e.start is not None), key=lambda e: (e.start, e.end, e.id))
    boundaries = {ranged[0].id, ranged[-1].id} if ranged else set()
    candidate = [not e.pinned and e.id not in frozen and e.id not in boundaries for e in ranged]
    order = _by_coverage(ranged, candidate)
    taken = set(order)
    rest = [e for e in entries if e.id not in taken and not e.pinned and e.id not in frozen]
    rest.sort(key=lambda e: (e.recency, e.uses, e.id))
    return order + [e.id for e in rest]


def _by_coverage(ranged, candidate):
    """Return the ids of the candidates of ``ranged`` (sorted by position), smallest hole first.

    A linked list over the positions and a heap of holes. A hole only grows
    (a removal widens its neighbours'), so an entry is re-checked when it is
    popped and pushed back with its current hole if that grew: each memory
    sits in the heap once, and no update is pushed that is never needed.
    O(n log n) over the bank.
    """
    n = len(ranged)
    starts = [e.start for e in ranged]
    ends = [e.end for e in ranged]
    prev = list(range(-1, n - 1))
    nxt = list(range(1, n + 1))
    # The tie-break (least recently used, less used, lower id) never changes, so it is ranked once and the
    # heap holds plain integers, hole * n + tie rank: comparing ints is what makes 10,000 fit in 50 ms.
    ties = sorted((i for i in range(n) if candidate[i]), key=lambda i: (ranged[i].recency, ranged[i].uses,
                                                                         ranged[i].id))
    # Boundaries are never candidates, so a candidate always has both neighbours.
    heap = [max(0, starts[i + 1] - ends[i - 1] - 1) * n + rank for rank, i in enumerate(ties)]
    heapq.heapify(heap)
    pop, replace = heapq.heappop, heapq.heapreplace
    order = []
    while heap:
        hole, rank = divmod(heap[0], n)
        i = ties[rank]
        before, after = prev[i], nxt[i]
        current = starts[after] - ends[before] - 1
        if current < 0:  # overlapping neighbours: no hole
            current = 0
        if current != hole:
            replace(heap, current * n + rank)
            continue
        pop(heap)
        order.append(ranged[i].id)
        nxt[before], prev[after] = after, before
    return order
