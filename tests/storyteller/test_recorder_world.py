"""The recorder in a world: what the model proposes and the world refuses is kept, rejected, with its reason.

Through the real fake model server (scripted JSON replies): "Mara strides
into the vault" with the vault locked changes nothing but a rejected move;
a valid item_changes applies; the play page shows the rejection.
"""

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from campaigns import worldfile
from campaigns.models import Node, RecorderRun, StateEvent
from campaigns.state.world import world
from tests.campaigns.test_world import document
from tests.storyteller.test_recorder import current_state, play, recordings
from tests.conftest import as_author

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HTTP_HX_REQUEST": "true"}


def event(type, subject="", object="", value="", **extra):
    return {"type": type, "subject": subject, "object": object, "value": value, "narrator_only": False, **extra}


@pytest.fixture
async def keep(owner):
    campaign, _ = await sync_to_async(worldfile.create_campaign)(owner, document())
    return campaign


async def test_a_move_through_a_locked_door_is_rejected_with_the_reason_and_changes_nothing(keep, narrator_server,
                                                                                             client, owner):
    await sync_to_async(as_author)(keep)
    narrator_server.script("Mara strides into the vault.")
    narrator_server.script_json({"events": [event("move", "Mara", "Vault")]})
    result = await play(keep, "follow Mara")
    [body] = recordings(narrator_server)
    prompt = body["messages"][-1]["content"]
    assert "Exit from Hall to Corridor: open, 30 s." in prompt and "Here: chest (closed)." in prompt
    [move] = [e async for e in StateEvent.objects.filter(source="recorder")]
    assert move.status == "rejected"
    assert move.reason == ("Mara cannot get there: no route of open exits from Hall to Vault "
                           "(Corridor → Vault through the iron door is locked)")
    assert (await current_state(keep)).location_of("mara") == "hall"
    assert (await Node.objects.aget(pk=result.node_id)).text == "Mara strides into the vault.", "the reply stands"
    assert (await RecorderRun.objects.aget(node_id=result.node_id)).status == "applied"

    await sync_to_async(client.force_login)(owner)
    panel = (await sync_to_async(client.get)(reverse("world_panel", args=[keep.pk]), **HTMX)).content.decode()
    assert 'id="world-refused"' in panel and "through the iron door is locked" in panel
    events = (await sync_to_async(client.get)(reverse("state_events", args=[keep.pk, result.node_id]),
                                              **HTMX)).content.decode()
    assert 'data-status="rejected"' in events and "no route of open exits from Hall to Vault" in events


async def test_a_valid_item_changes_from_the_recorder_applies(keep, narrator_server):
    narrator_server.script("You lift the lid and take the iron key.")
    narrator_server.script_json({"events": [event("item_changes", "Edrin", data={"ops": [
        {"op": "open", "item": "chest", "quantity": 0, "to": "", "key": "", "slot": "", "exit": "", "from": ""},
        {"op": "take", "item": "iron key", "quantity": 0, "to": "", "key": "", "slot": "", "exit": "", "from": ""},
    ]})]})
    await play(keep, "open the chest")
    [changes] = [e async for e in StateEvent.objects.filter(source="recorder", payload__type="item_changes")]
    assert changes.status == "applied", changes.reason
    now = await current_state(keep)
    assert world.item_of(now, "iron-key").holder == "protagonist"
    assert world.item_of(now, "chest").container == "open"
    assert "iron-key" in world.knowledge(now, "mara")["item"], "Mara saw the key come out of the chest"


def test_the_recorders_schema_is_the_documented_one_for_every_type_it_may_propose():
    from campaigns.state import RECORDER_TYPES, registry
    from storyteller.steps import recorder

    variants = recorder.SCHEMA["properties"]["events"]["items"]["anyOf"]
    assert [v["properties"]["type"]["const"] for v in variants] == list(RECORDER_TYPES)
    assert variants == [registry.schema(name, "recorder") for name in RECORDER_TYPES]
    assert {"acquire", "lose", "give", "observe", "retract", "set_holder"}.isdisjoint(RECORDER_TYPES)
    move = registry.schema("move", "recorder")
    assert "data" not in move["properties"], "only a person moves someone ignoring exits"
    assert "ignore_exits" in registry.schema("move", "correction")["properties"]["data"]["properties"]

    def bounded(node, where="schema"):
        if isinstance(node, dict):
            if node.get("type") == "string":
                assert "maxLength" in node, where
            if node.get("type") == "array":
                assert "maxItems" in node, where
            for key, value in node.items():
                bounded(value, f"{where}.{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                bounded(value, f"{where}[{index}]")

    bounded(recorder.SCHEMA)
