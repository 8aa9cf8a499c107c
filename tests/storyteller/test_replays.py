"""A line played again with another narrator (issue 29), against two real fake servers with different replies.

Server A is the campaign's own (Ollama's API): it narrates the original
line and records both lines (its recorder is a stub that reads the reply:
into the corridor is a move that holds, into the vault one the locked door
refuses, a garbled reply an answer that is not JSON). Server B (an
OpenAI-compatible one, which reports its prompt cache) plays the line again.
"""

import asyncio
import json
import os
import re
import subprocess
import sys
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.management import call_command
from django.urls import reverse

from campaigns import worldfile
from campaigns.models import (Branch, Campaign, ContextSnapshot, Node, RecorderRun, Replay, StateEvent,
                              StateRecord)
from storyteller import replays, turns
from storyteller.llm.fake_server import FakeModelServer
from storyteller.llm.scripted import vector_for
from storyteller.steps import postturn
from tests.campaigns.test_world import document
from tests.conftest import as_author
from tests.storyteller.test_recorder import play

pytestmark = pytest.mark.django_db(transaction=True)

ACTIONS = [f"look around the keep, turn {n}" for n in range(1, 11)]
ORIGINAL = [f"The torches gutter along the old hall, turn {n}, and the dust lies thick on every stone." for n in
            range(1, 11)]
ORIGINAL[2] = "Mara walks into the corridor, her lantern raised."
REPLAYED = list(ORIGINAL)
REPLAYED[1] = "The torches flare along the old hall, turn 2, and the dust lies thick on every single stone."
REPLAYED[2] = "Mara strides into the vault without a word."
REPLAYED[4] = "garbled"
REPLAYED[6] = "Nothing at all like the first telling: a gull cries over the sea."


def event(type, subject="", object="", value=""):
    return {"type": type, "subject": subject, "object": object, "value": value, "narrator_only": False}


class Recorder:
    """Server A's recorder: the events a reply's words call for, as a model that reads it would propose."""

    def reply(self, messages, schema):
        if not schema or "events" not in (schema.get("properties") or {}):
            return None
        recorded = [m["content"] for m in messages if "The turn to record:" in str(m.get("content"))]
        told = recorded[-1].rsplit("Narrator: ", 1)[-1] if recorded else ""
        if "garbled" in told:
            return "Sure! Mara arrives."
        if "corridor" in told:
            return {"events": [event("move", "Mara", "Corridor")]}
        if "vault" in told:
            return {"events": [event("move", "Mara", "Vault")]}
        return {"events": []}

    def embed(self, text):
        return vector_for(text)


@pytest.fixture
def server_a(settings):
    with FakeModelServer(stubs=Recorder()) as server:
        settings.STORYTELLER_LLM_URL = server.url
        settings.STORYTELLER_LLM_URL_CONFIGURED = True
        settings.STORYTELLER_LLM_API = "ollama"
        yield server


@pytest.fixture
def server_b():
    with FakeModelServer() as server:
        yield server


@pytest.fixture
async def keep(owner, server_a):
    return await played_keep(owner, server_a)


async def played_keep(owner, server_a):
    """The Lantern Keep with ten turns played by server A, each recorded."""
    campaign, _ = await sync_to_async(worldfile.create_campaign)(owner, document())
    server_a.script(*ORIGINAL)
    for action in ACTIONS:
        await play(campaign, action)
    await postturn.settle()
    return await Campaign.objects.select_related("head_branch").aget(pk=campaign.pk)


def narration(server):
    return [request.body for request in server.requests
            if request.path in ("/api/chat", "/v1/chat/completions") and not request.body.get("format")
            and not request.body.get("response_format")]


@sync_to_async
def rows_of_the_story():
    """Every row the story holds now, as values: what a replay must leave as it found it."""
    return {model.__name__: {row["id"]: row for row in model.objects.values()}
            for model in (Branch, Node, ContextSnapshot, StateEvent, StateRecord, RecorderRun)}


@sync_to_async
def start(campaign, server, **options):
    return replays.start(campaign, from_depth=1, to_depth=20, model="other-model", url=server.url, api="openai",
                         **options)


async def test_a_ten_turn_replay_makes_a_branch_of_ten_turns_and_leaves_every_row_of_the_line_as_it_was(
        keep, server_b):
    before = await rows_of_the_story()
    server_b.script(*REPLAYED)
    replay = await start(keep, server_b)
    replay = await replays.run(replay.pk)
    assert (replay.status, replay.error) == ("done", "")

    played = [n async for n in Node.objects.filter(branch=replay.branch_id).order_by("depth")]
    assert [(n.depth, n.role) for n in played] == [(d, "player" if d % 2 else "narrator") for d in range(1, 21)]
    assert [n.text for n in played if n.role == "player"] == ACTIONS, "each original action, in order"
    assert [n.text for n in played if n.role == "narrator"] == REPLAYED
    assert {s.model async for s in ContextSnapshot.objects.filter(node__branch=replay.branch_id)} == {"other-model"}
    assert len(narration(server_b)) == 10
    branch = await Branch.objects.aget(pk=replay.branch_id)
    assert (branch.parent_id, branch.fork_depth) == (keep.head_branch_id, 0)

    after = await rows_of_the_story()
    for table, rows in before.items():
        assert {pk: after[table][pk] for pk in rows} == rows, f"a {table} row of the line changed"
    # The replay's recordings are its own: every reply of the new branch was recorded, on the new branch.
    assert await RecorderRun.objects.filter(node__branch=replay.branch_id).acount() == 10
    assert await StateRecord.objects.filter(branch=replay.branch_id).aexists()


async def test_the_compare_page_shows_every_kind_of_difference(keep, server_b, client, owner):
    server_b.script(*REPLAYED)
    replay = await replays.run((await start(keep, server_b)).pk)
    await sync_to_async(client.force_login)(owner)
    url = reverse("replay_compare", args=[keep.pk, replay.pk])
    refused = await sync_to_async(client.get)(url)
    assert refused.status_code == 403, "both lines' states are the author's view"
    await sync_to_async(as_author)(keep)
    page = (await sync_to_async(client.get)(url)).content.decode()

    summary = page.split('id="compare-summary"')[1].split("</section>")[0]
    assert "10 of 10 turns played again" in summary and "6 replies word for word the same" in summary
    assert "The state first differs after turn" in summary and 'href="#turn-3"' in summary
    refused = re.search(r"Refused events per turn</th><td>(.*?)</td><td>(.*?)</td>", summary).groups()
    assert refused == ("0.0", "0.1")
    failed = re.search(r"Recordings that failed \(structured output\)</th><td>(.*?)</td><td>(.*?)</td>",
                       summary).groups()
    assert failed == ("0", "1")
    assert re.search(r"Tokens in, per turn</th><td>\d+</td><td>\d+</td>", summary)
    assert re.search(r"First words, per turn</th><td>\d+ ms</td><td>\d+ ms</td>", summary)

    turn = {n: page.split(f'id="turn-{n}"')[1].split("</section>")[0] for n in range(1, 11)}
    # A close reply is a word diff; a different one is two passages; the same one says so.
    assert "<del>gutter</del> <ins>flare</ins>" in turn[2] and "<ins>single</ins>" in turn[2]
    assert "word-diff" not in turn[7] and "a gull cries over the sea" in turn[7]
    assert "word for word" in turn[1]
    # Events applied and refused, with the reason; the state where it differs.
    assert "move</code> Mara / Corridor — <span class=\"ok\">applied" in turn[3]
    assert "refused: Mara cannot get there" in turn[3] and "iron door is locked" in turn[3]
    assert re.search(r"<th>Where mara is</th><td>corridor</td><td>hall</td>", turn[3])
    assert "diverged" in turn[3][:40] and "diverged" not in turn[2][:40]
    # The recording that failed, in its own words.
    assert "The recording failed:" in turn[5] and "not JSON" in turn[5]
    # Times, tokens and the cache as each server reported it (Ollama does not say; B does).
    assert re.search(r"First words \d+ ms · whole reply \d+ ms · \d+ tokens in, \d+ out", turn[4])
    assert "cache reuse not reported" in turn[4] and re.search(r"\d+ reused from the server&#x27;s cache|"
                                                               r"\d+ reused from the server's cache", turn[4])


async def test_same_prompts_sends_each_original_prompt_byte_for_byte(keep, server_a, server_b):
    originals = narration(server_a)
    assert len(originals) == 10
    server_b.script(*REPLAYED)
    replay = await replays.run((await start(keep, server_b, same_prompts=True)).pk)
    assert replay.status == "done"
    sent = narration(server_b)
    assert [json.dumps(body["messages"]) for body in sent] == [json.dumps(body["messages"]) for body in originals]
    reports = [s.report async for s in ContextSnapshot.objects.filter(node__branch=replay.branch_id)]
    assert all(r["same_prompt"] and "prompt" not in r for r in reports), "no prompt of their own to read back"


async def test_without_same_prompts_the_replay_builds_its_own_context_from_its_own_line(keep, server_a, server_b):
    originals = narration(server_a)
    server_b.script(*REPLAYED)
    await replays.run((await start(keep, server_b)).pk)
    sent = narration(server_b)
    assert sent[0]["messages"] == originals[0]["messages"], "the first turn follows the same story"
    assert "Mara strides into the vault" in json.dumps(sent[3]["messages"]), "later ones the replay's own replies"
    assert "Mara strides into the vault" not in json.dumps(originals[3]["messages"])


async def test_a_stopped_replay_keeps_its_turns_and_resumes_without_playing_one_twice(keep, server_b):
    server_b.script(*REPLAYED)
    server_b.chunk_delay(0.05)
    replay = await start(keep, server_b)
    task = replays.schedule(replay.pk)
    await until(lambda: Node.objects.filter(branch=replay.branch_id).acount(), 4)
    await sync_to_async(replays.stop)(replay)
    stopped = await task
    assert stopped.status == "stopped"
    kept = await Node.objects.filter(branch=replay.branch_id).acount()
    assert 4 <= kept < 20 and kept % 2 == 0, "the turn in progress saved nothing"

    server_b.chunk_delay(0)
    await sync_to_async(replays.resume)(stopped)
    done = await replays.run(replay.pk)
    assert done.status == "done"
    texts = [n.text async for n in Node.objects.filter(branch=replay.branch_id, role="player").order_by("depth")]
    assert texts == ACTIONS


async def until(count, at_least, timeout=60):
    """Wait until ``count()`` (awaitable) reaches ``at_least``, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while await count() < at_least:
        assert time.monotonic() < deadline, f"still below {at_least} after {timeout} s"
        await asyncio.sleep(0.02)


async def test_the_story_refuses_a_turn_while_a_replay_plays_and_says_why(keep, server_b):
    await start(keep, server_b)
    with pytest.raises(turns.TurnFailed) as refused:
        await play(keep, "open the door")
    assert str(refused.value) == turns.REPLAY_PLAYING


@pytest.mark.parametrize("options,words", [
    ({"from_depth": 1, "to_depth": 40}, "The line ends at turn 10 (depth 20)"),
    ({"from_depth": 21, "to_depth": 20}, "There is no player action from depth 21 to 20"),
    ({"from_depth": 1, "to_depth": 20, "api": "grpc"}, "The API is 'grpc'"),
    ({"from_depth": 1, "to_depth": 20, "model": " "}, "Name the model"),
])
async def test_a_replay_that_cannot_be_played_is_refused_in_words_and_writes_nothing(keep, options, words):
    branches = await Branch.objects.acount()
    with pytest.raises(replays.ReplayRefused) as refused:
        await sync_to_async(replays.start)(keep, **{"model": "other", **options})
    assert words in str(refused.value)
    assert await Branch.objects.acount() == branches and not await Replay.objects.aexists()


async def test_same_prompts_of_turns_played_before_prompts_were_kept_is_refused(keep, server_b):
    snapshot = await ContextSnapshot.objects.aget(node__depth=6)
    del snapshot.report["prompt"]  # as a reply played before issue 27 kept its prompt
    await snapshot.asave()
    with pytest.raises(replays.ReplayRefused) as refused:
        await start(keep, server_b, same_prompts=True)
    assert "Turn 3's prompt cannot be read back as it was sent" in str(refused.value)


async def test_the_branches_page_starts_shows_and_stops_a_replay(keep, server_b, async_client, owner, outsider):
    await async_client.aforce_login(owner)
    page = (await async_client.get(reverse("branches", args=[keep.pk]))).content.decode()
    assert 'id="replays"' in page and "Play a line again with another narrator" in page
    server_b.chunk_delay(0.05)
    server_b.script(*REPLAYED)
    answer = await async_client.post(reverse("replay_start", args=[keep.pk]), {
        "branch": keep.head_branch_id, "first": 1, "last": 10, "model": "other-model", "url": server_b.url,
        "api": "openai"}, headers={"HX-Request": "true"})
    assert answer.status_code == 200
    replay = await Replay.objects.aget()
    assert f'id="replay-{replay.pk}"' in answer.content.decode() and 'hx-trigger="every 1s"' in answer.content.decode()
    await until(lambda: Node.objects.filter(branch=replay.branch_id).acount(), 2)
    fragment = (await async_client.get(reverse("replay_list", args=[keep.pk]), headers={"HX-Request": "true"})).content.decode()
    assert re.search(r'class="replay-progress">\d+ of 10</span> · Playing', fragment)
    stopped = await async_client.post(reverse("replay_stop", args=[keep.pk, replay.pk]), headers={"HX-Request": "true"})
    assert "Stopped" in stopped.content.decode()
    await replays._tasks[replay.pk]
    # While a live process still lets the stopped turn go, Resume waits for it (set here as the run leaves it
    # mid-stop: whether the page's answer still found it there is a race with the run's ending).
    await Replay.objects.filter(pk=replay.pk).aupdate(runner=os.getpid())
    with pytest.raises(replays.ReplayRefused, match="still stopping"):
        await sync_to_async(replays.resume)(await Replay.objects.aget(pk=replay.pk))
    await Replay.objects.filter(pk=replay.pk).aupdate(runner=None)
    listed = (await async_client.get(reverse("replay_list", args=[keep.pk]))).content.decode()
    assert "Stopping…" not in listed and 'data-action="resume-replay"' in listed
    polled = await async_client.get(reverse("replay_list", args=[keep.pk]) + "?while=playing",
                                    headers={"HX-Request": "true"})
    assert polled.headers.get("HX-Refresh") == "true", "a replay that has ended reloads the page"
    branches = (await async_client.get(reverse("branches", args=[keep.pk]))).content.decode()
    assert f'data-branch="{replay.branch_id}"' in branches and "played again by other-model" in branches

    # A refusal keeps the form and says what to change.
    refused = await async_client.post(reverse("replay_start", args=[keep.pk]), {
        "branch": keep.head_branch_id, "first": 3, "last": 30, "model": "m"}, headers={"HX-Request": "true"})
    assert refused.status_code == 422 and "The line ends at turn 10" in refused.content.decode()
    backwards = await async_client.post(reverse("replay_start", args=[keep.pk]), {
        "branch": keep.head_branch_id, "first": 5, "last": 2, "model": "m"}, headers={"HX-Request": "true"})
    assert backwards.status_code == 422 and "The last turn comes before the first" in backwards.content.decode()

    # The wrong method, and another person's campaign.
    assert (await async_client.get(reverse("replay_start", args=[keep.pk]))).status_code == 405
    assert (await async_client.post(reverse("replay_list", args=[keep.pk]))).status_code == 405
    await async_client.aforce_login(outsider)
    for name, args in (("replay_compare", [keep.pk, replay.pk]), ("replay_list", [keep.pk]),
                       ("branches", [keep.pk])):
        assert (await async_client.get(reverse(name, args=args))).status_code == 404
    for name, args in (("replay_stop", [keep.pk, replay.pk]), ("replay_resume", [keep.pk, replay.pk]),
                       ("replay_start", [keep.pk])):
        assert (await async_client.post(reverse(name, args=args))).status_code == 404


def test_the_command_replays_with_the_same_prompts_and_prints_the_comparison_per_turn(owner, server_a, server_b,
                                                                                       capsys):
    keep = async_to_sync(played_keep)(owner, server_a)
    capsys.readouterr()
    server_b.script(*REPLAYED[1:4])
    call_command("replay", "--campaign", str(keep.pk), "--from-depth", "3", "--to-depth", "8", "--model",
                 "other-model", "--url", server_b.url, "--api", "openai", "--same-prompts", "--json")
    printed = json.loads(capsys.readouterr().out)
    assert [turn["turn"] for turn in printed["turns"]] == [2, 3, 4]
    assert printed["summary"]["played"] == 3 and printed["summary"]["first_divergent_turn"] == 3
    sent = [body["messages"] for body in narration(server_b)]
    assert [json.dumps(m) for m in sent] == [json.dumps(m) for m in
                                             [body["messages"] for body in narration(server_a)][1:4]]
    assert printed["turns"][1]["replay"]["events_refused"][0]["reason"].startswith("Mara cannot get there")
    assert printed["turns"][1]["state_differences"] == [{"what": "Where mara is", "original": "corridor",
                                                         "replay": "hall"}]
    assert all(turn["replay"]["cached_tokens"] is not None for turn in printed["turns"])


async def test_the_app_picks_up_a_replay_whose_process_ended_and_leaves_one_a_live_process_plays(keep, server_b):
    server_b.script(*REPLAYED)
    replay = await start(keep, server_b)
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        await Replay.objects.filter(pk=replay.pk).aupdate(runner=alive.pid)
        await replays.resume_unfinished()
        assert replay.pk not in replays._tasks, "another live process plays it"
        assert (await replays.run(replay.pk)).status == "running", "nor does a run here take it over"
        assert not await Node.objects.filter(branch=replay.branch_id).aexists()
    finally:
        alive.kill()
        alive.wait()
    await Replay.objects.filter(pk=replay.pk).aupdate(runner=ended.pid)
    await replays.resume_unfinished()
    done = await replays._tasks[replay.pk]
    assert (done.status, done.runner) == ("done", None)
    assert await Node.objects.filter(branch=replay.branch_id).acount() == 20


async def test_a_click_played_on_the_line_is_done_again_on_the_replays_line(owner, server_a, server_b):
    """A turn played from Here or the map (issue 24) is its words and its typed events: the replay does both."""
    from storyteller.context import Action

    campaign, _ = await sync_to_async(worldfile.create_campaign)(owner, document())
    server_a.script("Edrin walks into the corridor.", "The corridor is cold.")
    click = await sync_to_async(turns.click_action)(campaign.pk, "go", exit="exit:hall:corridor")
    for action in (click, Action(mode="do", text="listen at the iron door")):
        result = await turns.play_turn(campaign.pk, action, lambda _text: asyncio.sleep(0))
        await result.post_turn
    await postturn.settle()
    server_b.script("Edrin steps through to the corridor.", "Only the wind.")
    replay = await sync_to_async(replays.start)(campaign, from_depth=1, to_depth=4, model="other-model",
                                                url=server_b.url, api="openai")
    replay = await replays.run(replay.pk)
    assert (replay.status, replay.error) == ("done", "")
    moved = [(e.payload["type"], e.payload["object"], e.status) async for e in StateEvent.objects.filter(
        node__branch=replay.branch_id, node__depth=1, source=StateEvent.Source.PLAYER).order_by("id")]
    assert ("move", "corridor", "applied") in moved, moved
    player = await Node.objects.aget(branch=replay.branch_id, depth=1)
    assert player.text == click.text
