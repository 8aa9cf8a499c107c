"""The WP3 scenarios on the Kitchen, through the records: typed events in, a character's recall out (issue 14).

The digest's scenarios 6-11 (fusion, over-retrieval, rerank, MMR, association,
CJK) are pure and live in tests/memory/test_recall.py and
tests/memory/test_recall_index.py; 14 (the events section) in
test_minds_context.py; 15 (the summariser) in test_minds_summary.py; the
recorder's side of 2 in test_minds_step.py. Here the rest, from records
written by `story append` to what each character recalls.
"""

import json

import numpy as np

from campaigns import lineage, story, worldfile
from campaigns.models import Campaign, Node, StateEvent, StateRecord
from campaigns.state import state_for_turn
from campaigns.state.minds import minds as mind_events
from memory import recall, recall_index
from memory.models import RecallItem
from storyteller import scripting
from tests.campaigns.test_minds import KITCHEN

DAY = 86_400_000
START = 1_900_000_000_000  # the story clock's start, UTC ms


def ev(type, subject="", object="", value="", **extra):
    return {"type": type, "subject": subject, "object": object, "value": value, **extra}


HID = ev("event", object="hid-key", value="Mara hid the iron key in the teapot.",
         data={"importance": 3, "tags": ["secret", "key"], "participants": ["Mara"], "location": "Kitchen",
               "items": ["iron key", "teapot"], "gist": "Mara hid something in the kitchen."})
MARA_SAW = ev("perception", "Mara", "hid-key", "I hid the key in the teapot.",
              data={"accuracy": "accurate", "gist": "I hid the key."})
EDRIN_HEARD = ev("perception", "Edrin", "hid-key", "Someone hid something in the kitchen.",
                 data={"mode": "heard", "accuracy": "partial", "gist": "A noise from the kitchen."})
ALDRIC_TOLD = ev("perception", "Aldric", "hid-key", "Mara hid a knife in the teapot.",
                 data={"mode": "told", "accuracy": "wrong", "gist": "Mara hid a knife."})


def kitchen(owner, **fields):
    campaign, _ = worldfile.create_campaign(owner, worldfile.read(KITCHEN.read_bytes()), **fields)
    return campaign


def play(campaign, *turns):
    """Play ``turns`` through `story append`'s code; a turn is a list of events (or {"corrections": [...]})."""
    lines = []
    for n, events in enumerate(turns, 1):
        line = {"action": {"mode": "do", "text": f"turn {n}"}, "reply": f"Turn {n}."}
        line.update(events if isinstance(events, dict) else {"events": events})
        lines.append(json.dumps(line))
    results = scripting.append(campaign, scripting.read("\n".join(lines)))
    campaign.refresh_from_db()
    return results


def start_clock(campaign, at_ms):
    """Write the story clock's record at the head, as the story clock's own events will (issue 13)."""
    campaign.refresh_from_db()
    node = Node.objects.get(branch_id=campaign.head_branch_id, depth=campaign.head_depth)
    event = StateEvent.objects.create(campaign=campaign, node=node, source="correction",
                                      payload={"type": "clock_start"}, status="applied")
    StateRecord.objects.create(campaign=campaign, branch_id=node.branch_id, depth=node.depth, slot="clock",
                               kind="clock", value=str(at_ms), data={"mode": "simulated", "time_zone": "UTC"},
                               authority="state", event=event)


def remembers(campaign, who, text, *, flaky=True, vector=None, model=""):
    path = lineage.path_of(Campaign.objects.get(pk=campaign.pk))
    now = mind_events.clock_ms(state_for_turn(path, campaign, text))
    situation = recall.Situation(text=text)
    return recall_index.recall(path, campaign, who, situation, now, flaky=flaky, vector=vector, model=model)


def texts(found):
    return [memory.text for memory in found.memories]


# 1. Sealing


def test_the_event_is_sealed_and_only_perceptions_change(owner):
    campaign = kitchen(owner)
    play(campaign, [HID, MARA_SAW])
    results = play(campaign, [ev("event", object="hid-key", value="Mara hid a knife.")],
                   [ev("perception_edit", "Mara", "hid-key", "I tucked the key into the teapot."), ALDRIC_TOLD])
    assert results[0]["status"] == "rejected" and results[0]["reason"].startswith("events are sealed")
    assert [r["status"] for r in results[1:]] == ["applied", "applied"]
    [event] = StateRecord.objects.filter(kind="event")
    assert event.value == "Mara hid the iron key in the teapot."
    assert texts(remembers(campaign, "mara", "teapot")) == ["I tucked the key into the teapot."]


# 2 and 3. Perceptions by presence, and each character's own version


def test_teapot_recalls_each_characters_own_version_and_nothing_for_one_with_none(owner):
    campaign = kitchen(owner)
    results = play(campaign, [HID, MARA_SAW, EDRIN_HEARD,
                              ev("perception", "Aldric", "hid-key", "Mara hid it.", data={"mode": "witnessed"})],
                   [ALDRIC_TOLD])
    assert results[3]["status"] == "rejected" and "Aldric was not present or nearby" in results[3]["reason"]
    assert texts(remembers(campaign, "mara", "teapot")) == ["I hid the key in the teapot."]
    assert texts(remembers(campaign, "protagonist", "teapot")) == ["Someone hid something in the kitchen."]
    assert texts(remembers(campaign, "aldric", "teapot")) == ["Mara hid a knife in the teapot."]
    play(campaign, {"corrections": [ev("introduce", "Tom", "character", "a boy")]})
    assert texts(remembers(campaign, "tom", "teapot")) == []


def test_no_accuracy_label_reaches_what_a_character_recalls(owner):
    campaign = kitchen(owner)
    play(campaign, [HID, MARA_SAW, EDRIN_HEARD], [ALDRIC_TOLD])
    assert not RecallItem.objects.filter(text__icontains="wrong").exists()
    for who in ("mara", "protagonist", "aldric"):
        found = remembers(campaign, who, "teapot key knife")
        recalled = json.dumps([memory._asdict() for memory in found.memories])
        for label in ("accuracy", "accurate", "partial", "wrong"):
            assert label not in recalled, (who, label)


# 4. Fading by story time


def test_fading_follows_the_story_clock(owner):
    campaign = kitchen(owner)
    start_clock(campaign, START)
    trifle = ev("event", object="kettle", value="The kettle whistled.", data={"importance": 1, "location": "Kitchen"})
    vow = ev("event", object="vow", value="Mara swore to keep the secret.", data={"importance": 5,
                                                                                 "location": "Kitchen"})
    play(campaign, [trifle, ev("perception", "Mara", "kettle", "The kettle whistled at me."), vow,
                    ev("perception", "Mara", "vow", "I swore on my mother's grave to keep it.",
                       data={"gist": "I made a promise."})])
    assert StateRecord.objects.get(slot="event:kettle").data["at_ms"] == START + 30_000, "after the turn's round"

    start_clock(campaign, START + 6 * DAY)
    rows = {row["slot"]: row for row in remembers(campaign, "mara", "kettle").report["scores"]}
    assert abs(rows["perception:kettle:mara"]["retention"] / 0.5 - 1) <= recall.JITTER + 0.01

    start_clock(campaign, START + 30 * DAY)
    found = remembers(campaign, "mara", "kettle")
    assert "perception:kettle:mara" not in {row["slot"] for row in found.report["scores"]}, "R 0.031: faded away"

    start_clock(campaign, START + 400 * DAY)
    assert texts(remembers(campaign, "mara", "swore grave")) == ["I made a promise."], "importance 5: the gist"
    exact = texts(remembers(campaign, "mara", "swore grave", flaky=False))
    assert "I swore on my mother's grave to keep it." in exact and "I made a promise." not in exact, \
        "flaky off: the exact wording"


def test_fading_counts_story_time_not_turns_so_500_quick_turns_fade_nothing_away(owner):
    campaign = kitchen(owner)
    play(campaign, [ev("event", object="kettle", value="The kettle whistled.", data={"importance": 1}),
                    ev("perception", "Mara", "kettle", "The kettle whistled at me.")])
    play(campaign, *([[]] * 500))  # 500 rounds of 30 s: about four hours of story time
    found = remembers(campaign, "mara", "kettle")
    assert texts(found) == ["The kettle whistled at me."] and found.report["clock"] is True
    [row] = [row for row in found.report["scores"] if row["slot"] == "perception:kettle:mara"]
    assert row["retention"] > 0.9, "a trifle fades over days of story time, not over turns"


# 5. A disputed belief, and its folded evidence


def test_a_contradicted_belief_is_recalled_as_disputed_and_never_beside_its_evidence(owner):
    campaign = kitchen(owner)
    play(campaign, [HID, EDRIN_HEARD,
                    ev("event", object="footprints", value="Aldric's muddy boots stood by the back door.",
                       data={"importance": 2, "participants": ["Aldric"], "location": "Pantry"}),
                    ev("perception", "Edrin", "footprints", "Aldric was in the pantry all evening.",
                       data={"mode": "witnessed"})],
         [ev("belief", "Edrin", "thief", "Aldric is the thief.",
             data={"confidence": "likely", "supports": ["hid-key"], "contradicts": ["footprints"]})])
    found = remembers(campaign, "protagonist", "thief kitchen hid something")
    [belief] = [m for m in found.memories if m.kind == "belief"]
    assert belief.disputed and belief.text == "Aldric is the thief."
    assert "perception:hid-key:protagonist" not in {m.slot for m in found.memories}
    rows = {row["slot"]: row for row in found.report["scores"]}
    assert rows["perception:hid-key:protagonist"]["outcome"] == "folded into a chosen belief"


# 12. Lineage


def test_a_perception_on_an_abandoned_branch_is_never_recalled_and_returns_with_the_branch(owner):
    campaign = kitchen(owner)
    play(campaign, [HID, MARA_SAW], [])
    play(campaign, [ALDRIC_TOLD])
    abandoned = Campaign.objects.get(pk=campaign.pk).head_branch
    story.undo(campaign)
    story.undo(Campaign.objects.get(pk=campaign.pk))
    campaign.refresh_from_db()
    play(campaign, [ev("perception", "Aldric", "hid-key", "Mara hid a spoon.", data={"mode": "told"})])
    assert texts(remembers(campaign, "aldric", "teapot knife spoon")) == ["Mara hid a spoon."]
    story.switch_branch(Campaign.objects.get(pk=campaign.pk), abandoned)
    assert texts(remembers(campaign, "aldric", "teapot knife spoon")) == ["Mara hid a knife in the teapot."]


# 13. Vectors: pinned by the first batch; a corrected wording has none until embedded again


def test_the_first_vectors_pin_the_model_and_a_corrected_wording_waits_for_its_own(owner):
    campaign = kitchen(owner)
    play(campaign, [HID, MARA_SAW])
    pending = list(recall_index.needing_vectors(campaign.pk, "nomic-embed-text"))
    vectors = np.random.default_rng(1).standard_normal((len(pending), 768)).astype(np.float32)
    assert recall_index.store_vectors(campaign.pk, "nomic-embed-text", list(zip([r.pk for r in pending], vectors)))[0]
    stored, note = recall_index.store_vectors(campaign.pk, "all-minilm", [(pending[0].pk, np.ones(384))])
    assert stored == 0 and "pinned to nomic-embed-text (768-d)" in note
    play(campaign, {"corrections": [ev("perception_edit", "Mara", "hid-key", "I tucked the key into the teapot.")]})
    assert [r.text for r in recall_index.needing_vectors(campaign.pk, "nomic-embed-text")] == [
        "I tucked the key into the teapot."]
    found = remembers(campaign, "mara", "teapot", vector=tuple(vectors[1]), model="nomic-embed-text")
    assert texts(found) == ["I tucked the key into the teapot."]
