"""The turn's in-process index of the memory bank: read once, read again exactly when retrieval's view changes."""

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from campaigns import lineage
from memory import bank
from memory.models import BankStamp, Memory
from storyteller.context import memories as memory_section
from storyteller.llm.scripted import vector_for
from tests.memory.conftest import long_story, remember_at  # noqa: F401 (fixture)

MODEL = "nomic-embed-text"


def query(text):
    vector = tuple(vector_for(text))
    return memory_section.Query(text, "", vector, None, MODEL)


def ranked(campaign, text):
    _, report = memory_section.section(campaign, lineage.path_of(campaign), query(text), top_k=3)
    return [(entry["id"], entry["final"]) for entry in report["used"]], report["considered"]


def ranked_afresh(campaign, text):
    memory_section.forget()
    return ranked(campaign, text)


def embed(*memories):
    bank.store_vectors(MODEL, [(memory.pk, vector_for(memory.text)) for memory in memories])


def stamp(campaign):
    return BankStamp.objects.filter(campaign_id=campaign.pk).values_list("generation", flat=True).first()


@pytest.fixture
def indexed(long_story):
    first = remember_at(long_story, 6, "Mara hid the sundial in the cracked teapot.")
    second = remember_at(long_story, 12, "Aldric mended the abbey bell rope.")
    embed(first, second)
    ranked(long_story, "where is the sundial")
    return long_story, first, second


def test_an_unchanged_bank_is_not_read_again(indexed):
    campaign, _, _ = indexed
    with CaptureQueriesContext(connection) as queries:
        ranked(campaign, "the sundial and the bell")
    read = [q["sql"] for q in queries.captured_queries if "memory_memory" in q["sql"] and "IN (" not in q["sql"]]
    assert read == [], "only the stamp and the chosen memories' texts"
    assert not any("memory_memoryvector" in q["sql"] for q in queries.captured_queries)


@pytest.mark.parametrize("change", ["write", "embed", "forget", "disable", "pin", "edit", "downgrade"])
def test_every_change_retrieval_sees_is_ranked_at_once_as_a_fresh_read_would(indexed, change):
    campaign, first, second = indexed
    before = stamp(campaign)
    if change == "write":
        embed(remember_at(campaign, 18, "Mara found the sundial's brass gnomon."))
    elif change == "embed":
        third = remember_at(campaign, 18, "The sundial's shadow pointed at the crypt.")
        ranked(campaign, "sundial")  # indexed without its vector
        embed(third)
    elif change == "forget":
        bank.set_flags(first, forgotten=True)
    elif change == "disable":
        bank.set_flags(first, enabled=False)
    elif change == "pin":
        bank.set_flags(second, pinned=True)
    elif change == "edit":
        bank.edit_text(second, "Aldric buried the sundial under the bell tower.")
        embed(second)
    else:
        bank.set_flags(first, authority=Memory.Authority.HEURISTIC)
    assert stamp(campaign) != before
    kept = ranked(campaign, "where is the sundial")
    assert kept == ranked_afresh(campaign, "where is the sundial")


def test_counting_a_use_does_not_make_the_bank_read_again(indexed):
    campaign, first, _ = indexed
    before = stamp(campaign)
    bank.record_use([first.pk])
    assert stamp(campaign) == before


def test_a_new_vector_is_appended_to_the_kept_matrix(indexed):
    campaign, first, second = indexed
    matrix, _ = memory_section.bank_index(campaign.pk).vectors(MODEL)
    third = remember_at(campaign, 18, "The sundial's shadow pointed at the crypt.")
    embed(third)
    grown, rows = memory_section.bank_index(campaign.pk).vectors(MODEL)
    assert len(grown) == len(matrix) + 1 and np.shares_memory(grown, matrix), "appended in place, not read again"
    index = memory_section.bank_index(campaign.pk)
    assert rows[list(index.ids).index(third.pk)] == len(matrix)
