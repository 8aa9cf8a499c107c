"""The faster retrieval ranks exactly as before (issue 16): the same ids, scores, suppressions and reasons.

``fixtures/rankings_before.json`` was written by the code as it stood before
the hot in-process indexes (commit b14687f), on the fixed data below: a bank
of memories on a branching line (forgotten, disabled, pinned, unembedded and
restated ones among them) and a library of the standard fixtures plus
generated passages, each asked a fixed set of queries through the same public
functions the turn calls. Ids differ from run to run, so every row is named
by what it is (the n-th memory written, a source's file and passage index).

To write the file again from the code of the day (only ever on purpose):
``STORYTELLER_CAPTURE_RANKINGS=1 pytest tests/storyteller/test_ranking_unchanged.py``.
"""

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest

from campaigns import lineage
from knowledge import retrieval
from knowledge.importer import import_source
from knowledge.models import Passage
from memory import bank
from memory.models import Memory
from storyteller.context import memories as memory_section
from tests.campaigns.test_lineage import act
from tests.knowledge.conftest import import_fixture

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "rankings_before.json"
DIMS = 32
NAMES = ["Mara", "Aldric", "Tomas", "Ilse", "Brother Cade", "the Abbess"]
WORDS = ("lantern key abbey crypt ferry river tavern silver ledger headland button anchor crown harbour sundial "
         "teapot letter hearthstone bell chapel orchard cellar ladder rope candle map compass storm tide cliff "
         "wolf raven bridge mill forge anvil scroll seal ring dagger cloak boots well gate tower stair").split()


def _vector(rng):
    vector = rng.standard_normal(DIMS).astype(np.float32)
    return vector / np.linalg.norm(vector)


def _sentence(rng):
    name = NAMES[rng.integers(len(NAMES))]
    picked = [WORDS[i] for i in rng.choice(len(WORDS), size=int(rng.integers(3, 8)), replace=False)]
    return f"{name} {' and the '.join(picked[:2])} near the {' '.join(picked[2:])}."


def _memory_bank(campaign):
    """Write 240 memories along a line with a side branch; return (keys by id, the main path)."""
    rng = np.random.default_rng(1892)
    for step in range(30):
        act(campaign, f"step {step}")
    campaign.refresh_from_db()
    main = lineage.path_of(campaign)
    # An abandoned line forking at depth 40: its memories must never rank on the main line.
    campaign.head_depth = 40
    campaign.save(update_fields=["head_depth"])
    for step in range(3):
        act(campaign, f"elsewhere {step}")
    campaign.refresh_from_db()
    side = lineage.path_of(campaign)
    keys, vectors, previous = {}, [], None
    for index in range(240):
        path = side if index % 17 == 0 else main
        depth = 42 + 2 * (index % 3) if path is side else 2 + 2 * (index % 29)
        node = path.nodes().get(depth=depth)
        restated = index % 23 == 5 and previous is not None
        text = previous[0] if restated else _sentence(rng)
        [memory] = bank.write(campaign.pk, [bank.Written(max(0, depth - 5), depth, node.branch_id, text, "test")])
        flags = {}
        if index % 31 == 3:
            flags["pinned"] = True
        if index % 29 == 7:
            flags["forgotten"] = True
        if index % 37 == 11:
            flags["enabled"] = False
        if index % 41 == 13:
            flags["authority"] = Memory.Authority.HEURISTIC
        if flags:
            bank.set_flags(memory, **flags)
        keys[memory.pk] = f"memory {index}"
        vector = previous[1] + rng.normal(0, 0.01, DIMS).astype(np.float32) if restated else _vector(rng)
        if index % 19 != 4:  # a few have no vector yet
            vectors.append((memory.pk, vector))
        previous = (text, vector)
    bank.store_vectors("nomic-embed-text", vectors)
    return keys, main


def _memory_queries():
    rng = np.random.default_rng(7)
    queries = []
    for index in range(12):
        text = _sentence(rng)
        context = " ".join(_sentence(rng) for _ in range(3))
        kind = index % 4
        queries.append(memory_section.Query(
            text if kind != 3 else "", context,
            tuple(_vector(rng).tolist()) if kind in (0, 1) else None,
            tuple(_vector(rng).tolist()) if kind in (0, 2, 3) else None,
            "nomic-embed-text"))
    return queries


def _memory_rankings(campaign):
    keys, path = _memory_bank(campaign)
    observed = []
    for query in _memory_queries():
        for top_k in (5, 12):
            _, report = memory_section.section(campaign, path, query, top_k=top_k)
            observed.append({
                "used": [[keys[entry["id"]], entry["semantic"], entry["lexical"], entry["final"]]
                         for entry in report["used"]],
                "suppressed": [[keys[row["id"]], keys[row["repeats"]], round(row["cosine"], 4)]
                               for row in report["suppressed_ids"]],
                "weights": report["query"]["weights"],
                "considered": report["considered"],
                "without_vectors": report["without_vectors"],
            })
    return observed


def _library(campaign):
    """The standard fixtures and three generated sources of 120 passages, every passage with a vector."""
    for name in ["canon.md", "reference.md", "inspiration.md", "hostile.md"]:
        import_fixture(campaign, name)
    rng = random.Random(76)
    for number, classification in enumerate(["canon", "reference", "inspiration"]):
        sections = []
        for section in range(120):
            sentences = " ".join(_sentence(np.random.default_rng(rng.randrange(10**9))) for _ in range(6))
            sections.append(f"## Part {section}\n\n{sentences}")
        import_source(campaign, f"generated-{number}.md", "\n\n".join(sections).encode(), classification)
    vectors = np.random.default_rng(3).standard_normal((Passage.objects.count(), DIMS)).astype(np.float32)
    passages = list(Passage.objects.filter(campaign=campaign).order_by("source__filename", "index"))
    for passage, vector in zip(passages, vectors):
        passage.embedding, passage.embedding_model, passage.embedding_dims = vector.tobytes(), "nomic-embed-text", DIMS
    Passage.objects.bulk_update(passages, ["embedding", "embedding_model", "embedding_dims"])
    campaign.knowledge_sources.update(semantic_state="ready")
    return passages, vectors


KNOWLEDGE_QUERIES = [
    ("I ask about warp drives and ships between the stars", ()),
    ("ferry crossing the rivers", ()),
    ("the silver key and the abbey crypt door", ("Aldric",)),
    ("dragon", ()),
    ("Mara lantern key near the abbey crypt tavern ledger headland", ("Mara",)),
    ("the lantern the bell the chapel the orchard the cellar the ladder the rope the candle the map the storm the "
     "tide the cliff the wolf the raven the bridge the mill the forge the anvil the scroll", ()),
    ("I check the fuel gauge on the spaceship console and radio the orbital station", ()),
    ("Tomas hid the compass under the tower stair", ("Tomas", "Ilse")),
]


def _knowledge_rankings(campaign):
    passages, vectors = _library(campaign)
    name = {passage.pk: f"{passage.source.filename}#{passage.index}" for passage in passages}
    rng = np.random.default_rng(11)
    observed = []
    for index, (text, standing) in enumerate(KNOWLEDGE_QUERIES):
        for semantic in (False, True):
            vector = None
            if semantic:  # close to one passage, so meaning admits it over the floor
                vector = tuple((vectors[index * 37 % len(vectors)] + rng.normal(0, 0.05, DIMS)).tolist())
            query = retrieval.Query(text, standing, vector, "nomic-embed-text" if semantic else "")
            result = retrieval.retrieve(campaign, query)
            observed.append({
                "terms": list(result.terms),
                "hits": [[name[hit.passage_id], round(hit.lexical, 9), round(hit.semantic, 9),
                          None if hit.cosine is None else round(hit.cosine, 6), round(hit.score, 9),
                          list(hit.terms), hit.reason] for hit in result.hits],
            })
    return observed


@pytest.fixture
def rankings(campaign, owner):
    from tests.conftest import make_campaign

    library = make_campaign(owner, title="Library")
    return {"memories": _memory_rankings(campaign), "knowledge": _knowledge_rankings(library)}


def test_memories_and_passages_rank_exactly_as_before(rankings):
    if os.environ.get("STORYTELLER_CAPTURE_RANKINGS"):
        FIXTURE.parent.mkdir(exist_ok=True)
        FIXTURE.write_text(json.dumps(rankings, indent=1, sort_keys=True) + "\n")
    before = json.loads(FIXTURE.read_text())
    assert len(before["memories"]) == len(rankings["memories"])
    for was, now in zip(before["memories"], rankings["memories"]):
        assert now == was
    for was, now in zip(before["knowledge"], rankings["knowledge"], strict=True):
        assert now == was
    assert any(entry["suppressed"] for entry in before["memories"]), "the data exercises redundancy"
    assert any(hit[3] is not None for entry in before["knowledge"] for hit in entry["hits"]), "and meaning"
