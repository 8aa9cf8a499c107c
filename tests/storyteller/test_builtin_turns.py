"""Turns with the built-in narrator in its own process: a crash fails one turn in words, never anyone else's play."""

import asyncio
import os
import signal
import sys
import time

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.urls import reverse

from campaigns.models import Node, RecorderRun
from storyteller import turns
from storyteller.steps import postturn
from storyteller.consumers import CHUNK_FRAGMENT
from storyteller.context import Action
from storyteller.llm import supervisor
from tests.conftest import make_campaign
from tests.storyteller.test_consumers import connect, frames_until_end, outcome_of

pytestmark = pytest.mark.django_db(transaction=True)

CHUNK = CHUNK_FRAGMENT.split("{}")[0]


@pytest.fixture(autouse=True)
def _restarts_allowed():
    supervisor.allow_restart()
    yield
    supervisor.allow_restart()


@pytest.fixture
def builtin(settings):
    """Nothing configured and nothing answering at the default address: the built-in narrator plays."""
    settings.STORYTELLER_LLM_URL = "http://127.0.0.1:9"  # the discard port: nothing answers
    settings.STORYTELLER_LLM_URL_CONFIGURED = False
    return settings


def use_fake_server(settings, server):
    settings.STORYTELLER_LLM_URL = server.url
    settings.STORYTELLER_LLM_URL_CONFIGURED = True
    settings.STORYTELLER_LLM_API = "ollama"


def use_builtin(settings):
    settings.STORYTELLER_LLM_URL = "http://127.0.0.1:9"
    settings.STORYTELLER_LLM_URL_CONFIGURED = False


async def until_streaming(communicator, words=2, timeout=60):
    """Read frames until ``words`` streamed pieces of the reply have arrived; return the frames."""
    frames, seen = [], 0
    while seen < words:
        frame = await communicator.receive_from(timeout=timeout)
        frames.append(frame)
        seen += frame.startswith(CHUNK)
        assert 'id="turn-outcome"' not in frame, f"the turn ended before it streamed: {frame[-400:]}"
    return frames


async def nodes(campaign):
    return await Node.objects.filter(campaign=campaign).acount()


@sync_to_async
def signed_in(user):
    client = Client()
    client.force_login(user)
    return client


async def test_a_killed_narrator_fails_that_turn_in_words_while_another_persons_turn_streams_on(
    owner, outsider, builtin, fake_ollama
):
    ours = await sync_to_async(make_campaign)(owner, max_output_tokens=400, temperature=0.8)
    theirs = await sync_to_async(make_campaign)(outsider, title="Another story", max_output_tokens=400)
    mine, connected = await connect(ours, owner)
    assert connected
    await mine.send_json_to({"mode": "do", "text": "Tell me, at great length, the whole history of the abbey."})
    await until_streaming(mine)
    before = await nodes(ours)

    # The other person's campaign is narrated by a model server: their turn streams while ours is killed.
    use_fake_server(builtin, fake_ollama)
    fake_ollama.chunk_delay(0.05)
    fake_ollama.script(" The gate creaks." * 60)
    other, connected = await connect(theirs, outsider)
    assert connected
    await other.send_json_to({"mode": "do", "text": "I knock."})
    await until_streaming(other)
    os.kill(supervisor.running().process.pid, signal.SIGKILL)

    frames = await frames_until_end(mine, timeout=30)
    assert outcome_of(frames[-1]) == "failed"
    assert "The built-in narrator stopped unexpectedly" in frames[-1] and "Nothing was saved." in frames[-1]
    assert "Traceback" not in "".join(frames) and "SIGKILL" not in "".join(frames), "its last lines go to the log"
    assert await nodes(ours) == before

    streamed_after = 0
    while True:  # the other turn went on streaming after the kill, and ended as a committed turn
        frame = await other.receive_from(timeout=30)
        streamed_after += frame.startswith(CHUNK)
        if 'id="turn-outcome"' in frame:
            break
    assert streamed_after > 5 and outcome_of(frame) == "committed"
    page = await sync_to_async((await signed_in(outsider)).get)(reverse("play", args=[theirs.pk]))
    assert page.status_code == 200, "pages go on being served"
    await other.disconnect()
    await postturn.settle()

    use_builtin(builtin)
    await mine.send_json_to({"mode": "do", "text": "I try again."})
    frames = await frames_until_end(mine, timeout=120)
    assert outcome_of(frames[-1]) == "committed", "the next turn started a fresh narrator"
    assert await nodes(ours) == before + 2
    await mine.disconnect()
    await postturn.settle()


async def test_three_deaths_in_a_minute_say_so_on_the_page_and_the_settings_page_starts_it_again(owner, builtin):
    campaign = await sync_to_async(make_campaign)(owner, max_output_tokens=400, temperature=0.8)
    communicator, connected = await connect(campaign, owner)
    assert connected
    for _death in range(supervisor.DEATHS):
        await communicator.send_json_to({"mode": "do", "text": "Tell me the whole history of the abbey."})
        await until_streaming(communicator)
        os.kill(supervisor.running().process.pid, signal.SIGKILL)
        frames = await frames_until_end(communicator, timeout=30)
        assert "stopped unexpectedly; Retry, or send again" in frames[-1]

    await communicator.send_json_to({"mode": "do", "text": "And again."})
    frames = await frames_until_end(communicator, timeout=30)
    assert outcome_of(frames[-1]) == "failed"
    assert "stopped unexpectedly 3 times within a minute" in frames[-1]
    assert "Connect Ollama to play now" in frames[-1]
    client = await signed_in(owner)
    banner = (await sync_to_async(client.get)(reverse("narrator_banner", args=[campaign.pk]))).content.decode()
    assert 'data-builtin="refused"' in banner and "3 times within a minute" in banner
    settings_page = (await sync_to_async(client.get)(reverse("model_settings"))).content.decode()
    assert 'data-action="restart-builtin"' in settings_page

    section = (await sync_to_async(client.post)(reverse("restart_builtin"))).content.decode()
    assert 'data-builtin="running"' in section
    await communicator.send_json_to({"mode": "do", "text": "Once more."})
    frames = await frames_until_end(communicator, timeout=120)
    assert outcome_of(frames[-1]) == "committed"
    await communicator.disconnect()
    await postturn.settle()


async def test_a_turn_interrupts_the_running_recording_which_is_asked_again_and_finishes_after(
    owner, builtin, monkeypatch
):
    monkeypatch.setattr(postturn, "STEPS", [postturn.STEPS[0]])  # the recording alone
    campaign = await sync_to_async(make_campaign)(owner, max_output_tokens=40, temperature=0.0)
    log = supervisor.log_path()

    async def quiet(_text):
        pass

    first = await turns.play_turn(campaign.pk, Action(mode="do", text="I light the lantern."), quiet)
    for _tick in range(600):  # the recording has the model
        if supervisor.generating():
            break
        await asyncio.sleep(0.01)
    assert supervisor.generating() and not first.post_turn.done()
    cancelled_before = log.read_text().count("(json) cancelled")

    first_word = []

    async def relay(_text):
        if not first_word:
            first_word.append(first.post_turn.done())

    second = await turns.play_turn(campaign.pk, Action(mode="do", text="I climb the stairs."), relay)
    assert first_word == [False], "the reply's first word came while the recording was still unfinished"
    assert log.read_text().count("(json) cancelled") == cancelled_before + 1, "the recording gave way to the turn"

    await first.post_turn
    run = await RecorderRun.objects.aget(node_id=first.node_id)
    assert run.status == RecorderRun.Status.APPLIED, run.error  # asked again from its start, it finished
    await second.post_turn


async def test_the_app_process_plays_a_builtin_turn_without_loading_llama_cpp(owner, builtin):
    campaign = await sync_to_async(make_campaign)(owner, max_output_tokens=8)
    communicator, connected = await connect(campaign, owner)
    assert connected
    await communicator.send_json_to({"mode": "do", "text": "I wait."})
    frames = await frames_until_end(communicator, timeout=120)
    assert outcome_of(frames[-1]) == "committed"
    await communicator.disconnect()
    await postturn.settle()

    assert "llama_cpp" not in sys.modules
    maps = open(f"/proc/{os.getpid()}/maps").read()
    assert "libllama" not in maps and "libggml" not in maps, "no native llama.cpp code in the app's process"
    assert "libllama" in open(f"/proc/{supervisor.running().process.pid}/maps").read(), "it is in the child's"


async def test_a_cold_turn_says_it_waits_for_the_model_to_load(owner, builtin):
    supervisor.stop()
    campaign = await sync_to_async(make_campaign)(owner, max_output_tokens=8)
    notices = []

    async def notify(message):
        notices.append(message)

    async def quiet(_text):
        pass

    started = time.monotonic()
    result = await turns.play_turn(campaign.pk, Action(mode="do", text="I wait."), quiet, notify=notify)
    assert result.node_id and time.monotonic() - started < 120
    assert notices == ["Waiting for the built-in narrator to load its model (once after the app starts) before your "
                       "turn starts…"]
    await result.post_turn
