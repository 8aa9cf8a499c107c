"""The demo's first three turns, narrated by the built-in narrator, played again by llama-cpp-python's own server
(OpenAI-compatible, the suite's real one) and compared (issue 29)."""

import json

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from django.urls import reverse

from campaigns import worldfile
from campaigns.models import ContextSnapshot, Node, RecorderRun
from storyteller import comparing, replays, turns
from storyteller.context import Action
from storyteller.llm import supervisor
from storyteller.management.commands.seed_demo import DEMO_WORLD
from storyteller.steps import postturn
from tests.conftest import as_author

pytestmark = pytest.mark.django_db(transaction=True)

REPLY_TOKENS = 40
ACTIONS = ("look along the quay", "walk up the lane to Mara's cottage", "knock at the door")


@pytest.fixture
async def demo(owner, settings, llama_cpp_server):
    """The demo played three turns by the built-in narrator (nothing configured, nothing at the default address)."""
    settings.STORYTELLER_LLM_URL = "http://127.0.0.1:9"  # the discard port: nothing answers
    settings.STORYTELLER_LLM_URL_CONFIGURED = False
    settings.STORYTELLER_RECORDER_TIMEOUT = 600
    settings.STORYTELLER_LLM_TIMEOUT = 600
    supervisor.allow_restart()
    campaign, _ = await sync_to_async(worldfile.create_campaign)(
        owner, json.loads(DEMO_WORLD.read_text()), context_token_budget=4096, max_output_tokens=REPLY_TOKENS)

    async def relay(_):
        pass

    for action in ACTIONS:
        await turns.play_turn(campaign.pk, Action(mode="do", text=action), relay)
        await postturn.settle()
    yield campaign
    await postturn.settle()
    llama_cpp_server.check_running()


async def test_the_demo_replayed_by_a_real_server_is_compared_turn_by_turn(demo, owner, llama_cpp_server):
    replay = await sync_to_async(replays.start)(
        demo, from_depth=1, to_depth=6, model="smollm2", url=llama_cpp_server.url, api="openai", temperature=0.0)
    replay = await replays.run(replay.pk)
    assert (replay.status, replay.error) == ("done", "")
    replies = [n async for n in Node.objects.filter(branch=replay.branch_id, role="narrator").order_by("depth")]
    assert len(replies) == 3 and all(n.text.strip() for n in replies)
    assert {s.api async for s in ContextSnapshot.objects.filter(node__in=replies)} == {"openai"}
    assert await RecorderRun.objects.filter(node__in=replies).acount() == 3, "each replayed reply was recorded"

    summary, rows = await sync_to_async(
        lambda: comparing.compare(type(replay).objects.select_related("branch").get(pk=replay.pk)))()
    assert summary.played == 3 and [row.action for row in rows] == list(ACTIONS)
    for row in rows:
        assert row.original.model and row.original.model != row.replay.model
        assert row.replay.duration_ms and row.replay.tokens_in and row.replay.tokens_out
        assert row.original.first_word_ms is not None and row.replay.first_word_ms is not None
    client = AsyncClient()
    await client.aforce_login(owner)
    await sync_to_async(as_author)(demo)  # the compare page is the author's view
    page = (await client.get(reverse("replay_compare", args=[demo.pk, replay.pk]))).content.decode()
    assert "3 of 3 turns played again" in page and 'id="turn-3"' in page and "smollm2" in page
