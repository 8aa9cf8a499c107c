"""``knowledge``: importing a 1 MiB Markdown source; lexical and hybrid retrieval over 20,000 passages (seed 003).

Also the generated prose (``vocabulary``, ``prose``) and passages other
groups embed and search.
"""

import itertools
import time

from storyteller import vendors

from .measure import ACTIONS, REPLIES, figure


def run(sizes, repeat):
    """Import a 1 MiB Markdown source; lexical and hybrid retrieval over 20,000 passages (seed 003)."""
    import random

    from django.contrib.auth import get_user_model

    from campaigns import story
    from campaigns.models import Campaign

    user, _ = get_user_model().objects.get_or_create(username="bench")
    campaign = story.start_campaign(Campaign.objects.create(owner=user, title="Knowledge bench", protagonist="Edrin",
                                                            opening=REPLIES[0]))
    rng = random.Random(1892)
    words = vocabulary(rng)
    generate_passages(campaign, rng, words, KNOWLEDGE_PASSAGES)
    results = _measure_retrieval(campaign, rng, words, repeat)
    # Last: each sample imports and deletes 1 MiB, leaving FTS5 delete markers
    # that slow the retrievals above until the index merges them.
    results.insert(0, _measure_import(campaign, rng, words, max(3, repeat // 10)))
    return results


KNOWLEDGE_PASSAGES = 20_000
VECTOR_DIMS = 768  # nomic-embed-text


def vocabulary(rng):
    """Return 6,000 words ranked as in English prose: function words first, then content words."""
    from knowledge.retrieval import STOPWORDS

    common = sorted({word.strip('.,"').lower() for text in REPLIES + ACTIONS for word in text.split()} - STOPWORDS)
    letters = "abcdefghilmnoprstuvw"
    invented = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(4, 9))) for _ in range(7000)})
    words = sorted(STOPWORDS) + common + invented
    return words[:6000]


def prose(rng, words, count):
    # Zipf's law (frequency ∝ 1/rank), as in real prose: function words
    # everywhere, each content word in a few percent of passages.
    if not hasattr(prose, "weights") or len(prose.weights) != len(words):
        prose.weights = list(itertools.accumulate(1 / rank for rank in range(1, len(words) + 1)))
    return " ".join(rng.choices(words, cum_weights=prose.weights, k=count)).capitalize() + "."


def _markdown(rng, words, size):
    parts, total, section = [], 0, 0
    while total < size:
        section += 1
        block = f"## Section {section}\n\n" + "\n\n".join(prose(rng, words, rng.randint(40, 140)) for _ in range(3))
        parts.append(block)
        total += len(block.encode()) + 2
    return "\n\n".join(parts).encode()[: size - 1].decode("utf-8", "ignore")


def _measure_import(campaign, rng, words, repeat):
    from knowledge.importer import MAX_BYTES, import_source
    from knowledge.models import Source

    samples = []
    for index in range(repeat):
        data = f"# Setting bible {index}\n\n{_markdown(rng, words, MAX_BYTES - 100)}".encode()
        started = time.perf_counter()
        import_source(campaign, f"bible-{index}.md", data, "canon")
        samples.append(time.perf_counter() - started)
        Source.objects.filter(campaign=campaign).delete()
    return figure("knowledge import", "1 MiB markdown", samples, "median < 2 s (chunk + FTS, no vectors)")


def generate_passages(campaign, rng, words, count):
    """Write ``count`` passages with 768-dim float32 vectors, in sources of 500, the way import and embed do."""
    import hashlib

    import numpy as np
    from django.utils import timezone

    from knowledge.models import Passage, Source

    classes = ["canon", "reference", "inspiration"]
    now = timezone.now()
    vectors = np.random.default_rng(1892).standard_normal((count, VECTOR_DIMS)).astype(np.float32)
    for start in range(0, count, 500):
        source = Source.objects.create(
            campaign=campaign, title=f"Library {start // 500}", filename=f"library-{start // 500}.md",
            classification=classes[(start // 500) % 3], text="(generated)", content_hash=f"{start:064d}",
            size_bytes=0, parser_version=1, chunking_version=1, lexical_state="ready", semantic_state="ready",
        )
        passages = []
        for index in range(min(500, count - start)):
            text = prose(rng, words, rng.randint(60, 180))
            passages.append(Passage(
                source=source, campaign=campaign, index=index, heading_path=f"Library › Part {index // 20}", text=text,
                tokens=len(text.split()), content_hash=hashlib.sha256(text.encode()).hexdigest(),
                embedding=vectors[start + index].tobytes(), embedding_model="nomic-embed-text",
                embedding_dims=VECTOR_DIMS, embedded_at=now,
            ))
        Passage.objects.bulk_create(passages, batch_size=500)


def _measure_retrieval(campaign, rng, words, repeat):
    import numpy as np

    from knowledge import retrieval

    # Input plus the latest reply standing in for the scene: about 20 meaningful terms.
    queries = [f"{ACTIONS[i % 4]} {prose(rng, words, 50)}" for i in range(repeat + 3)]
    lexical, hybrid, cold = [], [], []
    for index, text in enumerate(queries):
        started = time.perf_counter()
        retrieval.retrieve(campaign, retrieval.Query(text, ("Edrin",)))
        if index >= 3:
            lexical.append(time.perf_counter() - started)
    vectors = np.random.default_rng(7).standard_normal((len(queries), VECTOR_DIMS)).astype(np.float32)
    for index, text in enumerate(queries):
        query = retrieval.Query(text, ("Edrin",), vector=tuple(vectors[index]), model="nomic-embed-text")
        if index < 3:  # the first three read the vectors out of SQLite: measured below as the cold cost
            retrieval._libraries.clear()
            started = time.perf_counter()
            retrieval.retrieve(campaign, query)
            cold.append(time.perf_counter() - started)
            continue
        started = time.perf_counter()
        retrieval.retrieve(campaign, query)
        hybrid.append(time.perf_counter() - started)
    # A query the state's short scene summary makes (input + scene + names) rather than a whole reply.
    short = []
    for index in range(repeat + 3):
        text = f"{ACTIONS[index % 4]} {prose(rng, words, 14)}"
        started = time.perf_counter()
        retrieval.retrieve(campaign, retrieval.Query(text, ("Edrin",)))
        if index >= 3:
            short.append(time.perf_counter() - started)
    size = f"{KNOWLEDGE_PASSAGES:,} passages"
    fts, cosine = _knowledge_hardware(campaign, queries, vectors)
    rows = [
        figure("lexical retrieval", size, lexical, "median < 15 ms"),
        figure("lexical, state scene", size, short, "query from a short scene summary"),
        figure("hybrid retrieval", f"{size}, 768-d", hybrid, "median < 25 ms"),
        figure("hybrid, cold vectors", f"{size}, 768-d", cold, "first query after vectors change"),
    ]
    rows[0]["target"] += f"; {rows[0]['median_ms'] / fts['median_ms']:.1f}x the hardware"
    rows[2]["target"] += f"; {rows[2]['median_ms'] / (fts['median_ms'] + cosine['median_ms']):.1f}x the hardware"
    return [*rows, fts, cosine]


def _knowledge_hardware(campaign, queries, vectors):
    """What the hardware does for the same queries: FTS5's own ranking of their terms, and one cosine pass."""
    import numpy as np
    from django.db import connection

    from knowledge.models import Passage
    from knowledge.retrieval import FTS_WINDOW, MAX_QUERY_TERMS, meaningful_terms

    matrix = np.vstack([np.frombuffer(blob, np.float32) for blob in Passage.objects.filter(
        campaign=campaign).values_list("embedding", flat=True)])
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    fts, cosine = [], []
    with connection.cursor() as cursor:
        for index, text in enumerate(queries):
            terms = meaningful_terms(text)[:MAX_QUERY_TERMS]
            started = time.perf_counter()
            engine_alone(cursor, terms, FTS_WINDOW)
            middle = time.perf_counter()
            np.flatnonzero(np.einsum("ij,j->i", matrix, vectors[index] / np.linalg.norm(vectors[index])) >= 0.5)
            done = time.perf_counter()
            fts.append(middle - started)
            cosine.append(done - middle)
    size = f"{KNOWLEDGE_PASSAGES:,} passages"
    engine = "PostgreSQL's tsvector" if vendors.is_postgres() else "FTS5"
    return (figure(f"  hardware: {engine} alone"[:34], size, fts[3:], "the same terms, ranked by the engine itself"),
            figure("  hardware: cosine pass", f"{size}, 768-d", cosine[3:], "one einsum over the unit vectors"))


def engine_alone(cursor, terms, limit):
    """Rank the passages matching any of ``terms`` by the full-text engine alone (no campaign, no join): what
    the hardware and the engine cost, beside which retrieval's own time is read."""
    if vendors.is_postgres():
        query, params = vendors.tsquery_any(terms)
        cursor.execute(f"SELECT p.id, ts_rank_cd(p.search, q.query) AS score FROM knowledge_passage p,"
                       f" (SELECT {query} AS query) q WHERE p.search @@ q.query ORDER BY score DESC, p.id LIMIT %s",
                       [*params, limit])
    else:
        cursor.execute("SELECT rowid, rank FROM knowledge_passage_fts WHERE knowledge_passage_fts MATCH %s "
                       "ORDER BY rank, rowid LIMIT %s", [vendors.fts5_any(terms), limit])
    return cursor.fetchall()
