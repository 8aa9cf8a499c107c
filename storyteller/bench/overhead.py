"""``overhead``: from the player's message at the socket to the narrator's chat request leaving the application.

Each step's share is traced from within, a retry and the first turn of a
fresh process are measured beside it (``cold_turn`` runs in the child
process ``manage.py bench --cold-turn`` starts), and the hardware's figure
for the same work is printed with them.
"""

import json
import statistics
import time

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connections

from .knowledge import KNOWLEDGE_PASSAGES, VECTOR_DIMS, engine_alone, generate_passages, prose, vocabulary
from .measure import ACTIONS, REPLIES, figure, use_database
from .turn import generate_story, summarise_by_hand


OVERHEAD_TURNS = 2_000
OVERHEAD_MEMORIES = 10_000
OVERHEAD_COLD = 3  # first turns after a restart: each one a fresh process


def run(sizes, repeat):
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
    words = vocabulary(rng)
    campaign = generate_story(OVERHEAD_TURNS)
    generate_passages(campaign, rng, words, KNOWLEDGE_PASSAGES)
    _add_memories(campaign, rng, words, OVERHEAD_MEMORIES)
    summarise_by_hand(campaign)  # last: the knowledge rule is part of the stable prefix it is bound to
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
    rows.append(figure("  hardware, same work", size, [hardware["total"]] * 3,
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
               source_start=i * span // count, source_end=1 + i * span // count, text=prose(rng, words, 30),
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
    from storyteller import warming
    from storyteller.steps import postturn

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

    use_database(database)
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

    from knowledge.retrieval import meaningful_terms
    from memory.models import MemoryVector
    from knowledge.models import Passage

    memories = np.vstack([np.frombuffer(blob, np.float32) for blob in MemoryVector.objects.filter(
        campaign=campaign).values_list("vector", flat=True)])
    passages = np.vstack([np.frombuffer(blob, np.float32) for blob in Passage.objects.filter(
        campaign=campaign).values_list("embedding", flat=True)])
    query = np.random.default_rng(3).standard_normal(VECTOR_DIMS).astype(np.float32)
    terms = meaningful_terms(f"{ACTIONS[0]} {REPLIES[1]} {REPLIES[2]}")[:20]
    figures = {"memory": [], "knowledge": [], "fts": []}
    with connection.cursor() as cursor:
        for _ in range(23):
            started = time.perf_counter()
            scores = np.einsum("ij,j->i", memories, query)
            np.argpartition(-scores, 5)[:5]
            middle = time.perf_counter()
            np.flatnonzero(np.einsum("ij,j->i", passages, query) >= 0.5)
            fts = time.perf_counter()
            engine_alone(cursor, terms, 160)
            done = time.perf_counter()
            figures["memory"].append(middle - started)
            figures["knowledge"].append(fts - middle)
            figures["fts"].append(done - fts)
    hardware = {name: statistics.median(values[3:]) for name, values in figures.items()}
    hardware["terms"] = len(terms)
    hardware["total"] = hardware["memory"] + hardware["knowledge"] + hardware["fts"]
    return hardware


def _overhead_row(name, size, samples, target, hardware):
    row = figure(name, size, [sample["total"] for sample in samples], target)
    row["target"] = f"{target}; {row['median_ms'] / (hardware['total'] * 1000):.1f}x the hardware"
    row["steps"] = samples
    return row


def _step_rows(samples, prefix="  "):
    """One row per step: its median and its share of the median turn."""
    total = statistics.median(sample["total"] for sample in samples)
    names = [name for name in samples[0] if name != "total"]
    rows = []
    for name in names:
        row = figure(f"{prefix}{name}"[:22], "", [sample.get(name, 0.0) for sample in samples], "")
        row["target"] = f"{row['median_ms'] / (total * 1000):.0%} of the median turn"
        rows.append(row)
    return rows
