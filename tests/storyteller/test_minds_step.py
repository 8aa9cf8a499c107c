"""The minds step: the recorder's second, small-schema call, verify, and the recall index (issue 14, D11).

The Kitchen (tests/campaigns/worlds/kitchen.json): Mara in the Kitchen with
an open teapot; Edrin in the Pantry next door through an open door; Aldric
in the Yard behind a locked door.
"""

import pytest
from asgiref.sync import sync_to_async

from campaigns import worldfile
from campaigns.models import RecorderRun, StateEvent, StateRecord
from memory.models import MindsRun, RecallItem, RecallVector
from storyteller.steps import minds, postturn
from tests.campaigns.test_minds import KITCHEN
from tests.storyteller.test_recorder import play

pytestmark = pytest.mark.django_db(transaction=True)

TURN = "In the kitchen, Mara slips the iron key into the teapot and hums."

HIDING = {
    "events": [{"id": "e1", "text": "Mara hid the key in the teapot.", "importance": 3, "tags": ["secret", "key"],
                "participants": ["Mara"], "location": "Kitchen", "items": ["iron key", "teapot"],
                "gist": "Mara hid something in the kitchen."}],
    "perceptions": [
        {"event": "e1", "who": "Mara", "mode": "witnessed", "wording": "I hid the key in the teapot.",
         "gist": "I hid the key.", "accuracy": "accurate"},
        {"event": "e1", "who": "Edrin", "mode": "heard", "wording": "Someone hid something in the kitchen.",
         "gist": "A sound from the kitchen.", "accuracy": "partial"}],
    "beliefs": [{"who": "Edrin", "id": "secret", "text": "Mara is hiding something.", "confidence": "likely",
                 "supports": ["e1"]}],
    "notices": [],
}
ALDRIC_SAW = {"event": "e1", "who": "Aldric", "mode": "witnessed", "wording": "Mara hid a knife.",
              "accuracy": "wrong"}


def kitchen(owner, **fields):
    campaign, _ = worldfile.create_campaign(owner, worldfile.read(KITCHEN.read_bytes()), **fields)
    return campaign


def minds_requests(server):
    return [body for body in server.bodies("/api/chat")
            if "format" in body and "perceptions" in body["format"].get("properties", {})]


@sync_to_async
def records(campaign, kind):
    return {r.slot: r for r in StateRecord.objects.filter(campaign=campaign, kind=kind)}


async def test_the_second_call_records_events_perceptions_and_beliefs_after_the_state(owner, narrator_server):
    campaign = await sync_to_async(kitchen)(owner)
    narrator_server.script(TURN)
    narrator_server.script_minds(HIDING)
    result = await play(campaign, "I listen at the door.")
    [request] = minds_requests(narrator_server)
    prompt = request["messages"][-1]["content"]
    assert "Present there: Edrin" in prompt and "Nearby (one open door away; they may hear it): Mara (in Kitchen)" \
        in prompt
    assert f"Narrator: {TURN}" in prompt
    run = await MindsRun.objects.aget(node_id=result.node_id)
    assert (run.status, run.applied, run.rejected, run.asked_again) == ("recorded", 4, 0, False)
    events = await records(campaign, "event")
    assert list(events) == ["event:t1-1"]
    assert events["event:t1-1"].data["perceived_by"] == {"mara": "present", "protagonist": "nearby"}
    perceptions = await records(campaign, "perception")
    assert set(perceptions) == {"perception:t1-1:mara", "perception:t1-1:protagonist"}
    beliefs = await records(campaign, "belief")
    assert beliefs["belief:protagonist:secret"].data["supports"] == ["perception:t1-1:protagonist"]
    assert (await RecorderRun.objects.aget(node_id=result.node_id)).status == "applied", "the state's run is its own"
    assert run.indexed == 4 and await RecallItem.objects.filter(campaign=campaign).acount() == 4


async def test_a_refused_draft_is_asked_for_again_with_its_reason_and_never_stored(owner, narrator_server):
    campaign = await sync_to_async(kitchen)(owner)
    narrator_server.script(TURN)
    draft = {**HIDING, "perceptions": [*HIDING["perceptions"], ALDRIC_SAW]}
    narrator_server.script_minds(draft, HIDING)
    result = await play(campaign, "I listen at the door.")
    first, second = minds_requests(narrator_server)
    again = second["messages"][-1]["content"]
    assert again.startswith("Some of what you recorded was refused.")
    assert "- perception Aldric e1: Aldric was not present or nearby when it happened at Kitchen" in again
    assert second["messages"][-2]["role"] == "assistant", "the refused draft is shown back"
    for request in (first, second):
        for message in request["messages"]:
            for label in ("accuracy", "accurate", "partial", "wrong"):
                assert label not in message["content"], (label, message["role"])
    run = await MindsRun.objects.aget(node_id=result.node_id)
    assert (run.status, run.applied, run.rejected, run.asked_again) == ("recorded", 4, 0, True)
    stored = [e async for e in StateEvent.objects.filter(node_id=result.node_id, payload__type="perception")]
    assert all(e.payload["subject"] != "Aldric" for e in stored), "drafts are never stored"


async def test_without_verify_the_first_answer_is_kept_and_the_refusal_recorded(owner, narrator_server):
    campaign = await sync_to_async(kitchen)(owner, memory_verify=False)
    narrator_server.script(TURN)
    narrator_server.script_minds({**HIDING, "perceptions": [*HIDING["perceptions"], ALDRIC_SAW]})
    result = await play(campaign, "I listen at the door.")
    assert len(minds_requests(narrator_server)) == 1
    run = await MindsRun.objects.aget(node_id=result.node_id)
    assert (run.applied, run.rejected, run.asked_again) == (4, 1, False)
    refused = await StateEvent.objects.aget(node_id=result.node_id, status="rejected")
    assert refused.payload["subject"] == "Aldric" and "not present or nearby" in refused.reason


async def test_nothing_is_asked_of_minds_while_the_state_is_not_recorded(owner, narrator_server):
    campaign = await sync_to_async(kitchen)(owner)
    narrator_server.script(TURN)
    narrator_server.script_json("this is not JSON {", "this is not JSON {")
    result = await play(campaign, "I listen at the door.")
    assert (await RecorderRun.objects.aget(node_id=result.node_id)).status == "failed"
    assert minds_requests(narrator_server) == []
    assert (await MindsRun.objects.aget(node_id=result.node_id)).status == "waiting"
    narrator_server.script_json({"events": []})
    narrator_server.script_minds(HIDING)
    await postturn.run(result.node_id)
    assert (await MindsRun.objects.aget(node_id=result.node_id)).status == "recorded", "a retry records them"


async def test_a_broken_answer_fails_in_words_and_the_turn_stands(owner, narrator_server):
    campaign = await sync_to_async(kitchen)(owner)
    narrator_server.script(TURN)
    narrator_server.script_minds({"events": "none"}, {"events": "none"})  # asked once more by the client
    result = await play(campaign, "I listen at the door.")
    run = await MindsRun.objects.aget(node_id=result.node_id)
    assert run.status == "failed" and "Retry" in run.error and "none" not in run.error, run.error
    assert await StateRecord.objects.filter(campaign=campaign, kind="event").acount() == 0


async def test_new_recall_items_are_embedded_as_documents_off_the_database(owner, narrator_server):
    campaign = await sync_to_async(kitchen)(owner)
    narrator_server.script(TURN)
    narrator_server.script_minds(HIDING)
    result = await play(campaign, "I listen at the door.")
    run = await MindsRun.objects.aget(node_id=result.node_id)
    assert run.embedded == 4 and run.embedding_note == ""
    assert await RecallVector.objects.filter(campaign=campaign, model="nomic-embed-text").acount() == 4
    embedded = [text for body in narrator_server.bodies("/api/embed") for text in body["input"]]
    assert "search_document: I hid the key in the teapot." in embedded


def test_the_schema_bounds_every_string_and_list():
    def bounded(node, where="schema"):
        if isinstance(node, dict):
            if node.get("type") == "string":
                assert "maxLength" in node, where
            if node.get("type") == "array":
                assert "maxItems" in node, where
            for key, value in node.items():
                bounded(value, f"{where}.{key}")
        elif isinstance(node, list):
            for value in node:
                bounded(value, where)

    bounded(minds.SCHEMA)


def test_an_answer_becomes_typed_events_with_the_applications_ids():
    events, labels = minds.typed(HIDING, 7, held={("protagonist", "secret")})
    assert labels == {"t7-1": "e1"}
    assert [e["type"] for e in events] == ["event", "perception", "perception", "belief"]
    assert events[0]["object"] == "t7-1" and events[1]["object"] == "t7-1"
    assert events[3]["data"]["supports"] == ["t7-1"]
    edits, _ = minds.typed({**HIDING, "beliefs": [{"who": "Edrin", "id": "secret", "text": "Surely.",
                                                "confidence": "sure"}]}, 7, held={("edrin", "secret")})
    assert edits[-1]["type"] == "belief_edit"


async def test_the_built_in_narrator_is_not_asked_and_the_run_says_why(owner, settings):
    from storyteller import llm

    settings.STORYTELLER_LLM_URL_CONFIGURED = False
    settings.STORYTELLER_LLM_URL = "http://127.0.0.1:9"  # nothing answers: the built-in narrator takes over
    llm.forget_servers()
    campaign = await sync_to_async(kitchen)(owner)
    node = await sync_to_async(_played)(campaign)
    await RecorderRun.objects.acreate(node_id=node, status="applied", model=llm.BUILTIN_MODEL)
    assert await minds.record(node) == "nothing"
    run = await MindsRun.objects.aget(node_id=node)
    assert run.note.startswith("The built-in narrator is too small to record what the characters perceive")


def _played(campaign):
    from tests.campaigns.test_lineage import act
    return act(campaign, "I listen.", TURN).head_branch.nodes.get(depth=2).pk
