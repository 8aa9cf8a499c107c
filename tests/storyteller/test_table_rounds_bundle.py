"""A table's rounds travel in the campaign bundle (issue 30): the actions as played, each round's stages, the
reply's parts by stage and the answered proposals; the seats (people of this install) stay home.

Real parts: a round played over real websockets against the fake model server, exported, imported again as
a new campaign, and read back through ``parts_for`` as each seat's character would get it.
"""

import json

import pytest
from asgiref.sync import sync_to_async

from campaigns import lineage, tablerounds
from campaigns.models import Campaign, NarrationPart, Node, RoundProposal, Seat, TableAction, TableRound
from storyteller import bundle
from tests.storyteller.test_table_rounds import KITCHEN_CANARY, SPLIT, YARD_CANARY, close, make_table, table_of

pytestmark = pytest.mark.django_db(transaction=True)


async def _played_round(owner, narrator_server):
    narrator_server.script(SPLIT)
    campaign, people = await make_table(owner)
    sockets = await table_of(campaign, owner, people, "bea", "cal", "dot")
    for name, text in (("bea", "I open the pantry <b>door</b>."), ("cal", "I pour the tea."), ("dot", "I draw water.")):
        await sockets[name].send(action="turn", text=text)
    await sockets["owner"].until('data-outcome="committed"')
    await sockets["cal"].send(action="propose", op="undo", text="that was too quick")
    await sockets["owner"].until("proposes")
    pk = await sync_to_async(lambda: RoundProposal.objects.get(campaign=campaign).pk)()
    await sockets["owner"].send(action="proposal", op="decline", node=str(pk))
    await sockets["owner"].until("No one has sent")
    await sockets["dot"].send(action="propose", op="retry")  # still waiting when exported: it stays home
    await sockets["owner"].until("dot proposes")
    await sockets["bea"].send(action="turn", text="I wait for the next round.")  # waiting: stays home too
    await sockets["bea"].until("I wait for the next round.")
    await close(sockets)
    return await Campaign.objects.aget(pk=campaign.pk)


@sync_to_async
def _told(campaign):
    """What each character gets of the round at depth 1-2 of the campaign's line, through parts_for."""
    path = lineage.path_of(Campaign.objects.get(pk=campaign.pk))
    player, reply = path.nodes().get(depth=1), path.nodes().get(depth=2)
    return {key: (tablerounds.parts_for(player, key), tablerounds.parts_for(reply, key))
            for key in ("protagonist", "mara", "aldric")}


async def test_a_tables_rounds_go_out_and_come_back_and_each_character_gets_only_its_own_stage(
        owner, narrator_server):
    campaign = await _played_round(owner, narrator_server)
    before = await _told(campaign)
    data = await sync_to_async(bundle.export_campaign)(campaign)
    section = data["sections"]["campaigns"]
    assert [(a["character"], a["text"], a["status"]) for a in section["table_actions"]] == [
        ("protagonist", "I open the pantry <b>door</b>.", "played"), ("mara", "I pour the tea.", "played"),
        ("aldric", "I draw water.", "played")]  # the waiting one is the live table's, not the story's
    assert "seat" not in json.dumps(section["table_actions"]) and "seat" not in json.dumps(section["round_proposals"])
    assert [(p["kind"], p["status"], p["note"]) for p in section["round_proposals"]] == [
        ("undo", "declined", "that was too quick")]
    assert len(section["table_rounds"]) == 1 and len(section["narration_parts"]) == 2

    restored = await sync_to_async(bundle.import_bundle)(owner, json.dumps(data).encode())

    assert restored.pk != campaign.pk
    after = await _told(restored)
    assert after == before
    kitchen_actions, kitchen_parts = after["mara"]
    assert kitchen_actions == ["Edrin: I open the pantry <b>door</b>.", "Mara: I pour the tea."]
    assert any(KITCHEN_CANARY in part for part in kitchen_parts)
    assert not any(YARD_CANARY in part for part in kitchen_parts)
    yard_actions, yard_parts = after["aldric"]
    assert yard_actions == ["Aldric: I draw water."]
    assert any(YARD_CANARY in part for part in yard_parts) and not any(KITCHEN_CANARY in p for p in yard_parts)
    assert not await Seat.objects.filter(campaign=restored).aexists()
    assert await TableAction.objects.filter(campaign=restored, seat__isnull=True, status="played").acount() == 3
    assert await RoundProposal.objects.filter(campaign=restored).acount() == 1
    assert await sync_to_async(tablerounds.proposals_waiting)(restored.pk) == []

    # Played actions are the story's: deleting a seat keeps them (its actions lose their seat, not their words).
    await Seat.objects.filter(campaign=campaign).adelete()
    assert await _told(campaign) == before


async def test_a_bundle_with_a_waiting_action_or_a_part_told_twice_is_refused_in_words(owner, narrator_server):
    campaign = await _played_round(owner, narrator_server)
    data = await sync_to_async(bundle.export_campaign)(campaign)
    counts = (await Campaign.every.acount(), await TableAction.objects.acount(), await NarrationPart.objects.acount(),
              await TableRound.objects.acount())

    def refused(change, match):
        changed = json.loads(json.dumps(data))
        change(changed["sections"]["campaigns"])
        changed["checksum"] = bundle.checksum(changed["sections"])
        with pytest.raises(bundle.BundleRefused, match=match):
            bundle.import_bundle(owner, json.dumps(changed).encode())

    await sync_to_async(refused)(lambda s: s["table_actions"][1].update(status="waiting"),
                                 "table_actions row 2 is not an action played in a round")
    await sync_to_async(refused)(lambda s: s["narration_parts"][1].update(number=1),
                                 "narration_parts row 2 is part 1 of the same reply as narration_parts row 1")
    await sync_to_async(refused)(lambda s: s["table_rounds"].append(dict(s["table_rounds"][0])),
                                 "table_rounds row 2 is a second table round of the same node")
    await sync_to_async(refused)(lambda s: s["round_proposals"][0].update(status="waiting"),
                                 "round_proposals row 1 is still waiting")
    await sync_to_async(refused)(lambda s: s["table_actions"][0].update(seat=1), "not part of the bundle format")
    await sync_to_async(refused)(lambda s: s["narration_parts"][0].update(present=[{"x": 1}]),
                                 "must be a list of character keys")
    assert (await Campaign.every.acount(), await TableAction.objects.acount(), await NarrationPart.objects.acount(),
            await TableRound.objects.acount()) == counts  # nothing was written
    assert await Node.objects.filter(campaign=campaign).acount() > 0
