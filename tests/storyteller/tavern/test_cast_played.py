"""A cast brought from two cards plays a game-master turn: both stand in the scene, each speaks from a brief that
carries its card's manner and speech."""

import json

import pytest
from asgiref.sync import sync_to_async

from campaigns.models import Round
from storyteller import turns
from storyteller.context import Action
from storyteller.tavern import files, importing
from storyteller.tavern import plan as plans
from tests.storyteller.voices.test_played import gm, says

from . import make

pytestmark = pytest.mark.django_db(transaction=True)


def _cast(owner):
    readings = [files.read("mara.json", json.dumps(make.v2()).encode(), 10**7),
                files.read("edrin.json", json.dumps(make.v3(name="Edrin", personality="gruff, loyal",
                                                            mes_example="<START>\n{{char}}: Hmph.")).encode(), 10**7)]
    return importing.create(owner, plans.make(readings, "Wren")).campaign


async def test_a_cast_from_cards_plays_a_game_master_turn(owner, narrator_server):
    campaign = await sync_to_async(_cast)(owner)
    assert campaign.game_master
    narrator_server.script_gm(gm([("Mara", "she is asked"), ("Edrin", "he grumbles")]))
    narrator_server.script_characters(says("Sit down, Wren."), says("Hmph."))
    narrator_server.script("The fire crackles.")

    async def relay(text):
        return None

    result = await turns.play_turn(campaign.pk, Action(mode="say", text="Hello, both of you."), relay)
    [played] = await sync_to_async(list)(Round.objects.filter(node_id=result.node_id).values("activated", "briefs"))
    assert [a["who"] for a in played["activated"]] == ["mara", "edrin"]
    assert "Your manner: gruff, loyal" in played["briefs"]["edrin"]["text"]
    assert "Edrin: Hmph." in played["briefs"]["edrin"]["text"]
    assert "Your manner: warm, watchful" in played["briefs"]["mara"]["text"]
