"""Benchmarks for one turn's costs on generated campaigns: context build, commit and relay.

Runs against a throwaway SQLite database in a temporary folder (same settings,
WAL and IMMEDIATE transactions included), never against the person's stories.
The relay figure is measured through the real play websocket consumer and the
fake Ollama server from the test suite, from the moment the server writes a
chunk to the moment the websocket frame carrying it arrives.
"""

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
        parser.add_argument("--only", default=",".join(BENCHMARKS), help="Comma-separated benchmark groups to run.")
        parser.add_argument("--sizes", default="200,2000", help="Comma-separated story lengths in turns.")
        parser.add_argument("--repeat", type=int, default=50, help="Samples per measurement.")
        parser.add_argument("--json", dest="json_path", default="bench-results.json", help="Where to write the results.")

    def handle(self, *args, only, sizes, repeat, json_path, **options):
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
        results.append(_measure_commit(campaign, turns, repeat))
        # The commits grew the verbatim story past the watermark: without a summary the relay's first turn would
        # compact, and the summariser would take the scripted reply meant for the narrator.
        _summarise_by_hand(campaign)
        results.append(_measure_relay(campaign, turns))
    return results


def _generate(turns):
    """Create a campaign of ``turns`` turns with an abandoned side branch every 100 turns."""
    from django.contrib.auth import get_user_model

    from campaigns import story
    from campaigns.models import Branch, Campaign, CanonRule, Node
    from storyteller.context import node_tokens

    user, _ = get_user_model().objects.get_or_create(username="bench")
    campaign = Campaign.objects.create(
        owner=user, title=f"Bench {turns}", protagonist="Edrin", opening=REPLIES[0],
        context_token_budget=8192, max_output_tokens=400,
    )
    for text in ["The story takes place in 1892.", "Magic cannot raise the dead.", "Mara is Edrin's aunt."]:
        CanonRule.objects.create(campaign=campaign, text=text)
    story.start_campaign(campaign)
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
    return _row("context build", f"{turns:,} turns", samples, "median < 30 ms at 2,000 turns")


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
    from campaigns import story
    from campaigns.models import Campaign

    samples = []
    for index in range(repeat):
        campaign = Campaign.objects.get(pk=campaign.pk)
        action = story.PlayerAction(mode="do", text=f"step {index}", tokens=5)
        reply = story.Reply(text=REPLIES[index % 4], tokens=60, report={"bench": True}, model="bench", api="bench")
        started = time.perf_counter()
        story.commit_turn(campaign.pk, (campaign.head_branch_id, campaign.head_depth), action, reply)
        samples.append(time.perf_counter() - started)
    return _row("commit", f"{turns:,} turns", samples, "median < 10 ms")


def _measure_relay(campaign, turns):
    from asgiref.sync import async_to_sync

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
            samples = async_to_sync(_relay_samples)(campaign, server)
        finally:
            for name, value in saved.items():
                setattr(settings, name, value)
    return _row("relay", f"{turns:,} turns", samples, "median < 5 ms")


async def _relay_samples(campaign, server, replies=5):
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
            if 'id="play-body"' in frame:
                break
            for word in words:
                if f">{word}<" in frame:
                    arrivals[word] = now
        written = {chunk.text: chunk.at for chunk in server.chunks}
        samples += [arrivals[word] - written[word] for word in words if word in arrivals and word in written]
    await communicator.disconnect()
    await asyncio.sleep(0)
    return samples


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
            retrieval._cache.clear()
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
    return [
        _row("lexical retrieval", size, lexical, "median < 30 ms"),
        _row("lexical, state scene", size, short, "query from a short scene summary"),
        _row("hybrid retrieval", f"{size}, 768-d", hybrid, "median < 80 ms"),
        _row("hybrid, cold vectors", f"{size}, 768-d", cold, "first query after vectors change"),
    ]


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
    results += [_row("state apply 20 events", size, wall, "median < 10 ms"), _row("  (CPU time)", size, cpu, "")]
    return results


def _generate_state(entities, facts, turns):
    """Create a campaign whose state, spread over ``turns`` recorded turns, holds ``entities`` and ``facts``.

    A tenth of the facts are later retracted and a side branch carries
    facts of its own, so the fold has superseded and abandoned rows to skip.
    """
    from django.contrib.auth import get_user_model

    from campaigns import story
    from campaigns.models import Branch, Campaign, Node, StateEvent, StateRecord
    from campaigns.state.reading import fact_slot

    user, _ = get_user_model().objects.get_or_create(username="bench")
    campaign = story.start_campaign(Campaign.objects.create(
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
    add(turns, slot="scene", kind="scene", value="The bench's scene.", data={"location": places[2]})
    add(turns, slot="location:protagonist", kind="location", subject="protagonist", value=places[2])
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
    def ev(type, subject="", object="", value=""):
        return {"type": type, "subject": subject, "object": object, "value": value, "narrator_only": False}

    newcomer, place, item = f"Newcomer {index}", f"New place {index}", f"New item {index}"
    return [
        ev("introduce", newcomer, "character", "a stranger"),
        ev("introduce", place, "place"),
        ev("introduce", item, "item"),
        ev("scene", "", place, f"Scene {index} begins."),
        ev("arrive", newcomer),
        ev("acquire", newcomer, item),
        ev("give", newcomer, item, "protagonist"),
        ev("move", "Character 5", place),
        ev("relationship", newcomer, "protagonist", "wary"),
        ev("set_condition", newcomer, "", "soaked"),
        ev("open_thread", "", "", f"Who sent newcomer {index}?"),
        ev("resolve_thread", "", "answered", f"Who sent newcomer {index}?"),
        *[ev("add_fact", newcomer, "", f"Newcomer {index} knows fact {n}.") for n in range(6)],
        ev("retract_fact", "", "", f"Newcomer {index} knows fact 0."),
        ev("lose", "protagonist", item),
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
    from storyteller.context import memories

    path = lineage.path_of(campaign)
    vectors = np.random.default_rng(11).standard_normal((2 * (repeat + 3), VECTOR_DIMS)).astype(np.float32)
    warm, cold = [], []
    for index in range(repeat + 3):
        query = memories.Query(f"{ACTIONS[index % 4]} {_prose(rng, words, 12)}", _prose(rng, words, 60),
                               tuple(vectors[2 * index]), tuple(vectors[2 * index + 1]), "nomic-embed-text")
        if index < 3:  # the vectors read out of SQLite: the first turn after they change
            memories._cache.clear()
            started = time.perf_counter()
            memories.section(campaign, path, query)
            cold.append(time.perf_counter() - started)
            continue
        started = time.perf_counter()
        memories.section(campaign, path, query)
        warm.append(time.perf_counter() - started)
    size = f"{count:,} memories, 768-d"
    target = "median < 20 ms" if count <= 1_000 else "median < 100 ms"
    return [_row("memory retrieval", size, warm, target),
            _row("memory, cold vectors", size, cold, "first turn after vectors change")]


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
    return [*_measure_checkpoint_lookup(repeat), _measure_prefix_reuse(PREFIX_REUSE_TURNS)]


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


def _measure_prefix_reuse(turns):
    """Play ``turns`` turns (a summary written by hand stands in for the summariser); measure what each prompt
    shares with the previous one."""
    from django.contrib.auth import get_user_model

    from campaigns import lineage, story
    from campaigns.models import Campaign
    from memory import checkpoints
    from storyteller import context, tokens

    user, _ = get_user_model().objects.get_or_create(username="bench")
    campaign = story.start_campaign(Campaign.objects.create(
        owner=user, title="Prefix reuse", protagonist="Edrin", opening=REPLIES[0],
        context_token_budget=4096, max_output_tokens=300))
    previous, shares, builds = None, [], []
    breaks = rotations = 0
    last_checkpoint = None
    for turn in range(turns):
        action = context.Action(mode="do", text=ACTIONS[turn % 4])
        started = time.perf_counter()
        try:
            ctx = context.build(campaign, lineage.path_of(campaign), action)
        except context.NeedsCompaction as need:
            plan = need.plan
            checkpoints.write(plan.path, plan.through, f"Edrin's story through depth {plan.through}. " * 8,
                              plan.prefix_hash)
            ctx = context.build(campaign, lineage.path_of(campaign), action)
        builds.append(time.perf_counter() - started)
        current = _rendered(ctx.messages)
        checkpoint = (ctx.report["checkpoint"] or {}).get("id")
        if previous is not None:
            rotations += checkpoint != last_checkpoint
            breaks += not current.startswith(_rendered(previous[:-1]))
            common = len(_common_prefix(_rendered(previous), current))
            shares.append(tokens.count(current[:common]) / tokens.count(current))
        previous, last_checkpoint = ctx.messages, checkpoint
        story.commit_turn(campaign.pk, (campaign.head_branch_id, campaign.head_depth),
                          story.PlayerAction(mode="do", text=action.text,
                                             tokens=context.node_tokens("player", "do", action.text)),
                          story.Reply(text=f"{REPLIES[turn % 4]} ({turn})",
                                      tokens=context.node_tokens("narrator", "", f"{REPLIES[turn % 4]} ({turn})"),
                                      report={}, model="bench", api="bench"))
        campaign.refresh_from_db()
    row = _row("prefix reuse", f"{turns} turns", builds, (
        f"reused share median {statistics.median(shares):.1%}, min {min(shares):.1%}; "
        f"{breaks} breaks, {rotations} rotations"))
    row.update({"reused_share_median": statistics.median(shares), "reused_share_min": min(shares),
                "breaks": breaks, "rotations": rotations})
    return row


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


def _common_prefix(first, second):
    return first[:next((i for i, (a, b) in enumerate(zip(first, second)) if a != b), min(len(first), len(second)))]


BENCHMARKS = {
    "turn": _bench_turn,
    "knowledge": _bench_knowledge,
    "state": _bench_state,
    "memory": _bench_memory,
    "checkpoint": _bench_checkpoint,
    "minds": _bench_minds,
}
