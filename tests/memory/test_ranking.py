"""Ranking: the exact formula, rarity over the eligible only, pins, ties, redundancy (seed 000 §20-§22)."""

import math

import numpy as np

from memory import ranking


ROWS3 = np.arange(3)


def candidate(pk, text, *, authority="accepted_story", pinned=False):
    words = [w.strip(".,?!").lower() for w in text.split()]
    return ranking.Candidate(pk, authority, pinned, ranking.fold_terms(w for w in words if len(w) > 2),
                             ranking.names_in(text))


def unit(*values, dims=8):
    v = np.zeros(dims, np.float32)
    v[: len(values)] = values
    return v / np.linalg.norm(v)


def test_final_is_semantic_plus_a_fifteenth_of_the_rarity_weighted_lexical_share():
    a = candidate(1, "Mara hid the sundial in the teapot")
    b = candidate(2, "Mara walked to the landing")
    c = candidate(3, "Mara slept")
    matrix = np.vstack([unit(1, 0), unit(0, 1), unit(1, 1)])
    semantic = ranking.semantic_scores(matrix, ROWS3, unit(1, 0), unit(0, 1))
    chosen = ranking.rank([a, b, c], ("mara", "sundial"), semantic=semantic, matrix=matrix, rows=np.arange(len(matrix)))
    # "mara" is in every candidate: it weighs ln(4/4) = 0; "sundial" in one: ln(4/2).
    assert chosen.weights == {"mara": 0.0, "sundial": math.log(2)}
    by_id = {s.id: s for s in chosen.used}
    assert math.isclose(by_id[1].semantic, 0.6, rel_tol=1e-6)
    assert math.isclose(by_id[2].semantic, 0.4, rel_tol=1e-6)
    assert math.isclose(by_id[3].semantic, 0.6 * 2 ** -0.5 + 0.4 * 2 ** -0.5, rel_tol=1e-6)
    assert by_id[1].lexical == 1.0 and by_id[2].lexical == 0.0
    assert math.isclose(by_id[1].final, 0.6 + 0.15, rel_tol=1e-6)
    assert [s.id for s in chosen.used] == [1, 3, 2]


def test_rarity_is_counted_over_the_eligible_candidates_only():
    few = [candidate(1, "the sundial"), candidate(2, "the sundial again")]
    many = few + [candidate(i, "nothing here") for i in range(3, 10)]
    assert ranking.rank(few, ("sundial",)).weights["sundial"] == math.log(3 / 3)
    assert ranking.rank(many, ("sundial",)).weights["sundial"] == math.log(10 / 3)


def test_a_one_line_question_is_not_drowned_by_recent_narration():
    # Seed 004 §G: the planting-era memory is close to the question (0.708) and far
    # from the narration, sixteen later memories the other way round.
    question, narration = unit(1, 0, 0), unit(0, 1, 0)
    fact = unit(0.708, 0.1, 0.7)
    later = [unit(0.1, 0.9, 0.42) for _ in range(16)]
    matrix = np.vstack([fact, *later])
    candidates = [candidate(1, "Mara slipped the amber sundial inside the cracked teapot")]
    candidates += [candidate(i, "The travellers talked at the tavern") for i in range(2, 18)]
    semantic = ranking.semantic_scores(matrix, np.arange(17), question, narration)
    chosen = ranking.rank(candidates, ("amber", "sundial"), semantic=semantic, matrix=matrix,
                          rows=np.arange(len(matrix)))
    assert chosen.used[0].id == 1


def test_the_lexical_term_lifts_the_memory_that_holds_the_questions_rare_words():
    candidates = [candidate(i, "The travellers talked at the tavern") for i in range(1, 9)]
    candidates.append(candidate(9, "Mara slipped the amber sundial inside the cracked teapot"))
    chosen = ranking.rank(candidates, ("amber", "sundial"), top_k=1)
    assert [s.id for s in chosen.used] == [9]
    assert chosen.used[0].semantic is None  # lexical only: no vectors


def test_pins_come_first_and_always_even_past_top_k():
    candidates = [candidate(i, f"memory {i}", pinned=i in (7, 8)) for i in range(1, 10)]
    chosen = ranking.rank(candidates, (), top_k=1)
    assert [s.id for s in chosen.used] == [7, 8]
    chosen = ranking.rank(candidates, (), top_k=4)
    assert [s.id for s in chosen.used][:2] == [7, 8] and len(chosen.used) == 4


def test_ties_on_the_final_score_are_broken_by_id():
    candidates = [candidate(i, "same words") for i in (5, 3, 9, 1)]
    assert [s.id for s in ranking.rank(candidates, (), top_k=3).used] == [1, 3, 5]


def test_a_restatement_of_a_chosen_memory_is_suppressed_and_counted():
    a = candidate(1, "Mara hid the letter beneath the hearthstone.")
    b = candidate(2, "Mara hid a letter under the hearthstone.")
    c = candidate(3, "The abbey bell rang at noon.")
    matrix = np.vstack([unit(1, 0.01), unit(1, 0.02), unit(0, 1)])
    semantic = ranking.semantic_scores(matrix, np.arange(3), unit(1, 0))
    chosen = ranking.rank([a, b, c], (), semantic=semantic, matrix=matrix, rows=np.arange(len(matrix)))
    assert [s.id for s in chosen.used] == [1, 3]
    assert chosen.suppressed == [{"id": 2, "repeats": 1, "cosine": chosen.suppressed[0]["cosine"]}]
    assert chosen.suppressed[0]["cosine"] >= ranking.REDUNDANT_SIMILARITY
    assert chosen.considered == 3


def test_mara_and_aldric_promising_to_return_are_never_merged():
    mara = candidate(1, "Mara promised to return before dawn")
    aldric = candidate(2, "Aldric promised to return before dawn")
    # Even at a cosine far above the threshold, as an embedding model may well give them.
    matrix = np.vstack([unit(1, 0.001), unit(1, 0.002)])
    semantic = ranking.semantic_scores(matrix, np.arange(2), unit(1, 0))
    chosen = ranking.rank([mara, aldric], ("promised",), semantic=semantic, matrix=matrix, rows=np.arange(len(matrix)))
    assert {s.id for s in chosen.used} == {1, 2}
    assert chosen.suppressed == []


def test_redundancy_never_crosses_authority():
    fact = candidate(1, "Mara hid the letter")
    guess = candidate(2, "Mara hid the letter", authority="heuristic")
    matrix = np.vstack([unit(1, 0), unit(1, 0)])
    semantic = ranking.semantic_scores(matrix, np.arange(2), unit(1, 0))
    chosen = ranking.rank([fact, guess], (), semantic=semantic, matrix=matrix, rows=np.arange(len(matrix)))
    assert {s.id for s in chosen.used} == {1, 2}


def test_a_memory_without_a_vector_is_still_ranked_on_its_words():
    a = candidate(1, "The sundial is in the teapot")
    b = candidate(2, "The travellers waited")
    matrix = np.vstack([unit(1, 0), unit(0, 1)])
    semantic = ranking.semantic_scores(matrix, np.array([-1, 1]), unit(0, 1))
    chosen = ranking.rank([a, b], ("sundial",), semantic=semantic, matrix=matrix, rows=np.arange(len(matrix)))
    by_id = {s.id: s for s in chosen.used}
    assert by_id[1].semantic is None and by_id[1].lexical == 1.0


def test_sorting_only_the_best_gives_the_full_sort_s_choice_however_many_tie_or_repeat():
    # rank sorts only as far down as the choice may reach; a plain full sort is the reference.
    rng = np.random.default_rng(20)
    words = ["sundial", "teapot", "mara", "abbey", "bell", "rope"]
    for trial in range(60):
        n = int(rng.integers(1, 300))
        candidates = [candidate(i + 1, " ".join(rng.choice(words, size=int(rng.integers(0, 4)))),
                                pinned=bool(rng.random() < 0.03)) for i in range(n)]
        # Few distinct directions: many exact ties and many restatements (cosine 1 between equal rows).
        matrix = np.vstack([unit(*rng.integers(0, 2, size=3) + 0.01) for _ in range(n)])
        semantic = ranking.semantic_scores(matrix, np.arange(n), unit(1, 0.5, 0.2)) if trial % 2 else None
        top_k = int(rng.integers(1, n + 2))
        chosen = ranking.rank(candidates, ("sundial", "mara"), semantic=semantic, matrix=matrix,
                              rows=np.arange(n), top_k=top_k)
        assert [s.id for s in chosen.used] == _reference(candidates, semantic, matrix, top_k), (trial, n, top_k)


def _reference(candidates, semantic, matrix, top_k):
    """The choice written out: pins best first, then the rest best first (ties by id), skipping repeats."""
    # Without a matrix nothing is a repeat, so every candidate comes back with its score.
    score = {s.id: s.final for s in ranking.rank(candidates, ("sundial", "mara"), semantic=semantic,
                                                 top_k=len(candidates) + 1).used}
    order = sorted(range(len(candidates)), key=lambda i: (-score[candidates[i].id], candidates[i].id))
    picked = [i for i in order if candidates[i].pinned]
    for i in order:
        if len(picked) >= top_k:
            break
        if candidates[i].pinned:
            continue
        if semantic is not None and any(
                candidates[j].authority == candidates[i].authority and candidates[j].names == candidates[i].names
                and float(matrix[i] @ matrix[j]) >= ranking.REDUNDANT_SIMILARITY for j in picked):
            continue
        picked.append(i)
    return [candidates[i].id for i in picked]
