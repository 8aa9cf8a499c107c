"""Benchmarks for one turn's costs on generated campaigns: context build, commit and relay.

Runs against a throwaway SQLite database in a temporary folder (same settings,
WAL and IMMEDIATE transactions included), never against the person's stories.
The relay figure is measured through the real play websocket consumer and the
fake Ollama server from the test suite, from the moment the server writes a
chunk to the moment the websocket frame carrying it arrives.
"""

import argparse
import asyncio
import contextlib
import itertools
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections, transaction

REPLIES = [
    "The rain thickens as you cross the square; somewhere a shutter bangs against stone, and the smell of "
    "wet ash drifts from the chandler's yard. A woman in a grey shawl watches you from a doorway, then "
    "slips inside before you can call to her.",
    "Mara's cottage is colder than it should be. Her lamp-oil ledger lies open on the table, the last entry "
    "three nights old, written in a hand that wanders off the line as if she had been interrupted.",
    "The fisherman spits into the harbour. \"The lantern's not gone dark by itself,\" he says. \"Someone "
    "climbed the headland that night. I saw the light of them, going up, and none coming down.\"",
    "Wind claws at the headland path. Halfway up, you find a brass button pressed into the mud, stamped with "
    "an anchor and a crown, the kind the harbour master's men wear on their coats.",
]
ACTIONS = ["ask about the lantern", "search the cottage", "climb the headland path", "knock at the door"]


class Command(BaseCommand):
    help = "Run the benchmarks on generated data; print a table of medians and write JSON."

    def add_arguments(self, parser):
        parser.add_argument("--only", default=",".join(name for name in BENCHMARKS if name not in SLOW),
                            help=f"Comma-separated benchmark groups to run ({', '.join(sorted(SLOW))} only when named).")
        parser.add_argument("--sizes", default="200,2000", help="Comma-separated story lengths in turns.")
        parser.add_argument("--repeat", type=int, default=50, help="Samples per measurement.")
        parser.add_argument("--json", dest="json_path", default="bench-results.json", help="Where to write the results.")
        parser.add_argument("--cold-turn", help=argparse.SUPPRESS)  # DATABASE:CAMPAIGN, the overhead bench's child

    def handle(self, *args, only, sizes, repeat, json_path, cold_turn=None, **options):
        if cold_turn:
            database, campaign_id, wait = cold_turn.rsplit(":", 2)
            self.stdout.write(json.dumps(globals()["cold_turn"](database, int(campaign_id), wait == "wait")))
            return
        unknown = set(only.split(",")) - set(BENCHMARKS)
        if unknown:
            raise CommandError(f"Unknown benchmark group(s) {sorted(unknown)}; choose from {sorted(BENCHMARKS)}.")
        folder = Path(tempfile.mkdtemp(prefix="storyteller-bench-"))
        try:
            _use_database(folder / "bench.sqlite3")
            call_command("migrate", verbosity=0)
            results = []
            for name in only.split(","):
                results += BENCHMARKS[name]([int(size) for size in sizes.split(",")], repeat)
        finally:
            connections["default"].close()
            shutil.rmtree(folder, ignore_errors=True)
        self._print(results)
        Path(json_path).write_text(json.dumps({"results": results}, indent=2))
        self.stdout.write(f"\nWrote {json_path}")

    def _print(self, results):
        self.stdout.write(f"{'measurement':<22}{'size':>14}{'samples':>9}{'median ms':>11}{'p95 ms':>9}  target")
        for row in results:
            self.stdout.write(
                f"{row['name']:<22}{row['size']:>14}{row['samples']:>9}{row['median_ms']:>11.2f}"
                f"{row['p95_ms']:>9.2f}  {row['target']}"
            )


def _use_database(path):
    connections["default"].close()
    connections.databases["default"]["NAME"] = path


def _row(name, size, samples, target):
    """Return one result row; ``size`` says what was measured against (e.g. "2,000 turns")."""
    ordered = sorted(samples)
    return {
        "name": name,
        "size": size,
        "samples": len(samples),
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000, 3),
        "target": target,
    }


def _bench_turn(sizes, repeat):
    """Context build, commit and relay at the head of a generated story of each size."""
    results = []
    for turns in sizes:
        campaign = _generate(turns)
        results.append(_measure_build(campaign, turns, repeat))
        results += _measure_commit(campaign, turns, repeat)
        # The commits grew the verbatim story past the watermark: without a summary the relay's first turn would
        # compact, and the summariser would take the scripted reply meant for the narrator.
        _summarise_by_hand(campaign)
        results.append(_measure_relay(campaign, turns))
    return results


def _generate(turns, campaign=None):
    """Create a campaign of ``turns`` turns with an abandoned side branch every 100 turns (or grow ``campaign``'s
    story from its opening, as a world's)."""
    from django.contrib.auth import get_user_model

    from campaigns import story
    from campaigns.models import Branch, Campaign, CanonRule, Node
    from storyteller.context import node_tokens

    if campaign is None:
        user, _ = get_user_model().objects.get_or_create(username="bench")
        campaign = Campaign.objects.create(
            owner=user, title=f"Bench {turns}", protagonist="Edrin", opening=REPLIES[0],
            context_token_budget=8192, max_output_tokens=400,
        )
        story.start_campaign(campaign)
    for text in ["The story takes place in 1892.", "Magic cannot raise the dead.", "Mara is Edrin's aunt."]:
        CanonRule.objects.create(campaign=campaign, text=text)
    main = campaign.head_branch
    reply_tokens = [node_tokens("narrator", "", text) for text in REPLIES]
    action_tokens = [node_tokens("player", "do", text) for text in ACTIONS]
    nodes = []
    through = Node.objects.get(campaign=campaign).tokens_through
    for turn in range(1, turns + 1):
        if turn % 100 == 0:
            side = Branch.objects.create(campaign=campaign, parent=main, fork_depth=2 * turn - 2)
            side_through = through
            for depth in range(2 * turn - 1, 2 * turn + 5):
                side_through += 4
                nodes.append(Node(campaign=campaign, branch=side, depth=depth, role="player" if depth % 2 else "narrator",
                                  mode="do" if depth % 2 else "", text=f"abandoned {depth}", tokens=4,
                                  tokens_through=side_through))
        through += action_tokens[turn % 4]
        nodes.append(Node(campaign=campaign, branch=main, depth=2 * turn - 1, role="player", mode="do",
                          text=ACTIONS[turn % 4], tokens=action_tokens[turn % 4], tokens_through=through))
        through += reply_tokens[turn % 4] + 4
        nodes.append(Node(campaign=campaign, branch=main, depth=2 * turn, role="narrator",
                          text=f"{REPLIES[turn % 4]} ({turn})", tokens=reply_tokens[turn % 4] + 4,
                          tokens_through=through))
    Node.objects.bulk_create(nodes, batch_size=2000)
    campaign.head_depth = 2 * turns
    campaign.save(update_fields=["head_depth"])
    return campaign


def _measure_build(campaign, turns, repeat):
    from campaigns import lineage
    from storyteller import context

    _summarise_by_hand(campaign)
    samples = []
    for index in range(repeat + 3):
        campaign.refresh_from_db()
        started = time.perf_counter()
        context.build(campaign, lineage.path_of(campaign), context.Action(mode="do", text=f"look around {index}"))
        if index >= 3:  # the first builds warm the tokenizer and SQLite's page cache
            samples.append(time.perf_counter() - started)
    return _row("context build", f"{turns:,} turns", samples, "median < 10 ms at 2,000 turns, flat to 5,000")


def _summarise_by_hand(campaign):
    """Give a long generated story the checkpoint a played one would have, so the build measures a real turn."""
    from campaigns import lineage
    from memory import checkpoints
    from storyteller import context

    campaign.refresh_from_db()
    try:
        context.build(campaign, lineage.path_of(campaign), context.Action(mode="do", text="look around"))
    except context.NeedsCompaction as need:
        checkpoints.write(need.plan.path, need.plan.through, "The story so far, in a paragraph. " * 20,
                          need.plan.prefix_hash)


def _measure_commit(campaign, turns, repeat):
    from django.db import transaction

    from campaigns import story, storytime
    from campaigns.models import Campaign

    samples = []
    for index in range(repeat):
        campaign = Campaign.objects.get(pk=campaign.pk)
        action = story.PlayerAction(mode="do", text=f"step {index}", tokens=5)
        reply = story.Reply(text=REPLIES[index % 4], tokens=60, report={"bench": True}, model="bench", api="bench")
        started = time.perf_counter()
        story.commit_turn(campaign.pk, (campaign.head_branch_id, campaign.head_depth), action, reply)
        samples.append(time.perf_counter() - started)
    # A played turn's commit (turns._commit) also times the turn in the story: its round, catch-up and trigger check.
    timed = []
    for index in range(repeat):
        campaign = Campaign.objects.get(pk=campaign.pk)
        action = story.PlayerAction(mode="do", text=f"step {index}", tokens=5)
        reply = story.Reply(text=REPLIES[index % 4], tokens=60, report={"bench": True}, model="bench", api="bench")
        started = time.perf_counter()
        with transaction.atomic():
            node = story.commit_turn(campaign.pk, (campaign.head_branch_id, campaign.head_depth), action, reply)
            storytime.advance(node)
        timed.append(time.perf_counter() - started)
    return [_row("commit", f"{turns:,} turns", samples, "median < 10 ms"),
            _row("  + story time", f"{turns:,} turns", timed, "median < 10 ms (the played turn's commit)")]


@contextlib.contextmanager
def _fake_model_server():
    """Serve the narrator from the fake Ollama server, as STORYTELLER_LLM_URL would, for the length of the block."""
    from storyteller.llm.fake_server import FakeModelServer

    with FakeModelServer() as server:
        overrides = {
            "STORYTELLER_LLM_URL": server.url,
            "STORYTELLER_LLM_URL_CONFIGURED": True,
            "STORYTELLER_LLM_API": "ollama",
        }
        saved = {name: getattr(settings, name) for name in overrides}
        for name, value in overrides.items():
            setattr(settings, name, value)
        try:
            yield server
        finally:
            for name, value in saved.items():
                setattr(settings, name, value)


def _measure_relay(campaign, turns):
    from asgiref.sync import async_to_sync

    with _fake_model_server() as server:
        samples = async_to_sync(_relay_samples)(campaign, server)
    return _row("relay", f"{turns:,} turns", samples, "median < 5 ms")


async def _play_socket(campaign):
    """Return a connected play websocket for the bench user's ``campaign``."""
    from channels.db import database_sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.contrib.auth import get_user_model
    from django.test import Client

    from storyteller.asgi import application

    @database_sync_to_async
    def cookie():
        client = Client()
        client.force_login(get_user_model().objects.get(username="bench"))
        return f"sessionid={client.cookies['sessionid'].value}".encode()

    headers = [(b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"), (b"cookie", await cookie())]
    communicator = WebsocketCommunicator(application, f"/ws/play/{campaign.pk}/", headers=headers)
    await communicator.connect()
    return communicator


async def _relay_samples(campaign, server, replies=5):
    communicator = await _play_socket(campaign)
    server.chunk_delay(0.005)  # paced like a fast model: 200 tokens a second
    samples = []
    for index in range(replies):
        words = [f" word{index}_{n}" for n in range(40)]
        server.script(words)
        server.chunks.clear()
        arrivals = {}
        await communicator.send_json_to({"mode": "do", "text": f"relay {index}"})
        while True:
            frame = await communicator.receive_from(timeout=30)
            now = time.perf_counter()
            if 'id="turn-outcome"' in frame:
                break
            for word in words:
                if f">{word}<" in frame:
                    arrivals[word] = now
        written = {chunk.text: chunk.at for chunk in server.chunks}
        samples += [arrivals[word] - written[word] for word in words if word in arrivals and word in written]
    await communicator.disconnect()
    await asyncio.sleep(0)
    return samples


def _bench_turn_first(sizes, repeat):
    """From Send to the narrator's request and to its first words, with a slow recorder on a one-slot server.

    Through the real play websocket and the fake server with one slot
    (Ollama's OLLAMA_NUM_PARALLEL=1) whose structured calls think for 30 s:
    every turn is sent while the previous turn's recording holds the slot,
    and must take it at once. Beside it, the same figure with no background
    work, which is the turn's own preparation.
    """
    from asgiref.sync import async_to_sync

    from storyteller.llm.fake_server import FakeModelServer

    campaign = _generate(10)
    _summarise_by_hand(campaign)
    samples = min(repeat, 20)
    with FakeModelServer(slots=1) as server:
        overrides = {
            "STORYTELLER_LLM_URL": server.url,
            "STORYTELLER_LLM_URL_CONFIGURED": True,
            "STORYTELLER_LLM_API": "ollama",
        }
        saved = {name: getattr(settings, name) for name in overrides}
        for name, value in overrides.items():
            setattr(settings, name, value)
        try:
            busy, idle = async_to_sync(_turn_first_samples)(campaign, server, samples)
        finally:
            for name, value in saved.items():
                setattr(settings, name, value)
    return [
        _row("turn first: request", "slow recorder", busy["request"], "median < 100 ms from Send"),
        _row("  first words", "slow recorder", busy["words"], "median < 100 ms from Send"),
        _row("  request, idle", "no background", idle["request"], "the turn's own preparation"),
    ]


async def _turn_first_samples(campaign, server, samples):
    from channels.db import database_sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.contrib.auth import get_user_model
    from django.test import Client

    from storyteller import postturn
    from storyteller.asgi import application

    @database_sync_to_async
    def cookie():
        client = Client()
        client.force_login(get_user_model().objects.get(username="bench"))
        return f"sessionid={client.cookies['sessionid'].value}".encode()

    headers = [(b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"), (b"cookie", await cookie())]
    communicator = WebsocketCommunicator(application, f"/ws/play/{campaign.pk}/", headers=headers)
    await communicator.connect()

    async def turn(index):
        words = f"Reply{index} follows."
        server.script(words)
        sent = time.perf_counter()
        await communicator.send_json_to({"mode": "do", "text": f"turn first {index}"})
        while 'id="turn-outcome"' not in await communicator.receive_from(timeout=60):
            pass
        request = next(r.at for r in server.requests if r.at > sent and r.path == "/api/chat" and r.body.get("stream"))
        first = next(c.at for c in server.chunks if c.at > sent and c.text.strip() == f"Reply{index}")
        return request - sent, first - sent

    def recordings():
        return [r for r in server.requests if "format" in (r.body or {})]

    figures = {"busy": {"request": [], "words": []}, "idle": {"request": [], "words": []}}
    for index in range(samples):  # no background work: each turn's recording is done before the next is sent
        await postturn.settle(campaign.pk)
        request, first = await turn(index)
        figures["idle"]["request"].append(request)
        figures["idle"]["words"].append(first)
    server.json_delay(30)
    last = time.perf_counter()
    await turn(samples)
    for index in range(samples + 1, 2 * samples + 1):
        for _ in range(3000):  # the worker's next recording call (the re-run, or the last turn's) is thinking
            if any(r.at > last for r in recordings()):
                break
            await asyncio.sleep(0.01)
        last = time.perf_counter()
        request, first = await turn(index)
        figures["busy"]["request"].append(request)
        figures["busy"]["words"].append(first)
    server.json_delay(0)
    await postturn.settle()
    await communicator.disconnect()
    return figures["busy"], figures["idle"]


def _bench_knowledge(sizes, repeat):
    """Import a 1 MiB Markdown source; lexical and hybrid retrieval over 20,000 passages (seed 003)."""
    import random

    from django.contrib.auth import get_user_model

    from campaigns import story
    from campaigns.models import Campaign

    user, _ = get_user_model().objects.get_or_create(username="bench")
    campaign = story.start_campaign(Campaign.objects.create(owner=user, title="Knowledge bench", protagonist="Edrin",
                                                            opening=REPLIES[0]))
    rng = random.Random(1892)
    words = _vocabulary(rng)
    _generate_passages(campaign, rng, words, KNOWLEDGE_PASSAGES)
    results = _measure_retrieval(campaign, rng, words, repeat)
    # Last: each sample imports and deletes 1 MiB, leaving FTS5 delete markers
    # that slow the retrievals above until the index merges them.
    results.insert(0, _measure_import(campaign, rng, words, max(3, repeat // 10)))
    return results


KNOWLEDGE_PASSAGES = 20_000
VECTOR_DIMS = 768  # nomic-embed-text


def _vocabulary(rng):
    """Return 6,000 words ranked as in English prose: function words first, then content words."""
    from knowledge.retrieval import STOPWORDS

    common = sorted({word.strip('.,"').lower() for text in REPLIES + ACTIONS for word in text.split()} - STOPWORDS)
    letters = "abcdefghilmnoprstuvw"
    invented = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(4, 9))) for _ in range(7000)})
    words = sorted(STOPWORDS) + common + invented
    return words[:6000]


def _prose(rng, words, count):
    # Zipf's law (frequency ∝ 1/rank), as in real prose: function words
    # everywhere, each content word in a few percent of passages.
    if not hasattr(_prose, "weights") or len(_prose.weights) != len(words):
        _prose.weights = list(itertools.accumulate(1 / rank for rank in range(1, len(words) + 1)))
    return " ".join(rng.choices(words, cum_weights=_prose.weights, k=count)).capitalize() + "."


def _markdown(rng, words, size):
    parts, total, section = [], 0, 0
    while total < size:
        section += 1
        block = f"## Section {section}\n\n" + "\n\n".join(_prose(rng, words, rng.randint(40, 140)) for _ in range(3))
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
    return _row("knowledge import", "1 MiB markdown", samples, "median < 2 s (chunk + FTS, no vectors)")


def _generate_passages(campaign, rng, words, count):
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
            text = _prose(rng, words, rng.randint(60, 180))
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
    queries = [f"{ACTIONS[i % 4]} {_prose(rng, words, 50)}" for i in range(repeat + 3)]
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
        text = f"{ACTIONS[index % 4]} {_prose(rng, words, 14)}"
        started = time.perf_counter()
        retrieval.retrieve(campaign, retrieval.Query(text, ("Edrin",)))
        if index >= 3:
            short.append(time.perf_counter() - started)
    size = f"{KNOWLEDGE_PASSAGES:,} passages"
    fts, cosine = _knowledge_hardware(campaign, queries, vectors)
    rows = [
        _row("lexical retrieval", size, lexical, "median < 15 ms"),
        _row("lexical, state scene", size, short, "query from a short scene summary"),
        _row("hybrid retrieval", f"{size}, 768-d", hybrid, "median < 25 ms"),
        _row("hybrid, cold vectors", f"{size}, 768-d", cold, "first query after vectors change"),
    ]
    rows[0]["target"] += f"; {rows[0]['median_ms'] / fts['median_ms']:.1f}x the hardware"
    rows[2]["target"] += f"; {rows[2]['median_ms'] / (fts['median_ms'] + cosine['median_ms']):.1f}x the hardware"
    return [*rows, fts, cosine]


def _knowledge_hardware(campaign, queries, vectors):
    """What the hardware does for the same queries: FTS5's own ranking of their terms, and one cosine pass."""
    import numpy as np
    from django.db import connection

    from knowledge.models import Passage
    from knowledge.retrieval import FTS_WINDOW, MAX_QUERY_TERMS, _quoted, meaningful_terms

    matrix = np.vstack([np.frombuffer(blob, np.float32) for blob in Passage.objects.filter(
        campaign=campaign).values_list("embedding", flat=True)])
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    fts, cosine = [], []
    with connection.cursor() as cursor:
        for index, text in enumerate(queries):
            expression = " OR ".join(_quoted(term) for term in meaningful_terms(text)[:MAX_QUERY_TERMS])
            started = time.perf_counter()
            cursor.execute("SELECT rowid, rank FROM knowledge_passage_fts WHERE knowledge_passage_fts MATCH %s "
                           "ORDER BY rank, rowid LIMIT %s", [expression, FTS_WINDOW])
            cursor.fetchall()
            middle = time.perf_counter()
            np.flatnonzero(np.einsum("ij,j->i", matrix, vectors[index] / np.linalg.norm(vectors[index])) >= 0.5)
            done = time.perf_counter()
            fts.append(middle - started)
            cosine.append(done - middle)
    size = f"{KNOWLEDGE_PASSAGES:,} passages"
    return (_row("  hardware: FTS5 alone", size, fts[3:], "the same terms, ranked by FTS5 itself"),
            _row("  hardware: cosine pass", f"{size}, 768-d", cosine[3:], "one einsum over the unit vectors"))


# Benchmark groups by name, in the order they run; ``--only`` picks some.
# Each takes (story sizes, repeat) and returns result rows.


def _bench_state(sizes, repeat):
    """State selection and rendering with 500 entities and 5,000 facts; applying a recorder batch of 20 events."""
    from campaigns import lineage
    from campaigns.state import apply_events
    from storyteller.context import state as state_section

    campaign = _generate_state(entities=500, facts=5000, turns=200)
    size = "500 entities, 5,000 facts"
    text = "I ask Character 7 about Item 3 while Character 12 watches from Place 2."
    wall, cpu = [], []
    for index in range(repeat + 3):
        campaign.refresh_from_db()
        started, started_cpu = time.perf_counter(), time.process_time()
        state_section.section(campaign, lineage.path_of(campaign), text)
        if index >= 3:  # the first reads warm SQLite's page cache
            wall.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
    # CPU time beside wall time: SQLite runs in this process, so on a shared
    # machine the CPU figure is the one other people's load does not move.
    results = [_row("state select+render", size, wall, "median < 20 ms"), _row("  (CPU time)", size, cpu, "")]
    wall, cpu = [], []
    for index in range(repeat):
        node = _commit_bench_turn(campaign, index)
        started, started_cpu = time.perf_counter(), time.process_time()
        events = apply_events(node, _recorder_batch(index), source="recorder", attempt=1)
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
        if index == 0 and any(event.status != "applied" for event in events):
            raise CommandError("the benchmark's recorder batch was rejected: "
                               + "; ".join(event.reason for event in events if event.reason))
    results += [_row("state apply 20 events", size, wall, "median < 5 ms"), _row("  (CPU time)", size, cpu, "")]
    return results


def _generate_state(entities, facts, turns, campaign=None, scene=None):
    """Create a campaign whose state, spread over ``turns`` recorded turns, holds ``entities`` and ``facts``.

    A tenth of the facts are later retracted and a side branch carries
    facts of its own, so the fold has superseded and abandoned rows to skip.
    Given a ``campaign`` (a world just imported), its story grows instead,
    and the scene is at ``scene``.
    """
    from django.contrib.auth import get_user_model

    from campaigns import story
    from campaigns.models import Branch, Campaign, Node, StateEvent, StateRecord
    from campaigns.state.reading import fact_slot

    user, _ = get_user_model().objects.get_or_create(username="bench")
    campaign = campaign or story.start_campaign(Campaign.objects.create(
        owner=user, title="Bench state", protagonist="Edrin, a lamplighter", opening=REPLIES[0],
        context_token_budget=8192, max_output_tokens=400,
    ))
    main = campaign.head_branch
    Node.objects.bulk_create([
        Node(campaign=campaign, branch=main, depth=depth, role="player" if depth % 2 else "narrator",
             mode="do" if depth % 2 else "", text=REPLIES[depth % 4] if depth % 2 == 0 else ACTIONS[depth % 4],
             tokens=60, tokens_through=60 * depth)
        for depth in range(1, 2 * turns + 1)
    ])
    side = Branch.objects.create(campaign=campaign, parent=main, fork_depth=2 * turns - 10)
    replies = {n.depth: n for n in Node.objects.filter(campaign=campaign, role="narrator")}
    events = StateEvent.objects.bulk_create([
        StateEvent(campaign=campaign, node=replies[2 * turn], source="recorder", payload={"type": "bench"},
                   status="applied") for turn in range(1, turns + 1)
    ])
    kinds = [("Character", "character", 200), ("Place", "place", 100), ("Item", "item", 150), ("Faction", "faction", 50)]
    records = []

    def add(turn, branch=main, **fields):
        records.append(StateRecord(campaign=campaign, branch=branch, depth=2 * turn, event=events[turn - 1],
                                   authority="state", **fields))

    names = []
    for prefix, kind, count in kinds:
        for number in range(count):
            name = f"{prefix} {number}"
            key = name.lower().replace(" ", "-")
            names.append((key, kind))
            add(1 + len(names) % turns, slot=f"entity:{key}", kind="entity", subject=key, value=name,
                data={"kind": kind, "aliases": [f"the {kind} {number}"], "description": f"a {kind} of the bench"})
    places = [key for key, kind in names if kind == "place"]
    people = [key for key, kind in names if kind == "character"]
    for index, key in enumerate(people):
        add(turns, slot=f"location:{key}", kind="location", subject=key, value=places[index % len(places)])
    for index, (key, kind) in enumerate(names):
        if kind == "item":
            add(turns, slot=f"holder:{key}", kind="holder", subject=key, value=people[index % len(people)])
    add(turns, slot="scene", kind="scene", value="The bench's scene.", data={"location": scene or places[2]})
    add(turns, slot="location:protagonist", kind="location", subject="protagonist", value=scene or places[2])
    for index in range(facts):
        subject = names[index % len(names)][0]
        text = f"Bench fact {index} about {subject}."
        add(1 + index % turns, slot=fact_slot(text), kind="fact", subject=subject, value=text)
        if index % 10 == 0:
            add(turns, slot=fact_slot(text), kind="fact", subject=subject, value=text, retracted=True)
        if index % 50 == 0:
            add(turns - 1, branch=side, slot=fact_slot(f"Abandoned {index}."), kind="fact", value=f"Abandoned {index}.")
    StateRecord.objects.bulk_create(records, batch_size=2000)
    campaign.head_depth = 2 * turns
    campaign.save(update_fields=["head_depth"])
    return campaign


def _commit_bench_turn(campaign, index):
    from campaigns import story
    from campaigns.models import Campaign

    campaign = Campaign.objects.get(pk=campaign.pk)
    action = story.PlayerAction(mode="do", text=f"step {index}", tokens=5)
    reply = story.Reply(text=REPLIES[index % 4], tokens=60, report={"bench": True}, model="bench", api="bench")
    return story.commit_turn(campaign.pk, (campaign.head_branch_id, campaign.head_depth), action, reply)


def _recorder_batch(index):
    """Return twenty valid events of every kind the recorder proposes, distinct per ``index``."""
    def ev(type, subject="", object="", value="", **data):
        return {"type": type, "subject": subject, "object": object, "value": value, "narrator_only": False,
                "data": data}

    newcomer, place, item = f"Newcomer {index}", f"New place {index}", f"New item {index}"
    return [
        ev("introduce", newcomer, "character", "a stranger"),
        ev("introduce", place, "place"),
        ev("scene", "", place, f"Scene {index} begins."),
        ev("introduce", item, "item"),
        ev("arrive", newcomer),
        ev("item_changes", newcomer, ops=[{"op": "take", "item": item}]),
        ev("item_changes", newcomer, ops=[{"op": "give", "item": item, "to": "protagonist"}]),
        ev("move", "Character 5", place),
        ev("relationship", newcomer, "protagonist", "wary"),
        ev("set_condition", newcomer, "", "soaked"),
        ev("open_thread", "", "", f"Who sent newcomer {index}?"),
        ev("resolve_thread", "", "answered", f"Who sent newcomer {index}?"),
        *[ev("add_fact", newcomer, "", f"Newcomer {index} knows fact {n}.") for n in range(6)],
        ev("retract_fact", "", "", f"Newcomer {index} knows fact 0."),
        ev("item_changes", "protagonist", ops=[{"op": "drop", "item": item}]),
    ]


def _bench_memory(sizes, repeat):
    """Memory retrieval over 1,000 and 10,000 eligible 768-d memories; eviction order over 10,000 (issue 4)."""
    import random

    rng = random.Random(2044)
    words = _vocabulary(rng)
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
               source_end=6 * i + 5, text=_prose(rng, words, 30), authority="accepted_story",
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
        query = memories.Query(f"{ACTIONS[index % 4]} {_prose(rng, words, 12)}", _prose(rng, words, 60),
                               tuple(vectors[2 * index]), tuple(vectors[2 * index + 1]), "nomic-embed-text")
        if index < 3:  # a fresh process: every row, word and vector read out of SQLite (the socket's warm-up)
            memories.forget()
            started = time.perf_counter()
            memories.section(campaign, path, query)
            fresh.append(time.perf_counter() - started)
            continue
        if index % 10 == 3:  # the memory step has just written and embedded a memory: the first turn after it
            [memory] = bank.write(campaign.pk, [bank.Written(0, 5, campaign.head_branch_id,
                                                             _prose(rng, words, 30), "bench")])
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
    row = _row("memory retrieval", size, warm, target)
    row["target"] += f"; {row['median_ms'] / hardware['median_ms']:.1f}x the hardware"
    return [row, hardware,
            _row("memory, new memory", size, written, "first turn after one is written (rows re-read, vector appended)"),
            _row("memory, fresh process", size, fresh, "every row and vector read (what the socket's warm-up does)")]


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
    return _row("  hardware: cosine top-5", f"{len(matrix):,} vectors", samples[3:], "the same work in numpy")


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
    return [_row("eviction order", size, ordering, "median < 50 ms"),
            _row("eviction pass", size, full, "read, order, mark one forgotten")]


def _bench_checkpoint(sizes, repeat):
    """Checkpoint eligibility on a 5,000-node tree, and prompt-prefix reuse over a 200-turn story (issue 4)."""
    return [*_measure_checkpoint_lookup(repeat), _measure_prefix_reuse(PREFIX_REUSE_TURNS),
            _measure_prefix_reuse(PREFIX_REUSE_TURNS, note=True)]


CHECKPOINT_TREE_TURNS = 2_500  # 5,000 nodes on the line, with an abandoned side branch every 100 turns
PREFIX_REUSE_TURNS = 200


def _measure_checkpoint_lookup(repeat):
    from campaigns import lineage
    from campaigns.models import Branch
    from memory import checkpoints
    from storyteller import context

    campaign = _generate(CHECKPOINT_TREE_TURNS)
    path = lineage.path_of(campaign)
    prefix = context.prefix_hash(campaign)
    # A checkpoint every 60 turns along the line, as compaction leaves them, and one on every side branch.
    for end in range(120, 2 * CHECKPOINT_TREE_TURNS - 1, 120):
        checkpoints.write(path, end, f"The story through depth {end}.", prefix)
    for side in Branch.objects.filter(campaign=campaign).exclude(pk=campaign.head_branch_id):
        side_path = lineage.path_at(campaign.pk, side.pk, side.fork_depth + 6)
        checkpoints.write(side_path, side.fork_depth + 6, "An abandoned line.", prefix)
    lookup, checked = [], []
    for index in range(repeat + 3):
        started = time.perf_counter()
        checkpoints.eligible_checkpoint(path, prefix)
        found = time.perf_counter()
        checkpoints.look_up(path, prefix, fresh=True)
        done = time.perf_counter()
        if index >= 3:
            lookup.append(found - started)
            checked.append(done - found)
    size = f"{2 * CHECKPOINT_TREE_TURNS:,} nodes"
    return [_row("checkpoint lookup", size, lookup, "median < 5 ms"),
            _row("checkpoint, fresh", size, checked, "with the source hash of ~4,900 nodes checked again")]


def _measure_prefix_reuse(turns, layout="narrator", note=False):
    """Play ``turns`` turns (a summary written by hand stands in for the summariser); measure what each prompt
    shares with the previous one.

    With ``note`` the story has an author's note at depth 2 every 3 turns
    (issue 26): a prompt's tail then starts at the note when it has one, and
    the turn after it reads the reply under the note again.

    With the ``"game master"`` layout each turn is a game master's, laid out
    and committed by ``voices.gm``'s own functions (a round in which two
    characters speak): the prompt built with its headroom (``gm.headroom``),
    the step's prompt (``gm.step_messages``), the narration's
    (``gm.narration_messages``), the reply's text and tokens
    (``gm.transcript``, ``gm.reply_tokens``) and its rounds (``gm.commit``),
    which history renders again (``context.messages_for``). Both medians are
    given: over every prompt, and turn to turn (each step against the
    previous turn's narration).
    """
    from django.contrib.auth import get_user_model

    from campaigns import lineage, notes, story
    from campaigns.models import Campaign
    from memory import checkpoints
    from storyteller import context, tokens
    from storyteller.voices import gm

    user, _ = get_user_model().objects.get_or_create(username="bench")
    campaign = story.start_campaign(Campaign.objects.create(
        owner=user, title="Prefix reuse", protagonist="Edrin", opening=REPLIES[0],
        context_token_budget=4096, max_output_tokens=300))
    if note:
        notes.save_note(campaign, text="Keep the rain in every scene; Edrin is being watched.", depth=2, interval=3,
                        role="system", branch_only=False)
    previous, shares, builds, steps = None, [], [], []
    previous_tail = -1
    breaks = rotations = 0
    last_checkpoint = None
    for turn in range(turns):
        action = context.Action(mode="do", text=ACTIONS[turn % 4])
        headroom = gm.headroom(campaign.max_output_tokens) if layout == "game master" else 0  # as a turn builds
        started = time.perf_counter()
        try:
            ctx = context.build(campaign, lineage.path_of(campaign), action, headroom=headroom)
        except context.NeedsCompaction as need:
            plan = need.plan
            checkpoints.write(plan.path, plan.through, f"Edrin's story through depth {plan.through}. " * 8,
                              plan.prefix_hash)
            ctx = context.build(campaign, lineage.path_of(campaign), action, headroom=headroom)
        builds.append(time.perf_counter() - started)
        prompts = [ctx.messages]
        if layout == "game master":
            played = _gm_played(ctx)
            prompts = [gm.step_messages(ctx.messages, gm.step_request(1, 3, "the square", ["Mara", "Aldric"])),
                       played.narration_messages]
        checkpoint = (ctx.report["checkpoint"] or {}).get("id")
        for n, messages in enumerate(prompts):
            current = _rendered(messages)
            if previous is not None:
                if n == 0:
                    rotations += checkpoint != last_checkpoint
                    # A game master's step starts with the whole of the last narration's prompt (history renders
                    # the turn as it had it); a narrator's with all of the last prompt but its tail.
                    breaks += not current.startswith(_rendered(previous if layout == "game master"
                                                               else previous[:previous_tail]))
                common = len(_common_prefix(_rendered(previous), current))
                shares.append(tokens.count(current[:common]) / tokens.count(current))
                if n == 0:
                    steps.append(shares[-1])
            previous, previous_tail = messages, ctx.tail_start
        last_checkpoint = checkpoint
        text = f"{REPLIES[turn % 4]} ({turn})"
        reply = story.Reply(text=text, tokens=context.node_tokens("narrator", "", text), report={}, model="bench",
                            api="bench")
        if layout == "game master":
            reply = story.Reply(text=gm.transcript(played, text), tokens=gm.reply_tokens(played, text), report={},
                                model="bench", api="bench")
        with transaction.atomic():
            node = story.commit_turn(campaign.pk, (campaign.head_branch_id, campaign.head_depth),
                                     story.PlayerAction(mode="do", text=action.text,
                                                        tokens=context.node_tokens("player", "do", action.text)),
                                     reply)
            if layout == "game master":
                gm.commit(node, played, text)
        campaign.refresh_from_db()
    name = "prefix reuse" if layout == "narrator" else "prefix reuse, GM"
    name += ", author's note" if note else ""
    note = (f"reused share median {statistics.median(shares):.1%}, min {min(shares):.1%}; "
            f"{breaks} breaks, {rotations} rotations")
    if layout == "game master":
        note = (f"every prompt: median {statistics.median(shares):.1%}; turn to turn (step after the last "
                f"narration): median {statistics.median(steps):.1%}, min {min(steps):.1%}; {breaks} breaks, "
                f"{rotations} rotations")
    row = _row(name, f"{turns} turns", builds, note)
    row.update({"reused_share_median": statistics.median(shares), "reused_share_min": min(shares),
                "breaks": breaks, "rotations": rotations})
    if steps:
        row.update({"turn_to_turn_median": statistics.median(steps), "turn_to_turn_min": min(steps)})
    return row


def _gm_played(ctx):
    """Return a game master's turn after ``ctx`` as ``voices.gm.play`` returns it: one round in which Mara and
    Aldric speak, its narration's prompt laid out by ``gm.narration_messages``."""
    from storyteller.voices import gm

    spoken = [("mara", "Mara", "Not tonight."), ("aldric", "Aldric", "Let him look.")]
    this = gm.RoundPlayed(1, {"actors": [], "refused": []},
                          [{"who": key, "name": name, "why": "they are here"} for key, name, _ in spoken],
                          [{"speaker": key, "name": name, "text": line, "action": ""} for key, name, line in spoken],
                          {}, [])
    return gm.Played([this], gm.narration_messages(ctx.messages, [this.row()]), [], [], {})


def _rendered(messages):
    """Return messages as a chat template lays them out: what a server's prompt cache compares."""
    return "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages)


def _bench_minds(sizes, repeat):
    """Per-character recall over 10,000 and 50,000 recall items, indexing, selection and beliefs (issue 14)."""
    import random

    rng = random.Random(2046)
    words = _vocabulary(rng)
    results = []
    for count in MINDS_ITEMS:
        campaign = _generate_recall_items(rng, words, count)
        results += _measure_recall(campaign, rng, words, count, repeat)
    results += _measure_recall_index_update(campaign, rng, words, repeat)
    results += _measure_recall_selection(rng, words, repeat)
    results += _measure_whereabouts(repeat)
    results += _measure_minds_pipeline(rng, repeat)
    results += _measure_events_build(rng, words, repeat)
    return results


MINDS_ITEMS = (10_000, 50_000)
MINDS_PER_OWNER = 2_000  # one character's perceptions and beliefs
MINDS_VECTOR_OWNERS = 5  # owners given 768-d vectors (her and four others): 10,000 vectors of 3 KiB
MINDS_PLACES = ("kitchen", "yard", "hall", "cellar", "tower", "quay", "chapel", "market")
MINDS_TAGS = ("secret", "key", "debt", "fire", "love", "theft", "storm", "oath")


def _generate_recall_items(rng, words, count):
    """Create a campaign with ``count`` recall items, 2,000 per owner, "mara" first; her first 5 owners embedded."""
    import numpy as np
    from django.contrib.auth import get_user_model

    from campaigns import story
    from campaigns.models import Branch, Campaign
    from memory import recall_index
    from memory.models import RecallItem

    user, _ = get_user_model().objects.get_or_create(username="bench")
    campaign = story.start_campaign(Campaign.objects.create(
        owner=user, title=f"Minds bench {count}", protagonist="Edrin", opening=REPLIES[0]))
    turns = 2_000
    campaign.head_depth = 2 * turns  # eligibility reads only (branch, depth)
    campaign.save(update_fields=["head_depth"])
    main = campaign.head_branch_id
    side = Branch.objects.create(campaign=campaign, parent_id=main, fork_depth=2 * turns - 200).pk
    owners = ["mara"] + [f"person{i}" for i in range(1, count // MINDS_PER_OWNER)]
    for owner in owners:
        entries = []
        for i in range(MINDS_PER_OWNER):
            depth = 2 * rng.randrange(1, turns) if i % 50 else 2 * turns - 150  # a few on the abandoned side
            anchor = (side if i % 50 == 0 else main, depth)
            kind = "belief" if i % 40 == 0 else "perception"
            slot = f"belief:{owner}:b{i}" if kind == "belief" else f"perception:e{i}:{owner}"
            entries.append(recall_index.Entry(
                slot, kind, owner, _prose(rng, words, rng.randint(8, 20)), anchor, gist=_prose(rng, words, 4),
                importance=rng.randint(1, 5), tags=tuple(rng.sample(MINDS_TAGS, 2)),
                location=rng.choice(MINDS_PLACES), people=tuple(rng.sample(owners[:12], 2)),
                at_ms=depth * 600_000))
        for start in range(0, len(entries), 500):
            recall_index.index(campaign.pk, entries[start:start + 500])
    vectors = np.random.default_rng(count)
    for owner in owners[:MINDS_VECTOR_OWNERS]:
        ids = list(RecallItem.objects.filter(campaign=campaign, owner=owner).values_list("id", flat=True))
        matrix = vectors.standard_normal((len(ids), VECTOR_DIMS)).astype(np.float32)
        recall_index.store_vectors(campaign.pk, "nomic-embed-text", list(zip(ids, matrix)))
    return campaign


def _minds_situation(rng, words, index):
    from memory import recall

    return recall.Situation(f"{ACTIONS[index % 4]} {_prose(rng, words, 12)} teapot",
                            people=frozenset({"person1", "person2"}), strength={"person1": 0.6},
                            location=MINDS_PLACES[index % len(MINDS_PLACES)], tags=frozenset({"secret"}))


def _measure_recall(campaign, rng, words, count, repeat):
    import numpy as np

    from campaigns import lineage
    from memory import recall_index

    path = lineage.path_of(campaign)
    queries = np.random.default_rng(12).standard_normal((repeat + 3, VECTOR_DIMS)).astype(np.float32)
    now = 2 * 2_000 * 600_000
    lexical, hybrid, cold = _Samples(), _Samples(), _Samples()
    for index in range(repeat + 3):
        situation = _minds_situation(rng, words, index)
        with lexical.timing(index >= 3):
            recall_index.recall(path, campaign, "mara", situation, now)
        if index < 3:  # her vectors read out of SQLite: the first recall after they change
            recall_index._matrices.clear()
        with (hybrid if index >= 3 else cold).timing():
            recall_index.recall(path, campaign, "mara", situation, now, vector=tuple(queries[index]),
                                model="nomic-embed-text")
    size = f"{count:,} items, 2,000 hers"
    return [*lexical.rows("recall, words + cues", size, "median < 30 ms, flat 10,000 → 50,000"),
            *hybrid.rows("recall, hybrid", size + ", 768-d", "median < 50 ms (hot vectors)"),
            *cold.rows("recall, cold matrix", size + ", 768-d", "< 150 ms (her matrix read from SQLite)")]


class _Samples:
    """Wall and CPU time of each timed block: SQLite runs in this process, so on a shared machine the
    CPU figure is the one other people's load does not move."""

    def __init__(self):
        self.wall, self.cpu = [], []

    @contextlib.contextmanager
    def timing(self, keep=True):
        started, started_cpu = time.perf_counter(), time.process_time()
        yield
        if keep:
            self.wall.append(time.perf_counter() - started)
            self.cpu.append(time.process_time() - started_cpu)

    def rows(self, name, size, target):
        return [_row(name, size, self.wall, target), _row("  (CPU time)", size, self.cpu, "")]


def _measure_recall_index_update(campaign, rng, words, repeat):
    """Index one turn's minds records at the head: 10 events, 40 perceptions, 3 beliefs."""
    from memory import recall_index

    samples = _Samples()
    for index in range(repeat):
        anchor = (campaign.head_branch_id, campaign.head_depth)
        entries = [recall_index.Entry(f"event:n{index}-{e}", "event", "", _prose(rng, words, 12), anchor,
                                      importance=3, tags=("secret",), location="kitchen", at_ms=index)
                   for e in range(10)]
        entries += [recall_index.Entry(f"perception:n{index}-{p % 10}:person{p // 10 + 1}", "perception",
                                       f"person{p // 10 + 1}", _prose(rng, words, 12), anchor, importance=3)
                    for p in range(40)]
        entries += [recall_index.Entry(f"belief:mara:n{index}-{b}", "belief", "mara", _prose(rng, words, 10), anchor,
                                       importance=3) for b in range(3)]
        with samples.timing():
            recall_index.index(campaign.pk, entries)
    return samples.rows("recall index update", "53 records", "median < 10 ms")


def _measure_recall_selection(rng, words, repeat):
    """Fading, rerank fallback, MMR and association over 60 candidates: the pure part of one recall."""
    from memory import recall

    items = [recall.Item(i, f"perception:e{i}:mara", "perception", text, _prose(rng, words, 4), rng.randint(1, 5),
                         frozenset({f"person{rng.randint(1, 8)}"}), frozenset(rng.sample(MINDS_TAGS, 2)),
                         rng.choice(MINDS_PLACES), frozenset(), i * 3_600_000, i, recall.terms(text))
             for i, text in ((i, _prose(rng, words, 14)) for i in range(60))]
    pool = recall.Pool(items)
    word_scores = {i: rng.random() * 5 for i in range(0, 60, 2)}
    samples = _Samples()
    for index in range(repeat):
        situation = _minds_situation(rng, words, index)
        with samples.timing():
            recall.rank(pool, situation, now_ms=80 * 3_600_000, words=word_scores)
    return samples.rows("retention + MMR", "60 candidates", "median < 2 ms")


def _measure_whereabouts(repeat):
    """Beliefs of 50 characters about 2,000 items: replayed from a generated story's world steps, and per turn."""
    import random

    from campaigns.state import beliefs

    rng = random.Random(50)
    places = [f"place{i}" for i in range(20)]
    people = [f"person{i}" for i in range(50)]

    def turn(index):
        who = rng.choice(people)
        steps = [beliefs.Move(who, rng.choice(places)),
                 beliefs.Change(f"item{rng.randrange(2_000)}", rng.choice(people), actor=who, hidden=index % 7 == 0)]
        if index % 8 == 0:
            steps.append(beliefs.Notice(f"item{rng.randrange(2_000)}", by=who))
        if index % 8 == 4:
            steps.append(beliefs.Tell(rng.choice(people), f"item{rng.randrange(2_000)}", by=who))
        return steps

    steps = []
    for i in range(2_000):
        holder = rng.choice(places) if i % 5 else f"item{i - 1}"  # every fifth item inside the one before it
        steps.append(beliefs.Change(f"item{i}", holder, hidden=i % 10 == 3))
        if i % 20 == 4:
            steps.append(beliefs.Container(f"item{i}", open=False))
    steps += [beliefs.Move(who, rng.choice(places)) for who in people]
    for index in range(400):
        steps += turn(index)
    replay, per_turn, pair = _Samples(), _Samples(), _Samples()
    for _ in range(max(5, repeat // 5)):
        with replay.timing():
            minds = beliefs.derive(steps)
            for who in people:
                minds.believes(who)
    for index in range(repeat):
        more = turn(index)
        with per_turn.timing():
            beliefs.derive(more, minds)
            for who in people:
                minds.believes(who)
        with pair.timing():
            minds.believes_about(people[0], people[1])
    size = f"50 people, 2,000 items, {len(steps):,} steps"
    return [*per_turn.rows("whereabouts, one turn", size, "median < 20 ms (a turn's steps + all 50 belief maps)"),
            *replay.rows("whereabouts, replay", size, "every step again (a branch switch, a new process)"),
            *pair.rows("second order, a pair", size, "one believes_about(a, b)")]


MINDS_PLACES_COUNT, MINDS_PEOPLE, MINDS_THINGS = 20, 50, 2_000


def _minds_world():
    """A world for minds: 20 rooms in a ring, 50 people (six of them and Edrin in room 0), 2,000 things, every
    tenth a closed chest holding the next, every seventh hidden."""
    rooms = [f"Room {n}" for n in range(MINDS_PLACES_COUNT)]
    exits = [{"from": rooms[n], "to": rooms[(n + 1) % len(rooms)], "both_ways": True} for n in range(len(rooms))]
    people = [{"name": f"Person {n}", "place": rooms[0 if n < 6 else n % len(rooms)]} for n in range(MINDS_PEOPLE)]
    people.append({"name": "Edrin", "protagonist": True, "place": rooms[0]})
    things = []
    for n in range(MINDS_THINGS):
        entry = {"name": f"Thing {n}", "holder": rooms[n % len(rooms)] if n % 10 != 1 else f"Thing {n - 1}"}
        if n % 10 == 0:
            entry["container"] = "closed"
        if n % 7 == 3:
            entry["hidden"] = True
        things.append(entry)
    return {"format": "storyteller-world", "version": 1,
            "campaign": {"title": "Minds bench", "protagonist": "Edrin, a lamplighter", "opening": REPLIES[0]},
            "places": [{"name": room} for room in rooms], "exits": exits, "characters": people, "items": things}


def _minds_world_batch(index):
    """A turn of the world: two people move, one takes a thing and puts it down elsewhere (they stay in room 0's
    ring), and something is said of a thing."""
    def ev(type, subject="", object="", value="", **extra):
        return {"type": type, "subject": subject, "object": object, "value": value, **extra}

    walker = f"Person {6 + index % 44}"
    here = int(walker.split()[1]) % MINDS_PLACES_COUNT
    step = (here + 1 + index % 2) % MINDS_PLACES_COUNT
    if step % 10 == 1:  # room 1 and room 11 hold the things inside chests: go one further
        step += 1
    thing = f"Thing {step + MINDS_PLACES_COUNT * (index * 7 % (MINDS_THINGS // MINDS_PLACES_COUNT))}"
    return [ev("move", walker, f"Room {step}"),
            ev("item_changes", walker, data={"ops": [{"op": "take", "item": thing}]}),
            ev("move", walker, f"Room {here}"),
            ev("item_changes", walker, data={"ops": [{"op": "drop", "item": thing}]}),
            ev("notice", f"Thing {index % 20 + 4}", data={"by": "Person 0", "holder": "Room 0"})]


def _minds_batch(index):
    """What a busy turn's minds step records: 10 events in room 0, 4 perceptions of each, 3 beliefs."""
    events = []
    for n in range(10):
        events.append({"type": "event", "object": f"b{index}-{n}", "value": f"Person {n % 6} did thing {n} ({index}).",
                       "data": {"importance": 1 + n % 5, "tags": ["bench", f"t{n % 4}"],
                                "participants": [f"Person {n % 6}"], "location": "Room 0",
                                "items": [f"Thing {n * 20}"]}})
    for n in range(10):
        for who in range(4):
            events.append({"type": "perception", "subject": f"Person {who}", "object": f"b{index}-{n}",
                           "value": f"I saw person {n % 6} do thing {n}.",
                           "data": {"mode": "witnessed", "accuracy": "accurate"}})
    for n in range(3):
        events.append({"type": "belief", "subject": "Person 0", "object": f"b{index}-belief-{n}",
                       "value": f"Person {n} is up to something ({index}).",
                       "data": {"confidence": "likely", "supports": [f"b{index}-{n}"]}})
    return events


def _measure_minds_pipeline(rng, repeat):
    """A minds batch applied through apply_events, and every character's whereabouts beliefs through the per-line
    cache after each turn of a 400-turn story in a world of 50 people and 2,000 things."""
    from campaigns import lineage, worldfile
    from campaigns.state import apply_events, whereabouts

    campaign, _ = worldfile.create_campaign(_bench_user(), _minds_world())
    for index in range(400):
        node = _commit_bench_turn(campaign, index)
        apply_events(node, _minds_world_batch(index), source="recorder", attempt=1)
    batch = _Samples()
    for index in range(repeat):
        node = _commit_bench_turn(campaign, 1_000 + index)
        payloads = _minds_batch(index)
        with batch.timing():
            events = apply_events(node, payloads, source="recorder", attempt=1, mark=False)
        refused = [event.reason for event in events if event.status != "applied"]
        if refused:
            raise CommandError("the minds benchmark's batch was refused: " + "; ".join(refused[:3]))
    people = [f"person-{n}" for n in range(MINDS_PEOPLE)]
    campaign.refresh_from_db()
    path = lineage.path_of(campaign)
    whereabouts.forget()
    replay = _Samples()
    for _ in range(max(3, repeat // 10)):
        whereabouts.forget()
        with replay.timing():
            minds = whereabouts.minds_at(path, campaign)
            for who in people:
                minds.believes(who)
    steps = sum(len(minds.believes(who)) for who in people)
    per_turn = _Samples()
    for index in range(repeat):
        node = _commit_bench_turn(campaign, 2_000 + index)
        apply_events(node, _minds_world_batch(500 + index), source="recorder", attempt=1)
        campaign.refresh_from_db()
        path = lineage.path_of(campaign)
        with per_turn.timing():
            minds = whereabouts.minds_at(path, campaign)
            for who in people:
                minds.believes(who)
    size = f"{MINDS_PEOPLE} people, {MINDS_THINGS:,} things, 400 turns"
    return [*batch.rows("minds batch apply", "10 events, 40 perceptions, 3 beliefs", "median < 15 ms"),
            *per_turn.rows("whereabouts, a turn (cache)", size, "median < 20 ms (new records + all 50 belief maps)"),
            *replay.rows("whereabouts, fresh read", size, f"every record again ({steps:,} beliefs held)")]


def _measure_events_build(rng, words, repeat):
    """Context build at 2,000 turns with 2,000 recorded events indexed and the events section searched."""
    from campaigns import lineage
    from campaigns.models import Node, StateEvent, StateRecord
    from memory import recall_index
    from storyteller import context

    campaign = _generate(2_000)
    replies = {n.depth: n for n in Node.objects.filter(campaign=campaign, role="narrator",
                                                       branch_id=campaign.head_branch_id)}
    stored = StateEvent.objects.bulk_create([
        StateEvent(campaign=campaign, node=replies[2 * turn], source="recorder", payload={"type": "event"},
                   status="applied") for turn in range(1, 2_001)])
    StateRecord.objects.bulk_create([
        StateRecord(campaign=campaign, branch_id=campaign.head_branch_id, depth=2 * turn, event=stored[turn - 1],
                    authority="state", slot=f"event:bench-{turn}", kind="event",
                    value=f"{_prose(rng, words, 10)} near the {MINDS_PLACES[turn % len(MINDS_PLACES)]}.",
                    data={"importance": 1 + turn % 5, "tags": [MINDS_TAGS[turn % len(MINDS_TAGS)]],
                          "participants": [], "location": "", "items": [], "at_ms": None, "perceived_by": {}})
        for turn in range(1, 2_001)], batch_size=2_000)
    recall_index.sync(campaign.pk)
    _summarise_by_hand(campaign)
    samples, shown = _Samples(), 0
    for index in range(repeat + 3):
        campaign.refresh_from_db()
        text = f"I think back to the {MINDS_PLACES[index % len(MINDS_PLACES)]} and {words[index % len(words)]}"
        with samples.timing(index >= 3):
            ctx = context.build(campaign, lineage.path_of(campaign), context.Action(mode="do", text=text))
        shown += len(ctx.report["events"]["used"])
    if not shown:
        raise CommandError("the events benchmark's builds evoked no event: it would not measure the section")
    return samples.rows("context build + events", "2,000 turns, 2,000 events", "median < 30 ms")


def _common_prefix(first, second):
    return first[:next((i for i, (a, b) in enumerate(zip(first, second)) if a != b), min(len(first), len(second)))]


def _bench_imports(sizes, repeat):
    """Exporting and importing long stories; hostile uploads into the running app while another person plays."""
    return [_measure_bundle(turns) for turns in sizes] + _measure_hostile_uploads()


def _measure_bundle(turns):
    """Export a story of ``turns`` turns whose every reply keeps a full prompt record; import it back."""
    from django.contrib.auth import get_user_model

    from campaigns import lineage
    from campaigns.models import ContextSnapshot, Node
    from storyteller import bundle, context
    from storyteller.diagnostics.load import PeakMemory

    campaign = _generate(turns)
    _summarise_by_hand(campaign)  # a played story of this length has its summary: the record is of a full prompt
    report = context.build(campaign, lineage.path_of(campaign), context.Action(mode="do", text=ACTIONS[0])).report
    ContextSnapshot.objects.bulk_create(
        [ContextSnapshot(node=node, report=report, model="bench", api="ollama")
         for node in Node.objects.filter(campaign=campaign, role="narrator")], batch_size=500)
    data = bundle.dumps(campaign)
    zipped = len(bundle.dumps(campaign, zipped=True))
    owner = get_user_model().objects.get(username="bench")
    with PeakMemory() as memory:
        started = time.perf_counter()
        bundle.import_bundle(owner, data)
        seconds = time.perf_counter() - started
    mib = 1024 * 1024
    return _row("bundle import", f"{turns:,} turns: {len(data) / mib:.1f} MiB JSON ({zipped / mib:.1f} zipped), "
                                 f"peak +{memory.above / mib:.0f} MiB", [seconds],
                f"within the {bundle.max_bytes() // mib} MiB limit")


def _measure_hostile_uploads():
    """Each upload issue 10 reproduced, into the app under Daphne while another person plays (diagnostics.load)."""
    from storyteller.diagnostics import load
    from storyteller.llm.fake_server import FakeModelServer

    with FakeModelServer() as server, load.LiveApp(server) as app:
        idle, outcomes = load.run(app, load.hostile_uploads(app))
    rows = [_row("turn, no import", "another person's turn", idle, "send to commit, fake model server")]
    for outcome in outcomes:
        rows.append(_row("turn during upload", f"{outcome.name}: HTTP {outcome.status} in {outcome.seconds:.1f} s, "
                                               f"app peak +{outcome.peak_above_idle / load.MiB:.0f} MiB",
                         outcome.turns, "turn max < 3 s; app peak < +200 MiB"))
    return rows


def _bench_page(sizes, repeat):
    """The play page and a flip between a reply's versions over HTTP; the end of a turn over the websocket."""
    results = []
    for turns in sizes:
        campaign = _generate(turns)
        _summarise_by_hand(campaign)
        _retry_head(campaign, versions=3)
        results.append(_measure_play_page(campaign, turns, repeat))
        results.append(_measure_flip(campaign, turns, repeat))
        results.append(_measure_turn_end(campaign, turns))
    return results


def _retry_head(campaign, versions):
    from campaigns import story

    for index in range(versions - 1):
        campaign.refresh_from_db()
        reply = story.Reply(text=f"{REPLIES[index % 4]} (version {index + 2})", tokens=60, report={"bench": True},
                            model="bench", api="bench")
        story.commit_retry(campaign.pk, (campaign.head_branch_id, campaign.head_depth), reply)


def _bench_client():
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(get_user_model().objects.get(username="bench"))
    return client


def _measure_play_page(campaign, turns, repeat):
    from django.urls import reverse

    client = _bench_client()
    url = reverse("play", args=[campaign.pk])
    samples = []
    for index in range(repeat + 3):
        started = time.perf_counter()
        assert client.get(url).status_code == 200
        if index >= 3:
            samples.append(time.perf_counter() - started)
    return _row("play page", f"{turns:,} turns", samples, "median < 100 ms (120 nodes shown)")


def _measure_flip(campaign, turns, repeat):
    from django.urls import reverse

    from campaigns.models import Node

    client = _bench_client()
    campaign.refresh_from_db()
    versions = list(Node.objects.filter(campaign=campaign, depth=campaign.head_depth).values_list("pk", flat=True))
    samples = []
    for index in range(repeat):
        url = reverse("show_version", args=[campaign.pk, versions[index % len(versions)]])
        started = time.perf_counter()
        assert client.post(url, HTTP_HX_REQUEST="true").status_code == 200
        samples.append(time.perf_counter() - started)
    return _row("version flip", f"{turns:,} turns", samples, "median < 100 ms (the story redrawn)")


def _measure_turn_end(campaign, turns, replies=3):
    """Time from a 4,000-token reply's last chunk to the frame that ends the turn; report that frame's size."""
    from asgiref.sync import async_to_sync

    campaign.max_output_tokens = 4096
    campaign.context_token_budget = 32768
    campaign.save(update_fields=["max_output_tokens", "context_token_budget"])
    long_reply = "The lantern swings over the flooded road. " * 500  # 4,000 tokens

    async def samples(server):
        from storyteller import postturn

        communicator = await _play_socket(campaign)
        found, largest = [], 0
        for index in range(replies):
            server.script([long_reply[i:i + 2000] for i in range(0, len(long_reply), 2000)])
            server.chunks.clear()
            await communicator.send_json_to({"mode": "do", "text": f"walk on {index}"})
            while True:
                frame = await communicator.receive_from(timeout=60)
                if 'id="turn-outcome"' in frame:
                    found.append(time.perf_counter() - server.chunks[-1].at)
                    largest = max(largest, len(frame.encode()))
                    break
        await communicator.disconnect()
        await postturn.settle()  # the recorder's requests must not outlive the fake server
        return found, largest

    with _fake_model_server() as server:
        found, largest = async_to_sync(samples)(server)
    return _row("turn end", f"{turns:,} turns, {largest:,} B", found,
                "frame ≈ one reply, whatever the story's length (daphne's limit: 1 MiB)")
# Twenty turns of the demo campaign a new player might send, in order.
DEMO_ACTIONS = [
    "ask the fisherman about the lantern", "walk up the hill to the cottage", "knock on the cottage door",
    "search Mara's desk", "read the lamp-oil ledger", "take the brass key from the drawer", "light a candle",
    "go back down to the harbour", "ask the fisherman who climbed the headland", "climb the headland path",
    "look at the dark lantern", "open the lantern's door", "call out for Mara", "pick up the brass button in the mud",
    "show the button to the harbour master", "ask the harbour master where his men were", "go to the inn",
    "ask the innkeeper for a room", "sleep until dawn", "return to the headland at dawn",
]


def _bench_recording(sizes, repeat):
    """The built-in narrator plays the demo campaign's first twenty turns, and records each (the recorder alone).

    Slow (tens of seconds a turn on two cores), so it runs only when named:
    ``--only recording``. Each turn either records or is skipped with one
    line in plain words; a line with a JSON decoder's message fails the run.
    """
    from asgiref.sync import async_to_sync

    overrides = {  # nothing answers on the discard port: the built-in narrator takes over, as on a fresh machine
        "STORYTELLER_LLM_URL": "http://127.0.0.1:9",
        "STORYTELLER_LLM_URL_CONFIGURED": False,
    }
    saved = {name: getattr(settings, name) for name in overrides}
    for name, value in overrides.items():
        setattr(settings, name, value)
    try:
        outcomes = async_to_sync(_record_demo_turns)()
    finally:
        for name, value in saved.items():
            setattr(settings, name, value)
    recorded = [o for o in outcomes if o["status"] == "applied"]
    skipped = [o for o in outcomes if o["status"] != "applied"]
    for outcome in outcomes:
        print(f"  turn {outcome['turn']:>2}: {outcome['status']:<8} {outcome['seconds']:6.1f} s  "
              f"{outcome['applied']} events applied, {outcome['rejected']} rejected  {outcome['error']}")
    raw = [o for o in skipped if any(word in o["error"] for word in ("Unterminated", "Expecting", "at character"))]
    if raw:
        raise CommandError(f"a skipped recording shows the decoder's message: {raw[0]['error']}")
    target = f"each records or is skipped in one line: {len(recorded)} recorded, {len(skipped)} skipped"
    return [
        _row("builtin recording", f"{len(outcomes)} demo turns", [o["seconds"] for o in outcomes], target),
        _row("  (reply)", f"{len(outcomes)} demo turns", [o["reply_seconds"] for o in outcomes], ""),
    ]


async def _record_demo_turns():
    from channels.db import database_sync_to_async

    from campaigns.models import Campaign, RecorderRun, StateEvent
    from storyteller import postturn, recorder, turns
    from storyteller.context import Action

    await database_sync_to_async(call_command)("seed_demo", verbosity=0)
    campaign = await Campaign.objects.order_by("-pk").afirst()
    recording = postturn.STEPS[0]
    assert recording.run is recorder.record
    outcomes = []

    async def quiet(_):
        pass

    saved = postturn.STEPS
    postturn.STEPS = [recording]  # the memory and summary steps are not what is measured here
    try:
        for turn, action in enumerate(DEMO_ACTIONS, start=1):
            started = time.perf_counter()
            result = await turns.play_turn(campaign.pk, Action(mode="do", text=action), quiet)
            played = time.perf_counter()
            await result.post_turn
            run = await RecorderRun.objects.aget(node_id=result.node_id)
            events = [status async for status in StateEvent.objects.filter(node_id=result.node_id)
                      .values_list("status", flat=True)]
            outcomes.append({
                "turn": turn, "status": run.status, "error": run.error,
                "seconds": time.perf_counter() - played, "reply_seconds": played - started,
                "applied": events.count("applied"), "rejected": len(events) - events.count("applied"),
            })
    finally:
        postturn.STEPS = saved
    return outcomes
# --- The turn's own overhead (issue 16) -------------------------------------------------------------------------

OVERHEAD_TURNS = 2_000
OVERHEAD_MEMORIES = 10_000
OVERHEAD_COLD = 3  # first turns after a restart: each one a fresh process


def _bench_overhead(sizes, repeat):
    """From the player's message arriving at the socket to the narrator's chat request leaving the application.

    Real turns through the play websocket consumer and the fake model server
    (embeddings answered at once, replies streamed), on one campaign of 2,000
    turns, 10,000 memories and 20,000 passages; the same for a retry, and for
    the first turn of a freshly started process (cold caches), each step's
    share beside the total, and what the hardware does for the same work.
    """
    import random
    import subprocess
    import sys

    rng = random.Random(2016)
    words = _vocabulary(rng)
    campaign = _generate(OVERHEAD_TURNS)
    _generate_passages(campaign, rng, words, KNOWLEDGE_PASSAGES)
    _add_memories(campaign, rng, words, OVERHEAD_MEMORIES)
    _summarise_by_hand(campaign)  # last: the knowledge rule is part of the stable prefix it is bound to
    size = f"{OVERHEAD_TURNS:,} turns, {OVERHEAD_MEMORIES // 1000}k mem, {KNOWLEDGE_PASSAGES // 1000}k pass"
    turns = _overhead_samples(campaign, words, repeat, retry=False)
    retries = _overhead_samples(campaign, words, max(5, repeat // 3), retry=True)
    cold = {"wait": [], "now": []}
    for _ in range(OVERHEAD_COLD):
        for wait in cold:
            child = subprocess.run(
                [sys.executable, "manage.py", "bench", "--cold-turn",
                 f"{connections['default'].settings_dict['NAME']}:{campaign.pk}:{wait}"],
                cwd=settings.BASE_DIR, capture_output=True, text=True, check=False)
            if child.returncode:
                raise CommandError(f"the cold-turn process failed:\n{child.stderr[-2000:]}")
            cold[wait].append(json.loads(child.stdout.strip().splitlines()[-1]))
    hardware = _overhead_hardware(campaign, words)
    rows = [_overhead_row("send -> chat request", size, turns, "median < 40 ms, p95 < 80 ms", hardware),
            *_step_rows(turns),
            _overhead_row("  retry", size, retries, "as a turn", hardware),
            _overhead_row("  first after restart", size, cold["wait"], "< 3x the warm median; socket warmed it",
                          hardware),
            *_step_rows(cold["wait"], prefix="    cold "),
            _overhead_row("  sent at once", size, cold["now"], "first after restart, before the warm-up", hardware)]
    rows.append(_row("  hardware, same work", size, [hardware["total"]] * 3,
                     "cosine top-5 over 10k + cosine over 20k + FTS5 of the turn's terms"))
    return rows


def _add_memories(campaign, rng, words, count):
    """Give ``campaign``'s line ``count`` embedded memories, spread over its depths."""
    import numpy as np
    from django.utils import timezone

    from memory.models import Memory, MemoryVector

    vectors = np.random.default_rng(count).standard_normal((count, VECTOR_DIMS)).astype(np.float32)
    now = timezone.now()
    span = campaign.head_depth - 2
    memories = Memory.objects.bulk_create([
        Memory(campaign=campaign, branch_id=campaign.head_branch_id, depth=1 + i * span // count,
               source_start=i * span // count, source_end=1 + i * span // count, text=_prose(rng, words, 30),
               authority="accepted_story", use_count=rng.randrange(5))
        for i in range(count)
    ], batch_size=1000)
    MemoryVector.objects.bulk_create([
        MemoryVector(memory=memory, campaign=campaign, model="nomic-embed-text", dims=VECTOR_DIMS,
                     vector=vectors[i].tobytes(), created_at=now)
        for i, memory in enumerate(memories)
    ], batch_size=1000)


class _BenchStubs:
    """The fake server's answers for the overhead bench: 768-d vectors at once, and a memory, a summary, no events."""

    def reply(self, messages, schema):
        properties = (schema or {}).get("properties", {})
        if "memory" in properties:
            return {"memory": "Edrin found a brass button on the headland path, stamped with an anchor."}
        if "summary" in properties:
            return {"summary": "Edrin's story so far, in a paragraph. " * 20}
        return None

    def embed(self, text):
        import hashlib

        import numpy as np

        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(VECTOR_DIMS).astype(np.float32).tolist()


class _Trace:
    """Exclusive time per step of the turn, per thread (the database's thread and the event loop's)."""

    STEPS = {
        "start fragment": ("storyteller.consumers", "_render_start"),
        "indexes (off-thread)": ("storyteller.warming", "indexes"),
        "read": ("storyteller.turns", "_read"),
        "embedding request": ("storyteller.turns", "queries_embedded"),
        "memory": ("storyteller.context.memories", "section"),
        "knowledge": ("storyteller.context.knowledge", "retrieved_sections"),
        "state": ("storyteller.context.state", "section"),
        "state fold": ("campaigns.state", "state_for_turn"),
        "build": ("storyteller.turns", "_build"),
    }

    def __init__(self):
        import threading

        self.local = threading.local()
        self.times = {}
        self.arrived = self.left = None
        self.saved = []

    def install(self):
        import importlib
        import inspect

        from storyteller.consumers import PlayConsumer
        from storyteller.llm import OllamaClient

        for name, (module_name, attribute) in self.STEPS.items():
            module = importlib.import_module(module_name)
            original = getattr(module, attribute)
            self.saved.append((module, attribute, original))
            wrapped = self._async(name, original) if inspect.iscoroutinefunction(original) or attribute in (
                "_render_start",) else self._sync(name, original)
            setattr(module, attribute, wrapped)
        receive, stream = PlayConsumer.receive_json, OllamaClient.stream_chat
        self.saved += [(PlayConsumer, "receive_json", receive), (OllamaClient, "stream_chat", stream)]
        trace = self

        async def receive_json(consumer, content, **kwargs):
            trace.arrived, trace.left, trace.times = time.perf_counter(), None, {}
            return await receive(consumer, content, **kwargs)

        def stream_chat(client, messages, options):
            if trace.left is None:
                trace.left, trace.frozen = time.perf_counter(), dict(trace.times)
            return stream(client, messages, options)

        PlayConsumer.receive_json, OllamaClient.stream_chat = receive_json, stream_chat

    def remove(self):
        for owner, attribute, original in reversed(self.saved):
            setattr(owner, attribute, original)

    def _enter(self):
        stack = getattr(self.local, "stack", None)
        if stack is None:
            stack = self.local.stack = []
        stack.append(0.0)
        return stack

    def _leave(self, name, stack, started):
        elapsed = time.perf_counter() - started
        children = stack.pop()
        if stack:
            stack[-1] += elapsed
        self.times[name] = self.times.get(name, 0.0) + elapsed - children

    def _sync(self, name, original):
        def timed(*args, **kwargs):
            stack, started = self._enter(), time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self._leave(name, stack, started)
        return timed

    def _async(self, name, original):
        async def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - started
        return timed

    def sample(self):
        """Return the last turn's total and steps, as they stood when its chat request left."""
        total = self.left - self.arrived
        steps = {name: self.frozen.get(name, 0.0) for name in self.STEPS}
        return {"total": total, **steps, "other (hops, narrator)": total - sum(steps.values())}


def _overhead_samples(campaign, words, count, *, retry):
    from asgiref.sync import async_to_sync

    with _bench_server() as server:
        trace = _Trace()
        trace.install()
        try:
            return async_to_sync(_play_traced)(campaign, server, trace, count, retry)
        finally:
            trace.remove()


class _bench_server:
    """The fake model server with the bench's stubs, the app pointed at it, and a bank that keeps every memory."""

    def __enter__(self):
        from storyteller.llm.fake_server import FakeModelServer

        self.server = FakeModelServer(stubs=_BenchStubs()).start()
        self.overrides = {
            "STORYTELLER_LLM_URL": self.server.url,
            "STORYTELLER_LLM_URL_CONFIGURED": True,
            "STORYTELLER_LLM_API": "ollama",
            "STORYTELLER_MEMORY_BANK_CAPACITY": 10 * OVERHEAD_MEMORIES,
        }
        self.saved = {name: getattr(settings, name, None) for name in self.overrides}
        for name, value in self.overrides.items():
            setattr(settings, name, value)
        return self.server

    def __exit__(self, *exc_info):
        for name, value in self.saved.items():
            setattr(settings, name, value)
        self.server.stop()


async def _play_traced(campaign, server, trace, count, retry, warm_up=3, wait=True):
    from storyteller import postturn, warming

    communicator = await _bench_socket(campaign)
    if wait:
        await warming.settle()  # a person reads the page for a moment before the first action
    samples = []
    for index in range(count + (0 if retry else warm_up)):
        server.script(" ".join(f"word{index}_{n}" for n in range(20)))
        message = {"action": "retry"} if retry else {"mode": "do", "text": f"{ACTIONS[index % 4]} {index}"}
        await communicator.send_json_to(message)
        while 'id="turn-outcome"' not in await communicator.receive_from(timeout=60):
            pass
        if trace.left is None:
            raise CommandError("a bench turn sent no chat request; is the fake server answering?")
        if retry or index >= warm_up:
            samples.append(trace.sample())
        await postturn.settle(campaign.pk)  # the person reads the reply while the worker runs
        await warming.settle()
    await communicator.disconnect()
    return samples


async def _bench_socket(campaign):
    from channels.db import database_sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.contrib.auth import get_user_model
    from django.test import Client

    from storyteller.asgi import application

    @database_sync_to_async
    def cookie():
        client = Client()
        client.force_login(get_user_model().objects.get(username="bench"))
        return f"sessionid={client.cookies['sessionid'].value}".encode()

    headers = [(b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"), (b"cookie", await cookie())]
    communicator = WebsocketCommunicator(application, f"/ws/play/{campaign.pk}/", headers=headers)
    connected, _ = await communicator.connect()
    if not connected:
        raise CommandError("the bench could not open the play websocket")
    return communicator


def cold_turn(database, campaign_id, wait):
    """Play one turn in this freshly started process (cold caches) and return its traced sample.

    ``wait``: once the socket's warming has finished, as when a person reads
    the page first; otherwise at once, before anything is warm.
    """
    from asgiref.sync import async_to_sync

    from campaigns.models import Campaign

    _use_database(database)
    campaign = Campaign.objects.get(pk=campaign_id)
    with _bench_server() as server:
        trace = _Trace()
        trace.install()
        try:
            return async_to_sync(_play_traced)(campaign, server, trace, 1, False, warm_up=0, wait=wait)[0]
        finally:
            trace.remove()


def _overhead_hardware(campaign, words):
    """Return what the hardware does for a turn's retrieval work: numpy cosines and FTS5's own ranking."""
    import numpy as np
    from django.db import connection

    from knowledge.retrieval import _quoted, meaningful_terms
    from memory.models import MemoryVector
    from knowledge.models import Passage

    memories = np.vstack([np.frombuffer(blob, np.float32) for blob in MemoryVector.objects.filter(
        campaign=campaign).values_list("vector", flat=True)])
    passages = np.vstack([np.frombuffer(blob, np.float32) for blob in Passage.objects.filter(
        campaign=campaign).values_list("embedding", flat=True)])
    query = np.random.default_rng(3).standard_normal(VECTOR_DIMS).astype(np.float32)
    terms = meaningful_terms(f"{ACTIONS[0]} {REPLIES[1]} {REPLIES[2]}")[:20]
    expression = " OR ".join(_quoted(term) for term in terms)
    figures = {"memory": [], "knowledge": [], "fts": []}
    with connection.cursor() as cursor:
        for _ in range(23):
            started = time.perf_counter()
            scores = np.einsum("ij,j->i", memories, query)
            np.argpartition(-scores, 5)[:5]
            middle = time.perf_counter()
            np.flatnonzero(np.einsum("ij,j->i", passages, query) >= 0.5)
            fts = time.perf_counter()
            cursor.execute("SELECT rowid, rank FROM knowledge_passage_fts WHERE knowledge_passage_fts MATCH %s "
                           "ORDER BY rank LIMIT 160", [expression])
            cursor.fetchall()
            done = time.perf_counter()
            figures["memory"].append(middle - started)
            figures["knowledge"].append(fts - middle)
            figures["fts"].append(done - fts)
    hardware = {name: statistics.median(values[3:]) for name, values in figures.items()}
    hardware["terms"] = len(terms)
    hardware["total"] = hardware["memory"] + hardware["knowledge"] + hardware["fts"]
    return hardware


def _overhead_row(name, size, samples, target, hardware):
    row = _row(name, size, [sample["total"] for sample in samples], target)
    row["target"] = f"{target}; {row['median_ms'] / (hardware['total'] * 1000):.1f}x the hardware"
    row["steps"] = samples
    return row


def _step_rows(samples, prefix="  "):
    """One row per step: its median and its share of the median turn."""
    total = statistics.median(sample["total"] for sample in samples)
    names = [name for name in samples[0] if name != "total"]
    rows = []
    for name in names:
        row = _row(f"{prefix}{name}"[:22], "", [sample.get(name, 0.0) for sample in samples], "")
        row["target"] = f"{row['median_ms'] / (total * 1000):.0%} of the median turn"
        rows.append(row)
    return rows
def _bench_world(sizes, repeat):
    """The world model (seed 002 WP1) at 1,000 places, 4,000 exits, 2,000 items and 200 characters: import, routes,
    a character's view, lint, a batch with a 20-operation item_changes, the state section, and a 2,000-turn build."""
    import random

    from campaigns import lineage, worldfile
    from campaigns.state import lint, state_at, world

    rng = random.Random(2002)
    document = _world_document(rng)
    imports, cpu = [], []
    for _ in range(3):
        started, started_cpu = time.perf_counter(), time.process_time()
        campaign, findings = worldfile.create_campaign(_bench_user(), document)
        imports.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    size = f"{WORLD_PLACES:,} places, {WORLD_EXITS:,} exits, {WORLD_ITEMS:,} items"
    # CPU time beside wall time, as for "state": on a shared machine it is the figure others' load does not move.
    results = [_row("world import", size, imports, "median < 2 s"), _row("  (CPU time)", size, cpu, "")]
    now = state_at(lineage.path_of(campaign), campaign)
    pairs = [(f"room-{rng.randrange(WORLD_PLACES)}", f"room-{rng.randrange(WORLD_PLACES)}") for _ in range(repeat)]
    results.append(_timed("route", size, lambda pair: world.route(now, *pair), pairs, "median < 1 ms"))
    known = [(f"room-{rng.randrange(KNOWN_PLACES)}", f"room-{rng.randrange(KNOWN_PLACES)}") for _ in range(repeat)]
    results.append(_timed("known_route", f"{KNOWN_EXITS} known exits", lambda pair: world.known_route(
        now, "villager-0", *pair), known, "median < 1 ms"))
    people = [f"villager-{rng.randrange(WORLD_CHARACTERS)}" for _ in range(repeat)]
    results.append(_timed("character_view", size, lambda who: world.character_view(now, who), people,
                          "median < 5 ms"))
    lints, cpu = [], []
    for _ in range(max(5, repeat // 5)):
        fresh = state_at(lineage.path_of(campaign), campaign)  # lint reads the exit graph and holders afresh
        started, started_cpu = time.perf_counter(), time.process_time()
        lint.lint(fresh)
        lints.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    results += [_row("world lint", size, lints, f"median < 100 ms ({len(findings)} findings)"),
                _row("  (CPU time)", size, cpu, "")]
    _generate_state(entities=500, facts=5000, turns=200, campaign=campaign, scene="room-0")
    results += _measure_world_turn(campaign, size, repeat)
    results += _measure_world_build(document, repeat)
    return results


WORLD_PLACES, WORLD_EXITS, WORLD_ITEMS, WORLD_CHARACTERS = 1_000, 4_000, 2_000, 200
KNOWN_PLACES, KNOWN_EXITS = 150, 300  # villager-0 knows rooms 0-149 and the 300 exits among them


def _bench_user():
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get_or_create(username="bench")[0]


def _timed(name, size, call, arguments, target):
    for argument in arguments[:3]:  # warm the caches a turn's first read makes
        call(argument)
    samples = []
    for argument in arguments:
        started = time.process_time()
        call(argument)
        samples.append(time.process_time() - started)
    # Pure computation: CPU time is what it costs (wall time on a shared machine adds others' load).
    return _row(name, size, samples, f"{target} (CPU time)")


def _world_document(rng):
    """A world file: rooms in a ring with random passages (4,000 exits, a tenth locked or blocked), villagers
    placed about, and items up to four deep in containers (a ring in a pouch in a box in a chest)."""
    rooms = [f"Room {n}" for n in range(WORLD_PLACES)]
    exits, pairs = [], set()

    def join(one, other, **extra):
        if one != other and (one, other) not in pairs:
            pairs.update({(one, other), (other, one)})
            exits.append({"from": rooms[one], "to": rooms[other], "travel_seconds": rng.randrange(10, 120),
                          "both_ways": True, **extra})

    for n in range(WORLD_PLACES):
        join(n, (n + 1) % WORLD_PLACES)
    # villager-0 knows rooms 0-149: a ring and chords among them make KNOWN_EXITS exits.
    while len(exits) < KNOWN_EXITS // 2:
        join(rng.randrange(KNOWN_PLACES), rng.randrange(KNOWN_PLACES))
    while len(exits) < WORLD_EXITS // 2:
        one, other = rng.randrange(WORLD_PLACES), rng.randrange(WORLD_PLACES)
        extra = {}
        if rng.random() < 0.05 and one >= KNOWN_PLACES:
            extra = {"state": "locked", "opener": "Thing 0"}
        elif rng.random() < 0.05 and one >= KNOWN_PLACES:
            extra = {"state": "blocked"}
        join(one, other, **extra)
    characters = [{"name": f"Villager {n}", "place": rooms[rng.randrange(WORLD_PLACES)]}
                  for n in range(WORLD_CHARACTERS)]
    characters[0]["place"] = rooms[0]
    characters[0]["knowledge"] = {"locations": rooms[:KNOWN_PLACES],
                                  "exits": [{"from": e["from"], "to": e["to"]} for e in exits
                                            if int(e["from"].split()[1]) < KNOWN_PLACES
                                            and int(e["to"].split()[1]) < KNOWN_PLACES]
                                  + [{"from": e["to"], "to": e["from"]} for e in exits
                                     if int(e["from"].split()[1]) < KNOWN_PLACES
                                     and int(e["to"].split()[1]) < KNOWN_PLACES]}
    characters.append({"name": "Edrin", "protagonist": True, "place": rooms[0]})
    items, number = [], 0
    while len(items) < WORLD_ITEMS:
        # The first ten chains lie in room 0, where the benchmark's batch moves them about.
        # (The rest are spread over 400 rooms and the villagers, a few to a place.)
        holder = (rooms[0] if number < 40 else rooms[number // 4 % 400 + 1] if number % 3
                  else f"Villager {number // 4 % WORLD_CHARACTERS}")
        chain = [f"Thing {number + depth}" for depth in range(4)]
        for depth, name in enumerate(chain):
            items.append({"name": name, "holder": holder if depth == 0 else chain[depth - 1],
                          **({"container": "open"} if depth < 3 else {}), "notable": depth == 0 and number % 7 == 0})
        number += 4
    return {"format": "storyteller-world", "version": 1,
            "campaign": {"title": "World bench", "protagonist": "Edrin, a lamplighter", "opening": REPLIES[0]},
            "places": [{"name": room, "description": f"{room} of the bench"} for room in rooms],
            "exits": exits, "characters": characters, "items": items}


def _world_batch(index):
    """Twenty item operations that leave the world as they found it, and ten other events, distinct per ``index``."""
    def ev(type, subject="", object="", value="", **extra):
        return {"type": type, "subject": subject, "object": object, "value": value, "narrator_only": False, **extra}

    operations = []
    for thing in range(10):  # Things 0-39 lie in room 0, four deep: take each and put it back where it was
        name, container = f"Thing {4 * (thing % 10) + 1 + thing % 3}", f"Thing {4 * (thing % 10) + thing % 3}"
        operations += [{"op": "take", "item": name}, {"op": "put", "item": name, "to": container}]
    there, back = ("Room 1", "Room 0") if index % 2 == 0 else ("Room 0", "Room 1")
    return [
        ev("item_changes", "Edrin", data={"ops": operations}),
        ev("move", "Villager 0", there),
        ev("set_condition", "Villager 0", "", f"tired {index}", data={"mood": "restless"}),
        ev("relationship", "Villager 0", "Edrin", f"owes him {index} coins", data={"trust": 0.2}),
        ev("add_fact", "Villager 0", "", f"Villager 0 counted {index} gulls."),
        ev("add_fact", "", "", f"The bell rang {index} times."),
        ev("know", "Villager 1", f"rumour {index}", data={"kind": "lore", "how": "told"}),
        ev("exit_change", "Room 0", "Room 1", data={"travel_seconds": 30 + index % 2}),
        ev("feature", "Room 0", "hearth", f"a hearth, fire {index}"),
        ev("open_thread", "", "", f"Who rang the bell {index} times?"),
        ev("arrive", "Villager 2", back),
    ]


def _measure_world_turn(campaign, size, repeat):
    from campaigns import lineage
    from campaigns.state import apply_events
    from storyteller.context import state as state_section

    text = "I ask Villager 3 about Thing 5 while Character 12 watches from Room 1."
    wall, cpu = [], []
    for index in range(repeat + 3):
        campaign.refresh_from_db()
        started, started_cpu = time.perf_counter(), time.process_time()
        state_section.section(campaign, lineage.path_of(campaign), text)
        if index >= 3:
            wall.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
    full = f"{size} + 500 entities, 5,000 facts"
    results = [_row("world select+render", full, wall, "median < 20 ms"), _row("  (CPU time)", full, cpu, "")]
    wall, cpu = [], []
    for index in range(repeat):
        node = _commit_bench_turn(campaign, index)
        started, started_cpu = time.perf_counter(), time.process_time()
        events = apply_events(node, _world_batch(index), source="recorder", attempt=1)
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
        refused = [event.reason for event in events if event.status != "applied"]
        if refused:
            raise CommandError("the world benchmark's batch was rejected: " + "; ".join(refused))
    results += [_row("world apply 20 ops + 10", full, wall, "median < 10 ms"), _row("  (CPU time)", full, cpu, "")]
    return results


def _measure_world_build(document, repeat):
    """Context build at the head of a 2,000-turn story whose world is the benchmark's."""
    from campaigns import worldfile

    from campaigns import lineage
    from storyteller import context

    campaign, _ = worldfile.create_campaign(_bench_user(), document, context_token_budget=8192,
                                            max_output_tokens=400)
    campaign = _generate(2_000, campaign)
    _summarise_by_hand(campaign)
    wall, cpu = [], []
    for index in range(repeat + 3):
        campaign.refresh_from_db()
        started, started_cpu = time.perf_counter(), time.process_time()
        context.build(campaign, lineage.path_of(campaign), context.Action(mode="do", text=f"look around {index}"))
        if index >= 3:
            wall.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
    size = f"2,000 turns, {WORLD_PLACES:,} places"
    return [_row("world context build", size, wall, "median < 30 ms at 2,000 turns"),
            _row("  (CPU time)", size, cpu, "")]
def _bench_rules(sizes, repeat):
    """Story time and world rules, pure (issue 13): agendas, catch-up, triggers, dice and calendar parsing."""
    from campaigns.state import calendar

    tz = "Europe/Lisbon"
    now = calendar.parse_instant("2031-03-14T08:00", now_ms=0, tz=tz)
    return [*_measure_agendas(now, tz, repeat), *_measure_trigger_check(now, tz, repeat), *_measure_dice(repeat),
            *_measure_calendar_parsing(now, tz, repeat), *_measure_rules_apply(repeat)]


RULES_WINDOWS = [
    {"start": "06:00", "end": "09:00", "place": "home", "activity": "waking"},
    {"start": "09:00", "end": "17:00", "days": "mon-fri", "place": "work", "activity": "working"},
    {"start": "17:00", "end": "22:00", "place": "tavern", "activity": "drinking"},
    {"start": "22:00", "end": "06:00", "place": "home", "activity": "sleeping"},
]


def _measure_agendas(now, tz, repeat):
    from campaigns.state import agenda, calendar

    people = [f"c{i}" for i in range(500)]
    routines = {who: agenda.parse_routine(who, [{**w, "place": f"{w['place']}-{i % 20}"} for w in RULES_WINDOWS])
                for i, who in enumerate(people)}
    engagements = {who: [agenda.Engagement(f"{who}-e{n}", (who,), now + n * 1_200_000, "tavern-1", "meet")
                         for n in range(3)] for who in people}
    intents = {who: [agenda.Intent(who, f"i{n}", priority=1 + n % 5, urgency=1 + (n * 3) % 5, plan=f"plan {n}")
                     for n in range(4)] for who in people}
    at = calendar.moment(now + 3_600_000, tz)
    daily, daily_cpu = [], []
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        for who in people[:200]:
            agenda.agenda_at(who, at, routine=routines[who], engagements=engagements[who], intents=intents[who])
        daily.append(time.perf_counter() - started)
        daily_cpu.append(time.process_time() - started_cpu)
    locations = {who: "street" for who in people}
    # Just under the 30-day cap, landing in the evening window so that every character moves. The cost does not
    # grow with the skip: catch-up compares each routine's window now with its cursor, nothing in between.
    later = calendar.moment(now + 29 * calendar.DAY_MS + 10 * 3_600_000, tz)
    catch_up = []
    for _ in range(repeat):
        started = time.perf_counter()
        plan = agenda.catch_up_plan(people, later, routines=routines, locations=locations, cursors={},
                                    protagonist_place="street-0", skipping=True)
        catch_up.append(time.perf_counter() - started)
    if len(plan.moves) != len(people):
        raise CommandError(f"the catch-up benchmark moved {len(plan.moves)} of {len(people)} characters")
    # CPU time beside wall time, as for "state": the one figure other people's load on the machine does not move.
    return [_row("agenda_at", "200 characters", daily, "median < 5 ms"),
            _row("  (CPU time)", "200 characters", daily_cpu, ""),
            _row("catch-up, 30-day skip", "500 characters", catch_up, "median < 50 ms")]


class _BenchWorld:
    """The world after a batch, as plain dicts: what a trigger check asks of the story State."""

    def __init__(self, locations, holders, values):
        self.locations, self.holders, self.values = locations, holders, values

    def location_of(self, who):
        return self.locations.get(who, "")

    def holder_of(self, item):
        return self.holders.get(item, "")

    def place_of(self, item):
        holder = self.holders.get(item, "")
        return self.locations.get(holder, holder)

    def variable(self, obj, name):
        return self.values.get((obj, name), 0)


def _measure_trigger_check(now, tz, repeat):
    """500 triggers of every condition type, read from their record data and checked after a 20-event batch."""
    from campaigns.state import triggers

    kinds = [
        lambda i: {"type": "time", "after": now + i * 60_000},
        lambda i: {"type": "at", "who": f"c{i % 50}", "place": f"p{i % 7}"},
        lambda i: {"type": "variable", "object": f"c{i % 50}", "name": "debt", "op": ">=", "value": i % 100},
        lambda i: {"type": "holds", "who": f"c{i % 50}", "item": f"i{i % 80}"},
        lambda i: {"type": "item_at", "item": f"i{i % 80}", "place": f"p{i % 7}"},
        lambda i: {"type": "time", "every": "20:00", "days": "mon-fri"},
        lambda i: {"type": "time", "window": {"start": "09:00", "end": "17:00"}},
        lambda i: {"all": [{"type": "trigger", "id": f"t{i - 1}", "status": "fired"},
                           {"type": "at", "who": f"c{i % 50}", "place": f"p{i % 7}"}]},
    ]
    definitions = [{"id": f"t{i}", "when": kinds[i % len(kinds)](i), "priority": i % 10, "max_fires": 3,
                    "beat": f"beat {i}", "effects": [{"type": "variable_change", "name": "debt", "by": 1}]}
                   for i in range(500)]
    records = [triggers.record(t, triggers.Status())["data"] for t in triggers.load_triggers(definitions, tz=tz)]
    world = _BenchWorld({f"c{i}": f"p{i % 7}" for i in range(50)}, {f"i{i}": f"c{i % 50}" for i in range(80)},
                        {(f"c{i}", "debt"): i for i in range(50)})
    samples, cpu = [], []
    for index in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        entries = [triggers.from_record(data) for data in records]
        ctx = triggers.Context(world, now + 3_600_000 + index, now + 3_570_000, tz=tz)
        triggers.check(entries, ctx, seed=(1, index))
        samples.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return [_row("triggers check", "500 triggers", samples, "median < 5 ms (records read, after a batch)"),
            _row("  (CPU time)", "500 triggers", cpu, "")]


def _measure_dice(repeat):
    from campaigns.state import dice

    pool = {"definition": {"dice": "10d10>=7", "bands": [
        {"label": "fail", "min": 0, "max": 0, "outcome": "nothing"},
        {"label": "some", "min": 1, "max": 4, "outcome": "something"},
        {"label": "many", "min": 5, "max": 10, "outcome": "everything"}]}}
    coverage, rolls = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        check = dice.parse_check("pool", pool)
        coverage.append(time.perf_counter() - started)
    for index in range(repeat):
        started = time.perf_counter()
        dice.roll(check, seed=(1, 2, index), who="mara")
        rolls.append(time.perf_counter() - started)
    return [_row("dice band coverage", "10d10 successes", coverage, "median < 5 ms"),
            _row("dice roll", "10d10 successes", rolls, "median < 1 ms")]


def _measure_calendar_parsing(now, tz, repeat):
    """1,000 different expressions of every form of the grammar, parsed into instants."""
    from campaigns.state import calendar

    months = list(calendar.MONTH_NAMES[1:])
    forms = [
        lambda i: f"{1 + i % 28} {months[i % 12]} {2031 + i % 5} at {i % 24:02d}:{i % 60:02d}",
        lambda i: f"the {['first', 'second', 'third', 'last'][i % 4]} {calendar.WEEKDAY_NAMES[i % 7]} of "
                  f"{months[i % 12]} {2031 + i % 5} at {i % 24}:{(i * 17) % 60:02d}",
        lambda i: f"the {1 + i % 28}th of each month at {i % 24:02d}:{(i * 11) % 60:02d}",
        lambda i: f"{months[i % 12]} {1 + i % 28}, {2031 + i % 9} {1 + i % 12}pm",
        lambda i: f"{2031 + i % 9}-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}",
        lambda i: f"tomorrow at {i % 24:02d}:{(i * 7) % 60:02d}",
        lambda i: f"every {calendar.WEEKDAY_NAMES[i % 7]} at {1 + i % 12}:{i % 60:02d} am",
        lambda i: f"{i % 24:02d}:{(i * 13) % 60:02d}",
    ]
    # Each form in turn, its fields varying with j = i // len(forms) so no two expressions are alike by accident.
    expressions = [forms[i % len(forms)](i // len(forms)) for i in range(1000)]
    if len(set(expressions)) < 950:
        raise CommandError("the calendar benchmark's expressions repeat; it would measure a cache")
    samples, cpu = [], []
    for _ in range(max(5, repeat // 5)):
        started, started_cpu = time.perf_counter(), time.process_time()
        for text in expressions:
            calendar.parse_instant(text, now_ms=now, tz=tz)
        samples.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return [_row("calendar parsing", "1,000 expressions", samples, "median < 50 ms"),
            _row("  (CPU time)", "1,000 expressions", cpu, "")]


def _measure_rules_apply(repeat):
    """A recorder batch of 20 events through ``apply_events`` with 500 triggers on the line (issue 13): the whole
    batch, and the trigger check ``rulebook.after_batch`` runs inside it (the same calls, timed from within)."""
    from campaigns.models import Node
    from campaigns.state import apply_events, rulebook

    campaign = _generate_state(entities=500, facts=5000, turns=200)
    head = Node.objects.get(campaign=campaign, depth=campaign.head_depth)
    places = [f"place-{n}" for n in range(100)]
    kinds = [
        lambda i: {"type": "time", "after": f"2031-03-{15 + i % 10}T{i % 24:02d}:00"},
        lambda i: {"type": "at", "who": f"character-{i % 200}", "place": places[(i * 7) % 100]},
        lambda i: {"type": "variable", "object": f"character-{i % 200}", "name": "debt", "op": ">=", "value": 50},
        lambda i: {"type": "holds", "who": f"character-{i % 200}", "item": f"item-{i % 150}"},
        lambda i: {"type": "item_at", "item": f"item-{i % 150}", "place": places[i % 100]},
        lambda i: {"type": "time", "every": "20:00", "days": "mon-fri"},
        lambda i: {"type": "time", "window": {"start": "09:00", "end": "17:00"}},
        lambda i: {"all": [{"type": "trigger", "id": f"t{i - 1}", "status": "fired"},
                           {"type": "at", "who": f"character-{i % 200}", "place": places[i % 100]}]},
    ]
    definitions = [{"id": f"t{i}", "when": kinds[i % len(kinds)](i), "priority": i % 10, "max_fires": 3,
                    "beat": f"beat {i}"} for i in range(500)]
    setup = apply_events(head, [
        {"type": "clock_start", "data": {"starting_time": "2031-03-14T08:00"}},
        {"type": "variable_define", "data": {"definition": {"name": "debt", "type": "number", "range": [0, 100]}}},
        {"type": "trigger_define", "data": {"triggers": definitions}}], source="correction")
    refused = [event.reason for event in setup if event.status != "applied"]
    if refused:
        raise CommandError("the rules benchmark's world was refused: " + "; ".join(refused))
    checks, checks_cpu, original = [], [], rulebook.after_batch

    def timed(*args, **kwargs):
        started, started_cpu = time.perf_counter(), time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            checks.append(time.perf_counter() - started)
            checks_cpu.append(time.process_time() - started_cpu)

    rulebook.after_batch = timed
    wall, cpu = [], []
    try:
        for index in range(repeat + 3):
            node = _commit_bench_turn(campaign, index)
            started, started_cpu = time.perf_counter(), time.process_time()
            events = apply_events(node, _recorder_batch(index), source="recorder", attempt=1)
            if index >= 3:  # the first batches warm the cached base with the triggers
                wall.append(time.perf_counter() - started)
                cpu.append(time.process_time() - started_cpu)
            if index == 0 and any(event.status != "applied" for event in events):
                raise CommandError("the rules benchmark's batch was rejected: "
                                   + "; ".join(event.reason for event in events if event.reason))
    finally:
        rulebook.after_batch = original
    size = "500 triggers, 500 entities"
    return [_row("state apply 20 events", size, wall, "median < 10 ms (500 triggers checked inside)"),
            _row("  (CPU time)", size, cpu, ""),
            _row("  triggers check in it", size, checks[3:], "median < 5 ms"),
            _row("  (CPU time)", size, checks_cpu[3:], "")]


def _bench_voices(sizes, repeat):
    """Voices (issue 15, phase 1): off-stage selection over 200 characters, lore recall, a round's resolve_round and
    a world author's edit checked on the 1,000-place world."""
    import random

    rng = random.Random(2015)
    return [*_measure_offstage(rng, repeat), *_measure_offstage_state(rng, repeat), *_measure_lore_recall(rng, repeat),
            *_measure_author(rng, repeat), *_measure_gm_round(rng, repeat), _measure_gm_commit(repeat),
            _measure_prefix_reuse(PREFIX_REUSE_TURNS, layout="game master")]


class _InstantVoices:
    """A narrator that answers every voice at once, its answers read and checked as a server's are: the round's
    time is then everything but the model's."""

    model, api = "bench", "bench"

    def __init__(self, names):
        self.names = names

    async def complete_json(self, messages, schema, options):
        from storyteller.llm import structured

        properties = schema["properties"]
        if "activate_characters" in properties:
            answer = {"resolve_round": {"actors": [{"who": "Edrin", "moves_to": "", "ignore_exits": False,
                                                    "item_changes": [{"op": "take", "item": "Thing 0"}],
                                                    "variable_changes": []}], "elapsed_seconds": 30},
                      "activate_characters": [{"who": name, "why": "they are here"} for name in self.names],
                      "expand_world": {"need": "", "what": ""}, "rolls": [], "narrate": True}
        else:
            answer = {"speech": "I will see to it before the bell.", "action": "looks about", "moves_to": "Room 1",
                      "item_changes": [], "lore": ""}
        value, reasons = structured.read(json.dumps(answer), schema)
        if reasons:
            raise CommandError(f"the voices benchmark's canned answer does not match its schema: {reasons}")
        return value


def _measure_gm_round(rng, repeat):
    """One game-master round with 4 characters on the 1,000-place world, everything but the model: the step's
    answer read and checked, resolve_round, the activation, each character's recall, whereabouts and brief, its
    reply checked and its move resolved (``voices.gm.play`` with an instant narrator)."""
    from asgiref.sync import async_to_sync

    from campaigns import lineage, worldfile
    from storyteller import context
    from storyteller.voices import gm

    document = _world_document(rng)
    for character in document["characters"][1:4]:
        character["place"] = "Room 0"
    campaign, _ = worldfile.create_campaign(_bench_user(), document, game_master=True)
    path = lineage.path_of(campaign)
    ctx = context.build(campaign, path, context.Action(mode="do", text="I ask who saw Thing 0"))
    narrator = _InstantVoices([f"Villager {n}" for n in range(4)])
    samples, cpu = [], []
    for index in range(repeat + 3):
        started, started_cpu = time.perf_counter(), time.process_time()
        played = async_to_sync(gm.play)(campaign, path, ctx, narrator)
        if index >= 3:  # the first rounds warm the caches a turn's first read makes
            samples.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
    if len(played.rounds[0].briefs) != 4:
        raise CommandError("the voices benchmark's round did not brief 4 characters")
    size = f"4 characters, {WORLD_PLACES:,} places"
    return [_row("game-master round", size, samples, "median < 60 ms"), _row("  (CPU time)", size, cpu, "")]


def _measure_gm_commit(repeat):
    """The commit of a 3-round game-master turn: both nodes, three Round rows with their briefs, each round's
    events (a move and an item change) with the game master's rights, the turn's story time (the engine's round,
    then the rounds' sum), the head."""
    from django.db import transaction

    from campaigns import story, storytime, worldfile
    from campaigns.models import Campaign
    from storyteller import context
    from storyteller.voices import gm

    document = {"format": "storyteller-world", "version": 1,
                "campaign": {"title": "Commit bench", "protagonist": "Edrin", "opening": REPLIES[0]},
                "places": [{"name": "Kitchen"}, {"name": "Hall"}],
                "exits": [{"from": "Kitchen", "to": "Hall", "travel_seconds": 10, "both_ways": True}],
                "characters": [{"name": "Edrin", "protagonist": True, "place": "Kitchen"},
                               {"name": "Mara", "place": "Kitchen"}, {"name": "Aldric", "place": "Kitchen"}],
                "items": [{"name": "knife", "holder": "Kitchen"}]}
    campaign, _ = worldfile.create_campaign(_bench_user(), document, game_master=True)
    brief = {"text": "You are Mara.\n" + "A line of the brief.\n" * 40, "sections": [], "left_out": {}, "name": "Mara"}
    samples = []
    for index in range(repeat):
        going = ("Hall", "Kitchen")[index % 2]
        events = [[{"type": "move", "subject": "Mara", "object": going, "data": {}}],
                  [{"type": "item_changes", "subject": "Aldric", "data": {"ops": [{"op": "take", "item": "knife"}]}}],
                  [{"type": "item_changes", "subject": "Aldric", "data": {"ops": [{"op": "drop", "item": "knife"}]}}]]
        rounds = [gm.RoundPlayed(n + 1, {"actors": [], "refused": []}, [{"who": "mara", "name": "Mara", "why": "x"}],
                                 [{"speaker": "mara", "name": "Mara", "text": "Yes.", "action": ""}],
                                 {"mara": brief, "aldric": brief}, events[n]) for n in range(3)]
        played = gm.Played(rounds, [], [], [], {"rounds": []}, elapsed=90)
        text = f"{REPLIES[index % 4]} ({index})"
        reply = story.Reply(text=text, tokens=context.node_tokens("narrator", "", text), report={}, model="bench",
                            api="bench")
        campaign.refresh_from_db()
        started = time.perf_counter()
        with transaction.atomic():
            node = story.commit_turn(campaign.pk, (campaign.head_branch_id, campaign.head_depth),
                                     story.PlayerAction(mode="do", text="wait", tokens=2), reply)
            storytime.advance(node)
            gm.commit(node, played, text)
        samples.append(time.perf_counter() - started)
    return _row("commit, 3 rounds", "3 events, 6 briefs", samples, "median < 15 ms")


def _measure_offstage(rng, repeat):
    from campaigns.state.agenda import Engagement, Intent
    from storyteller.voices import offstage

    now = 1_900_000_000_000
    people = [f"villager-{n}" for n in range(WORLD_CHARACTERS)]
    positions = {who: f"room-{rng.randrange(50)}" for who in people} | {"protagonist": "room-0"}
    # Three engagements and four goals each, about half of them due, a tenth already handled.
    engagements = [Engagement(f"{who}-e{n}", (who,), now + rng.randrange(-7_200_000, 7_200_000), f"room-{n}", "meet")
                   for who in people for n in range(3)]
    intents = [Intent(who, f"i{n}", plan="a plan", deadline=now + rng.randrange(-7_200_000, 7_200_000))
               for who in people for n in range(4)]
    handled = {f"engagement:{e.id}" for e in engagements[::10]}
    samples, cpu = [], []
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        offstage.select(offstage.due_items(positions=positions, protagonist_place="room-0", engagements=engagements,
                                           intents=intents, now_ms=now, handled=handled),
                        per_turn=2, per_character=1)
        samples.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    size = f"{WORLD_CHARACTERS} characters, {len(engagements) + len(intents):,} items"
    return [_row("off-stage selection", size, samples, "median < 5 ms"), _row("  (CPU time)", size, cpu, "")]


def _measure_offstage_state(rng, repeat):
    """The off-stage step's choice as it runs after a turn: the due items read from the state of the 200-villager
    world (three engagements and two goals each, about 60 % of them past their time), then selected."""
    from campaigns import lineage, storytime, worldfile
    from campaigns.state import state_at
    from storyteller.voices import away, offstage

    doc = _world_document(rng)
    doc["starting_time"] = "2031-03-14T08:00"
    doc["engagements"] = [{"who": [f"Villager {n}"], "at": f"2031-03-14T{8 + 2 * k:02d}:{5 + n % 50:02d}",
                           "place": f"Room {rng.randrange(WORLD_PLACES)}", "what": f"errand {k}"}
                          for n in range(WORLD_CHARACTERS) for k in range(3)]
    doc["intents"] = [{"who": f"Villager {n}", "plan": f"plan {k} of villager {n}", "priority": 3,
                       "deadline": f"2031-03-14T{9 + 3 * k:02d}:30"} for n in range(WORLD_CHARACTERS) for k in range(2)]
    campaign, _ = worldfile.create_campaign(_bench_user(), doc)
    storytime.skip(campaign, _bench_user(), {"reason": "the bench's morning", "until_time": "11:00"})
    path = lineage.path_of(campaign)
    reads, samples, whole = [], [], []
    for _ in range(repeat):
        started = time.perf_counter()
        state = away.read_due(path, campaign)
        reads.append(time.perf_counter() - started)
        started = time.process_time()
        chosen = offstage.select(away.due_at(state), per_turn=2, per_character=1)
        samples.append(time.process_time() - started)
    for _ in range(max(3, repeat // 10)):
        started = time.perf_counter()
        state_at(path, campaign)
        whole.append(time.perf_counter() - started)
    size = f"{WORLD_CHARACTERS} characters, {len(doc['engagements']) + len(doc['intents']):,} items, " \
           f"{len(chosen.runs) + len(chosen.waiting)} due"
    world_size = f"{WORLD_PLACES:,} places, {WORLD_ITEMS:,} items"
    return [_row("off-stage choice from the state", size, samples, "median < 5 ms (CPU time)"),
            _row("  (the step's read of what it needs)", world_size, reads, "background work, no target"),
            _row("  (the whole state, for comparison)", world_size, whole, "")]


def _measure_lore_recall(rng, repeat):
    from campaigns.state import lore

    words = _vocabulary(rng)
    entries = [lore.Entry(f"book:e{n}", _prose(rng, words, 4), _prose(rng, words, 120)) for n in range(2_000)]
    known = {entry.key for entry in rng.sample(entries, 200)}
    texts = [_prose(rng, words, 30) for _ in range(repeat)]
    return [_timed("lore recall", "2,000 entries, 200 known", lambda text: lore.recall(entries, known, text), texts,
                   "part of a round's 60 ms")]


def _measure_author(rng, repeat):
    from campaigns import lineage, worldfile
    from campaigns.state import authoring, state_at, world
    from storyteller.voices import resolution

    campaign, _ = worldfile.create_campaign(_bench_user(), _world_document(rng))
    now = state_at(lineage.path_of(campaign), campaign)
    # A turn's state comes with the cached base's exit graph and holders built (state_for_turn); so does this one.
    world.graph(now)
    world.holders(now)
    size = f"{WORLD_PLACES:,} places, {WORLD_EXITS:,} exits, {WORLD_ITEMS:,} items"
    rounds = [{"actors": [{"who": f"Villager {rng.randrange(WORLD_CHARACTERS)}", "moves_to": f"Room {rng.randrange(50)}",
                           "ignore_exits": False, "item_changes": [], "variable_changes": []} for _ in range(4)],
               "elapsed_seconds": 30} for _ in range(repeat)]
    results = [_timed("resolve_round", f"4 moves, {size}", lambda r: resolution.resolve(now, r), rounds,
                      "part of a round's 60 ms")]
    edits = [{"characters": [{"name": f"Stranger {n}", "aliases": [], "description": "a stranger", "place": "Room 0",
                              "relationships": [{"to": "Villager 0", "label": "", "summary": "owes money"}]}],
              "places": [{"name": f"Cellar {n}", "aliases": [], "description": "", "features": [],
                          "exits": [{"to": "Room 0", "label": "", "travel_seconds": 10, "both_ways": True}]}],
              "items": []} for n in range(max(5, repeat // 5))]
    results.append(_timed("author edit check", f"2 new things, {size}",
                          lambda e: authoring.check_edit(now, e, turn=1, per_turn=2), edits,
                          "no target: a world_lint pass of the whole world"))
    return results


def _bench_limits(sizes, repeat):
    """The largest accepted world file, bundle and dice check (issue 22: storyteller/diagnostics/limits.py)."""
    from storyteller.diagnostics import limits

    return limits.bench(sizes, repeat)


BENCHMARKS = {
    "turn": _bench_turn,
    "knowledge": _bench_knowledge,
    "state": _bench_state,
    "memory": _bench_memory,
    "checkpoint": _bench_checkpoint,
    "imports": _bench_imports,
    "page": _bench_page,
    "recording": _bench_recording,
    "turn_first": _bench_turn_first,
    "overhead": _bench_overhead,
    "world": _bench_world,
    "rules": _bench_rules,
    "minds": _bench_minds,
    "voices": _bench_voices,
    "limits": _bench_limits,
}
# Run only when named: minutes of the built-in model, not milliseconds of the app.
SLOW = {"recording"}
