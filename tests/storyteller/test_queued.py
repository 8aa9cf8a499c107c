"""The post-turn steps as tasks of Django's tasks interface (issue 31, STORYTELLER_TASKS=database).

Through the real queue (django-tasks-db's rows and its own worker loop, run
here in the test's process) and the real fake model server: a reply is queued
after its commit and nothing runs it in the process that played; a worker
runs it, one campaign's replies one at a time and in commit order; a task
whose worker died is ready again and its retry leaves every step applied
once; the play page reads what runs from the database. Real worker processes,
killed with SIGKILL, are in tests/multiprocess.
"""

import asyncio
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse
from django.utils import timezone
from django_tasks import TaskResultStatus
from django_tasks_db.management.commands.db_worker import Worker
from django_tasks_db.models import DBTaskResult

from campaigns import lineage
from campaigns.models import PostTurnLease, RecorderRun
from memory.models import MemoryRun
from storyteller.steps import postturn, queued, recorder
from tests.campaigns.test_lineage import act
from tests.conftest import as_author

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def queue(settings, narrator_server):
    settings.STORYTELLER_TASKS = "database"
    return narrator_server


@pytest.fixture(autouse=True)
def _no_lock_watcher_left():
    """Close the connection campaigns.locks asks about other processes' locks on (PostgreSQL): the test
    database cannot be dropped while it is open."""
    yield
    from campaigns import locks

    if locks._watcher is not None:
        locks._watcher.close()
        locks._watcher = None


def head(campaign):
    campaign.refresh_from_db()
    return lineage.path_of(campaign).nodes().get(depth=campaign.head_depth)


def played(campaign, text="open the gate"):
    """Commit a turn and schedule its steps as the turn pipeline does; return the reply."""
    act(campaign, text)
    node = head(campaign)

    async def schedule():
        await postturn.schedule(campaign.pk, node.pk)

    async_to_sync(schedule)()
    return node


def work(worker_id="w1", max_tasks=None):
    """Run django-tasks-db's own worker loop until the queue has nothing ready (its --batch mode)."""
    Worker(queue_names=["default"], interval=0, batch=True, backend_name="default", startup_delay=False,
           max_tasks=max_tasks, worker_id=worker_id, excluded_queue_names=[]).run()


def tasks(**filters):
    return DBTaskResult.objects.filter(task_path=postturn.run_queued.module_path, **filters)


def status_of(client, campaign):
    return client.get(reverse("worker_status", args=[campaign.pk]), **HTMX).content.decode()


def test_a_reply_is_queued_after_its_commit_and_only_a_worker_runs_its_steps(client_of, campaign, queue):
    as_author(campaign)
    node = played(campaign)
    task = tasks().get()
    assert task.status == TaskResultStatus.READY
    assert task.args_kwargs["kwargs"] == {"campaign_id": campaign.pk, "node_id": node.pk}
    assert not RecorderRun.objects.filter(node=node).exists(), "the process that played runs no step"
    page = status_of(client_of, campaign)
    assert 'data-worker="running"' in page and "Getting to the last reply" in page, "read from the queue's rows"

    work()
    task.refresh_from_db()
    assert (task.status, task.return_value) == (TaskResultStatus.SUCCESSFUL, "done")
    assert RecorderRun.objects.get(node=node).status == "applied"
    assert MemoryRun.objects.filter(node=node).exists()
    assert PostTurnLease.objects.get(campaign=campaign).holder == "", "given back"
    assert 'data-worker="done"' in status_of(client_of, campaign)


def test_the_default_install_runs_the_steps_in_process_and_queues_nothing(campaign, narrator_server):
    node = played(campaign)
    assert RecorderRun.objects.get(node=node).status == "applied"
    assert not tasks().exists()


def test_a_reply_already_waiting_is_not_queued_twice(campaign, queue):
    node = played(campaign)

    async def again():
        await postturn.schedule(campaign.pk, node.pk)

    async_to_sync(again)()
    assert tasks().count() == 1


def test_a_campaign_another_task_holds_is_left_alone_and_its_task_tried_again_later(campaign, queue):
    node = played(campaign)
    PostTurnLease.objects.create(campaign=campaign, holder="another-task", step="Recording", beat_at=timezone.now())
    work(max_tasks=1)
    first = tasks().order_by("enqueued_at").first()
    assert (first.status, first.return_value) == (TaskResultStatus.SUCCESSFUL, "deferred")
    again = tasks(status=TaskResultStatus.READY).get()
    assert again.run_after > timezone.now() and again.args_kwargs["kwargs"]["node_id"] == node.pk
    assert not RecorderRun.objects.filter(node=node).exists(), "never two tasks of one campaign at once"

    PostTurnLease.objects.filter(campaign=campaign).update(holder="")
    time.sleep(queued.DEFER_SECONDS)
    work()
    assert RecorderRun.objects.get(node=node).status == "applied"


def test_a_campaigns_replies_run_in_commit_order_whichever_task_a_worker_takes_first(campaign, queue):
    first = played(campaign, "open the gate")
    second = played(campaign, "climb the tower")
    # A worker takes the later reply's task first (a retry, another worker's order): it waits for the earlier one.
    tasks(args_kwargs__kwargs__node_id=second.pk).update(priority=10)
    work()
    assert tasks(return_value="deferred").count() == 1
    time.sleep(queued.DEFER_SECONDS)
    work()
    runs = list(RecorderRun.objects.filter(node__in=[first, second]).order_by("id").values_list("node_id", flat=True))
    assert runs == [first.pk, second.pk]


def test_a_task_whose_worker_died_mid_step_is_ready_again_and_its_retry_applies_each_step_once(
        settings, campaign, queue):
    settings.STORYTELLER_TASK_LEASE = 2.0
    node = played(campaign)
    task = tasks().get()
    # As a worker killed in the recorder leaves it: the task claimed, the lease held, the beat stopped.
    long_ago = timezone.now() - timedelta(seconds=5)
    tasks().update(status=TaskResultStatus.RUNNING, started_at=long_ago, worker_ids=["dead"])
    PostTurnLease.objects.create(campaign=campaign, holder=str(task.id), node=node, step=recorder.STEP.name,
                                 beat_at=long_ago)
    assert queued.recover(postturn.run_queued) == 1
    task.refresh_from_db()
    assert task.status == TaskResultStatus.READY
    assert PostTurnLease.objects.get(campaign=campaign).holder == ""

    work(worker_id="w2")
    task.refresh_from_db()
    assert task.status == TaskResultStatus.SUCCESSFUL and task.worker_ids == ["dead", "w2"]
    assert RecorderRun.objects.filter(node=node).count() == 1


def test_only_dead_workers_tasks_are_retried(settings, campaign, queue):
    settings.STORYTELLER_TASK_LEASE = 2.0
    played(campaign, "open the gate")
    played(campaign, "climb the tower")
    alive, orphan = tasks().order_by("enqueued_at")
    long_ago = timezone.now() - timedelta(seconds=5)
    # One runs and beats (a long step); the other was claimed long ago and never took its lease (killed at once).
    tasks().update(status=TaskResultStatus.RUNNING, started_at=long_ago)
    holding = queued.take(alive.task_result, campaign.pk, alive.args_kwargs["kwargs"]["node_id"])
    try:
        assert queued.recover(postturn.run_queued) == 1
    finally:
        queued.give_back(holding)
    alive.refresh_from_db()
    assert alive.status == TaskResultStatus.RUNNING
    tasks(pk=alive.pk).update(status=TaskResultStatus.SUCCESSFUL)  # as its worker marks it after its steps
    orphan.refresh_from_db()
    assert orphan.status == TaskResultStatus.READY
    # Claimed a moment ago without a lease yet: not dead, just starting.
    tasks(pk=orphan.pk).update(status=TaskResultStatus.RUNNING, started_at=timezone.now())
    assert queued.recover(postturn.run_queued) == 0


def test_the_holder_beats_while_its_step_runs(settings, campaign, queue):
    settings.STORYTELLER_TASK_LEASE = 0.4
    node = played(campaign)
    holding = queued.take(tasks().get().task_result, campaign.pk, node.pk)
    try:
        began = PostTurnLease.objects.get(campaign=campaign).beat_at
        time.sleep(0.35)
        assert PostTurnLease.objects.get(campaign=campaign).beat_at > began
        assert queued.recover(postturn.run_queued) == 0
    finally:
        queued.give_back(holding)
    assert PostTurnLease.objects.get(campaign=campaign).holder == ""


def test_the_play_page_says_which_step_a_worker_elsewhere_runs_and_not_after_it_died(
        settings, client_of, campaign, queue):
    settings.STORYTELLER_TASK_LEASE = 2.0
    as_author(campaign)
    node = played(campaign)
    task = tasks().get()
    tasks().update(status=TaskResultStatus.RUNNING, started_at=timezone.now())
    PostTurnLease.objects.create(campaign=campaign, holder=str(task.id), node=node, step=recorder.STEP.name,
                                 beat_at=timezone.now())
    page = status_of(client_of, campaign)
    assert 'data-worker="running"' in page and recorder.STEP.doing in page

    PostTurnLease.objects.filter(campaign=campaign).update(beat_at=timezone.now() - timedelta(seconds=5))
    page = status_of(client_of, campaign)
    assert recorder.STEP.doing not in page and "Getting to the last reply" in page, "its task waits for a retry"


async def test_settling_a_campaign_waits_for_its_tasks_to_run_in_a_worker(settings, campaign, queue):
    from asgiref.sync import sync_to_async

    await sync_to_async(act)(campaign, "open the gate")
    node = await sync_to_async(head)(campaign)
    await postturn.schedule(campaign.pk, node.pk)
    worker = asyncio.get_running_loop().run_in_executor(None, _work_in_thread)
    await asyncio.wait_for(postturn.settle(campaign.pk), timeout=60)
    assert await RecorderRun.objects.filter(node=node).aexists(), "settled only once the worker ran the steps"
    await worker


def _work_in_thread():
    from django.db import connection

    time.sleep(0.5)  # the settle is already waiting
    try:
        work()
    finally:
        connection.close()


def test_on_postgresql_a_lease_whose_holders_lock_is_gone_is_a_dead_workers_at_once(settings, campaign, queue):
    from storyteller import vendors

    if not vendors.is_postgres():
        pytest.skip("the advisory lock is PostgreSQL's (scripts/with-postgres)")
    node = played(campaign)
    task = tasks().get()
    tasks().update(status=TaskResultStatus.RUNNING, started_at=timezone.now())
    holding = queued.take(task.task_result, campaign.pk, node.pk)
    try:
        assert queued.recover(postturn.run_queued) == 0, "its holder lives: the lock is held"
        other = queued.take(task.task_result, campaign.pk, node.pk)
        assert other is None, "nobody else takes a held campaign, whatever the lease says"
        holding.lock.release()  # as the server does when the holder's process dies
        assert queued.recover(postturn.run_queued) == 1, "at once, not a lease later"
    finally:
        holding._stop.set()
        holding._beating.join()
    task.refresh_from_db()
    assert task.status == TaskResultStatus.READY
