"""The post-turn steps continue the narration's own prompt, byte for byte (issue 27), through the real fake server."""

import json
from datetime import UTC, datetime

import pytest
from asgiref.sync import sync_to_async

from campaigns import lineage, notes
from campaigns.models import Campaign, ContextSnapshot, Node
from storyteller import context
from storyteller.context import Action
from storyteller.steps import minds, prompts
from tests.storyteller.test_minds_step import HIDING, kitchen, minds_requests
from tests.storyteller.test_recorder import WORLD, narration, play, recordings

pytestmark = pytest.mark.django_db(transaction=True)


async def test_the_recorder_and_minds_send_the_narrations_messages_then_the_reply_then_one_instruction(
        owner, narrator_server):
    campaign = await sync_to_async(kitchen)(owner)
    narrator_server.script("In the kitchen, Mara slips the iron key into the teapot and hums.")
    narrator_server.script_json({"events": []})
    narrator_server.script_minds(HIDING)
    result = await play(campaign, "I listen at the door.")
    [told] = narration(narrator_server)
    [recording] = recordings(narrator_server)
    [perceived] = minds_requests(narrator_server)
    reply = {"role": "assistant", "content": "In the kitchen, Mara slips the iron key into the teapot and hums."}
    for body, rules in ((recording, "You keep the record of an interactive story."), (perceived, minds.RULES)):
        sent = body["messages"]
        # Byte for byte what the narration sent, as the server received both.
        assert json.dumps(sent[:-2]) == json.dumps(told["messages"])
        assert sent[-2] == reply
        assert sent[-1]["role"] == "user" and sent[-1]["content"].startswith(rules)
        assert len(sent) == len(told["messages"]) + 2
    assert "Player (do): I listen at the door." in recording["messages"][-1]["content"]
    node = await Node.objects.aget(pk=result.node_id)
    assert node.text == reply["content"]


async def test_the_memory_continues_the_prompt_up_to_its_tail_only(campaign, narrator_server):
    for turn in range(7):  # memories are written once the story passes its twelfth depth
        narrator_server.script(f"Passage {turn}: the lantern burns low over the harbour.")
        await play(campaign, f"walk on, step {turn}")
    tails = [s.report["prompt"]["tail_start"] async for s in ContextSnapshot.objects.filter(
        node__campaign=campaign).order_by("node__depth")]
    told, written = [], 0
    for body in narrator_server.bodies("/api/chat"):
        if "format" not in body:
            told.append(body["messages"])
        elif "memory" in body["format"].get("properties", {}):
            written += 1
            # The prompt of the narration just before it, up to its tail, then one message.
            assert json.dumps(body["messages"][:-1]) == json.dumps(told[-1][:tails[len(told) - 1]])
            last = body["messages"][-1]
            assert last["role"] == "user" and "You keep the long-term memory" in last["content"]
            assert "Story excerpt:" in last["content"]
            # The tail (the state's lines, narrator-only ones among them) is never part of what the summariser reads.
            assert told[-1][-1]["content"] not in json.dumps(body["messages"])
    assert written == 2


@sync_to_async
def _build(campaign, text):
    campaign = Campaign.objects.get(pk=campaign.pk)
    return context.build(campaign, lineage.path_of(campaign), Action(mode="do", text=text))


async def test_a_report_reads_back_as_the_messages_it_was_built_from_with_an_authors_note(campaign, narrator_server):
    for turn in range(3):
        narrator_server.script(f"Passage {turn} of the story.")
        await play(campaign, f"step {turn}")
    await sync_to_async(notes.save_note)(campaign, text="Keep the rain falling.", depth=2, interval=1, role="system",
                                         branch_only=False)
    ctx = await _build(campaign, "look at the sky")
    assert ctx.report["author_note"]["index"] is not None
    assert await sync_to_async(context.messages_of)(ctx.report) == ctx.messages
    assert ctx.report["prompt"]["digest"] == context.digest(ctx.messages)


async def test_a_report_that_no_longer_reads_back_the_same_gives_the_steps_their_own_prompts(
        campaign, narrator_server):
    narrator_server.script("The gate opens.")
    result = await play(campaign, "open the gate")
    snapshot = await ContextSnapshot.objects.aget(node_id=result.node_id)
    node = await Node.objects.aget(pk=result.node_id)
    assert await sync_to_async(prompts.narration_of)(node) is not None
    report = snapshot.report
    report["sections"][0]["text"] += " (edited by hand)"
    await ContextSnapshot.objects.filter(pk=snapshot.pk).aupdate(report=report)
    assert await sync_to_async(prompts.narration_of)(node) is None, "the digest no longer matches"
    report["prompt"] = None
    await ContextSnapshot.objects.filter(pk=snapshot.pk).aupdate(report=report)
    assert await sync_to_async(prompts.narration_of)(node) is None, "a report from before issue 27"


async def test_with_own_prompts_each_step_sends_its_rules_as_the_system_message(campaign, narrator_server, settings):
    settings.STORYTELLER_STEP_PROMPTS = "own"
    narrator_server.script("Mara waits in the Crooked Lantern Tavern.")
    narrator_server.script_json(WORLD)
    await play(campaign, "enter the tavern")
    [body] = recordings(narrator_server)
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][0]["content"].startswith("You keep the record of an interactive story.")


STORY = [
    ("enter the tavern", "Mara waits in the Crooked Lantern Tavern.", WORLD, None),
    ("sit with Mara", "Mara pours two cups and says nothing.",
     {"events": [{"type": "add_fact", "subject": "Mara", "object": "", "value": "Mara pours tea for guests.",
                  "narrator_only": False}]},
     {"events": [{"id": "e1", "text": "Mara poured two cups of tea.", "importance": 2, "participants": ["Mara"]}],
      "perceptions": [{"event": "e1", "who": "Mara", "mode": "witnessed", "wording": "I poured the tea."}],
      "beliefs": [{"who": "Mara", "id": "guest", "text": "The stranger means no harm.", "confidence": "likely",
                   "supports": ["e1"]}], "notices": []}),
    ("ask about the key", "\"The key is under the bar,\" Mara whispers.",
     {"events": [{"type": "introduce", "subject": "brass key", "object": "item", "value": "a small brass key",
                  "data": {"holder": "Crooked Lantern Tavern"}, "narrator_only": False}]}, None),
]


async def _played(owner, server, layout, settings):
    """Play STORY with the steps' requests laid out as ``layout``; return every record the steps wrote, as JSON."""
    from campaigns.models import StateRecord
    from tests.conftest import make_campaign

    settings.STORYTELLER_STEP_PROMPTS = layout
    campaign = await sync_to_async(make_campaign)(owner, title="Both ways")
    # The story clock starts at the campaign's creation: the same for both.
    await Campaign.objects.filter(pk=campaign.pk).aupdate(created_at=datetime(2031, 3, 14, 8, 0, tzinfo=UTC))
    for action, reply, recording, perceived in STORY:
        server.script(reply)
        server.script_json(recording)
        if perceived:
            server.script_minds(perceived)
        await play(campaign, action)
    rows = [row async for row in StateRecord.objects.filter(campaign=campaign).order_by("depth", "slot").values(
        "kind", "slot", "subject", "value", "data", "depth", "narrator_only", "retracted", "authority")]
    return json.dumps(rows, sort_keys=True, default=str)


async def test_the_same_scripted_story_keeps_the_same_state_with_either_layout(owner, narrator_server, settings):
    narrator = await _played(owner, narrator_server, "narration", settings)
    own = await _played(owner, narrator_server, "own", settings)
    for recorded in ("Mara pours tea for guests.", "brass key", "I poured the tea.", "The stranger means no harm."):
        assert recorded in narrator
    assert narrator == own


async def test_a_game_masters_narration_is_read_back_with_its_rules_and_notes(owner, narrator_server):
    from tests.storyteller.voices.test_played import game, gm, says
    from tests.storyteller.voices.test_played import play as play_gm

    campaign = await sync_to_async(game)(owner)
    narrator_server.script_gm(gm([("Mara", "she holds the key")]))
    narrator_server.script_characters(says("It is mine, child."))
    narrator_server.script("The kitchen falls quiet.")
    result, _ = await play_gm(campaign)
    [told] = narration(narrator_server)
    node = await Node.objects.aget(pk=result.node_id)
    read = await sync_to_async(prompts.narration_of)(node)
    assert read is not None and json.dumps(read.messages) == json.dumps(told["messages"])
    assert read.reply == {"role": "assistant", "content": "The kitchen falls quiet."}, "the narration, as history has it"


@pytest.fixture
async def one_cache(settings):
    """A fake Ollama with one prompt cache: its prompt_eval_count is what such a server reads of each prompt."""
    from tests.fake_ollama import serving

    async with serving(settings, cache_slots=1) as server:
        yield server


async def test_the_inspector_shows_each_request_of_a_reply_and_what_the_server_read(campaign, owner, one_cache):
    from django.test import Client
    from django.urls import reverse

    from campaigns.models import ModelRequest

    one_cache.script("Mara waits in the Crooked Lantern Tavern.")
    one_cache.script_json(WORLD)
    result = await play(campaign, "enter the tavern")
    rows = [row async for row in ModelRequest.objects.filter(node_id=result.node_id)]
    assert [row.kind for row in rows] == ["recorder", "minds"]
    [recording] = recordings(one_cache)
    instruction = recording["messages"][-1]["content"]
    for row in rows:
        assert row.shared_messages == len(recording["messages"]) - 1, "every message but the step's own"
        assert 0 < row.new_tokens < row.prompt_tokens
        assert row.source.startswith("Ollama's prompt_eval_count")
    # The fake counts words: with one cache the recorder read its instruction and little else.
    assert len(instruction.split()) <= rows[0].server_read <= len(instruction.split()) + 20
    client = Client()
    await sync_to_async(client.force_login)(owner)
    page = (await sync_to_async(client.get)(reverse("inspector", args=[campaign.pk, result.node_id]))).content.decode()
    table = page[page.index('id="model-request-table"'):page.index("</table>", page.index('id="model-request-table"'))]
    assert 'data-request="narration"' in table and 'data-request="recorder"' in table
    assert f"<td data-read>{rows[0].server_read}</td>" in table and f"<td data-new>{rows[0].new_tokens}</td>" in table


async def test_a_step_whose_continued_request_would_leave_it_less_than_half_its_answer_limit_uses_its_own_prompt(
        owner, narrator_server, monkeypatch):
    from campaigns.models import ModelRequest, RecorderRun
    from storyteller import tokens
    from storyteller.llm import caching
    from storyteller.steps import recorder

    campaign = await sync_to_async(kitchen)(owner)
    # A recorder that may answer in twice the window: no continued request leaves it half of that.
    monkeypatch.setattr(recorder, "MAX_TOKENS", 2 * campaign.context_token_budget)
    narrator_server.script("In the kitchen, Mara slips the iron key into the teapot and hums.")
    narrator_server.script_json({"events": [{"type": "add_fact", "subject": "Mara", "object": "",
                                             "value": "Mara hums while she works.", "narrator_only": False}]})
    narrator_server.script_minds(HIDING)
    result = await play(campaign, "I listen at the door.")
    [told] = narration(narrator_server)
    [recording] = recordings(narrator_server)
    [perceived] = minds_requests(narrator_server)
    assert [m["role"] for m in recording["messages"]] == ["system", "user"]
    assert recording["messages"][0]["content"].startswith("You keep the record of an interactive story.")
    assert json.dumps(perceived["messages"][:-2]) == json.dumps(told["messages"]), "the minds step still fits"
    assert (await RecorderRun.objects.aget(node_id=result.node_id)).status == RecorderRun.Status.APPLIED
    kept = {row.kind: row.shared_messages async for row in ModelRequest.objects.filter(node_id=result.node_id)}
    assert kept == {"recorder": 0, "minds": len(told["messages"]) + 1}

    # At the boundary: a request of exactly the room continues the narration, one token more does not.
    node = await Node.objects.aget(pk=result.node_id)
    read = await sync_to_async(prompts.narration_of)(node)
    continued = prompts.continuing(read, "Rules.", "Input.", room=10**6)
    size = caching.prompt_tokens(continued, tokens.count)
    assert prompts.continuing(read, "Rules.", "Input.", room=size) == continued
    assert prompts.continuing(read, "Rules.", "Input.", room=size - 1) == prompts.own("Rules.", "Input.")
    # Near the window's edge the step answers in what the window leaves after its prompt.
    window = campaign.context_token_budget
    assert prompts.room_for(campaign, 800) == window - 400
    assert prompts.answer_limit(campaign, continued, 800) == min(800, window - size)
    assert prompts.answer_limit(campaign, continued, 10**6) == window - size


async def test_a_report_with_fired_lorebook_entries_reads_back_as_its_messages(campaign, narrator_server):
    from knowledge import importer, worldinfo

    narrator_server.script("The dragon's shadow crosses the abbey.")
    await play(campaign, "look up at the sky")
    book = worldinfo.read({"entries": {"0": {"uid": 0, "key": ["dragon"], "content": "{{char}} fears the dragon."},
                                       "1": {"uid": 1, "constant": True, "content": "The abbey is old."}}}, "Abbey")
    await sync_to_async(importer.import_keyed)(campaign, "Abbey.json", book, "inspiration")
    ctx = await _build(campaign, "A dragon!")
    assert any(s.key.startswith("lorebook") for s in ctx.sections), "the entries fired"
    assert await sync_to_async(context.messages_of)(ctx.report) == ctx.messages
