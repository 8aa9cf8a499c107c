"""The recall index: partition by owner, lineage, CJK pairs, the vector model pin, records in, accuracy never.

The Kitchen fixture (digest WP3): Mara hides the key in the teapot. Mara
witnessed it, Edrin heard it through the open door, Aldric was later told a
wrong version.
"""

import dataclasses
from typing import NamedTuple

import numpy as np
import pytest
from django.db import connection

from campaigns import lineage, story
from memory import recall, recall_index
from memory.models import RecallItem, RecallPin, RecallUse, RecallVector
from storyteller import vendors
from tests.campaigns.test_lineage import act

DAY = recall.DAY_MS


class Rec(NamedTuple):
    """A StateRecord's values, as the integration will hand them over."""

    slot: str
    kind: str
    value: str
    data: dict
    branch_id: int
    depth: int
    retracted: bool = False


@pytest.fixture
def kitchen(campaign):
    act(campaign, "Mara slips into the kitchen")
    anchor = (campaign.head_branch_id, campaign.head_depth)
    branch, depth = anchor
    event = Rec("event:e1", "event", "Mara hid the key in the teapot", {
        "importance": 3, "tags": ["secret", "key"], "participants": ["mara"], "location": "kitchen",
        "items": ["iron_key", "teapot"], "at_ms": 10 * DAY, "keywords": "Kitchen iron key teapot Mara"}, branch, depth)
    records = [
        event,
        Rec("perception:e1:mara", "perception", "I hid the key in the teapot where nobody looks",
            {"mode": "witnessed", "gist": "I hid the key somewhere", "accuracy": "accurate"}, branch, depth),
        Rec("perception:e1:edrin", "perception", "Someone hid something in the kitchen, by the teapot clink",
            {"mode": "heard", "gist": "someone hid something", "accuracy": "partial"}, branch, depth),
        Rec("perception:e1:aldric", "perception", "Mara hid a knife in the teapot",
            {"mode": "told", "gist": "Mara hid a knife", "accuracy": "wrong"}, branch, depth),
    ]
    recall_index.index(campaign.pk, recall_index.entries_from_records(records))
    return campaign


def at_head(campaign, owner, text, **options):
    campaign.refresh_from_db()
    situation = recall.Situation(text, **options.pop("situation", {}))
    return recall_index.recall(lineage.path_of(campaign), campaign, owner, situation, options.pop("now_ms", None),
                               **options)


def texts(result):
    return [memory.text for memory in result.memories]


# Partition (scenario 3)


def test_teapot_recalls_each_characters_own_version(kitchen):
    assert texts(at_head(kitchen, "mara", "the teapot")) == ["I hid the key in the teapot where nobody looks"]
    assert texts(at_head(kitchen, "edrin", "the teapot")) == [
        "Someone hid something in the kitchen, by the teapot clink"]
    assert texts(at_head(kitchen, "aldric", "the teapot")) == ["Mara hid a knife in the teapot"]
    assert texts(at_head(kitchen, "tom", "the teapot")) == []
    assert texts(at_head(kitchen, "", "teapot")) == ["Mara hid the key in the teapot"]  # the game master's event


def test_a_search_never_leaves_its_owner_even_with_a_similar_key(campaign):
    act(campaign, "x")
    anchor = (campaign.head_branch_id, campaign.head_depth)
    recall_index.index(campaign.pk, [
        recall_index.Entry("perception:e1:old_tom", "perception", "old_tom", "The lantern went dark", anchor),
        recall_index.Entry("perception:e1:old_tom_x", "perception", "old_tom_x", "The lantern was stolen", anchor),
    ])
    assert recall_index.scope_token(campaign.pk, "old_tom") != recall_index.scope_token(campaign.pk, "old_tom_x")
    found = recall_index.search_words(campaign.pk, "old_tom", "lantern")
    assert set(found) == set(RecallItem.objects.filter(owner="old_tom").values_list("id", flat=True))


def test_another_campaigns_rows_are_never_searched(kitchen, owner):
    from tests.conftest import make_campaign

    other = make_campaign(owner, title="Elsewhere")
    act(other, "y")
    recall_index.index(other.pk, [recall_index.Entry("perception:e9:mara", "perception", "mara",
                                                     "A teapot in another story", (other.head_branch_id, 2))])
    assert texts(at_head(kitchen, "mara", "teapot")) == ["I hid the key in the teapot where nobody looks"]


def test_each_owners_vector_matrix_holds_only_their_rows(kitchen):
    rows = dict(RecallItem.objects.filter(campaign=kitchen).values_list("owner", "id"))
    rng = np.random.default_rng(3)
    stored, note = recall_index.store_vectors(kitchen.pk, "nomic-embed-text",
                                              [(pk, rng.standard_normal(768)) for pk in rows.values()])
    assert (stored, note) == (4, "")
    query = rng.standard_normal(768)
    for owner in ("aldric", "mara"):
        at_head(kitchen, owner, "teapot", vector=tuple(query), model="nomic-embed-text")
    matrices = recall_index.cached_owners(kitchen.pk, "nomic-embed-text")
    assert matrices == {"aldric": {rows["aldric"]}, "mara": {rows["mara"]}}


# Records in, accuracy never (scenario 2's canary at the index)


def test_accuracy_labels_never_reach_the_index(kitchen):
    for row in RecallItem.objects.filter(campaign=kitchen).values():
        stored = " ".join(str(value) for value in row.values())
        for label in ("accurate", "partial", "wrong"):
            assert label not in stored


def test_a_perception_takes_its_events_importance_time_place_and_people(kitchen):
    row = RecallItem.objects.get(slot="perception:e1:edrin")
    assert (row.importance, row.at_ms, row.location, row.people, row.tags) == (
        3, 10 * DAY, "kitchen", ["mara"], ["key", "secret"])
    assert row.gist == "someone hid something" and row.owner == "edrin"


def test_a_belief_takes_its_evidences_highest_importance_and_is_disputed_when_contradicted(kitchen):
    kitchen.refresh_from_db()
    branch, depth = kitchen.head_branch_id, kitchen.head_depth
    records = [
        Rec("event:e1", "event", "Mara hid the key", {"importance": 4}, branch, depth),
        Rec("perception:e1:aldric", "perception", "Mara hid a knife", {}, branch, depth),
        Rec("belief:aldric:b1", "belief", "Mara is the thief", {
            "confidence": "likely", "supports": [], "contradicts": ["perception:e1:aldric"], "formed_at_ms": DAY,
            "about": ["mara"]}, branch, depth),
    ]
    [_, _, belief] = recall_index.entries_from_records(records)
    assert (belief.importance, belief.owner, belief.at_ms, belief.people) == (4, "aldric", DAY, ("mara",))
    recall_index.index(kitchen.pk, [belief])
    [recalled] = [m for m in at_head(kitchen, "aldric", "thief").memories if m.kind == "belief"]
    assert recalled.disputed


def test_bad_entries_are_refused_naming_what_to_change(campaign):
    anchor = (campaign.head_branch_id, 0)
    with pytest.raises(recall_index.InvalidEntry, match="an event has no owner"):
        recall_index.index(campaign.pk, [recall_index.Entry("event:e1", "event", "mara", "x", anchor)])
    with pytest.raises(recall_index.InvalidEntry, match="importance 7 is outside 1-5"):
        recall_index.index(campaign.pk, [recall_index.Entry("event:e1", "event", "", "x", anchor, importance=7)])
    with pytest.raises(recall_index.InvalidEntry, match="kind 'rumour'"):
        recall_index.index(campaign.pk, [recall_index.Entry("rumour:1", "rumour", "mara", "x", anchor)])
    with pytest.raises(recall_index.InvalidEntry, match="needs its text"):
        recall_index.index(campaign.pk, [recall_index.Entry("belief:mara:b1", "belief", "mara", " ", anchor)])
    assert not RecallItem.objects.exists()


def test_indexing_the_same_record_again_changes_nothing_or_counts_a_revision(kitchen):
    row = RecallItem.objects.get(slot="perception:e1:mara")
    entry = recall_index.Entry("perception:e1:mara", "perception", "mara", row.text, (row.branch_id, row.depth),
                               gist=row.gist, importance=3, tags=("secret", "key"), location="kitchen",
                               items=("iron_key", "teapot"), people=("mara",), at_ms=10 * DAY,
                               keywords="Kitchen iron key teapot Mara")
    assert recall_index.index(kitchen.pk, [entry]) == (0, 0)
    assert recall_index.index(kitchen.pk, [dataclasses.replace(entry, text="I hid the key")]) == (0, 1)
    row.refresh_from_db()
    assert (row.text, row.revision) == ("I hid the key", 1)


# Lineage (scenario 12)


def test_a_perception_on_an_abandoned_branch_is_never_recalled_and_returns_with_the_branch(campaign):
    act(campaign, "look around")
    act(campaign, "Mara hides the key")
    abandoned = campaign.head_branch
    recall_index.index(campaign.pk, [recall_index.Entry(
        "perception:e2:mara", "perception", "mara", "I hid the key in the teapot",
        (abandoned.pk, campaign.head_depth))])
    assert texts(at_head(campaign, "mara", "teapot")) == ["I hid the key in the teapot"]
    story.undo(campaign)
    act(campaign, "Mara walks to the yard instead")
    assert campaign.head_branch_id != abandoned.pk
    assert texts(at_head(campaign, "mara", "teapot")) == []
    story.switch_branch(campaign, abandoned)
    assert texts(at_head(campaign, "mara", "teapot")) == ["I hid the key in the teapot"]


def test_a_correction_at_a_deeper_node_wins_and_a_retraction_ends_the_slot(kitchen):
    kitchen.refresh_from_db()
    act(kitchen, "Aldric learns more")
    deeper = (kitchen.head_branch_id, kitchen.head_depth)
    fixed = recall_index.Entry("perception:e1:aldric", "perception", "aldric", "Mara hid a key in the teapot",
                               deeper, importance=3)
    recall_index.index(kitchen.pk, [fixed])
    assert texts(at_head(kitchen, "aldric", "teapot")) == ["Mara hid a key in the teapot"]
    story.undo(kitchen)  # before the correction: the old wording again
    assert texts(at_head(kitchen, "aldric", "teapot")) == ["Mara hid a knife in the teapot"]
    story.redo(kitchen)
    act(kitchen, "it was all a dream")
    gone = recall_index.Entry("perception:e1:aldric", "perception", "aldric", "",
                              (kitchen.head_branch_id, kitchen.head_depth), retracted=True)
    recall_index.index(kitchen.pk, [gone])
    assert texts(at_head(kitchen, "aldric", "teapot")) == []


def test_repeated_recall_on_the_line_lengthens_the_half_life(kitchen):
    kitchen.refresh_from_db()
    first = at_head(kitchen, "mara", "teapot", now_ms=20 * DAY)
    [row] = [r for r in first.report["scores"] if r["slot"] == "perception:e1:mara"]
    recall_index.record_use(kitchen.pk, (kitchen.head_branch_id, kitchen.head_depth), "mara",
                            ["perception:e1:mara"] * 2)
    again = at_head(kitchen, "mara", "teapot", now_ms=20 * DAY)
    [row2] = [r for r in again.report["scores"] if r["slot"] == "perception:e1:mara"]
    assert row2["half_life_days"] == pytest.approx(row["half_life_days"] * 2, abs=1e-3)
    assert RecallUse.objects.count() == 2


# CJK (scenario 11)


def test_a_cjk_word_finds_its_sentence_through_the_pairs_and_unicode61_alone_misses_it(campaign):
    act(campaign, "x")
    recall_index.index(campaign.pk, [recall_index.Entry(
        "perception:e3:mara", "perception", "mara", "她把钥匙藏在茶壶里",
        (campaign.head_branch_id, campaign.head_depth))])
    [pk] = RecallItem.objects.values_list("id", flat=True)
    assert list(recall_index.search_words(campaign.pk, "mara", "茶壶")) == [pk]
    assert texts(at_head(campaign, "mara", "茶壶在哪")) == ["她把钥匙藏在茶壶里"]
    with connection.cursor() as cursor:
        if vendors.is_postgres():
            # Negative control: PostgreSQL's parser, like unicode61, keeps the Han run as one word.
            cursor.execute("SELECT to_tsvector('storyteller', %s) @@ phraseto_tsquery('storyteller', %s)",
                           ["她把钥匙藏在茶壶里", "茶壶"])
            assert cursor.fetchone() == (False,)
            return
        # Negative control: the same query on the text column, which unicode61 alone tokenised.
        cursor.execute("SELECT rowid FROM memory_recallitem_fts WHERE memory_recallitem_fts MATCH %s",
                       ['text:"茶壶"'])
        assert cursor.fetchall() == []
        cursor.execute("CREATE VIRTUAL TABLE temp.plain USING fts5(text, tokenize='unicode61')")
        cursor.execute("INSERT INTO temp.plain(text) VALUES (%s)", ["她把钥匙藏在茶壶里"])
        cursor.execute("SELECT rowid FROM temp.plain WHERE plain MATCH %s", ['"茶壶"'])
        assert cursor.fetchall() == []
        cursor.execute("DROP TABLE temp.plain")


# Vectors (scenario 13)


def test_the_first_batch_pins_the_model_and_another_is_refused_until_the_index_is_reset(kitchen):
    ids = list(RecallItem.objects.values_list("id", flat=True))
    assert recall_index.store_vectors(kitchen.pk, "nomic-embed-text", [(ids[0], np.ones(768))]) == (1, "")
    assert (RecallPin.objects.get(campaign=kitchen).model, RecallPin.objects.get(campaign=kitchen).dims) == (
        "nomic-embed-text", 768)
    stored, note = recall_index.store_vectors(kitchen.pk, "mxbai-embed-large", [(ids[1], np.ones(1024))])
    assert stored == 0
    assert note == ("the recall index is pinned to nomic-embed-text (768-d) by its first vectors; "
                    "mxbai-embed-large (1024-d) vectors are refused until the index is reset")
    assert recall_index.store_vectors(kitchen.pk, "nomic-embed-text", [(ids[1], np.ones(512))])[0] == 0
    assert recall_index.reset_vectors(kitchen.pk) == 1
    assert recall_index.store_vectors(kitchen.pk, "mxbai-embed-large", [(ids[1], np.ones(1024))]) == (1, "")


def test_a_changed_text_drops_its_vector(kitchen):
    row = RecallItem.objects.get(slot="perception:e1:mara")
    recall_index.store_vectors(kitchen.pk, "nomic-embed-text", [(row.pk, np.ones(768))])
    recall_index.index(kitchen.pk, [recall_index.Entry("perception:e1:mara", "perception", "mara", "I hid it",
                                                       (row.branch_id, row.depth), importance=3)])
    assert not RecallVector.objects.filter(item=row).exists()
    assert [r.pk for r in recall_index.needing_vectors(kitchen.pk, "nomic-embed-text")] == sorted(
        RecallItem.objects.values_list("id", flat=True))


def test_with_vectors_the_semantic_channel_runs_and_without_the_embedder_words_and_cues_still_answer(kitchen):
    rows = dict(RecallItem.objects.values_list("owner", "id"))
    query = np.zeros(768)
    query[0] = 1
    vector = query.copy()
    vector[1] = 0.2
    recall_index.store_vectors(kitchen.pk, "nomic-embed-text", [(rows["mara"], vector)])
    hybrid = at_head(kitchen, "mara", "teapot", vector=tuple(query), model="nomic-embed-text")
    assert hybrid.report["channels"]["vectors"]["ran"] is True
    assert hybrid.report["scores"][0]["cosine"] == pytest.approx(1 / np.sqrt(1.04), abs=1e-4)
    down = at_head(kitchen, "mara", "teapot")  # the embedder is down: no query vector
    assert texts(down) == ["I hid the key in the teapot where nobody looks"]
    assert down.report["channels"]["vectors"] == {"ran": False, "weight": 1.5, "model": "", "floor": None,
                                                  "note": "the situation was not embedded; words and cues only"}


def test_a_query_from_another_model_than_the_pinned_one_is_not_compared(kitchen):
    rows = dict(RecallItem.objects.values_list("owner", "id"))
    recall_index.store_vectors(kitchen.pk, "nomic-embed-text", [(rows["mara"], np.ones(768))])
    result = at_head(kitchen, "mara", "teapot", vector=tuple(np.ones(1024)), model="mxbai-embed-large")
    assert result.report["channels"]["vectors"]["ran"] is False
    assert "holds nomic-embed-text vectors (768-d), not mxbai-embed-large (1024-d)" in \
        result.report["channels"]["vectors"]["note"]


def test_an_unmeasured_model_gets_no_semantic_channel(kitchen):
    rows = dict(RecallItem.objects.values_list("owner", "id"))
    recall_index.store_vectors(kitchen.pk, "all-minilm", [(rows["mara"], np.ones(384))])
    result = at_head(kitchen, "mara", "teapot", vector=tuple(np.ones(384)), model="all-minilm")
    assert result.report["channels"]["vectors"]["ran"] is False
    assert "all-minilm has no measured similarity floor" in result.report["channels"]["vectors"]["note"]


def test_rebuilding_the_index_changes_nothing_a_character_recalls(kitchen):
    before = texts(at_head(kitchen, "edrin", "teapot"))
    entries = recall_index.entries_from_records([])  # nothing: the index is emptied
    recall_index.rebuild(kitchen.pk, entries)
    assert texts(at_head(kitchen, "edrin", "teapot")) == []
    kitchen.refresh_from_db()
    branch, depth = kitchen.head_branch_id, kitchen.head_depth
    recall_index.rebuild(kitchen.pk, recall_index.entries_from_records([
        Rec("event:e1", "event", "Mara hid the key in the teapot", {"importance": 3}, branch, depth),
        Rec("perception:e1:edrin", "perception", "Someone hid something in the kitchen, by the teapot clink",
            {"gist": "someone hid something"}, branch, depth)]))
    assert texts(at_head(kitchen, "edrin", "teapot")) == before


def test_an_invalid_entry_stores_none_of_its_batch(campaign):
    anchor = (campaign.head_branch_id, 0)
    good = recall_index.Entry("event:e1", "event", "", "The bell rang", anchor)
    with pytest.raises(recall_index.InvalidEntry):
        recall_index.index(campaign.pk, [good, recall_index.Entry("event:e2", "event", "", "", anchor)])
    assert not RecallItem.objects.exists()


def test_a_large_batch_is_indexed_in_parts(campaign):
    anchor = (campaign.head_branch_id, 0)
    entries = [recall_index.Entry(f"event:e{i}", "event", "", f"The bell rang {i} times", anchor)
               for i in range(2_000)]
    assert recall_index.index(campaign.pk, entries) == (2_000, 0)
    assert recall_index.index(campaign.pk, entries) == (0, 0)
    ids = list(RecallItem.objects.values_list("id", flat=True))
    assert recall_index.store_vectors(campaign.pk, "nomic-embed-text", [(pk, np.ones(4)) for pk in ids]) == (2_000, "")


def test_a_later_perception_of_an_old_event_takes_the_events_values_from_the_line(kitchen):
    kitchen.refresh_from_db()
    branch, depth = kitchen.head_branch_id, kitchen.head_depth
    event = Rec("event:e1", "event", "Mara hid the key in the teapot", {"importance": 4, "at_ms": 10 * DAY,
                                                                         "location": "kitchen"}, branch, depth)
    later = Rec("perception:e1:tom", "perception", "Tom heard Mara hid something", {"mode": "told"}, branch, depth)
    [entry] = recall_index.entries_from_records([later], context=[event])
    assert (entry.importance, entry.at_ms, entry.location, entry.owner) == (4, 10 * DAY, "kitchen", "tom")


def test_the_cached_pool_follows_a_branch_switch_between_lines_with_as_many_rows(campaign):
    act(campaign, "look around")
    act(campaign, "Mara hides the key")
    first = campaign.head_branch
    recall_index.index(campaign.pk, [recall_index.Entry(
        "perception:e2:mara", "perception", "mara", "I hid the key in the teapot", (first.pk, campaign.head_depth))])
    assert texts(at_head(campaign, "mara", "key")) == ["I hid the key in the teapot"]
    story.undo(campaign)
    act(campaign, "Mara hides the key elsewhere")
    recall_index.index(campaign.pk, [recall_index.Entry(
        "perception:e2:mara", "perception", "mara", "I hid the key under the mat",
        (campaign.head_branch_id, campaign.head_depth))])
    assert texts(at_head(campaign, "mara", "key")) == ["I hid the key under the mat"]
    story.switch_branch(campaign, first)
    assert texts(at_head(campaign, "mara", "key")) == ["I hid the key in the teapot"]
    act(campaign, "time passes")  # the line grows: the same rows, the same pool
    assert texts(at_head(campaign, "mara", "key")) == ["I hid the key in the teapot"]
