"""The same passages are admitted on SQLite (FTS5, bm25) and PostgreSQL (tsvector, ts_rank_cd) (issue 31).

Admission is decided on the query terms a passage matched (``admitted_lexically``), never on the engine's score,
so the engines only have to match the same passages for the same terms; the sets below were read on SQLite
from the standard fixtures and this test runs in both of scripts/test's passes. The order may differ (bm25's
idf against cover density; docs/decisions.md lists the two queries of these where it does).
"""

import pytest

from knowledge import retrieval
from knowledge.retrieval import Query
from tests.knowledge.conftest import import_fixture

ADMITTED = {
    'I ask about warp drives and ships between the stars': [('reference.md', 2)],
    'Aldric walks into the Crooked Lantern and orders a drink from Mara': [('canon.md', 1), ('canon.md', 2)],
    'We take the ferry across the river at dawn': [('canon.md', 0), ('canon.md', 1), ('canon.md', 2), ('hostile.md', 0), ('inspiration.md', 0), ('reference.md', 0), ('reference.md', 1), ('reference.md', 2)],
    'I search the old abbey for the silver key': [('canon.md', 1), ('canon.md', 3), ('inspiration.md', 0)],
    'Captain Vale draws his sword on the harbour': [('canon.md', 2)],
    'The doctor treats the fever with laudanum': [('reference.md', 1)],
    'The spaceship docks at the orbital station': [],
    'I listen to the rain on the roof and think of home': [('inspiration.md', 0)],
    'dragon': [('inspiration.md', 0)],
    'Mara pours ale for the travellers in the tavern': [('canon.md', 1), ('canon.md', 2), ('reference.md', 0)],
    'What are the world rules about magic and the dead?': [('canon.md', 0)],
    'The tide rises under the bridge as the lamps are lit': [],
}


@pytest.fixture
def fixtures(campaign):
    for name in ["canon.md", "reference.md", "inspiration.md", "hostile.md"]:
        import_fixture(campaign, name)
    return campaign


def test_each_scene_admits_the_passages_it_admits_on_sqlite(fixtures):
    found = {}
    for text in ADMITTED:
        result = retrieval.retrieve(fixtures, Query(text, standing_names=("Aldric",)))
        found[text] = sorted((result.passages[hit.passage_id].source.filename, result.passages[hit.passage_id].index)
                             for hit in result.hits)
    assert found == ADMITTED
