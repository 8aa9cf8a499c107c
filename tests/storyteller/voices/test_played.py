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
from storyteller.context import Action
from tests.campaigns.test_minds import kitchen_document

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
