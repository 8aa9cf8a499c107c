"""Work after a turn has been committed, one worker per campaign (single flight).

A committed reply is queued here and its steps run in order, in the event
loop that played the turn, after the person already has the reply. Each step
records its own status and its own failure; a failing step never touches the
accepted turn, and the next step and the next reply still run. Add a step by
writing a module of this package that declares its ``STEP`` (a ``Step``: an
async function of the reply node's id, and the model of the run row it
writes on the reply) and listing it in ``STEPS``.

A player's turn comes first: every step runs as background work
(``llm.priority``), so its model calls stop when a turn starts and are made
again once the reply is written; the step itself never sees the pause.

``status(campaign)`` says what the worker has done for the reply at the head,
for the play page: running is read from the worker itself (a restart ends it),
everything else from the run rows, which a step writes after its failed work
has rolled back, so the page never reads "up to date" over a failure.
"""

import asyncio
import contextvars
import logging
from collections import deque
from dataclasses import dataclass

from channels.db import database_sync_to_async

from campaigns import lineage, playing
from campaigns.models import ContextSnapshot, Node, RecorderRun

from .. import llm
from ..llm import priority, usage
from . import Step, away, compaction, consolidation, judge, memories, minds, recorder, requests

logger = logging.getLogger(__name__)

# In order: the state first, so later steps see what the turn changed (the
# memory step's cast brief reads it), and the judge of triggers' free-text
# conditions right after it (a condition is judged on the recorded state);
# the checkpoint last, so the next turn finds its summary already written
# (and the memory step's blocks are not waiting behind a long summary).
# Ordered for a server with one prompt cache too (issue 27): every step that
# continues the narration's prompt (recorder, judge, minds, memories) runs
# before those with prompts of their own (off stage, consolidation, the
# summary), so these cost the next narration its cache only on the turns they
# run, and the summary's only where the next prompt changes anyway (a new
# checkpoint).
STEPS = [
    recorder.STEP,
    judge.STEP,
    # The recorder's second call (D11): what the characters perceived, then the recall index.
    minds.STEP,
    memories.STEP,
    # Off stage (seed 002 离场行动): characters away from the player act on what is due, one at a time, and the
    # "Meanwhile" card is written; then the world author completes what it created (consolidation), when due.
    away.STEP,
    consolidation.STEP,
    compaction.STEP,
]

# Measured (`manage.py bench --only recording`): over twenty demo turns the
# built-in 135M model's recordings closed, but proposed no change that held.
SMALL_RECORDER = ("The built-in narrator is too small to notice much of what changes, so the story state stays "
                  "mostly as you set it; start Ollama (the command ollama serve) for a recorder that keeps it.")

# A reply brought in from a chat (storyteller.tavern) waits for the person to ask before anything records it.
IMPORTED = "imported"
BROUGHT_IN = ("This reply was brought in from another tool and is not read into the world state; the Cast panel "
              "can read the story in.")

_queues: dict[int, deque] = {}
_workers: dict[int, asyncio.Task] = {}
_running: dict[int, Step] = {}  # the step each campaign's worker is in


def schedule(campaign_id, node_id):
    """Queue the post-turn work for reply ``node_id`` and return the campaign's worker task.

    One worker per campaign runs the queue in commit order; scheduling while
    it runs only lengthens its queue. Call from the event loop (after commit).
    """
    loop = asyncio.get_running_loop()
    worker = _workers.get(campaign_id)
    if worker is not None and worker.get_loop() is not loop:
        # A worker of a loop that has ended (a test's, a management command's) left nothing to finish here.
        worker = None
        _queues.pop(campaign_id, None)
    queue = _queues.setdefault(campaign_id, deque())
    if node_id not in queue:
        queue.append(node_id)
    if worker is None or worker.done():
        # A context of its own: the worker outlives the turn that scheduled it and must not carry its notices.
        worker = loop.create_task(_work(campaign_id), name=f"post-turn-{campaign_id}", context=contextvars.Context())
        _workers[campaign_id] = worker
    return worker


async def run(node_id, *, campaign_id=None):
    """Run every post-turn step for reply ``node_id``, each on its own (saying which, for ``campaign_id``); keep
    what each of its model requests cost, for the inspector."""
    for step in STEPS:
        if campaign_id is not None:
            _running[campaign_id] = step
        try:
            with priority.background(f"the {step.name.lower()}", elsewhere=turns_elsewhere()), \
                    usage.collecting() as used, \
                    usage.asking(step.kind):
                await step.run(node_id)
        except Exception:  # noqa: BLE001 — a step records its own failure; this only keeps the next step alive
            logger.exception("post-turn step %s failed for node %s", step.run.__qualname__, node_id)
        await requests.arecord(node_id, used)


def turns_elsewhere():
    """Return what background work asks to give way to turns in other processes, or None when none share the work."""
    return _anywhere if playing.shared() else None


_anywhere = database_sync_to_async(playing.anywhere)


async def settle(campaign_id=None):
    """Wait until the post-turn work of ``campaign_id`` (or of every campaign) in this loop is done."""
    loop = asyncio.get_running_loop()
    workers = [w for key, w in list(_workers.items())
               if (campaign_id is None or key == campaign_id) and w.get_loop() is loop and not w.done()]
    if workers:
        await asyncio.gather(*workers, return_exceptions=True)


async def _work(campaign_id):
    queue = _queues[campaign_id]
    try:
        while queue:
            await run(queue.popleft(), campaign_id=campaign_id)
    finally:
        _running.pop(campaign_id, None)


@dataclass(frozen=True)
class Failure:
    """One step that failed for one reply: shown once, naming its turn, in the words the step stored."""

    step: str
    turn: int
    error: str


@dataclass(frozen=True)
class WorkerStatus:
    """What the post-turn worker has done for the reply at the head, in words for the play page."""

    state: str  # "running" | "failed" | "unfinished" | "done" | "none" (no reply yet)
    text: str = ""
    failures: tuple = ()
    node_id: int | None = None  # the head reply
    retry: tuple = ()  # the replies a retry runs the steps for, oldest first
    waiting: int = 0  # a game master's replies on the line waiting for a stage boundary to be recorded
    waiting_note: str = ""  # why the last recording at a boundary failed (they still wait)
    note: str = ""  # what a player should know about how the story is kept, in one sentence (or "")


def status(campaign):
    """Return the WorkerStatus of ``campaign``'s head reply, and of earlier replies on its line never recorded.

    The worker is asked first and the rows read after: a step that finishes
    between the two reads then shows as running for one more look, never as
    not done. The memory and summary steps catch up on their own after a
    later reply, so only the head's count; a recording is of one reply, so a
    failed one earlier on the line stays a failure until it is retried.
    """
    step = _current_step(campaign.pk)
    if step is not None:
        text = step.doing if step else "Getting to the last reply…"
        if _paused(campaign.pk):
            text = f"{text} (paused while a reply is written)"
        return WorkerStatus("running", text)
    path = lineage.path_of(campaign)
    head = path.nodes().filter(depth=campaign.head_depth, role=Node.Role.NARRATOR).first()
    if head is None or head.depth == 0:  # the opening is not a reply: no post-turn work follows it
        return WorkerStatus("none")
    if (ContextSnapshot.objects.filter(node=head, api=IMPORTED).exists()
            and not RecorderRun.objects.filter(node=head).exists()):
        return WorkerStatus("done", BROUGHT_IN, node_id=head.pk)
    earlier = list(RecorderRun.objects.filter(path.clause("node__"), node__campaign_id=campaign.pk,
                                              node__depth__lt=head.depth, status=RecorderRun.Status.FAILED)
                   .order_by("node__depth").values_list("node_id", "node__depth", "error"))
    failures = [Failure("Recording", depth // 2, error) for _, depth, error in earlier]
    retry = (*(node_id for node_id, _, _ in earlier), head.pk)
    missing = []
    for each in STEPS:
        row = each.record.objects.filter(node=head).values_list("status", "error").first()
        if row is None:
            missing.append(each.name)
        elif row[0] == "failed":
            failures.append(Failure(each.name, head.depth // 2, row[1]))
    waiting = _waiting(path, campaign, head)
    if failures:
        return WorkerStatus("failed", failures=tuple(failures), node_id=head.pk, retry=retry, **waiting)
    if missing:
        return WorkerStatus("unfinished", f"Not done for the last reply yet: {', '.join(missing).lower()}.",
                            node_id=head.pk, retry=retry, **waiting)
    if waiting:
        return WorkerStatus("done", "Up to date but for the recording, which waits for a new stage.",
                            node_id=head.pk, **waiting)
    # Said while the built-in narrator still plays: once a model server answers, the next reply is recorded by it.
    if RecorderRun.objects.filter(node=head, model=llm.BUILTIN_MODEL).exists() and llm.builtin_in_use():
        return WorkerStatus("done", f"Up to date. {SMALL_RECORDER}", node_id=head.pk, note=SMALL_RECORDER)
    return WorkerStatus("done", "Up to date.", node_id=head.pk)


def _waiting(path, campaign, head):
    """Return the count of replies waiting for a stage boundary on the line, and why the last try failed."""
    rows = list(RecorderRun.objects.filter(path.clause("node__"), node__campaign_id=campaign.pk,
                                           node__depth__lte=head.depth, status=RecorderRun.Status.WAITING)
                .order_by("node__depth").values_list("error", flat=True))
    if not rows:
        return {}
    return {"waiting": len(rows), "waiting_note": rows[-1]}


def _paused(campaign_id):
    """Return whether the campaign's worker is giving way to a turn playing in its event loop."""
    worker = _workers.get(campaign_id)
    return worker is not None and priority.playing(worker.get_loop()) > 0


def _current_step(campaign_id):
    """Return the step the campaign's worker is in, False between steps, or None when no worker is running."""
    worker = _workers.get(campaign_id)
    if worker is None or worker.done() or worker.get_loop().is_closed():
        return None
    return _running.get(campaign_id, False)
