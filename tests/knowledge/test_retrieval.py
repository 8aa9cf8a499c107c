"""Retrieval: admission before comparison, hybrid ranking, class weights, isolation (seed 003 §76)."""

import numpy as np
import pytest

from knowledge import retrieval
from knowledge.importer import embed_source
from knowledge.retrieval import Candidate, Query, rank
from tests.conftest import make_campaign
from tests.knowledge.conftest import import_fixture

TERMS = ("warp", "drives", "ferry", "river", "tavern", "lantern", "silver", "key", "abbey", "crypt", "mara")


def hits_for(campaign, text, **query):
    return retrieval.retrieve(campaign, Query(text, **query)).hits


def titles(campaign, text, **query):
    result = retrieval.retrieve(campaign, Query(text, **query))
    return [(result.passages[hit.passage_id].source.filename, result.passages[hit.passage_id].index)
            for hit in result.hits]


# The pure core


def test_two_distinct_terms_admit_a_passage():
    assert retrieval.admitted_lexically({"warp", "drives"}, TERMS, frozenset())


def test_one_term_admits_only_when_it_is_no_standing_name_and_a_real_share_of_the_query():
    assert retrieval.admitted_lexically({"dragon"}, ("dragon",), frozenset())
    assert not retrieval.admitted_lexically({"mara"}, ("mara",), frozenset({"mara"}))
    assert retrieval.admitted_lexically({"dragon"}, ("dragon", "sleeps", "gold", "abbey"), frozenset())
    assert not retrieval.admitted_lexically({"ferry"}, TERMS, frozenset()), "one word of eleven is negligible"


def test_nothing_matched_admits_nothing_and_rank_can_return_nothing():
    weak = [Candidate(1, 1, "canon", lexical=9.0, terms=frozenset({"river"}), cosine=0.2)]
    assert rank(weak, query_terms=TERMS, standing_terms=frozenset(), floor=0.5) == []


def test_the_best_candidate_is_not_admitted_merely_for_being_best():
    lone = [Candidate(1, 1, "canon", lexical=100.0, terms=frozenset({"key"}))]
    assert rank(lone, query_terms=TERMS, standing_terms=frozenset(), floor=None) == []


def test_relevance_is_max_plus_0_15_of_min_and_the_class_multiplies_it():
    candidates = [
        Candidate(1, 1, "canon", lexical=4.0, terms=frozenset({"warp", "drives"}), cosine=0.60),
        Candidate(2, 2, "reference", lexical=2.0, terms=frozenset({"warp", "drives"}), cosine=0.80),
        Candidate(3, 3, "inspiration", cosine=0.80),
    ]
    hits = {hit.passage_id: hit for hit in rank(candidates, query_terms=TERMS, standing_terms=frozenset(), floor=0.5)}
    assert hits[1].lexical == 1.0 and hits[1].semantic == pytest.approx(0.75)
    assert hits[1].relevance == pytest.approx(1.0 + 0.15 * 0.75) and hits[1].score == hits[1].relevance
    assert hits[2].relevance == pytest.approx(1.0 + 0.15 * 0.5)
    assert hits[2].score == pytest.approx(hits[2].relevance * 0.85)
    assert hits[3].relevance == 1.0 and hits[3].score == pytest.approx(0.70)
    assert "matched drives, warp" in hits[1].reason and "cosine 0.600" in hits[1].reason


def test_class_orders_equal_relevance_but_never_rescues_what_did_not_match():
    candidates = [
        Candidate(1, 1, "inspiration", lexical=3.0, terms=frozenset({"warp", "drives"})),
        Candidate(2, 2, "reference", lexical=3.0, terms=frozenset({"warp", "drives"})),
        Candidate(3, 3, "canon", lexical=3.0, terms=frozenset({"warp", "drives"})),
        Candidate(4, 4, "canon", lexical=50.0, terms=frozenset({"river"})),
    ]
    hits = rank(candidates, query_terms=TERMS, standing_terms=frozenset(), floor=None)
    assert [hit.passage_id for hit in hits] == [3, 2, 1]


def test_below_the_semantic_floor_meaning_admits_nothing():
    candidates = [Candidate(1, 1, "canon", cosine=0.49)]
    assert rank(candidates, query_terms=TERMS, standing_terms=frozenset(), floor=0.5) == []
    assert rank([Candidate(1, 1, "canon", cosine=0.99)], query_terms=TERMS, standing_terms=frozenset(),
                floor=None) == [], "no floor, no semantic admission"


def test_only_a_measured_embedding_model_has_a_floor():
    assert retrieval.semantic_floor("nomic-embed-text:latest") == 0.50
    assert retrieval.semantic_floor("all-minilm") is None


def test_meaningful_terms_drop_function_words_and_repeat_nothing():
    terms = retrieval.meaningful_terms("I ask Mara about the warp drives, the WARP drives!")
    assert terms == ("mara", "warp", "drives")


# Against the fixtures, through FTS5


def test_a_related_scene_finds_the_passage_and_says_which_terms_matched(library, campaign):
    result = retrieval.retrieve(campaign, Query("I ask about warp drives and ships between the stars"))
    top = result.passages[result.hits[0].passage_id]
    assert top.source.filename == "reference.md" and "Warp drives" in top.text
    assert {"warp", "drives"} <= set(result.hits[0].terms)


def test_stems_match_through_the_porter_tokenizer(library, campaign):
    assert ("reference.md", 1) in titles(campaign, "ferry crossing the rivers")


def test_an_unrelated_scene_retrieves_nothing(library, campaign):
    assert hits_for(campaign, "I check the fuel gauge on the spaceship console and radio the orbital station") == []


def test_a_standing_name_alone_does_not_pull_in_passages(library, campaign):
    assert hits_for(campaign, "Aldric", standing_names=("Aldric",)) == []
    assert hits_for(campaign, "Aldric")  # the same word, not a standing name, is a real query


def test_a_disabled_source_is_never_retrieved_and_enabling_restores_it(library, campaign):
    reference = library["reference.md"]
    query = "warp drives between the stars"
    assert hits_for(campaign, query)
    reference.enabled = False
    reference.save()
    assert all(hit.source_id != reference.pk for hit in hits_for(campaign, query))
    reference.enabled = True
    reference.save()
    assert any(hit.source_id == reference.pk for hit in hits_for(campaign, query))


def test_a_deleted_source_leaves_no_passages_or_index_rows(library, campaign):
    library["reference.md"].delete()
    assert hits_for(campaign, "warp drives between the stars") == []
    from tests.knowledge.test_importer import fts_rows

    assert fts_rows() == sum(s.passages.count() for name, s in library.items() if name != "reference.md")


def test_another_campaigns_knowledge_is_never_retrieved(library, owner, campaign):
    other = make_campaign(owner, title="Elsewhere")
    assert hits_for(other, "warp drives between the stars") == []
    import_fixture(other, "inspiration.md")
    assert all(hit.source_id != library["reference.md"].pk for hit in hits_for(other, "warp drives dragon abbey"))


def test_always_included_canon_is_not_retrieved_again(campaign):
    canon = import_fixture(campaign, "canon.md", always_include=True)
    assert all(hit.source_id != canon.pk for hit in hits_for(campaign, "the silver key and the abbey crypt door"))


def test_semantic_retrieval_admits_by_meaning_over_the_measured_floor(campaign, narrator_server):
    source = import_fixture(campaign, "canon.md")
    embed_source(source)
    passage = source.passages.get(index=2)
    vector = np.frombuffer(bytes(passage.embedding), dtype=np.float32)
    query = Query("nothing lexical here at all", vector=tuple(vector), model="nomic-embed-text")
    hits = retrieval.retrieve(campaign, query).hits
    assert [hit.passage_id for hit in hits] == [passage.pk]
    assert hits[0].cosine == pytest.approx(1.0, abs=1e-4) and hits[0].lexical == 0


def test_an_unmeasured_embedding_model_gets_no_semantic_retrieval_and_the_reason(campaign, narrator_server):
    campaign.embed_model = "all-minilm"
    campaign.save()
    embed_source(import_fixture(campaign, "canon.md"))
    requests = len(narrator_server.requests)
    query = retrieval.embed_query(campaign, Query("the silver key"))
    assert query.vector is None and "no measured similarity floor" in query.semantic_note
    assert len(narrator_server.requests) == requests, "no model call for a vector that would not be trusted"


def test_the_query_is_embedded_with_the_nomic_query_prefix(campaign, narrator_server):
    embed_source(import_fixture(campaign, "canon.md"))
    query = retrieval.embed_query(campaign, Query("the silver key"))
    assert query.vector is not None and query.model == "nomic-embed-text"
    assert narrator_server.bodies("/api/embed")[-1]["input"] == ["search_query: the silver key"]


def test_without_vectors_the_query_is_not_embedded_and_the_reason_is_kept(campaign, narrator_server):
    import_fixture(campaign, "canon.md")
    query = retrieval.embed_query(campaign, Query("the silver key"))
    assert query.vector is None and "lexical retrieval only" in query.semantic_note
    assert narrator_server.bodies("/api/embed") == []


def test_another_campaigns_crowd_of_better_matches_does_not_hide_this_campaigns_passage(campaign, owner):
    crowd = make_campaign(owner, title="Crowd")
    section = "Warp drives and warp drives again: ships between the stars use warp drives. " * 6
    text = "\n\n".join(f"## Drive {n}\n\n{section}" for n in range(retrieval.FTS_WINDOW + 20))
    from knowledge.importer import import_source

    crowded = import_source(crowd, "crowd.md", text.encode(), "reference")
    assert crowded.passages.count() > retrieval.FTS_WINDOW, "FTS5's own best matches are all the other campaign's"
    reference = import_fixture(campaign, "reference.md")
    hits = hits_for(campaign, "warp drives between the stars")
    assert hits and {hit.source_id for hit in hits} == {reference.pk}


def test_an_import_reads_only_its_own_sources_vectors_and_finds_them_at_once(campaign, narrator_server):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    canon = import_fixture(campaign, "canon.md")
    embed_source(canon)
    vector = np.frombuffer(bytes(canon.passages.get(index=2).embedding), dtype=np.float32)
    query = Query("nothing lexical here at all", vector=tuple(vector), model="nomic-embed-text")
    retrieval.retrieve(campaign, query)
    reference = import_fixture(campaign, "reference.md")
    embed_source(reference)
    vector = np.frombuffer(bytes(reference.passages.get(index=1).embedding), dtype=np.float32)
    with CaptureQueriesContext(connection) as queries:
        hits = retrieval.retrieve(campaign, Query("nothing lexical", vector=tuple(vector),
                                                  model="nomic-embed-text")).hits
    assert hits[0].source_id == reference.pk, "the new source's vectors are there for the very next query"
    vector_reads = [q["sql"] for q in queries.captured_queries if '"embedding"' in q["sql"]]
    assert len(vector_reads) == 1 and f"= {reference.pk}" in vector_reads[0], "the kept source is not read again"
