"""Work after a turn has been committed, one worker per campaign (single flight).

A committed reply is queued here and its steps run in order, in the event
loop that played the turn, after the person already has the reply. Each step
records its own status and its own failure; a failing step never touches the
accepted turn, and the next step and the next reply still run. Add a step by
appending an async function of the reply node's id to ``STEPS``.
"""

import asyncio
import logging
from collections import deque

from . import compaction, memories, recorder

logger = logging.getLogger(__name__)

# In order: the state first, so later steps see what the turn changed (the
# memory step's cast brief reads it); the checkpoint last, so the next turn
# finds its summary already written (and the memory step's blocks are not
# waiting behind a long summary).
STEPS = [recorder.record, memories.remember, compaction.checkpoint]

_queues: dict[int, deque] = {}
_workers: dict[int, asyncio.Task] = {}


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
        worker = loop.create_task(_work(campaign_id), name=f"post-turn-{campaign_id}")
        _workers[campaign_id] = worker
    return worker


async def run(node_id):
    """Run every post-turn step for reply ``node_id``, each on its own."""
    for step in STEPS:
        try:
            await step(node_id)
        except Exception:  # noqa: BLE001 — a step records its own failure; this only keeps the next step alive
            logger.exception("post-turn step %s failed for node %s", step.__qualname__, node_id)


async def settle(campaign_id=None):
    """Wait until the post-turn work of ``campaign_id`` (or of every campaign) in this loop is done."""
    loop = asyncio.get_running_loop()
    workers = [w for key, w in list(_workers.items())
               if (campaign_id is None or key == campaign_id) and w.get_loop() is loop and not w.done()]
    if workers:
        await asyncio.gather(*workers, return_exceptions=True)


async def _work(campaign_id):
    queue = _queues[campaign_id]
    while queue:
        await run(queue.popleft())
