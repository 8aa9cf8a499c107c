"""``memory``: memory retrieval over 1,000 and 10,000 eligible 768-d memories, and eviction over 10,000 (issue 4)."""

import time

from django.db import transaction

from .knowledge import VECTOR_DIMS, prose, vocabulary
from .measure import ACTIONS, REPLIES, figure


def run(sizes, repeat):
    """Memory retrieval over 1,000 and 10,000 eligible 768-d memories; eviction order over 10,000 (issue 4)."""
    import random

    rng = random.Random(2044)
    words = vocabulary(rng)
    results = []
    for count in MEMORY_BANKS:
        campaign = _generate_memories(rng, words, count)
        results += _measure_memory_retrieval(campaign, rng, words, count, repeat)
    results += _measure_eviction(campaign, MEMORY_BANKS[-1], repeat)
    return results


MEMORY_BANKS = (1_000, 10_000)


def _generate_memories(rng, words, count):
    """Create a campaign whose line holds ``count`` embedded memories, one per block of six actions."""
    import numpy as np
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from campaigns import story
    from campaigns.models import Campaign
    from memory.models import Memory, MemoryVector

    user, _ = get_user_model().objects.get_or_create(username="bench")
    campaign = story.start_campaign(Campaign.objects.create(
        owner=user, title=f"Memory bench {count}", protagonist="Edrin", opening=REPLIES[0]))
    # Eligibility reads only (branch, depth): the head may stand past nodes the bench never writes.
    campaign.head_depth = 6 * count + 1
    campaign.save(update_fields=["head_depth"])
    vectors = np.random.default_rng(count).standard_normal((count, VECTOR_DIMS)).astype(np.float32)
    now = timezone.now()
    memories = Memory.objects.bulk_create([
        Memory(campaign=campaign, branch_id=campaign.head_branch_id, depth=6 * i + 5, source_start=6 * i,
               source_end=6 * i + 5, text=prose(rng, words, 30), authority="accepted_story",
               use_count=rng.randrange(5))
        for i in range(count)
    ], batch_size=1000)
    MemoryVector.objects.bulk_create([
        MemoryVector(memory=memory, campaign=campaign, model="nomic-embed-text", dims=VECTOR_DIMS,
                     vector=vectors[i].tobytes(), created_at=now)
        for i, memory in enumerate(memories)
    ], batch_size=1000)
    return campaign


def _measure_memory_retrieval(campaign, rng, words, count, repeat):
    import numpy as np

    from campaigns import lineage
    from memory import bank
    from storyteller.context import memories

    path = lineage.path_of(campaign)
    vectors = np.random.default_rng(11).standard_normal((2 * (repeat + 3), VECTOR_DIMS)).astype(np.float32)
    warm, fresh, written = [], [], []
    for index in range(repeat + 3):
        query = memories.Query(f"{ACTIONS[index % 4]} {prose(rng, words, 12)}", prose(rng, words, 60),
                               tuple(vectors[2 * index]), tuple(vectors[2 * index + 1]), "nomic-embed-text")
        if index < 3:  # a fresh process: every row, word and vector read out of SQLite (the socket's warm-up)
            memories.forget()
            started = time.perf_counter()
            memories.section(campaign, path, query)
            fresh.append(time.perf_counter() - started)
            continue
        if index % 10 == 3:  # the memory step has just written and embedded a memory: the first turn after it
            [memory] = bank.write(campaign.pk, [bank.Written(0, 5, campaign.head_branch_id,
                                                             prose(rng, words, 30), "bench")])
            bank.store_vectors("nomic-embed-text", [(memory.pk, vectors[2 * index])])
            started = time.perf_counter()
            memories.section(campaign, path, query)
            written.append(time.perf_counter() - started)
            continue
        started = time.perf_counter()
        memories.section(campaign, path, query)
        warm.append(time.perf_counter() - started)
    size = f"{count:,} memories, 768-d"
    hardware = _cosine_top5(campaign, vectors)
    target = "median < 1 ms" if count <= 1_000 else "median < 5 ms"
    row = figure("memory retrieval", size, warm, target)
    row["target"] += f"; {row['median_ms'] / hardware['median_ms']:.1f}x the hardware"
    return [row, hardware,
            figure("memory, new memory", size, written, "first turn after one is written (rows re-read, vector appended)"),
            figure("memory, fresh process", size, fresh, "every row and vector read (what the socket's warm-up does)")]


def _cosine_top5(campaign, queries):
    """What the hardware does for a memory query: cosine top-5 over the campaign's unit vectors in memory."""
    import numpy as np

    from memory.models import MemoryVector

    matrix = np.vstack([np.frombuffer(blob, np.float32) for blob in MemoryVector.objects.filter(
        campaign=campaign).values_list("vector", flat=True)])
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    samples = []
    for query in queries:
        started = time.perf_counter()
        scores = np.einsum("ij,j->i", matrix, query / np.linalg.norm(query))
        np.argpartition(-scores, 5)[:5]
        samples.append(time.perf_counter() - started)
    return figure("  hardware: cosine top-5", f"{len(matrix):,} vectors", samples[3:], "the same work in numpy")


def _measure_eviction(campaign, count, repeat):
    from memory import bank, eviction
    from memory.models import Memory

    rows = Memory.objects.filter(campaign=campaign).values_list("id", "source_start", "source_end", "pinned",
                                                                "created_at", "use_count")
    entries = [eviction.Entry(pk, start, end, pinned, created.timestamp() + pk, uses)
               for pk, start, end, pinned, created, uses in rows]
    ordering = []
    for _ in range(repeat):
        started = time.perf_counter()
        eviction.eviction_order(entries)
        ordering.append(time.perf_counter() - started)
    full = []
    for _ in range(max(3, repeat // 10)):
        started = time.perf_counter()
        with transaction.atomic():
            # The steady state: a pass that wrote one memory into a full bank evicts one.
            bank.evict(campaign.pk, count - 1)
            transaction.set_rollback(True)  # measure the pass, keep the bank for the next sample
        full.append(time.perf_counter() - started)
    size = f"{count:,} memories"
    return [figure("eviction order", size, ordering, "median < 50 ms"),
            figure("eviction pass", size, full, "read, order, mark one forgotten")]
