"""Game-master turns played end to end against the real fake model server (issue 15, phase 3).

Each test plays through ``turns.play_turn`` — the game master's step, the
resolution, each activated character's reply from its brief, the streamed
narration — and reads what the one commit wrote.
"""

import copy
import json

import pytest
from asgiref.sync import sync_to_async

from campaigns import worldfile
from campaigns.models import Campaign, Node, Round, StateEvent
from storyteller import turns
from storyteller.voices import gm as gm_module
from storyteller.context import Action
from tests.campaigns.test_minds import kitchen_document
from tests.storyteller.streaming import while_streaming

pytestmark = pytest.mark.django_db(transaction=True)


def scene_document():
    """The Kitchen with everyone in it: Edrin (the player), Mara and Aldric; the back door to the Yard locked."""
    document = copy.deepcopy(kitchen_document())
    for character in document["characters"]:
        character["place"] = "Kitchen"
    return document


def game(owner, document=None, **fields):
    campaign, _ = worldfile.create_campaign(owner, worldfile.read(json.dumps(document or scene_document()).encode()),
                                            game_master=True, **fields)
    return campaign


async def play(campaign, text="I ask who has the key", *, retry=False, voices=None):
    received = []

    async def relay(chunk):
        received.append(chunk)

    async def on_voice(kind, data):
        if voices is not None:
            voices.append((kind, data))

    result = await turns.play_turn(campaign.pk, Action(mode="do", text=text), relay, retry=retry,
                                   on_voice=on_voice)
    return result, "".join(received)


def gm(activate=(), actors=(), narrate=True, rolls=(), need="", what=""):
    return {"resolve_round": {"actors": list(actors), "elapsed_seconds": 0},
            "activate_characters": [{"who": who, "why": why} for who, why in activate],
            "expand_world": {"need": need, "what": what}, "rolls": list(rolls), "narrate": narrate}


def actor(who, moves_to="", ops=(), ignore_exits=False):
    return {"who": who, "moves_to": moves_to, "ignore_exits": ignore_exits, "item_changes": list(ops),
            "variable_changes": []}


def says(speech, action="", moves_to="", ops=()):
    return {"speech": speech, "action": action, "moves_to": moves_to, "item_changes": list(ops), "lore": ""}


@sync_to_async
def rounds_of(node_id):
    return list(Round.objects.filter(node_id=node_id).order_by("number").values(
        "number", "kind", "activated", "outputs", "briefs", "resolution"))


async def test_a_game_master_turn_plays_rounds_of_voices_then_streams_the_narration(owner, narrator_server):
    campaign = await sync_to_async(game)(owner)
    narrator_server.script_gm(gm([("Mara", "she holds the key"), ("Aldric", "he is suspicious")]))
    narrator_server.script_characters(says("It is mine, child."), says("Hand it over.", "steps closer"))
    narrator_server.script("The kitchen falls quiet.")
    voices = []
    result, streamed = await play(campaign, voices=voices)
    assert streamed == "The kitchen falls quiet."
    [one] = await rounds_of(result.node_id)
    assert one["kind"] == "gm" and one["number"] == 1
    assert [a["who"] for a in one["activated"]] == ["mara", "aldric"]
    assert [(o["speaker"], o["text"]) for o in one["outputs"]] == [
        ("mara", "It is mine, child."), ("aldric", "Hand it over."), ("gm", "The kitchen falls quiet.")]
    assert set(one["briefs"]) == {"mara", "aldric"}
    assert [kind for kind, _ in voices] == ["round", "voice", "voice"]
    node = await Node.objects.select_related("snapshot").aget(pk=result.node_id)
    assert "Mara: “It is mine, child.”" in node.text and node.text.endswith("The kitchen falls quiet.")
    assert node.snapshot.report["voices"]["rounds"][0]["answer"]["activate_characters"][0]["who"] == "Mara"


# --- bounds (WP4 scenario 1, through a played turn) -----------------------------------------------------------------


def gm_prompts(server):
    """Return the last user message of every game-master step the server was asked, in order."""
    return [body["messages"][-1]["content"] for body in server.bodies("/api/chat")
            if isinstance(body.get("format"), dict) and "activate_characters" in body["format"]["properties"]]


async def test_a_turn_stops_at_max_rounds_and_counts_a_round_of_the_players_move_alone(owner, narrator_server):
    campaign = await sync_to_async(game)(owner, max_rounds=2)
    narrator_server.script_gm(gm(narrate=False), gm([("Mara", "she answers")], narrate=False),
                              gm([("Aldric", "never asked")]))
    narrator_server.script_characters(says("Yes?"))
    result, _ = await play(campaign)
    played = await rounds_of(result.node_id)
    assert [(r["number"], [a["who"] for a in r["activated"]]) for r in played] == [(1, []), (2, ["mara"])]
    assert len(gm_prompts(narrator_server)) == 2, "no third step: the player's move alone counted as a round"
    assert "Round 2 of 2 at Kitchen, with:" in gm_prompts(narrator_server)[1]


async def test_activation_past_the_bounds_is_refused_with_the_reason_and_told_to_the_game_master(
        owner, narrator_server):
    document = scene_document()
    document["characters"].append({"name": "Tomas", "description": "a carter", "place": "Hall"})
    campaign = await sync_to_async(game)(owner, document, max_characters=1)
    narrator_server.script_gm(gm([("Mara", "first"), ("Aldric", "second"), ("Edrin", "the player"),
                                  ("Tomas", "away"), ("Ghost", "nobody")], narrate=False), gm())
    narrator_server.script_characters(says("Only me."))
    result, _ = await play(campaign)
    first, second = await rounds_of(result.node_id)
    assert [a["who"] for a in first["activated"]] == ["mara"]
    refused = dict(first["resolution"]["not_activated"])
    assert "at most 1 characters act in one round (max_characters); Mara were activated first" in refused["Aldric"]
    assert "the player's character never acts on its own" in refused["Edrin"]
    assert "Tomas is not with the player" in refused["Tomas"]
    assert "nobody in the story is called 'Ghost'" in refused["Ghost"]
    tail = gm_prompts(narrator_server)[1]
    assert "Not activated (Aldric): at most 1 characters" in tail and "Not activated (Tomas)" in tail
    assert [o["speaker"] for o in first["outputs"]] == ["mara"]


# --- resolve_round through a played turn (WP4 scenario 2) -------------------------------------------------------------


def walled_document():
    """The scene, with the Yard reached only through the locked back door (no way round by the Hall)."""
    document = scene_document()
    document["exits"] = [e for e in document["exits"] if "Yard" not in (e["from"], e["to"]) or e.get("state")]
    return document


@sync_to_async
def world_of(campaign):
    from campaigns import lineage
    from campaigns.state import state_at

    campaign = Campaign.objects.get(pk=campaign.pk)
    state = state_at(lineage.path_of(campaign), campaign)
    return {"mara": state.location_of("mara"), "knife": state.holder_of("knife"),
            "events": list(StateEvent.objects.filter(campaign=campaign, source="world", node__depth__gt=0)
                           .values_list("payload__type", "status"))}


async def test_a_blocked_route_is_refused_and_told_while_the_rounds_item_changes_commit_with_the_turn(
        owner, narrator_server):
    campaign = await sync_to_async(game)(owner, walled_document())
    narrator_server.script_gm(
        gm([("Mara", "she wants out")], [actor("Edrin", ops=[{"op": "take", "item": "knife"}])], narrate=False),
        gm())
    narrator_server.script_characters(says("I am going out.", "tries the back door", moves_to="Yard"))
    result, _ = await play(campaign)
    first, _second = await rounds_of(result.node_id)
    [tried] = first["resolution"]["characters"]
    assert tried["moves_to"] == "Yard" and "back door" in tried["refused"][0][1] and "locked" in tried["refused"][0][1]
    assert "Refused (Mara, actors[1].moves_to): Mara cannot get there" in gm_prompts(narrator_server)[1]
    now = await world_of(campaign)
    assert now["mara"] == "kitchen", "a refused move moves nobody"
    assert now["knife"] == "protagonist"
    assert ("item_changes", "applied") in now["events"] and not any(t == "move" for t, _ in now["events"])


async def test_a_failed_narration_leaves_neither_the_rounds_nor_their_changes(owner, narrator_server):
    campaign = await sync_to_async(game)(owner, walled_document())
    narrator_server.script_gm(gm([("Mara", "she answers")], [actor("Edrin", ops=[{"op": "take", "item": "knife"}])]))
    narrator_server.script_characters(says("Careful with that."))
    narrator_server.script("The knife glints and then")
    narrator_server.fail_mid_stream(after_chunks=2)
    nodes = await Node.objects.acount()
    with pytest.raises(turns.TurnFailed, match="Nothing was saved"):
        await play(campaign)
    assert await Node.objects.acount() == nodes
    assert await Round.objects.acount() == 0
    now = await world_of(campaign)
    assert now["knife"] == "kitchen" and now["events"] == []


async def test_a_game_master_step_that_is_not_its_json_fails_the_turn_in_words_and_saves_nothing(
        owner, narrator_server):
    campaign = await sync_to_async(game)(owner)
    narrator_server.script_gm("not json at all", "still not json")
    nodes = await Node.objects.acount()
    with pytest.raises(turns.TurnFailed) as failed:
        await play(campaign)
    assert "The game master's step of round 1 failed" in str(failed.value)
    assert "Nothing was saved." in str(failed.value)
    assert await Node.objects.acount() == nodes and await Round.objects.acount() == 0


async def test_a_character_whose_model_answer_fails_stays_silent_and_the_game_master_is_told(owner, narrator_server):
    campaign = await sync_to_async(game)(owner)
    narrator_server.script_gm(gm([("Mara", "first"), ("Aldric", "second")], narrate=False), gm())
    narrator_server.script_characters("nope", "still nope", says("I heard that."))
    result, _ = await play(campaign)
    first, _ = await rounds_of(result.node_id)
    assert [(o["speaker"], o["text"]) for o in first["outputs"]] == [("mara", ""), ("aldric", "I heard that.")]
    assert first["outputs"][0]["failed"]
    assert "Mara stayed silent" in gm_prompts(narrator_server)[1]


async def test_stopping_a_game_master_turn_during_the_narration_saves_nothing(owner, narrator_server):
    import asyncio

    campaign = await sync_to_async(game)(owner)
    narrator_server.script_gm(gm([("Mara", "she answers")]))
    narrator_server.script_characters(says("Well?"))
    narrator_server.script("One two three four five six seven eight nine ten eleven twelve.")
    narrator_server.chunk_delay(0.1)
    streamed = asyncio.Event()

    async def relay(chunk):
        streamed.set()

    nodes = await Node.objects.acount()
    task = asyncio.create_task(turns.play_turn(campaign.pk, Action(mode="do", text="wait"), relay))
    await asyncio.wait_for(streamed.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    narrator_server.chunk_delay(0)
    assert await Node.objects.acount() == nodes and await Round.objects.acount() == 0


# --- the world author from a played turn (WP4 scenario 5, phase 3) ----------------------------------------------------


def tinker(place="Kitchen"):
    return {"decision": "create", "reuse": "", "reason": "a visitor the scene needs",
            "characters": [{"name": "Tomas", "aliases": ["the tinker"], "description": "a travelling tinker",
                            "place": place, "relationships": []}], "places": [], "items": []}


async def test_expand_world_creates_a_character_who_acts_next_round_and_commits_with_the_turn(owner, narrator_server):
    campaign = await sync_to_async(game)(owner)
    narrator_server.script_gm(gm(need="arrival", what="a travelling tinker knocks and comes in", narrate=False),
                              gm([("Tomas", "he has just arrived")]))
    narrator_server.script_json(tinker())
    narrator_server.script_characters(says("Pots mended, knives ground!"))
    result, _ = await play(campaign)
    first, second = await rounds_of(result.node_id)
    assert "The world author created" in gm_prompts(narrator_server)[1]
    assert [a["who"] for a in second["activated"]] == ["tomas"]
    assert "You are Tomas, a travelling tinker." in second["briefs"]["tomas"]["text"]
    node = await Node.objects.select_related("snapshot").aget(pk=result.node_id)
    [made] = node.snapshot.report["voices"]["author"]
    assert made["status"] == "created" and made["created"] == ["tomas"]

    @sync_to_async
    def tomas_now():
        from campaigns import lineage
        from campaigns.state import state_at

        fresh = Campaign.objects.get(pk=campaign.pk)
        state = state_at(lineage.path_of(fresh), fresh)
        return state.location_of("tomas"), StateEvent.objects.filter(node_id=result.node_id, source="world").count()

    place, events = await tomas_now()
    assert place == "kitchen" and events >= 1


async def test_expand_world_is_refused_naming_who_to_reuse_and_nothing_is_created(owner, narrator_server):
    campaign = await sync_to_async(game)(owner)
    narrator_server.script_gm(gm(need="arrival", what="a hunter", narrate=False), gm())
    result, _ = await play(campaign)
    assert "reuse Aldric instead of creating someone" in gm_prompts(narrator_server)[1]
    node = await Node.objects.select_related("snapshot").aget(pk=result.node_id)
    assert node.snapshot.report["voices"]["author"][0]["status"] == "refused"
    assert not [body for body in narrator_server.bodies("/api/chat") if isinstance(body.get("format"), dict)
                and "decision" in body["format"]["properties"]], "refused before asking the model"


# --- lore by knowledge in a played turn (WP4 scenario 7, phase 3) -----------------------------------------------------


def lore_document():
    document = scene_document()
    document["lore"] = [{"id": "teapot-curse", "title": "The curse of the black teapot",
                         "text": "LORE-BODY Whoever pours from it at midnight hears the dead."},
                        {"id": "aldric-secret", "title": "Aldric's oath", "text": "LORE-SECRET He swore never to hunt."}]
    for character in document["characters"]:
        if character["name"] == "Mara":
            character["knowledge"] = {"lore": ["teapot-curse"]}
    return document


async def test_a_character_lists_lore_titles_and_asks_for_one_entry_once(owner, narrator_server):
    campaign = await sync_to_async(game)(owner, lore_document())
    narrator_server.script_gm(gm([("Mara", "she knows the old tales")]))
    asked = says("", "thinks")
    asked["lore"] = "The curse of the black teapot"
    again = says("Never pour from it at midnight.")
    again["lore"] = "Aldric's oath"  # a second question is not asked
    narrator_server.script_characters(asked, again)
    result, _ = await play(campaign)
    [one] = await rounds_of(result.node_id)
    brief = one["briefs"]["mara"]["text"]
    assert "- The curse of the black teapot" in brief and "LORE-BODY" not in brief, "titles only"
    assert "Aldric's oath" not in brief and "LORE-SECRET" not in brief, "lore she has no edge to"
    sent = [body["messages"] for body in narrator_server.bodies("/api/chat")
            if isinstance(body.get("format"), dict) and "speech" in body["format"]["properties"]]
    assert len(sent) == 2, "one more call with the entry, and no third"
    assert gm_module.BACKGROUND_QUESTION in sent[0][-1]["content"], "asked at her first answer, as she has lore"
    assert gm_module.BACKGROUND_QUESTION not in sent[1][-1]["content"], "and only once"
    assert "LORE-BODY Whoever pours from it at midnight" in sent[1][-1]["content"]
    assert not any("LORE-SECRET" in m["content"] for messages in sent for m in messages)
    assert [o["text"] for o in one["outputs"] if o["speaker"] == "mara"] == ["Never pour from it at midnight."]


async def test_a_character_without_lore_is_not_asked_about_her_background(owner, narrator_server):
    campaign = await sync_to_async(game)(owner)
    narrator_server.script_gm(gm([("Mara", "she is here")]))
    narrator_server.script_characters(says("Not tonight."))
    await play(campaign)
    [sent] = [body["messages"] for body in narrator_server.bodies("/api/chat")
              if isinstance(body.get("format"), dict) and "speech" in body["format"]["properties"]]
    assert "Lore you know" not in sent[-1]["content"]
    assert gm_module.BACKGROUND_QUESTION not in sent[-1]["content"]


async def test_a_lorebook_cannot_change_while_a_game_master_turn_plays(owner, narrator_server):
    from campaigns import playing

    campaign = await sync_to_async(game)(owner)
    narrator_server.script_gm(gm())
    async with while_streaming(campaign.pk, narrator_server):
        with pytest.raises(playing.TurnInProgress, match="lorebooks do not change during a turn"):
            with playing.lore_change(campaign.pk):
                pass
    with playing.lore_change(campaign.pk):
        pass  # the turn is over: a change goes through


async def test_the_story_leaves_the_game_master_room_for_its_rules_round_and_answer(owner, narrator_server):
    from storyteller import tokens
    from storyteller.context import budget
    from storyteller.voices import gm as game_master

    campaign = await sync_to_async(game)(owner, max_output_tokens=200)
    result, _ = await play(campaign)
    report = (await Node.objects.select_related("snapshot").aget(pk=result.node_id)).snapshot.report
    assert report["budget"]["reply_reserve"] == budget.reply_reserve(200)
    assert report["budget"]["game_master_headroom"] == game_master.headroom(200)
    assert game_master.headroom(200) > game_master.GM_TOKENS - 200 + tokens.count(game_master.GM_RULES)
    assert report["budget"]["unused"] == (campaign.context_token_budget - budget.reply_reserve(200)
                                          - report["budget"]["prompt_tokens"] - game_master.headroom(200))
    assert report["settings"]["num_predict"] == 200, "the narration itself still writes at most max_output_tokens"
    narration = [body for body in narrator_server.bodies("/api/chat") if "format" not in body][-1]
    assert narration["options"]["num_predict"] == 200


async def test_stopping_while_the_game_master_thinks_saves_nothing_and_lets_go_of_the_model(owner, narrator_server):
    import asyncio

    campaign = await sync_to_async(game)(owner)
    narrator_server.json_delay(5)
    nodes = await Node.objects.acount()
    task = asyncio.create_task(turns.play_turn(campaign.pk, Action(mode="do", text="wait"), lambda text: None))
    try:
        for _ in range(200):
            if gm_prompts(narrator_server):
                break
            await asyncio.sleep(0.02)
        assert gm_prompts(narrator_server), "the game master was asked"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        narrator_server.json_delay(0)
    for _ in range(100):  # the server notices the closed connection within its next poll
        if narrator_server.cancelled:
            break
        await asyncio.sleep(0.02)
    assert narrator_server.cancelled == 1, "the game master's request was closed, so the server stops thinking"
    assert await Node.objects.acount() == nodes and await Round.objects.acount() == 0
    assert not [body for body in narrator_server.bodies("/api/chat") if "format" not in body], "never narrated"


# --- the game master's prompts stay cache-friendly (issue 15 point 7, WP4 benchmark) ---------------------------------


def narration_prompts(server):
    """Return the messages of every narration the server was asked to stream, in order."""
    return [body["messages"] for body in server.bodies("/api/chat") if "format" not in body]


def step_bodies(server):
    return [body["messages"] for body in server.bodies("/api/chat")
            if isinstance(body.get("format"), dict) and "activate_characters" in body["format"]["properties"]]


async def test_the_next_turns_step_starts_with_the_last_narrations_prompt_as_history_renders_it(
        owner, narrator_server):
    from storyteller import tokens
    from storyteller.context import budget, layers

    campaign = await sync_to_async(game)(owner, walled_document())
    narrator_server.script_gm(gm([("Mara", "she holds the key")], narrate=False),
                              gm([("Aldric", "he is suspicious")], [actor("Aldric", "Yard")]))
    narrator_server.script_characters(says("It is mine, child.", "grips the key"), says("Hand it over."))
    narrator_server.script("The kitchen falls quiet.", "Mara shrugs.")
    first, _ = await play(campaign)
    await play(campaign, "I wait")
    narrated, step = narration_prompts(narrator_server)[0], step_bodies(narrator_server)[2]
    # The narration: the narrator's prompt (its dynamic tail last), then the game master's notes and the request.
    notes, request = narrated[-2:]
    assert notes["role"] == "assistant" and request == {"role": "user", "content": layers.NARRATE_REQUEST}
    assert "Round 1:\n- Mara said: “It is mine, child.” (grips the key)" in notes["content"]
    assert "Round 2:\n- Aldric said: “Hand it over.”" in notes["content"]
    assert "\n- refused: actors[1].moves_to: Aldric cannot get there: no route" in notes["content"]
    # The next turn's step: the same system message and history, the action where the tail was (the tail's
    # memories and state are the narrator's, new each turn), the notes and request byte for byte, the narration.
    at = len(narrated) - 3
    assert step[:at] == narrated[:at]
    assert step[at]["role"] == "user" and narrated[at]["content"].endswith(step[at]["content"])
    assert step[at + 1:at + 3] == [notes, request]
    assert step[at + 3] == {"role": "assistant", "content": "The kitchen falls quiet."}
    assert step[-1]["content"].rsplit("\n\n", 1)[1].startswith("Round 1 of 3 at Kitchen, with: ")
    # The reply's stored tokens price exactly what history sends for it.
    node = await Node.objects.aget(pk=first.node_id)
    assert node.tokens == (sum(tokens.count(m["content"]) for m in step[at + 1:at + 4]) + 2 * budget.MESSAGE_OVERHEAD)
    assert node.text == "Mara: “It is mine, child.” (grips the key)\n\nAldric: “Hand it over.”\n\nThe kitchen falls quiet."


async def test_a_game_master_step_asks_in_a_line_and_every_constant_instruction_is_in_the_system_message(
        owner, narrator_server):
    from storyteller.voices import gm as game_master

    campaign = await sync_to_async(game)(owner)
    await play(campaign)
    [step], [narrated] = step_bodies(narrator_server), narration_prompts(narrator_server)
    assert step[0]["content"].endswith(game_master.GM_RULES) and narrated[0] == step[0]
    added = step[-1]["content"][len(narrated[-3]["content"]):]
    assert added == "\n\nRound 1 of 3 at Kitchen, with: Aldric; Mara.", "the step adds one short line to the tail"
    assert step[:-1] == narrated[:-3], "the step and the narration share all but their last messages"
