"""The four-stage retention diagnostic: was a planted fact created, retained, ranked and injected (seed 004 §C.2)?

``diagnose(campaign, fact, recall_node)`` reads the recall turn's stored
context snapshot and the campaign's memory bank, and recomputes the recall
turn's ranking with the production code (``memory.ranking`` through the same
candidates, query and vectors the turn used), so a disagreement with what the
turn stored is itself reported. Read-only, apart from embedding the stored
query again through the campaign's embedding model.

Verdicts, first failing stage first: not_created, created_but_evicted,
retained_but_not_ranked, ranked_but_not_selected, selected_but_not_injected,
injected.
"""

import json
from dataclasses import asdict, dataclass, field

import numpy as np

from campaigns import lineage
from campaigns.models import Campaign, ContextSnapshot, Node
from knowledge.importer import embedding_model
from memory import bank, blocks, eviction, ranking
from memory.models import Memory, MemoryVector

from .. import tokens
from ..context import memories as memory_section
from ..steps import memories as memory_step

VERDICTS = ("not_created", "created_but_evicted", "retained_but_not_ranked", "ranked_but_not_selected",
            "selected_but_not_injected", "injected")


@dataclass
class Diagnosis:
    verdict: str
    plant_depth: int | None
    recall_depth: int
    stages: dict = field(default_factory=dict)  # created, retained, ranked, injected -> their fields

    def to_json(self):
        """Return the diagnosis as a JSON-ready dict."""
        return json.loads(json.dumps(asdict(self), default=str))


def recall_of(recall_node):
    """Return the recall reply Node from a Node or its id; refuse anything without a stored prompt."""
    recall = recall_node if isinstance(recall_node, Node) else Node.objects.get(pk=recall_node)
    if not ContextSnapshot.objects.filter(node=recall).exists():
        raise ValueError(f"Node {recall.pk} (depth {recall.depth}, {recall.role}) has no stored prompt; pass the "
                         "recall turn's reply, whose context snapshot the diagnosis reads.")
    return recall


def plant_depth(path, fact):
    """Return the depth of the first node on ``path`` whose text carries ``fact``, or None."""
    for depth, text in path.nodes().values_list("depth", "text").iterator():
        if fact.carries(text):
            return depth
    return None


def diagnose(campaign, fact, recall_node):
    """Return the Diagnosis of ``fact`` (a stubs.Fact) at the recall turn ``recall_node`` (a reply Node or id)."""
    recall = recall_of(recall_node)
    path = lineage.path_at(campaign.pk, recall.branch_id, recall.depth)
    planted = plant_depth(path, fact)
    result = Diagnosis("not_created", planted, recall.depth)
    created = _created(campaign, path, fact, planted)
    result.stages["created"] = created
    memory = Memory.objects.filter(pk=created["memory_id"]).first() if created["memory_id"] else None
    if memory is None:
        return result
    retained = _retained(campaign, memory)
    result.stages["retained"] = retained
    report = ContextSnapshot.objects.get(node=recall).report.get("memories", {})
    ranked = _ranked(campaign, path.capped(recall.depth - 2), recall, memory, report)
    result.stages["ranked"] = ranked
    injected = _injected(recall, memory, report)
    result.stages["injected"] = injected
    result.verdict = _verdict(retained, ranked, injected)
    return result


def _verdict(retained, ranked, injected):
    """Return the first stage that failed: ranked means within top_k by score, selected what the turn stored."""
    if not retained["retained"]:
        return "created_but_evicted"
    if ranked["rank"] is None or ranked["rank"] > ranked["top_k_cutoff"]:
        return "retained_but_not_ranked"
    if not injected["in_stored_memories_used"]:
        return "ranked_but_not_selected"
    if not injected["text_in_section"]:
        return "selected_but_not_injected"
    return "injected"


def _created(campaign, path, fact, planted):
    """Return the created stage: the memories covering the plant, what their summariser saw, and which carries it."""
    stage = {"created": False, "memory_id": None, "source_start": None, "source_end": None, "memory_text": None,
             "covering_memories": []}
    if planted is None:
        stage["reason"] = "the fact is on no node of the recall turn's path: it was never planted there"
        return stage
    covering = Memory.objects.filter(path.clause(), campaign=campaign, origin=Memory.Origin.SUMMARISER,
                                     source_start__lte=planted, source_end__gte=planted).order_by("forgotten", "id")
    for memory in covering:
        texts = memory_step.read_block(path, memory.source_start, memory.source_end)
        whole = "\n\n".join(texts)
        stage["covering_memories"].append({
            "memory_id": memory.pk, "source_start": memory.source_start, "source_end": memory.source_end,
            "block_tokens": tokens.count(whole), "fact_in_block": fact.carries(whole),
            "fact_in_summariser_excerpt": fact.carries(blocks.excerpt(texts)),
            "carries_fact": fact.carries(memory.text), "forgotten": memory.forgotten,
        })
        if stage["memory_id"] is None and fact.carries(memory.text):
            stage.update(created=True, memory_id=memory.pk, source_start=memory.source_start,
                         source_end=memory.source_end, memory_text=memory.text)
    if not stage["created"]:
        stage["reason"] = ("no memory covers the planting depth yet" if not stage["covering_memories"] else
                           "the memories covering the planting depth do not carry the fact")
    return stage


def _retained(campaign, memory):
    """Return the retained stage: the memory's row and where production eviction would put it now."""
    entries = bank.eviction_entries(campaign.pk)
    order = eviction.eviction_order(entries)
    position = order.index(memory.pk) + 1 if memory.pk in order else None
    active = lineage.path_of(Campaign.objects.get(pk=campaign.pk))  # the head now, not when ``campaign`` was read
    retained = not memory.forgotten and memory.enabled
    if memory.forgotten:
        reason = "forgotten: evicted over capacity, or forgotten by the person"
    elif not memory.enabled:
        reason = "disabled by the person"
    else:
        reason = "kept"
    return {
        "retained": retained, "forgotten": memory.forgotten, "pinned": memory.pinned, "enabled": memory.enabled,
        "embedded": MemoryVector.objects.filter(memory=memory, model=embedding_model(campaign)).exists(),
        "on_active_lineage": active.contains(memory.branch_id, memory.depth),
        "use_count": memory.use_count, "last_used_at": memory.last_used_at, "created_at": memory.created_at,
        "active_memories": len(entries), "memory_bank_capacity": memory_step.capacity(),
        "eviction_position": position, "evictable": len(order), "reason": reason,
    }


def _ranked(campaign, path, recall, memory, report):
    """Return the ranked stage: the recall turn's ranking recomputed by production ranking over every candidate.

    The candidates are the memories eligible on the recall turn's path that
    existed when it was played; the query is the one it stored, embedded
    again. ``replica_matches_stored_selection`` says whether this replica
    chose what the turn stored.
    """
    top_k = memory_section.memory_top_k()
    stored = report.get("query", {})
    query = memory_section.Query(stored.get("input", ""), stored.get("context", ""))
    query = memory_section.embed_query(campaign, path, query)
    rows = list(bank.eligible(campaign.pk, path).filter(created_at__lte=recall.created_at).order_by("id")
                .values_list("id", "authority", "pinned", "text"))
    candidates = [memory_section.candidate(*row) for row in rows]
    semantic = matrix = positions = None
    if query.input_vector is not None or query.context_vector is not None:
        matrix, positions = _matrix(query.model, [c.id for c in candidates])
        semantic = ranking.semantic_scores(matrix, positions, query.input_vector, query.context_vector)
    # Every candidate in production order (pins, then final score, ties by id), with no repeat suppressed:
    everyone = ranking.rank(candidates, query.input_terms, semantic=semantic, top_k=len(candidates)).used
    chosen = ranking.rank(candidates, query.input_terms, semantic=semantic, matrix=matrix, rows=positions,
                          top_k=top_k)
    order = [scored.id for scored in everyone]
    mine = next((scored for scored in everyone if scored.id == memory.pk), None)
    repeat = next((entry for entry in chosen.suppressed if entry["id"] == memory.pk), None)
    stored_ids = [entry["id"] for entry in report.get("used", [])]
    return {
        "eligible": mine is not None,
        "semantic_score": _rounded(mine.semantic) if mine else None,
        "lexical_score": round(mine.lexical, 4) if mine else None,
        "final_score": round(mine.final, 4) if mine else None,
        "rank": order.index(memory.pk) + 1 if mine else None, "of": len(order), "top_k_cutoff": top_k,
        "selected": memory.pk in [scored.id for scored in chosen.used],
        "suppressed_as_duplicate_of": repeat["repeats"] if repeat else None,
        "replica_selection": [scored.id for scored in chosen.used], "stored_selection": stored_ids,
        "replica_matches_stored_selection": [scored.id for scored in chosen.used] == stored_ids,
        "query": {"input": query.input, "context": query.context, "semantic": query.note or "used"},
    }


def _injected(recall, memory, report):
    """Return the injected stage, from the recall turn's stored context snapshot."""
    sections = ContextSnapshot.objects.get(node=recall).report.get("sections", [])
    section = next((s for s in sections if s["key"] == "memories"), None)
    component = next((entry for entry in report.get("used", []) if entry["id"] == memory.pk), None)
    return {
        "in_stored_memories_used": component is not None,
        "text_in_section": bool(section) and memory.text in section["text"],
        "context_component": component,
        "token_count": section["tokens"] if section else 0,
    }


def _matrix(model, ids):
    """Return (unit vectors of ``ids`` from ``model``, each id's row or -1), as retrieval compares them."""
    vectors = dict(MemoryVector.objects.filter(memory_id__in=ids, model=model).values_list("memory_id", "vector"))
    found = [pk for pk in ids if pk in vectors]
    if not found:
        return np.zeros((0, 0), np.float32), np.full(len(ids), -1, np.int64)
    matrix = np.vstack([np.frombuffer(vectors[pk], dtype=np.float32) for pk in found])
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix = matrix / np.where(norms == 0, 1, norms)
    row_of = {pk: i for i, pk in enumerate(found)}
    return matrix, np.array([row_of.get(pk, -1) for pk in ids], np.int64)


def _rounded(value):
    return None if value is None else round(value, 4)
