"""Eviction: coverage-aware order, boundaries kept, pins never taken, the frozen bank (seed 000 §21, seed 004 §F)."""

from memory import eviction
from memory.eviction import Entry


def block(pk, k, *, recency=None, uses=0, pinned=False):
    """A memory of block ``k`` (depths 6k..6k+5); by default, used more recently the later it is."""
    return Entry(pk, 6 * k, 6 * k + 5, pinned, float(k if recency is None else recency), uses)


def test_an_early_memory_never_used_again_is_not_evicted_first():
    # Seed 004 §F: the only memory of the opening stretch, last used long ago.
    bank = [block(1, 0, recency=0)] + [block(k + 1, k, recency=100 + k) for k in range(1, 7)]
    assert 1 not in eviction.to_evict(bank, capacity=6)
    assert eviction.eviction_order(bank)[-2:] != [1]


def test_the_smallest_hole_goes_first_so_the_bank_thins_where_it_is_densest():
    # Blocks 0, 1, 2 dense, then 5 and 9: removing 1 leaves a 6-depth hole, removing 5 an 18-depth one.
    bank = [block(1, 0), block(2, 1), block(3, 2), block(4, 5), block(5, 9)]
    assert eviction.eviction_order(bank)[0] == 2


def test_a_memory_whose_start_another_shares_leaves_no_hole_and_goes_first():
    bank = [block(1, 0), block(2, 3, recency=50), block(3, 3, recency=60), block(4, 6)]
    assert eviction.eviction_order(bank)[0] == 2


def test_among_equal_holes_the_least_recently_used_goes_first_then_the_less_used_then_the_lower_id():
    bank = [block(1, 0), block(2, 2, recency=5), block(3, 4, recency=1), block(4, 6, recency=9), block(9, 8)]
    assert eviction.eviction_order(bank)[0] == 3
    tied = [block(1, 0), block(5, 2, recency=1, uses=2), block(3, 4, recency=1, uses=1),
            block(4, 6, recency=1, uses=1), block(9, 8)]
    assert eviction.eviction_order(tied)[:2] == [3, 4]


def test_the_earliest_and_latest_are_kept_until_no_coverage_candidate_remains():
    bank = [block(1, 0, recency=0), block(2, 1, recency=99), block(3, 2, recency=98), block(4, 3, recency=1)]
    order = eviction.eviction_order(bank)
    assert set(order[:2]) == {2, 3}
    assert order[2:] == [1, 4]  # then the boundaries, least recently used first


def test_pinned_memories_are_never_taken_and_count_as_coverage():
    bank = [block(1, 0), block(2, 1, pinned=True), block(3, 2), block(4, 3)]
    assert 2 not in eviction.eviction_order(bank)
    assert eviction.to_evict([block(1, 0, pinned=True), block(2, 1, pinned=True)], capacity=1) == []


def test_a_memory_is_never_evicted_by_the_pass_that_wrote_it():
    bank = [block(1, 0), block(2, 1), block(3, 2, recency=-5), block(4, 3)]
    assert 3 not in eviction.to_evict(bank, capacity=2, frozen=[3])


def test_rangeless_memories_go_least_recently_used_after_the_coverage_candidates():
    bank = [block(1, 0), block(2, 1), block(3, 2), Entry(7, None, None, False, -1.0, 0)]
    assert eviction.eviction_order(bank) == [2, 7, 1, 3]


def test_the_kept_bank_starts_at_the_opening_and_has_no_large_hole():
    bank = [block(k + 1, k, recency=k) for k in range(300)]  # 1,800 actions, nothing ever retrieved again
    gone = set(eviction.to_evict(bank, capacity=80))
    kept = sorted((e for e in bank if e.id not in gone), key=lambda e: e.start)
    assert len(kept) == 80 and kept[0].start == 0 and kept[-1].start == 6 * 299
    spacing = 1800 / 80
    assert max(b.start - a.end - 1 for a, b in zip(kept, kept[1:])) <= 1.3 * spacing


def _one_at_a_time(entries, frozen=()):
    """The rule written out plainly: recompute every candidate's hole after each removal."""
    ranged = sorted((e for e in entries if e.start is not None), key=lambda e: (e.start, e.end, e.id))
    boundaries = {ranged[0].id, ranged[-1].id} if ranged else set()
    live, order = list(ranged), []
    while True:
        holes = [(max(0, live[i + 1].start - live[i - 1].end - 1), e.recency, e.uses, e.id, i)
                 for i, e in enumerate(live) if not e.pinned and e.id not in frozen and e.id not in boundaries]
        if not holes:
            break
        *_, pk, i = min(holes)
        order.append(pk)
        del live[i]
    rest = sorted((e for e in entries if e.id not in order and not e.pinned and e.id not in frozen),
                  key=lambda e: (e.recency, e.uses, e.id))
    return order + [e.id for e in rest]


def test_the_order_is_smallest_hole_first_recomputed_after_every_removal_on_random_banks():
    import random

    # One span length per bank, so no range lies inside an earlier one and a removal only widens holes
    # (summarised blocks never nest).
    rng = random.Random(4)
    for _ in range(300):
        bank, span = [], rng.randrange(12)
        for pk in rng.sample(range(1, 500), rng.randrange(0, 30)):
            start = None if rng.random() < 0.15 else rng.randrange(60)
            bank.append(Entry(pk, start, None if start is None else start + span,
                              rng.random() < 0.15, float(rng.randrange(4)), rng.randrange(3)))
        frozen = {e.id for e in bank if rng.random() < 0.1}
        assert eviction.eviction_order(bank, frozen=frozen) == _one_at_a_time(bank, frozen)


def test_the_order_stays_smallest_hole_first_when_ranges_nest():
    import random

    # Spans differ within a bank, so a range can lie inside another and a removal can shrink a neighbour's hole;
    # the order must still follow the rule written out plainly.
    rng = random.Random(5)
    for _ in range(500):
        bank = []
        for pk in rng.sample(range(1, 500), rng.randrange(0, 30)):
            start = None if rng.random() < 0.15 else rng.randrange(60)
            bank.append(Entry(pk, start, None if start is None else start + rng.randrange(15),
                              rng.random() < 0.15, float(rng.randrange(4)), rng.randrange(3)))
        frozen = {e.id for e in bank if rng.random() < 0.1}
        assert eviction.eviction_order(bank, frozen=frozen) == _one_at_a_time(bank, frozen)
