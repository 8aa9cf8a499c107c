"""The one write path for memories, and the eligibility read every retrieval starts from.

Plain values in, rows out: the pipeline asks the model and passes the text
here; nothing in this module calls a model or reads the pipeline.
"""

from dataclasses import dataclass

import numpy as np
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from campaigns.models import REASON_CHARS

from . import authority, blocks, eviction
from .models import MEMORY_CHARS, Memory, MemoryRun, MemoryVector


@dataclass(frozen=True)
class Written:
    """A memory the summariser wrote for one block."""

    start: int
    end: int
    branch_id: int  # the block's last node's branch: its anchor
    text: str
    model: str


def eligible(campaign_id, path):
    """Return the memories a turn on ``path`` may be shown: this campaign, this lineage, not forgotten, enabled."""
    return Memory.objects.filter(path.clause(), campaign_id=campaign_id, forgotten=False, enabled=True)


def cursor(campaign_id, path):
    """Return the first depth no summarised memory on ``path`` covers (forgotten ones count: they were written)."""
    ends = Memory.objects.filter(path.clause(), campaign_id=campaign_id, origin=Memory.Origin.SUMMARISER,
                                 source_end__isnull=False).order_by("-source_end")
    last = ends.values_list("source_end", flat=True).first()
    return 0 if last is None else last + 1


def write(campaign_id, written):
    """Store ``written`` (a list of Written) with the authority their wording earns; return the new rows.

    The marker the summariser may have repeated is removed here, so it is never stored.
    """
    rows = []
    for memory in written:
        text = blocks.strip_marker(memory.text)[:MEMORY_CHARS]  # a server that ignores the token limit
        if not text:
            continue
        rows.append(Memory(
            campaign_id=campaign_id, branch_id=memory.branch_id, depth=memory.end,
            source_start=memory.start, source_end=memory.end, text=text,
            authority=authority.classify(text), origin=Memory.Origin.SUMMARISER, model=memory.model,
        ))
    return Memory.objects.bulk_create(rows)


def add_by_hand(campaign, text):
    """Record a memory the person typed, anchored at the head (where they typed it); it has no source range."""
    text = _checked(text, "A memory needs some text; write what the narrator should remember.")
    return Memory.objects.create(
        campaign=campaign, branch_id=campaign.head_branch_id, depth=campaign.head_depth, text=text,
        authority=authority.classify(text), origin=Memory.Origin.PERSON,
    )


def edit_text(memory, text):
    """Correct a memory's text, keeping what was first written; its vector is rebuilt from the new text."""
    text = _checked(text, "A memory cannot be emptied; forget it instead.")
    if not memory.original_text:
        memory.original_text = memory.text
    memory.text = text
    memory.revision += 1
    # An edit may add a hedge, never remove the downgrade the wording or the person made.
    if authority.classify(text) == Memory.Authority.HEURISTIC:
        memory.authority = Memory.Authority.HEURISTIC
    memory.save()
    MemoryVector.objects.filter(memory=memory).delete()


def _checked(text, empty):
    """Return ``text`` with its whitespace folded, or raise ValueError saying what to change."""
    if len(text) > 2 * MEMORY_CHARS:  # far over: refuse before folding megabytes
        raise ValueError(f"A memory may be at most {MEMORY_CHARS:,} characters; this one is {len(text):,}. "
                         "Shorten it to what the narrator should remember.")
    text = " ".join(text.split())
    if not text:
        raise ValueError(empty)
    if len(text) > MEMORY_CHARS:
        raise ValueError(f"A memory may be at most {MEMORY_CHARS:,} characters; this one is {len(text):,}. "
                         "Shorten it to what the narrator should remember.")
    return text


def set_flags(memory, **flags):
    """Pin, forget, restore, disable or downgrade ``memory`` (authority may only go down to heuristic)."""
    if flags.get("authority") not in (None, Memory.Authority.HEURISTIC):
        raise ValueError("A memory can only be downgraded to heuristic; correct the state for an authoritative fact.")
    for name, value in flags.items():
        setattr(memory, name, value)
    memory.save(update_fields=list(flags))


def needing_vectors(campaign_id, model):
    """Return the unforgotten memories without a vector from ``model``."""
    made = MemoryVector.objects.filter(campaign_id=campaign_id, model=model).values("memory_id")
    return Memory.objects.filter(campaign_id=campaign_id, forgotten=False).exclude(pk__in=made).order_by("id")


def store_vectors(model, pairs):
    """Store float32 ``(memory id, vector)`` pairs with the model, dimensions and time that made them."""
    now = timezone.now()
    campaigns = dict(Memory.objects.filter(pk__in=[pk for pk, _ in pairs]).values_list("id", "campaign_id"))
    with transaction.atomic():
        for memory_id, vector in pairs:
            if memory_id not in campaigns:
                continue  # deleted with its campaign while the model was embedding
            array = np.asarray(vector, dtype=np.float32)
            MemoryVector.objects.update_or_create(memory_id=memory_id, defaults={
                "campaign_id": campaigns[memory_id], "model": model, "dims": len(array), "vector": array.tobytes(),
                "created_at": now})


def clear_vectors(campaign_id):
    """Drop every vector of the campaign so the next pass rebuilds them (derived data: nothing else changes)."""
    return MemoryVector.objects.filter(campaign_id=campaign_id).delete()[0]


def record_use(memory_ids, at=None):
    """Count one use of each memory, at ``at``: call it inside the turn's own commit."""
    if memory_ids:
        Memory.objects.filter(pk__in=memory_ids).update(use_count=F("use_count") + 1, last_used_at=at or timezone.now())


def evict(campaign_id, capacity=eviction.MEMORY_BANK_CAPACITY, *, frozen=()):
    """Mark forgotten what is over ``capacity`` across the whole campaign (never deleted); return the ids."""
    ids = eviction.to_evict(eviction_entries(campaign_id), capacity, frozen=frozen)
    if ids:
        Memory.objects.filter(pk__in=ids).update(forgotten=True)
    return ids


def eviction_entries(campaign_id):
    """Return the campaign's unforgotten memories as eviction Entries: what eviction orders."""
    rows = Memory.objects.filter(campaign_id=campaign_id, forgotten=False).values_list(
        "id", "source_start", "source_end", "pinned", "last_used_at", "created_at", "use_count")
    return [eviction.Entry(pk, start, end, pinned, (used or created).timestamp(), uses)
            for pk, start, end, pinned, used, created, uses in rows]


def record_run(node, *, status, written=0, evicted=0, embedded=0, embedding_note="", error=""):
    """Record what the memory step did after ``node``, counting attempts (a failure's record is written last)."""
    run, created = MemoryRun.objects.get_or_create(
        node=node, defaults={"campaign_id": node.campaign_id, "status": status})
    run.status, run.written, run.evicted, run.embedded = status, written, evicted, embedded
    run.embedding_note, run.error = embedding_note[:REASON_CHARS], error[:REASON_CHARS]
    if not created:
        run.attempts += 1
    run.save()
    return run
