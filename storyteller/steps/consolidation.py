"""The consolidation step (seed 002 扩展世界): after a reply, the world author completes what it created, when due.

It reads (the database's thread) whether this reply's step is still to run;
the world author's ``consolidate`` reads the queue and asks nothing unless
consolidation is due (``authoring_consolidate_after`` things wait, or one
has waited four turns), makes the one model call, checks the completion and
writes it through ``apply_events``. The outcome, a failure in words, is
recorded on the reply's ``ConsolidationRun``; a failure writes nothing and
keeps the queue for the next try.
"""

from channels.db import database_sync_to_async

from campaigns.models import ConsolidationRun, Node

from ..voices import author
from . import Step


async def after_turn(node_id):
    """The post-turn step: consolidate at reply ``node_id`` when due; return its ConsolidationRun status.

    Nothing is asked unless consolidation is due. A failure keeps the queue
    and its reason is recorded on the reply's run, for the play page.
    """
    found = await database_sync_to_async(_pending)(node_id)
    if found is None:
        return None
    campaign_id, attempt = found
    try:
        outcome = await author.consolidate(campaign_id, node_id)
    except Exception as error:  # noqa: BLE001 — whatever failed, nothing was written and the queue stays
        outcome = author.Consolidation("failed", f"Consolidation failed ({type(error).__name__}: {error}); "
                                                 "nothing was written and the queue is kept.")
    status = {"applied": ConsolidationRun.Status.APPLIED, "failed": ConsolidationRun.Status.FAILED}.get(
        outcome.status, ConsolidationRun.Status.NOT_DUE)
    failed = status == ConsolidationRun.Status.FAILED
    await database_sync_to_async(ConsolidationRun.objects.update_or_create)(node_id=node_id, defaults={
        "status": status, "error": outcome.reason[:2000] if failed else "",
        "note": "" if failed else outcome.reason[:2000], "attempts": attempt})
    return status


def _pending(node_id):
    """Return (campaign id, attempt) of the reply whose consolidation step is still to run, or None."""
    node = Node.objects.filter(pk=node_id, role=Node.Role.NARRATOR).first()
    if node is None or node.depth == 0:
        return None
    run = ConsolidationRun.objects.filter(node=node).first()
    if run is not None and run.status != ConsolidationRun.Status.FAILED:
        return None
    return node.campaign_id, (run.attempts + 1) if run else 1


STEP = Step(after_turn, "Completing the new parts of the world…", "Consolidation step", ConsolidationRun,
            kind="consolidation")
