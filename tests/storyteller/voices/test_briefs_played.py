"""What each character is told in a played game-master turn: its own mind, never another's (WP4 scenario 3).

The phase-1 tests (test_briefs.py) hold the world's canaries against
``briefs.compose``; here the canaries of minds and of the world file go in
through their real write paths (a world file, `story append`), a turn is
played against the fake model server, and every brief stored on its Round —
and every prompt a character was sent — is read for them.
"""

import json

import pytest
from asgiref.sync import sync_to_async

from campaigns import worldfile
from campaigns.models import Round
from storyteller import scripting
from tests.storyteller.voices.test_played import gm, play, says, scene_document

pytestmark = pytest.mark.django_db(transaction=True)

ACCURACY_LABELS = ("accurate", "partial", "wrong", "accuracy")


def canary_document():
    document = scene_document()
    for character in document["characters"]:
        if character["name"] == "Aldric":
            character["condition"] = {"public": "muddy", "inner": "CANARY-ALDRIC-INNER he means to steal the key",
                                      "activity": "sharpening a blade", "mood": "CANARY-ALDRIC-MOOD"}
            character["relationships"] = [{"to": "Mara", "label": "rival", "summary": "CANARY-ALDRIC-REL distrusts her"}]
        if character["name"] == "Mara":
            character["condition"] = {"public": "flustered", "inner": "CANARY-MARA-INNER the key is hers",
                                      "activity": "stirring the pot", "mood": "CANARY-MARA-MOOD"}
    document["items"] += [
        {"name": "silver ring", "holder": "Kitchen", "hidden": True},
        {"name": "tin box", "holder": "Kitchen", "container": "closed"},
        {"name": "gold coin", "holder": "tin box"},
        {"name": "brass lamp", "holder": "Hall"},
    ]
    return document


def ev(type, subject="", object="", value="", **extra):
    return {"type": type, "subject": subject, "object": object, "value": value, **extra}


MINDS = [
    ev("event", object="quarrel", value="Mara and Aldric quarrelled over the iron key.",
       data={"importance": 4, "tags": ["key", "quarrel"], "participants": ["Mara", "Aldric"], "location": "Kitchen",
             "items": ["iron key"]}),
    ev("perception", "Mara", "quarrel", "MARA-OWN Aldric shouted at me about the iron key.",
       data={"accuracy": "accurate"}),
    ev("perception", "Aldric", "quarrel", "CANARY-ALDRIC-SAW Mara hid the iron key from me.",
       data={"accuracy": "wrong", "gist": "CANARY-ALDRIC-GIST a quarrel"}),
    ev("belief", "Aldric", "thief", "CANARY-ALDRIC-BELIEF Mara is a thief who took the iron key.",
       data={"confidence": "sure", "supports": ["quarrel"], "about": ["Mara", "iron key"]}),
]


@sync_to_async
def canary_game(owner):
    campaign, _ = worldfile.create_campaign(owner, worldfile.read(json.dumps(canary_document()).encode()),
                                            game_master=True)
    line = {"action": {"mode": "do", "text": "I watch them"}, "reply": "They quarrel over the key.", "events": MINDS}
    results = scripting.append(campaign, scripting.read(json.dumps(line)))
    assert all(r["status"] == "applied" for r in results), results
    campaign.refresh_from_db()
    return campaign


@sync_to_async
def briefs_of(node_id):
    return {who: brief["text"] for row in Round.objects.filter(node_id=node_id) for who, brief in row.briefs.items()}


def character_prompts(server):
    return ["\n".join(m["content"] for m in body["messages"]) for body in server.bodies("/api/chat")
            if isinstance(body.get("format"), dict) and "speech" in body["format"]["properties"]]


async def test_no_brief_holds_another_characters_mind_nor_anything_hidden_elsewhere_or_labelled(
        owner, narrator_server):
    campaign = await canary_game(owner)
    narrator_server.script_gm(gm([("Mara", "asked about the key"), ("Aldric", "he accuses her")]))
    narrator_server.script_characters(says("It is mine."), says("Thief."))
    result, _ = await play(campaign, "I ask about the iron key and the quarrel")
    briefs = await briefs_of(result.node_id)
    mara, aldric = briefs["mara"], briefs["aldric"]
    # Each remembers its own version (the recall works, so the absence of the other's below means something).
    assert "MARA-OWN Aldric shouted at me" in mara
    assert "CANARY-ALDRIC-BELIEF" in aldric
    assert "CANARY-MARA-INNER" in mara and "CANARY-ALDRIC-INNER" in aldric, "each knows its own inner state"
    for canary in ("CANARY-ALDRIC-SAW", "CANARY-ALDRIC-GIST", "CANARY-ALDRIC-BELIEF", "CANARY-ALDRIC-INNER",
                   "CANARY-ALDRIC-MOOD", "CANARY-ALDRIC-REL"):
        assert canary not in mara, canary
    for canary in ("MARA-OWN", "CANARY-MARA-INNER", "CANARY-MARA-MOOD"):
        assert canary not in aldric, canary
    for text in (mara, aldric, *character_prompts(narrator_server)):
        assert "silver ring" not in text, "a hidden item"
        assert "gold coin" not in text, "what is shut in a closed container"
        assert "brass lamp" not in text, "another place's contents"
        for label in ACCURACY_LABELS:
            assert label not in text.lower().replace("hand it over", ""), label
    assert "Aldric (muddy; sharpening a blade)" in mara, "only what shows of another: public state and activity"
    sent = character_prompts(narrator_server)
    assert len(sent) == 2 and "CANARY-ALDRIC" not in sent[0] and "MARA-OWN" not in sent[1]


    @sync_to_async
    def recalled():
        from memory.models import RecallUse

        return {(use.owner, use.slot.split(":")[0]) for use in RecallUse.objects.filter(campaign_id=campaign.pk)
                if use.owner}

    # What each brief recalled is counted once more on the line (its memories fade slower), in the turn's commit.
    uses = await recalled()
    assert ("mara", "perception") in uses and ("aldric", "belief") in uses
