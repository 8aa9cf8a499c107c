"""On PostgreSQL, one campaign's story keeps the order SQLite's IMMEDIATE transactions give it (issue 31).

Real PostgreSQL only (scripts/with-postgres; scripts/test's second pass): each racer is a thread with a
connection of its own, committing for real (``transactional_db``), and "another process" is a connection
that no code of this process knows of, or a child process killed with SIGKILL.
"""

import asyncio
import os
import signal
import subprocess
import sys
import threading

import pytest
from django.db import connection, connections, transaction

from campaigns import locks, playing, story
from campaigns.models import Campaign, Node
from storyteller import vendors
from tests.campaigns.test_lineage import act, reply
from tests.conftest import make_campaign

pytestmark = [pytest.mark.skipif(not vendors.is_postgres(), reason="PostgreSQL only (scripts/with-postgres)"),
              pytest.mark.django_db(transaction=True)]

ACTION = story.PlayerAction(mode="do", text="ring the bell", tokens=3)


def in_thread(work):
    """Run ``work()`` on a thread of its own (its own database connection); return (thread, outcome dict)."""
    outcome = {}

    def run():
        try:
            outcome["value"] = work()
        except Exception as error:  # noqa: BLE001 - the refusal under test is an outcome, not a crash
            outcome["error"] = error
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


@pytest.fixture
def campaign(owner):
    return act(act(make_campaign(owner), "open the gate"), "climb the stair")


def test_two_turns_racing_from_one_head_give_one_turn_and_one_refusal(campaign):
    head = (campaign.head_branch_id, campaign.head_depth)
    first_in, let_go = threading.Event(), threading.Event()

    def first():
        with transaction.atomic():
            node = story.commit_turn(campaign.pk, head, ACTION, reply("The bell rings."))
            first_in.set()
            let_go.wait(10)  # the second turn arrives while this one has not committed
        return node.pk

    thread_a, a = in_thread(first)
    assert first_in.wait(10)
    thread_b, b = in_thread(lambda: story.commit_turn(campaign.pk, head, ACTION, reply("It rings twice.")).pk)
    thread_b.join(0.5)
    assert thread_b.is_alive(), "the second commit must wait for the campaign's lock, not write beside the first"
    let_go.set()
    thread_a.join(10)
    thread_b.join(10)
    assert "value" in a and isinstance(b.get("error"), story.StoryMovedOn)
    campaign.refresh_from_db()
    assert (campaign.head_depth, Node.objects.get(pk=a["value"]).text) == (6, "The bell rings.")
    assert not Node.objects.filter(campaign=campaign, text="It rings twice.").exists()


def test_two_undos_at_once_step_back_two_turns_not_one(campaign):
    """Without the row lock the second undo reads the head the first is moving and writes the same depth."""
    first_in, let_go = threading.Event(), threading.Event()

    def first():
        with transaction.atomic():
            story.undo(Campaign.objects.get(pk=campaign.pk))
            first_in.set()
            let_go.wait(10)

    thread_a, _ = in_thread(first)
    assert first_in.wait(10)
    thread_b, b = in_thread(lambda: story.undo(Campaign.objects.get(pk=campaign.pk)))
    thread_b.join(0.5)
    assert thread_b.is_alive()
    let_go.set()
    thread_a.join(10)
    thread_b.join(10)
    assert b == {"value": True}
    campaign.refresh_from_db()
    assert campaign.head_depth == 0


def test_another_campaign_never_waits_for_this_ones_lock(campaign, owner):
    other = make_campaign(owner, title="Elsewhere")
    first_in, let_go = threading.Event(), threading.Event()

    def first():
        with transaction.atomic():
            locks.story(campaign.pk)
            first_in.set()
            let_go.wait(10)

    thread_a, _ = in_thread(first)
    assert first_in.wait(10)
    thread_b, b = in_thread(lambda: act(Campaign.objects.get(pk=other.pk), "knock").head_depth)
    thread_b.join(5)
    let_go.set()
    thread_a.join(10)
    assert b == {"value": 2}


def test_the_story_lock_is_refused_outside_a_transaction(campaign):
    with pytest.raises(transaction.TransactionManagementError):
        locks.story(campaign.pk)


def test_a_lore_change_is_refused_while_another_process_plays_a_turn(campaign):
    elsewhere = locks.Held("turn", campaign.pk)  # a connection no registry of this process knows of
    assert elsewhere.acquire(shared=True)
    try:
        assert playing.playing(campaign.pk)
        with pytest.raises(playing.TurnInProgress, match="A turn is being played"), playing.lore_change(campaign.pk):
            pytest.fail("the change ran during another process's turn")
    finally:
        elsewhere.release()
    assert not playing.playing(campaign.pk)
    with playing.lore_change(campaign.pk):
        pass


def test_a_turn_waits_for_a_lore_change_in_another_process_and_then_plays(campaign):
    elsewhere = locks.Held("turn", campaign.pk)
    assert elsewhere.acquire(shared=False)

    async def play(wait):
        async with playing.turn(campaign.pk, wait=wait):
            return playing.playing(campaign.pk)

    with pytest.raises(playing.TurnInProgress, match="still being changed"):
        asyncio.run(play(0.3))
    elsewhere.release()
    assert asyncio.run(play(0.3)) is True
    assert not playing.playing(campaign.pk)


def test_turns_in_two_processes_do_not_exclude_each_other(campaign):
    elsewhere = locks.Held("turn", campaign.pk)
    assert elsewhere.acquire(shared=True)
    try:
        async def play():
            async with playing.turn(campaign.pk, wait=0.3):
                return True

        assert asyncio.run(play())
    finally:
        elsewhere.release()


HOLDER = """
import sys, time, psycopg
with psycopg.connect(sys.argv[1]) as conn:
    conn.execute("SELECT pg_advisory_lock_shared(%s, %s)", (1, int(sys.argv[2])))
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_process_killed_mid_turn_leaves_no_lock_behind(campaign):
    params = connection.get_connection_params()
    dsn = (f"host={params['host']} port={params['port']} dbname={params['dbname']} user={params['user']}"
           f" password={params['password']}")
    child = subprocess.Popen([sys.executable, "-c", HOLDER, dsn, str(campaign.pk)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(playing.TurnInProgress), playing.lore_change(campaign.pk):
            pass
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
    for _ in range(100):  # the server notices the closed socket at once; allow it a moment
        if not playing.playing(campaign.pk):
            break
        threading.Event().wait(0.05)
    with playing.lore_change(campaign.pk):
        pass
