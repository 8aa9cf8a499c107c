"""The post-turn steps as tasks in a queue, for several processes (``STORYTELLER_TASKS=database``).

Django's tasks interface (the ``django-tasks`` package, the API Django 6
ships) with its database backend (``django-tasks-db``) carries the work: a
committed reply becomes one task row, and ``manage.py worker`` processes, as
many as are started, claim rows and run the steps (``postturn.run_queued``).
The queue knows nothing of campaigns, so what the steps need beyond it is
here, in the same database:

- **One campaign at a time, in commit order.** A task runs only while it
  holds its campaign's ``PostTurnLease``, taken in one locked write (a row
  lock on PostgreSQL, the IMMEDIATE write lock on SQLite) that also checks no
  earlier reply of the campaign is still waiting. A task that cannot take it
  is queued again a moment later and its row ends: no worker waits idle on
  another's campaign.
- **A dead worker's task runs again.** The holder beats (``beat_at``) every
  quarter of ``STORYTELLER_TASK_LEASE`` from a thread of its own, whatever
  the step is doing. Every worker looks for leases whose beat stopped and
  tasks left running without one, frees the lease and puts the task back to
  ready: the backend has no lease of its own, so this is what makes ``kill
  -9`` a retry. On PostgreSQL the holder also holds the campaign's
  "postturn" advisory lock (``campaigns.locks.Held``) on a connection of its
  own, which the server frees the moment the holder's process dies: a lease
  whose lock is free is a dead holder's at once, without waiting out the
  lease, and a holder that only stopped beating (a stalled machine) still
  keeps every other worker out. Each step writes its work and its run row in one transaction
  and skips itself once it succeeded, so the retry redoes only what was lost.
- **What runs, for the play page.** The lease names the step running; a
  task still waiting means the steps are about to run.

This module knows the task only as the object it is handed (it lives in
``postturn``, which imports this one).
"""

import logging
import threading
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, close_old_connections, connection, transaction
from django.utils import timezone
from django_tasks import TaskResultStatus
from django_tasks_db.models import DBTaskResult

from campaigns import locks
from campaigns.models import PostTurnLease

logger = logging.getLogger(__name__)

PENDING = (TaskResultStatus.READY, TaskResultStatus.RUNNING)
# How long a task that found its campaign busy waits before it is tried again: a step takes seconds at least.
DEFER_SECONDS = 1.0


def enabled():
    """Return whether the post-turn steps run in worker processes rather than in the process that played."""
    return settings.STORYTELLER_TASKS == "database"


def enqueue(task, campaign_id, node_id):
    """Queue ``task`` for reply ``node_id`` once the transaction that wrote the reply has committed.

    A reply already waiting in the queue is not queued twice (a retry pressed
    while the turn's own task waits).
    """

    def send():
        if not _pending(task, campaign_id).filter(status=TaskResultStatus.READY,
                                                  args_kwargs__kwargs__node_id=node_id).exists():
            task.enqueue(campaign_id=campaign_id, node_id=node_id)

    transaction.on_commit(send)


def defer(task, campaign_id, node_id):
    """Queue ``task`` for reply ``node_id`` again a moment from now (its campaign was busy)."""
    task.using(run_after=timezone.now() + timedelta(seconds=DEFER_SECONDS)).enqueue(
        campaign_id=campaign_id, node_id=node_id)


class Holding:
    """The lease a task holds while it runs a campaign's steps: it beats from a thread and names the step."""

    def __init__(self, holder, campaign_id, lock):
        self.holder = holder
        self.campaign_id = campaign_id
        self.lock = lock  # the campaign's "postturn" advisory lock (PostgreSQL; holds nothing on SQLite)
        self._stop = threading.Event()
        self._beating = threading.Thread(target=self._beat, name=f"post-turn-lease-{campaign_id}", daemon=True)

    def step(self, name):
        """Say which step runs now (for the play page); also a beat."""
        _held(self.holder, self.campaign_id).update(step=name, beat_at=timezone.now())

    def _beat(self):
        interval = settings.STORYTELLER_TASK_LEASE / 4
        try:
            while not self._stop.wait(interval):
                if not _held(self.holder, self.campaign_id).update(beat_at=timezone.now()):
                    # Only a beat missed for a whole lease loses it: the step runs on, and another worker may run
                    # the task again, which its steps' skip-once-done keeps harmless.
                    logger.warning("post-turn lease of campaign %s was taken from task %s", self.campaign_id,
                                   self.holder)
        finally:
            connection.close()


def take(task_result, campaign_id, node_id):
    """Take the campaign's lease for ``task_result`` and return its Holding (beating), or None when it is busy.

    Busy: another task holds it and still beats, or an earlier reply of the
    campaign waits in the queue (the steps run in commit order).
    """
    holder = str(task_result.id)
    held = locks.Held("postturn", campaign_id)
    if not held.acquire():  # PostgreSQL: a live process runs this campaign's steps
        return None
    taken = False
    try:
        PostTurnLease.objects.get_or_create(campaign_id=campaign_id)
        with transaction.atomic():
            lease = PostTurnLease.objects.select_for_update().get(campaign_id=campaign_id)
            if lease.holder and lease.holder != holder and lease.beat_at and lease.beat_at >= _stale():
                return None
            earlier = (_pending(task_result.task, campaign_id).exclude(id=task_result.id)
                       .filter(args_kwargs__kwargs__node_id__lt=node_id))
            if earlier.exists():
                return None
            lease.holder, lease.node_id, lease.step, lease.beat_at = holder, node_id, "", timezone.now()
            lease.save()
        taken = True
    except IntegrityError:  # the reply or the campaign was deleted meanwhile
        return None
    finally:
        if not taken:
            held.release()
    holding = Holding(holder, campaign_id, held)
    holding._beating.start()
    return holding


def give_back(holding):
    """Stop the beat and free the lease (unless another task took it meanwhile)."""
    holding._stop.set()
    holding._beating.join()
    _held(holding.holder, holding.campaign_id).update(holder="", node=None, step="", beat_at=None)
    holding.lock.release()  # after the lease: a free lock beside a held lease means its holder died


def current(task, campaign_id):
    """Return the name of the step running for ``campaign_id`` ("" between steps or while a task waits), or None.

    Read from the database, so any process sees a worker's progress: a lease
    that still beats is running; a task still ready or running (a dead
    worker's, before it is retried) is about to.
    """
    lease = PostTurnLease.objects.filter(campaign_id=campaign_id).values("holder", "step", "beat_at").first()
    if lease and lease["holder"] and lease["beat_at"] and lease["beat_at"] >= _stale():
        return lease["step"]
    if _pending(task, campaign_id).exists():
        return ""
    return None


def recover(task):
    """Put back to ready every task of ``task`` whose worker died (its lease stopped beating or, on PostgreSQL,
    its advisory lock is free; or it ran without one for a whole lease); return how many.

    The queue's backend keeps a claimed row running forever when its worker
    is killed; this is the retry. A task that runs without a lease for that
    long is one killed between its claim and taking the lease.
    """
    stale = _stale()
    retried = 0
    with transaction.atomic():
        dead = [lease for lease in PostTurnLease.objects.select_for_update().exclude(holder="")
                if lease.beat_at is None or lease.beat_at < stale or _lock_free(lease.campaign_id)]
        for lease in dead:
            retried += DBTaskResult.objects.filter(id=lease.holder, status=TaskResultStatus.RUNNING).update(
                status=TaskResultStatus.READY)
            logger.warning("post-turn task %s of campaign %s stopped beating; it runs again", lease.holder,
                           lease.campaign_id)
            lease.holder, lease.node_id, lease.step, lease.beat_at = "", None, "", None
            lease.save()
        held = PostTurnLease.objects.exclude(holder="").values_list("holder", flat=True)
        orphans = (DBTaskResult.objects.filter(task_path=task.module_path, status=TaskResultStatus.RUNNING,
                                               started_at__lt=stale)
                   .exclude(id__in=list(held)))
        retried += orphans.update(status=TaskResultStatus.READY)
    return retried


def keep_recovering(task, stop):
    """Run ``recover`` every quarter lease until ``stop`` is set (a worker's thread)."""
    interval = settings.STORYTELLER_TASK_LEASE / 4
    try:
        while not stop.wait(interval):
            try:
                close_old_connections()
                recover(task)
            except Exception:  # a locked or lost database this time; the next look tries again
                logger.exception("looking for post-turn tasks of dead workers failed")
    finally:
        connection.close()


def _lock_free(campaign_id):
    """Return whether nobody holds the campaign's "postturn" advisory lock (PostgreSQL; never on SQLite)."""
    return locks.Held("postturn", campaign_id).needed and not locks.Held.anyone("postturn", campaign_id,
                                                                               shared=False)


def _pending(task, campaign_id):
    return DBTaskResult.objects.filter(task_path=task.module_path, status__in=PENDING,
                                       args_kwargs__kwargs__campaign_id=campaign_id)


def _held(holder, campaign_id):
    return PostTurnLease.objects.filter(campaign_id=campaign_id, holder=holder)


def _stale():
    return timezone.now() - timedelta(seconds=settings.STORYTELLER_TASK_LEASE)
