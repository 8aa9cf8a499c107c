"""A game master's rounds travel in the campaign bundle, under their reply, checked like every table."""

import json

import pytest
from asgiref.sync import sync_to_async

from campaigns import lineage
from campaigns.models import Campaign, Node, Round
from storyteller import bundle
from tests.storyteller.voices.test_played import game, gm, play, says

pytestmark = pytest.mark.django_db(transaction=True)


async def test_rounds_go_out_and_come_back_under_their_reply_and_a_misnumbered_one_is_refused_in_words(
        owner, narrator_server):
    campaign = await sync_to_async(game)(owner)
    narrator_server.script_gm(gm([("Mara", "she answers")], narrate=False), gm([("Aldric", "his turn")]))
    narrator_server.script_characters(says("Yes?"), says("No."))
    narrator_server.script("They fall silent.")
    await play(campaign)
    campaign = await Campaign.objects.aget(pk=campaign.pk)
    data = await sync_to_async(bundle.export_campaign)(campaign)
    assert [r["number"] for r in data["sections"]["campaigns"]["rounds"]] == [1, 2]

    restored = await sync_to_async(bundle.import_bundle)(owner, json.dumps(data).encode())

    @sync_to_async
    def rounds_on_the_line():
        path = lineage.path_of(Campaign.objects.get(pk=restored.pk))
        reply = path.nodes().get(depth=2)
        return [(r.number, [o["text"] for o in r.outputs], sorted(r.briefs)) for r in reply.rounds.order_by("number")]

    assert await rounds_on_the_line() == [(1, ["Yes?"], ["mara"]), (2, ["No.", "They fall silent."], ["aldric"])]

    data["sections"]["campaigns"]["rounds"][1]["number"] = 100
    data["checksum"] = bundle.checksum(data["sections"])
    before = await Round.objects.acount(), await Node.objects.acount()
    with pytest.raises(bundle.BundleRefused, match="rounds row 2 is a game master's round numbered 100; those are "
                                                   "numbered 1 to 99"):
        await sync_to_async(bundle.import_bundle)(owner, json.dumps(data).encode())
    assert (await Round.objects.acount(), await Node.objects.acount()) == before

    data["sections"]["campaigns"]["rounds"][1]["number"] = 1
    data["checksum"] = bundle.checksum(data["sections"])
    with pytest.raises(bundle.BundleRefused, match="rounds row 2 is round 1 of the same reply as rounds row 1"):
        await sync_to_async(bundle.import_bundle)(owner, json.dumps(data).encode())
    assert (await Round.objects.acount(), await Node.objects.acount()) == before
