"""The summariser is handed the sealed public events of the range it covers, and nothing private (WP3 scenario 15).

Seed 002 「根据事件而非旧摘要」, settled by decision D1: the built checkpoint
stays, and its summariser gets the range's events beside its passages; never
perceptions, accuracy labels, beliefs, narrator-only events or private state
(seed 001's "summary safety"). The checkpoint's source hash covers the events.
"""

import json

import pytest
from asgiref.sync import sync_to_async

from campaigns import lineage, worldfile
from campaigns.models import Node
from campaigns.state import apply_events
from memory import checkpoints
from storyteller import scripting
from storyteller.context import prefix_hash
from storyteller.steps import compaction
from tests.campaigns.test_minds import KITCHEN

pytestmark = pytest.mark.django_db(transaction=True)

CANARIES = ("PERCEPTIONCANARY", "BELIEFCANARY", "SECRETEVENTCANARY", "SECRETFACTCANARY", "accuracy", "partial",
            "wrong")


def ev(type, subject="", object="", value="", **extra):
    return {"type": type, "subject": subject, "object": object, "value": value, **extra}


TURNS = [
    [ev("event", object="hid-key", value="Mara hid the iron key in the teapot.",
        data={"importance": 3, "participants": ["Mara"], "location": "Kitchen"}),
     ev("perception", "Mara", "hid-key", "PERCEPTIONCANARY I tucked it away.", data={"accuracy": "accurate"}),
     ev("perception", "Edrin", "hid-key", "PERCEPTIONCANARY a clink from the kitchen.",
        data={"mode": "heard", "accuracy": "partial", "gist": "PERCEPTIONCANARY"}),
     ev("belief", "Edrin", "hiding", "BELIEFCANARY Mara hides things.", data={"supports": ["hid-key"]}),
     ev("event", object="plan", value="SECRETEVENTCANARY Mara planned to flee.", narrator_only=True),
     ev("add_fact", value="SECRETFACTCANARY Mara owes the baker money.", narrator_only=True)],
    [ev("event", object="stew", value="Mara stirred the stew.", data={"location": "Kitchen"})],
    [],
]


def kitchen_story(owner):
    campaign, _ = worldfile.create_campaign(owner, worldfile.read(KITCHEN.read_bytes()))
    lines = [json.dumps({"action": {"mode": "do", "text": f"I wait, turn {n}."}, "reply": f"Time passes, turn {n}.",
                         "events": events}) for n, events in enumerate(TURNS, 1)]
    results = scripting.append(campaign, scripting.read("\n".join(lines)))
    assert all(r["status"] == "applied" for r in results), results
    campaign.refresh_from_db()
    return campaign


def summary_requests(server):
    return [body for body in server.bodies("/api/chat")
            if "summary" in (body.get("format") or {}).get("properties", {})]


async def test_the_summariser_gets_the_ranges_public_events_and_nothing_private(owner, narrator_server):
    campaign = await sync_to_async(kitchen_story)(owner)
    narrator_server.script_json({"summary": "Mara hid the key; later she stirred the stew."})
    await compaction.rebuild(campaign.pk)  # covers all but the newest turn: depths 0-4
    [request] = summary_requests(narrator_server)
    sent = "\n".join(message["content"] for message in request["messages"])
    assert "Events recorded in these passages:\n- Mara hid the iron key in the teapot.\n- Mara stirred the stew." \
        in sent
    for canary in CANARIES:
        assert canary not in sent, canary


async def test_an_event_outside_the_range_is_not_handed_over(owner, narrator_server):
    campaign = await sync_to_async(kitchen_story)(owner)
    narrator_server.script_json({"summary": "Mara hid the key."})
    path = await sync_to_async(lineage.path_of)(campaign)
    plan = compaction.budget.Compaction(path, 2, 400, await sync_to_async(prefix_hash)(campaign))
    await compaction.compact(plan)
    sent = "\n".join(m["content"] for m in summary_requests(narrator_server)[0]["messages"])
    assert "Mara hid the iron key in the teapot." in sent and "stew" not in sent


def test_the_source_hash_covers_the_events_of_the_range(owner):
    campaign = kitchen_story(owner)
    path = lineage.path_of(campaign)
    summary = checkpoints.write(path, 4, "Mara hid the key; the stew.", prefix_hash(campaign))
    assert checkpoints.problem(summary, path, fresh=True) == ""
    turn_two = Node.objects.get(campaign=campaign, depth=4)
    apply_events(turn_two, [ev("event", object="late", value="A late event in turn two.")], source="correction")
    assert "no longer matches its source hash" in checkpoints.problem(summary, path, fresh=True)


def test_older_checkpoints_are_written_again_under_the_new_schema(owner):
    assert (checkpoints.SCHEMA_VERSION, checkpoints.PROMPT_VERSION) == (2, 2)
