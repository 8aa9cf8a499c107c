"""``replay``: the compare page of a replay (issue 29) of 200 turns, with events, recordings and state on both lines.

Both lines are written directly (no model): the original line of the
generated story, and a replay branch of the same length whose replies are
close to the original's (so every turn gets a word diff, the page's most
costly part), each reply with its snapshot's figures, an applied and a
refused event, a recording, and a whereabouts record that differs every
tenth turn.
"""

import time

from .measure import bench_user, figure
from .turn import generate_story


def run(sizes, repeat):
    """The compare page of a replay as long as the story (up to 200 turns: the replays people run)."""
    results = []
    for turns in sorted({min(size, 200) for size in sizes}):
        campaign = generate_story(turns)
        replay = _replayed(campaign, turns)
        results += _measure_compare(campaign, replay, turns, repeat)
    return results


def _replayed(campaign, turns):
    from campaigns.models import (Branch, ContextSnapshot, Node, RecorderRun, Replay, StateEvent, StateRecord)

    main = campaign.head_branch
    branch = Branch.objects.create(campaign=campaign, parent=main, fork_depth=0)
    replay = Replay.objects.create(campaign=campaign, source=main, from_depth=1, to_depth=2 * turns, branch=branch,
                                   model="bench-other", status=Replay.Status.DONE)
    originals = list(Node.objects.filter(campaign=campaign, branch=main, depth__gte=1).order_by("depth"))
    nodes = [Node(campaign=campaign, branch=branch, depth=n.depth, role=n.role, mode=n.mode,
                  text=n.text if n.role == "player" else f"{n.text} And the rain goes on.",
                  tokens=n.tokens, tokens_through=n.tokens_through) for n in originals]
    Node.objects.bulk_create(nodes, batch_size=2000)
    replies = [n for n in [*originals, *Node.objects.filter(branch=branch)] if n.role == "narrator"]
    usage = {"first_word_ms": 420, "cached_tokens": 1800, "prompt_eval_count": 2000, "eval_count": 120}
    ContextSnapshot.objects.bulk_create([ContextSnapshot(
        node=n, report={"usage": usage, "sections": [{"text": "x" * 8000}]}, model="bench", api="ollama",
        prompt_eval_count=2000, eval_count=120, duration_ms=2400) for n in replies], batch_size=1000)
    RecorderRun.objects.bulk_create([RecorderRun(node=n, status="applied") for n in replies], batch_size=1000)
    events = []
    for n in replies:
        events.append(StateEvent(campaign=campaign, node=n, source="recorder", status="applied",
                                 payload={"type": "move", "subject": "Mara", "object": "Quay"}))
        events.append(StateEvent(campaign=campaign, node=n, source="recorder", status="rejected",
                                 payload={"type": "move", "subject": "Mara", "object": "Vault"},
                                 reason="Mara cannot get there: the iron door is locked"))
    StateEvent.objects.bulk_create(events, batch_size=1000)
    applied = {e.node_id: e for e in StateEvent.objects.filter(campaign=campaign, status="applied")}
    StateRecord.objects.bulk_create([StateRecord(
        campaign=campaign, branch_id=n.branch_id, depth=n.depth, slot="location:mara", kind="location",
        subject="mara", value="vault" if n.branch_id == branch.pk and n.depth % 20 == 0 else "quay",
        authority="state", event=applied[n.pk]) for n in replies], batch_size=1000)
    return replay


def _measure_compare(campaign, replay, turns, repeat):
    from django.test import Client
    from django.urls import reverse

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(bench_user())
    url = reverse("replay_compare", args=[campaign.pk, replay.pk])
    samples, work = [], []
    for index in range(repeat + 2):
        started, cpu = time.perf_counter(), time.process_time()
        answer = client.get(url)
        assert answer.status_code == 200 and b"word-diff" in answer.content
        if index >= 2:
            samples.append(time.perf_counter() - started)
            work.append(time.process_time() - cpu)
    # The page's own work beside its wall time: on two cores shared with other suites the wall time is mostly theirs.
    return [figure("compare page", f"{turns:,} turns", samples, "median < 300 ms"),
            figure("compare page (CPU)", f"{turns:,} turns", work, "its own work")]
