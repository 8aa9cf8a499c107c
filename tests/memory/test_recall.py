"""Per-character recall, pure (seed 002 角色如何回忆 and 淡忘; digest WP3 scenarios 4-10)."""

import math

import numpy as np
import pytest

from memory import recall

DAY = recall.DAY_MS
START = 1_000 * DAY  # story time of the first record in these tests


def item(pk, text, *, kind="perception", importance=3, people=(), tags=(), location="", items=(), at_ms=START,
         depth=None, gist="", uses=0, supports=(), contradicts=(), slot=None):
    return recall.Item(
        id=pk, slot=slot or f"{kind}:{pk}", kind=kind, text=text, gist=gist, importance=importance,
        people=frozenset(people), tags=frozenset(tags), location=location, items=frozenset(items), at_ms=at_ms,
        depth=pk if depth is None else depth, terms=recall.terms(f"{text} {gist}"), uses=uses,
        supports=frozenset(supports), contradicts=frozenset(contradicts))


def scores_by_id(result):
    return {row["id"]: row for row in result.report["scores"]}


def unit(*values, dims=8):
    v = np.zeros(dims, np.float32)
    v[: len(values)] = values
    return v / np.linalg.norm(v)


# Fusion (scenario 6)


def test_without_vectors_the_fused_score_is_the_mean_of_the_cue_and_word_scores():
    items = [item(1, "Mara hid the key", people={"mara"}, location="kitchen"),
             item(2, "The kettle boiled", location="kitchen")]
    situation = recall.Situation("where is the key", people=frozenset({"mara"}), location="kitchen")
    result = recall.rank(items, situation, words={1: 4.0, 2: 1.0})
    rows = scores_by_id(result)
    # Cue points: 1 = Mara + the kitchen = 2 (best), 2 = the kitchen = 1; words 4 (best) and 1.
    assert rows[1]["cue"] == 1.0 and rows[2]["cue"] == 0.5
    assert rows[1]["words"] == 1.0 and rows[2]["words"] == 0.25
    assert rows[1]["fused"] == 1.0
    assert rows[2]["fused"] == pytest.approx((0.5 + 0.25) / 2, abs=1e-4)
    assert rows[2]["vectors"] is None
    assert result.report["channels"]["vectors"]["ran"] is False


def test_with_vectors_the_semantic_channel_weighs_one_and_a_half():
    items = [item(1, "Mara hid the key", location="kitchen"), item(2, "The kettle boiled", location="kitchen")]
    situation = recall.Situation("the key", location="kitchen")
    cosines = np.array([0.6, 0.9])
    result = recall.rank(items, situation, words={1: 2.0}, cosines=cosines, floor=0.5, model="nomic-embed-text")
    rows = scores_by_id(result)
    # cue 1 and 1, words 1 and 0, vectors 0.6/0.9 and 1.
    assert rows[1]["fused"] == pytest.approx((1 + 1 + 1.5 * 0.6 / 0.9) / 3.5, abs=1e-4)
    assert rows[2]["fused"] == pytest.approx((1 + 0 + 1.5) / 3.5, abs=1e-4)
    assert result.report["channels"]["vectors"]["ran"] is True


def test_a_cosine_under_the_floor_is_not_counted():
    items = [item(1, "Mara hid the key"), item(2, "The kettle boiled")]
    cosines = np.array([0.49, 0.8])
    result = recall.rank(items, recall.Situation("the key"), words={1: 1.0}, cosines=cosines, floor=0.5)
    rows = scores_by_id(result)
    assert rows[1]["vectors"] == 0.0 and rows[1]["cosine"] == 0.49
    assert rows[1]["fused"] == pytest.approx(1.0 / 2.5, abs=1e-4)  # words only, over words + vectors


def test_a_channel_that_did_not_run_takes_no_part_in_the_average():
    assert recall.fuse({"cue": np.array([1.0]), "words": None, "vectors": None}).tolist() == [1.0]
    assert recall.fuse({"cue": None, "words": None}) is None
    assert recall.fuse({"cue": np.array([0.5]), "vectors": np.array([1.0])}).tolist() == [pytest.approx(2 / 2.5)]


def test_the_cue_channel_does_not_run_when_the_situation_offers_no_cue():
    result = recall.rank([item(1, "Mara hid the key")], recall.Situation(""), words=None)
    assert result.report["channels"]["cue"]["ran"] is False
    assert result.report["channels"]["words"]["ran"] is False


# The semantic floor (D5)


def test_only_a_measured_model_gets_the_semantic_channel_and_the_report_says_why():
    assert recall.semantic_floor("nomic-embed-text:latest") == 0.50
    assert recall.semantic_floor("library/nomic-embed-text") == 0.50
    assert recall.semantic_floor("mxbai-embed-large") is None
    items = [item(1, "Mara hid the key"), item(2, "The kettle boiled")]
    result = recall.rank(items, recall.Situation("key"), words={1: 1.0}, cosines=np.array([0.9, 0.95]),
                         floor=recall.semantic_floor("mxbai-embed-large"), model="mxbai-embed-large")
    vectors = result.report["channels"]["vectors"]
    assert vectors["ran"] is False
    assert "mxbai-embed-large has no measured similarity floor" in vectors["note"]
    assert scores_by_id(result)[2]["fused"] == 0.0


# Cues


def test_relationship_strength_makes_a_person_a_stronger_cue():
    items = [item(1, "Edrin lied to me", people={"edrin"}), item(2, "Aldric lied to me", people={"aldric"})]
    situation = recall.Situation(people=frozenset({"edrin", "aldric"}), strength={"edrin": 0.8})
    assert recall.cue_scores(items, situation).tolist() == [1.8, 1.0]
    assert recall.strength(0.6, 1.0) == 0.8
    assert recall.strength(-1.0, -0.5) == 0.0


def test_names_and_aliases_are_found_in_the_words_of_the_scene():
    aliases = {"mara": "mara", "the widow": "mara", "aldric": "aldric", "玛拉": "mara"}
    assert recall.mentioned("Where did the widow go?", aliases) == {"mara"}
    assert recall.mentioned("Aldric's coat", aliases) == {"aldric"}
    assert recall.mentioned("Maraschino cherries", aliases) == frozenset()
    assert recall.mentioned("我问玛拉钥匙在哪", aliases) == {"mara"}


def test_shared_tags_and_items_are_cues():
    items = [item(1, "x", tags={"secret", "key"}, items={"iron_key"}), item(2, "y", tags={"weather"})]
    situation = recall.Situation("a secret", items=frozenset({"iron_key"}))
    assert recall.cue_scores(items, situation).tolist() == [2.0, 0.0]


# Over-retrieval (scenario 7)


def test_over_retrieval_keeps_four_times_the_recall_at_most_sixty():
    assert recall.candidate_count(12, 4) == 48
    assert recall.candidate_count(20, 4) == 60
    items = [item(pk, f"memory {pk}") for pk in range(1, 101)]
    assert recall.rank(items, recall.Situation("memory"), recall=12).report["candidates"] == 48
    assert recall.rank(items, recall.Situation("memory"), recall=20).report["candidates"] == 60
    assert len(recall.rank(items, recall.Situation("memory"), recall=20).memories) == 20


# Rerank (scenario 8)


def test_a_reranker_gives_seventy_percent_rerank_and_thirty_fused():
    items = [item(1, "Mara hid the key"), item(2, "The kettle boiled")]
    seen = {}

    def reranker(query, documents):
        seen.update(query=query, documents=documents)
        return [0.2 if "key" in d else 0.9 for d in documents]

    result = recall.rank(items, recall.Situation("the key"), words={1: 1.0}, reranker=reranker)
    rows = scores_by_id(result)
    assert rows[1]["relevance"] == pytest.approx(0.7 * 0.2 + 0.3 * 1.0, abs=1e-4)
    assert rows[2]["relevance"] == pytest.approx(0.7 * 0.9 + 0.3 * 0.0, abs=1e-4)
    assert result.report["rerank"] == {"used": True, "note": ""}
    assert seen["query"] == "the key" and sorted(seen["documents"]) == ["Mara hid the key", "The kettle boiled"]


class ServiceError(Exception):
    pass


def test_a_failing_reranker_leaves_the_fused_score_and_the_report_says_why():
    items = [item(1, "Mara hid the key"), item(2, "The kettle boiled")]

    def reranker(query, documents):
        raise ServiceError("HTTP 500 from the reranking service")

    result = recall.rank(items, recall.Situation("the key"), words={1: 1.0}, reranker=reranker)
    rows = scores_by_id(result)
    assert rows[1]["relevance"] == rows[1]["fused"] == 1.0
    assert result.report["rerank"]["used"] is False
    assert "HTTP 500" in result.report["rerank"]["note"] and "fused scores only" in result.report["rerank"]["note"]


@pytest.mark.parametrize("answer, says", [([0.5], "returned 1 scores for 2 candidates"),
                                          ([0.5, 1.5], "outside 0-1"), ([0.5, "high"], "not a number")])
def test_a_reranker_answering_nonsense_is_not_used(answer, says):
    items = [item(1, "Mara hid the key"), item(2, "The kettle boiled")]
    result = recall.rank(items, recall.Situation("key"), words={1: 1.0}, reranker=lambda q, d: answer)
    assert result.report["rerank"]["used"] is False and says in result.report["rerank"]["note"]


def test_without_a_reranker_the_report_says_so():
    result = recall.rank([item(1, "x")], recall.Situation("x"), words={1: 1.0})
    assert result.report["rerank"] == {"used": False, "note": "no reranker is configured; fused scores only"}


# Diversity (scenario 9)


def test_mmr_chooses_the_distinct_memory_before_the_second_duplicate_and_answers_in_event_order():
    items = [item(3, "Mara hid the key in the teapot", importance=3, at_ms=START + 3),
             item(1, "Mara hid the key in the teapot, I think", importance=3, at_ms=START + 1),
             item(2, "Mara locked the teapot cupboard", importance=3, at_ms=START + 2)]
    situation = recall.Situation("Mara key teapot")
    words = {3: 3.0, 1: 3.0, 2: 2.5}
    matrix = np.vstack([unit(1, 0), unit(1, 0.02), unit(0.3, 1)])
    result = recall.rank(items, situation, words=words, recall=2, vectors=(matrix, np.arange(3)))
    assert {m.id for m in result.memories} == {3, 2} or {m.id for m in result.memories} == {1, 2}
    assert 2 in [m.id for m in result.memories]
    without = recall.rank(items, situation, words=words, recall=2, diversity=0.0, vectors=(matrix, np.arange(3)))
    assert {m.id for m in without.memories} == {3, 1}  # no discount: both duplicates outrank the distinct one
    everything = recall.rank(items, situation, words=words, recall=3)
    assert [m.id for m in everything.memories] == [1, 2, 3]  # story order, not score order


def test_without_vectors_diversity_uses_word_overlap():
    items = [item(1, "Mara hid the key in the teapot"), item(2, "Mara hid the key in the teapot again"),
             item(3, "Edrin fed the goats at dawn")]
    words = {1: 3.0, 2: 3.0, 3: 2.4}
    result = recall.rank(items, recall.Situation("teapot key goats"), words=words, recall=2)
    assert 3 in [m.id for m in result.memories]
    assert recall.jaccard(frozenset("ab"), frozenset("bc")) == 1 / 3


# Association (scenario 10)


def test_a_direct_hit_brings_at_most_two_important_items_sharing_a_tag_never_a_minor_one():
    hit = item(1, "Mara hid the key in the teapot", tags={"key"}, importance=3)
    related = [item(2, "The key opens the vault", tags={"key"}, importance=4),
               item(3, "Aldric lost a key once", tags={"key"}, importance=3),
               item(4, "A key was sold at market", tags={"key"}, importance=5),
               item(5, "The key is rusty", tags={"key"}, importance=2)]
    unrelated = [item(6, "The goats escaped", tags={"goats"}, importance=5)]
    items = [hit, *related, *unrelated]
    result = recall.rank(items, recall.Situation("teapot"), words={1: 1.0}, recall=1)
    assert result.report["chosen"] == [1]
    associated = [m for m in result.memories if m.associated]
    assert len(associated) == 2
    assert {m.id for m in associated} <= {2, 3, 4}
    assert 5 not in result.report["associated"] and 6 not in result.report["associated"]


def test_no_association_without_a_direct_hit():
    items = [item(1, "Mara hid the key", tags={"key"}, importance=4), item(2, "The key opens the vault",
                                                                            tags={"key"}, importance=4)]
    result = recall.rank(items, recall.Situation("the weather"), words={}, recall=1)
    assert result.memories and not result.memories[0].hit
    assert result.report["associated"] == []


def test_association_can_be_turned_off():
    items = [item(1, "Mara hid the key", tags={"key"}), item(2, "The key opens the vault", tags={"key"}, importance=4)]
    result = recall.rank(items, recall.Situation("teapot"), words={1: 1.0}, recall=1, associate=0)
    assert result.report["associated"] == []


def test_recent_important_memories_appear_when_nothing_is_cued():
    items = [item(1, "An old trifle", importance=1, at_ms=START), item(2, "The fire at the mill", importance=5,
                                                                        at_ms=START + DAY)]
    result = recall.rank(items, recall.Situation(""), now_ms=START + 2 * DAY, recall=1)
    assert [m.id for m in result.memories] == [2]
    assert result.memories[0].hit is False


# Fading (scenario 4)


def test_an_importance_one_perception_keeps_half_after_six_story_days():
    memory = item(1, "The kettle boiled", importance=1, gist="something boiled")
    value, life = recall.retention(memory, START + 6 * DAY)
    assert life == pytest.approx(6 * recall.jitter(memory.slot))
    assert value == pytest.approx(0.5 ** (1 / recall.jitter(memory.slot)))
    assert 0.48 < value < 0.52


def test_an_importance_one_perception_is_no_candidate_after_thirty_days():
    memory = item(1, "The kettle boiled", importance=1)
    value, _ = recall.retention(memory, START + 30 * DAY)
    assert value < recall.DROP_BELOW  # 0.5^5 = 0.031, within the jitter
    result = recall.rank([memory], recall.Situation("kettle"), words={1: 1.0}, now_ms=START + 30 * DAY)
    assert result.memories == [] and result.report["faded"] == 1 and result.report["candidates"] == 0


def test_an_importance_five_perception_is_recalled_as_its_gist_after_four_hundred_days():
    memory = item(1, "Mara hid the iron key in the blue teapot", importance=5, gist="Mara hid something")
    value, _ = recall.retention(memory, START + 400 * DAY)
    assert value < recall.GIST_BELOW
    [recalled] = recall.rank([memory], recall.Situation(""), now_ms=START + 400 * DAY).memories
    assert (recalled.text, recalled.wording) == ("Mara hid something", "gist")


def test_importance_five_keeps_its_gist_even_below_the_drop():
    memory = item(1, "Mara hid the iron key", importance=5, gist="Mara hid something")
    value, _ = recall.retention(memory, START + 2000 * DAY)
    assert value < recall.DROP_BELOW
    [recalled] = recall.rank([memory], recall.Situation(""), now_ms=START + 2000 * DAY).memories
    assert recalled.text == "Mara hid something"


def test_flaky_off_keeps_the_exact_wording():
    memory = item(1, "Mara hid the iron key in the blue teapot", importance=5, gist="Mara hid something")
    [recalled] = recall.rank([memory], recall.Situation(""), now_ms=START + 400 * DAY, flaky=False).memories
    assert (recalled.text, recalled.wording, recalled.retention) == (memory.text, "exact", 1.0)
    trivial = item(2, "The kettle boiled", importance=1)
    assert recall.rank([trivial], recall.Situation(""), now_ms=START + 400 * DAY, flaky=False).memories


def test_without_a_story_clock_nothing_fades():
    memory = item(1, "The kettle boiled", importance=1, gist="something", at_ms=None)
    [recalled] = recall.rank([memory], recall.Situation(""), now_ms=None).memories
    assert (recalled.wording, recalled.retention) == ("exact", 1.0)
    assert recall.retention(item(2, "x", at_ms=START), None) == (1.0, None)


def test_the_half_life_doubles_per_importance_and_is_four_times_longer_for_a_belief():
    for importance, days in [(1, 6), (2, 12), (3, 24), (4, 48), (5, 96)]:
        assert recall.half_life_days("perception", importance, key="k") == pytest.approx(days * recall.jitter("k"))
    assert recall.half_life_days("belief", 2, key="k") == pytest.approx(48 * recall.jitter("k"))


def test_importance_two_after_thirty_days_and_a_folded_perception_after_twelve():
    memory = item(1, "x", importance=2)
    expected = 0.5 ** (30 / (12 * recall.jitter(memory.slot)))
    assert recall.retention(memory, START + 30 * DAY)[0] == pytest.approx(expected)
    folded = item(2, "y", importance=3)
    value, life = recall.retention(folded, START + 12 * DAY, folded=True)
    assert life == pytest.approx(12 * recall.jitter(folded.slot)) and 0.48 < value < 0.52


def test_each_earlier_recall_extends_the_half_life_by_half():
    assert recall.half_life_days("perception", 1, uses=2, key="k") == pytest.approx(12 * recall.jitter("k"))


def test_the_jitter_is_deterministic_and_within_five_percent():
    values = [recall.jitter(f"perception:e{i}:mara") for i in range(500)]
    assert all(0.95 <= v <= 1.05 for v in values)
    assert max(values) - min(values) > 0.08  # it does vary
    assert recall.jitter("perception:e1:mara") == recall.jitter("perception:e1:mara")


def test_a_cue_brings_back_part_of_faded_wording():
    memory = item(1, "Mara hid the iron key in the teapot", importance=3, gist="Mara hid something",
                  people={"mara"})
    now = START + 30 * DAY  # R ≈ 0.42: the gist, uncued
    assert recall.rank([memory], recall.Situation(""), now_ms=now).memories[0].wording == "gist"
    cued = recall.rank([memory], recall.Situation(people=frozenset({"mara"})), now_ms=now).memories[0]
    assert cued.wording == "exact"


# Beliefs (scenario 5)


def test_a_belief_with_contradicting_evidence_is_disputed_and_its_evidence_never_comes_with_it():
    p1 = item(1, "I saw Aldric near the strongbox", slot="perception:e1:mara", people={"aldric"}, importance=3)
    p2 = item(2, "Aldric was at the market all day", slot="perception:e2:mara", people={"aldric"}, importance=3)
    belief = item(3, "Aldric is the thief", kind="belief", slot="belief:mara:b1", people={"aldric"},
                  supports={"perception:e1:mara"}, contradicts={"perception:e2:mara"})
    result = recall.rank([p1, p2, belief], recall.Situation("Aldric thief", people=frozenset({"aldric"})),
                         words={1: 1.0, 2: 0.5, 3: 2.0})
    recalled = {m.slot: m for m in result.memories}
    assert recalled["belief:mara:b1"].disputed is True
    assert "perception:e1:mara" not in recalled
    assert "perception:e2:mara" in recalled and recalled["perception:e2:mara"].disputed is False
    assert scores_by_id(result)[1]["outcome"] == "folded into a chosen belief"


def test_a_belief_chosen_after_its_evidence_replaces_it():
    p1 = item(1, "I saw Aldric near the strongbox", slot="perception:e1:mara")
    belief = item(3, "Aldric is the thief", kind="belief", slot="belief:mara:b1", supports={"perception:e1:mara"})
    result = recall.rank([p1, belief], recall.Situation("strongbox"), words={1: 5.0, 3: 0.1}, recall=2)
    assert [m.slot for m in result.memories] == ["belief:mara:b1"]


def test_folded_evidence_fades_at_half_its_half_life():
    p1 = item(1, "I saw Aldric near the strongbox", slot="perception:e1:mara", importance=3)
    belief = item(3, "Aldric is the thief", kind="belief", slot="belief:mara:b1", supports={"perception:e1:mara"})
    result = recall.rank([p1, belief], recall.Situation(""), now_ms=START + 12 * DAY, recall=1)
    rows = scores_by_id(result)
    assert rows[1]["half_life_days"] == pytest.approx(12 * recall.jitter("perception:e1:mara"), abs=1e-3)


# The report


def test_the_report_holds_every_candidates_scores():
    items = [item(pk, f"memory {pk}", importance=1 + pk % 5) for pk in range(1, 31)]
    result = recall.rank(items, recall.Situation("memory"), words={pk: 1.0 for pk in range(1, 31)}, recall=8,
                         now_ms=START + DAY)
    assert len(result.report["scores"]) == 30
    row = result.report["scores"][0]
    for name in ("cue", "words", "vectors", "fused", "rerank", "relevance", "recency", "retention",
                 "half_life_days", "score", "outcome"):
        assert name in row
    assert sum(row["outcome"] == "chosen" for row in result.report["scores"]) == 8


# The CJK tokenizer (scenario 11, pure half)


def test_cjk_runs_become_two_character_pairs():
    assert recall.bigrams("她把钥匙藏在茶壶里") == ["她把", "把钥", "钥匙", "匙藏", "藏在", "在茶", "茶壶", "壶里"]
    assert recall.bigrams("茶") == ["茶"]
    assert recall.bigrams("Mara hid it") == []
    assert "茶壶" in recall.terms("她把钥匙藏在茶壶里")
    assert "teapot" in recall.terms("Mara, teapots!") or "teapot" in recall.terms("the teapot")


def test_no_memories_no_recall():
    result = recall.rank([], recall.Situation("x"), words={})
    assert result.memories == [] and result.report["considered"] == 0
    assert math.isclose(recall.normalised([0, 0]).sum(), 0)


# The Pool: what the index caches per owner gives the same answers as the rules one item at a time


def test_the_pools_fading_is_the_rule_applied_to_each_item():
    items = [item(pk, f"memory {pk}", kind="belief" if pk % 4 == 0 else "perception", importance=1 + pk % 5,
                  at_ms=None if pk % 7 == 0 else START + pk * DAY, uses=pk % 3,
                  slot=f"perception:e{pk}:mara" if pk % 4 else f"belief:mara:{pk}",
                  supports={"perception:e5:mara"} if pk == 8 else ())
             for pk in range(1, 40)]
    pool = recall.Pool(items)
    values, lives = pool.retention(START + 50 * DAY)
    for i, memory in enumerate(items):
        value, life = recall.retention(memory, START + 50 * DAY, folded=memory.slot == "perception:e5:mara")
        assert values[i] == pytest.approx(value)
        assert (life is None and np.isnan(lives[i])) or lives[i] == pytest.approx(life)


def test_the_pool_searches_only_words_its_items_hold_and_not_the_commonest():
    items = [item(pk, f"the lantern story number {pk}" + (" teapot" if pk == 3 else "")) for pk in range(1, 31)]
    pool = recall.Pool(items)
    assert pool.searchable(["lantern", "teapot", "dragon"]) == ["teapot"]
    few = recall.Pool(items[:5])  # too few to call any word common
    assert few.searchable(["lantern", "teapot", "dragon"]) == ["lantern", "teapot"]
