"""A brought-in story is read into the world state only when the person asks, its cost said first."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from campaigns.models import Campaign, RecorderRun
from storyteller.tavern import files, importing
from storyteller.tavern import plan as plans

from . import make

pytestmark = pytest.mark.django_db(transaction=True)


def _bring(owner, campaign):
    plan = plans.make([files.read("mara.jsonl", make.mara_chat(), 10**7)], "Wren")
    importing.add(owner, campaign, plan)


async def test_nothing_records_an_imported_history_until_asked_then_each_reply_is_read(owner, campaign,
                                                                                       narrator_server, async_client):
    await sync_to_async(_bring)(owner, campaign)
    campaign = await Campaign.objects.aget(pk=campaign.pk)
    unread = await sync_to_async(importing.unread)(campaign)
    assert len(unread.nodes) == 3 and unread.done == 0 and unread.prompt_tokens > 3 * importing.RECORDER_READS
    assert await RecorderRun.objects.acount() == 0
    await async_client.aforce_login(owner)
    shown = (await async_client.get(reverse("read_into_state", args=[campaign.pk]))).content.decode()
    assert "3 replies on this line have not been read" in shown and "3 recorder calls" in shown
    narrator_server.script_json(*[{"events": []}] * 3)
    await async_client.post(reverse("read_into_state", args=[campaign.pk]))
    for _ in range(200):
        if not importing.reading(campaign.pk):
            break
        await asyncio.sleep(0.05)
    assert set(await sync_to_async(list)(RecorderRun.objects.values_list("node_id", "status"))) == {
        (node, "applied") for node in unread.nodes}
    after = await sync_to_async(importing.unread)(campaign)
    assert after.nodes == () and after.done == 3


def test_the_reading_counts_its_progress_against_every_brought_in_reply(campaign):
    from django.template.loader import render_to_string

    shown = render_to_string("tavern/_read_story.html", {
        "campaign": campaign, "started": True, "unread": importing.Unread((7, 8), 400, done=3)})
    assert "3 of 5 brought-in replies read" in shown
