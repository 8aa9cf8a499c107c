"""The post-turn worker's status on the play page (issue 4 item 7, seed 000 §51).

Through the real fake model server: a failing step shows as failed (never as
up to date), the accepted turn is untouched, a retry runs the step again, and
a step in progress shows as running.
"""

import asyncio

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.test import AsyncClient
from django.urls import reverse

from campaigns import lineage
from campaigns.models import Node, RecorderRun
from memory.models import Memory, MemoryRun
from storyteller import postturn
from tests.campaigns.test_lineage import act, texts
from tests.memory.conftest import play_to

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HTTP_HX_REQUEST": "true"}
NARRATOR = "qwen2.5:3b-instruct"


def head(campaign):
    campaign.refresh_from_db()
    return lineage.path_of(campaign).nodes().get(depth=campaign.head_depth)


def status_of(client, campaign):
    return client.get(reverse("worker_status", args=[campaign.pk]), **HTMX).content.decode()


def test_a_malformed_memory_summary_shows_failed_never_up_to_date_and_a_retry_runs_it_again(
        client_of, campaign, narrator_server):
    play_to(campaign, 12)  # two blocks of six actions are due
    node = head(campaign)
    story = texts(campaign)
    narrator_server.script_json({"events": []}, "this is not JSON {")
    async_to_sync(postturn.run)(node.pk)

    page = status_of(client_of, campaign)
    assert 'data-worker="failed"' in page and "Up to date" not in page
    assert "Memory step failed: No memory of depths 0–5" in page and "not JSON" in page
    assert 'data-action="retry-worker"' in page and "every 1s" not in page
    assert RecorderRun.objects.get(node=node).status == "applied", "the other steps still ran"
    assert texts(campaign) == story and head(campaign) == node, "the accepted turn is untouched"
    assert not Memory.objects.filter(campaign=campaign).exists()

    narrator_server.script_json({"memory": "Aldric reached the gate."}, {"memory": "Aldric waited in the rain."})
    page = client_of.post(reverse("retry_worker", args=[campaign.pk]), **HTMX).content.decode()
    assert 'data-worker="done"' in page and "Up to date." in page and "failed" not in page
    assert page.count('hx-swap-oob="true"') == 6, "the state, memory, plot, world, map and items panels load again"
    run = MemoryRun.objects.get(node=node)
    assert (run.status, run.written, run.attempts) == ("written", 2, 2)
    assert Memory.objects.filter(campaign=campaign).count() == 2
    assert texts(campaign) == story


def test_a_model_server_error_shows_every_failed_step_and_the_turn_stands(client_of, campaign, narrator_server):
    play_to(campaign, 12)
    node = head(campaign)
    nodes = Node.objects.count()
    narrator_server.not_found(NARRATOR, persistent=True)
    async_to_sync(postturn.run)(node.pk)

    page = status_of(client_of, campaign)
    assert 'data-worker="failed"' in page
    assert "Recording failed:" in page and "Memory step failed:" in page and "not found" in page
    assert Node.objects.count() == nodes and head(campaign) == node

    narrator_server.clear_failures()
    narrator_server.script_json({"events": []}, {"memory": "Aldric reached the gate."}, {"memory": "It rained."})
    page = client_of.post(reverse("retry_worker", args=[campaign.pk]), **HTMX).content.decode()
    assert 'data-worker="done"' in page
    assert RecorderRun.objects.get(node=node).attempts == 2 and MemoryRun.objects.get(node=node).attempts == 2


def test_an_earlier_reply_whose_recording_failed_stays_a_failure_until_a_retry_records_it(
        client_of, campaign, narrator_server):
    from campaigns.state import record_failure

    act(campaign, "enter the tavern", "Mara waits by the fire.")
    earlier = head(campaign)
    record_failure(earlier, "The model server is not running.", attempt=1)
    act(campaign, "wait")
    async_to_sync(postturn.run)(head(campaign).pk)  # the next reply is recorded (nothing changed)

    page = status_of(client_of, campaign)
    assert 'data-worker="failed"' in page and "Up to date" not in page
    assert "Recording of turn 1 failed: The model server is not running." in page

    narrator_server.script_json({"events": [
        {"type": "introduce", "subject": "Mara", "object": "character", "value": "", "narrator_only": False}]})
    page = client_of.post(reverse("retry_worker", args=[campaign.pk]), **HTMX).content.decode()
    assert 'data-worker="done"' in page
    run = RecorderRun.objects.get(node=earlier)
    assert (run.status, run.attempts) == ("applied", 2)
    assert "Mara" in client_of.get(reverse("state_panel", args=[campaign.pk]), **HTMX).content.decode()


def test_a_reply_the_worker_has_not_finished_offers_to_run_it_rather_than_saying_up_to_date(client_of, campaign):
    assert 'data-worker="none"' in status_of(client_of, campaign), "the opening is not a reply"
    act(campaign, "look around")  # committed with no worker after it, as a restart mid-work leaves it
    page = status_of(client_of, campaign)
    assert 'data-worker="unfinished"' in page and "Up to date" not in page
    assert "recording, memory step, summary step" in page and 'data-action="retry-worker"' in page


async def test_the_status_says_running_while_a_step_waits_for_the_model_and_no_write_lock_is_held(
        campaign, narrator_server, owner):
    node = await sync_to_async(lambda: head(act(campaign, "look around", "Mara waits by the fire.")))()
    narrator_server.stall(3)  # the recorder's request waits before it is answered
    worker = postturn.schedule(campaign.pk, node.pk)
    for _ in range(500):
        if narrator_server.bodies("/api/chat"):
            break
        await asyncio.sleep(0.01)

    status = await sync_to_async(postturn.status)(campaign)
    assert (status.state, status.text) == ("running", "Recording what the reply changed…")
    client = AsyncClient()
    await client.aforce_login(owner)
    page = (await client.get(reverse("worker_status", args=[campaign.pk]), headers={"HX-Request": "true"})
            ).content.decode()
    assert 'data-worker="running"' in page and "Recording what the reply changed…" in page
    assert 'hx-trigger="every 1s"' in page, "a running status polls until the worker is done"

    # Nothing holds SQLite's write lock across the model call: the next turn commits at once.
    started = asyncio.get_running_loop().time()
    await sync_to_async(act)(campaign, "walk on", "The road bends.")
    assert asyncio.get_running_loop().time() - started < 1.0 and not worker.done()

    await worker
    assert await RecorderRun.objects.filter(node=node, status="applied").aexists()
    assert (await sync_to_async(postturn.status)(campaign)).state == "unfinished", "no worker ran after 'walk on'"


def test_a_poll_that_finds_the_worker_finished_loads_the_panels_again_and_a_plain_read_does_not(client_of, campaign):
    act(campaign, "look around")
    url = reverse("worker_status", args=[campaign.pk])
    assert 'id="memory-panel"' not in client_of.get(url, **HTMX).content.decode()
    page = client_of.get(url + "?was=running", **HTMX).content.decode()
    assert all(f'id="{panel}"' in page for panel in ("state-panel", "memory-panel", "plot-panel"))
    assert page.count('hx-swap-oob="true"') == 6


def test_the_play_page_loads_the_worker_status(client_of, campaign):
    page = client_of.get(reverse("play", args=[campaign.pk])).content.decode()
    assert f'hx-get="{reverse("worker_status", args=[campaign.pk])}"' in page


def test_worker_views_refuse_the_wrong_method_and_send_a_plain_request_to_the_play_page(client_of, campaign):
    assert client_of.post(reverse("worker_status", args=[campaign.pk])).status_code == 405
    assert client_of.get(reverse("retry_worker", args=[campaign.pk])).status_code == 405
    response = client_of.get(reverse("worker_status", args=[campaign.pk]))
    assert response.status_code == 302 and response.url == reverse("play", args=[campaign.pk])


def test_worker_views_are_404_for_another_user_and_need_a_sign_in(client, campaign, outsider):
    act(campaign, "look around")
    urls = [("get", reverse("worker_status", args=[campaign.pk])),
            ("post", reverse("retry_worker", args=[campaign.pk]))]
    for method, url in urls:
        response = getattr(client, method)(url, **HTMX)
        assert response.status_code == 302 and response.url.startswith(reverse("login"))
    client.force_login(outsider)
    for method, url in urls:
        assert getattr(client, method)(url, **HTMX).status_code == 404
    assert not RecorderRun.objects.exists(), "nothing was run for the outsider"
