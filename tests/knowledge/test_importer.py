"""Importing: UTF-8 only, 1 MiB, hashed, duplicates refused, all or nothing (seed 003 §11-§13, §57, §60, §76)."""

import hashlib

import pytest
from django.db import connection, IntegrityError

from knowledge import chunking
from knowledge.importer import MAX_BYTES, DuplicateSource, ImportRefused, embed_source, import_source
from knowledge.models import Passage, Source
from storyteller import vendors
from tests.knowledge.conftest import import_fixture, read_fixture


def fts_rows():
    """The passages the full-text index holds: FTS5's rows on SQLite, non-empty generated tsvectors on PostgreSQL."""
    with connection.cursor() as cursor:
        if vendors.is_postgres():
            cursor.execute("SELECT count(*) FROM knowledge_passage WHERE search != ''::tsvector")
        else:
            cursor.execute("SELECT count(*) FROM knowledge_passage_fts_docsize")
        return cursor.fetchone()[0]


def test_a_markdown_file_is_stored_hashed_cut_and_indexed(campaign):
    source = import_fixture(campaign, "canon.md")
    data = read_fixture("canon.md")
    assert source.text == data.decode() and source.size_bytes == len(data)
    assert source.content_hash == hashlib.sha256(data).hexdigest()
    assert source.title == "Westhaven Setting Bible" and source.filename == "canon.md"
    assert (source.parser_version, source.chunking_version) == (chunking.PARSER_VERSION, chunking.CHUNKING_VERSION)
    assert source.lexical_state == "ready" and source.semantic_state == "pending"
    passages = list(source.passages.all())
    assert [p.text for p in passages] == [c.text for c in chunking.chunk(source.text)]
    assert fts_rows() == len(passages)


def test_a_text_file_is_imported_with_its_name_as_title(campaign):
    source = import_source(campaign, "notes/ferry times.txt", b"The ferry runs hourly.\r\n", "reference")
    assert source.title == "ferry times" and source.text == "The ferry runs hourly.\n"


def test_text_is_normalised_before_hashing_so_the_same_words_are_one_source(campaign):
    import_source(campaign, "a.md", "Caf\u00e9 by the river.\n".encode(), "reference")
    with pytest.raises(DuplicateSource):
        import_source(campaign, "b.md", "Cafe\u0301 by the river.\r\n".encode(), "reference")


def test_invalid_utf8_is_refused_with_the_byte_offset_and_nothing_stored(campaign):
    data = read_fixture("invalid-utf8.txt")
    offset = data.index(b"\xff") if b"\xff" in data else None
    with pytest.raises(ImportRefused) as refused:
        import_fixture(campaign, "invalid-utf8.txt", "reference")
    try:
        data.decode()
    except UnicodeDecodeError as error:
        offset = error.start
    assert f"offset {offset:,}" in str(refused.value) and "UTF-8" in str(refused.value)
    assert not Source.objects.exists() and not Passage.objects.exists() and fts_rows() == 0


def test_a_file_over_one_mebibyte_is_refused_clearly(campaign):
    data = ("# Huge\n\n" + "The river runs on. " * 60000).encode()
    assert len(data) > MAX_BYTES
    with pytest.raises(ImportRefused, match="at most 1,048,576 bytes"):
        import_source(campaign, "huge.md", data, "reference")
    assert not Source.objects.exists() and fts_rows() == 0


def test_only_markdown_and_text_files_are_accepted(campaign):
    with pytest.raises(ImportRefused, match=r"\.md or \.txt"):
        import_source(campaign, "bible.pdf", b"%PDF-1.4", "canon")


def test_a_duplicate_names_the_source_that_holds_it_and_may_be_imported_deliberately(campaign):
    first = import_fixture(campaign, "canon.md")
    with pytest.raises(DuplicateSource) as refused:
        import_fixture(campaign, "canon.md")
    assert refused.value.existing == first and "Westhaven Setting Bible" in str(refused.value)
    second = import_fixture(campaign, "canon.md", allow_duplicate=True)
    assert second.pk != first.pk and Source.objects.count() == 2


def test_the_same_file_in_another_campaign_is_not_a_duplicate(campaign, owner):
    from tests.conftest import make_campaign

    import_fixture(campaign, "canon.md")
    import_fixture(make_campaign(owner, title="Other"), "canon.md")
    assert Source.objects.count() == 2


def test_a_failure_inside_the_import_leaves_no_source_passages_or_index_rows(campaign, monkeypatch):
    from knowledge import importer

    def broken(source, chunks):
        Passage.objects.bulk_create([Passage(source=source, campaign=campaign, index=0, text="x", tokens=1,
                                             content_hash="h")])
        raise IntegrityError("disk full")

    monkeypatch.setattr(importer, "_write_passages", broken)
    with pytest.raises(IntegrityError):
        import_fixture(campaign, "canon.md")
    assert not Source.objects.exists() and not Passage.objects.exists() and fts_rows() == 0


def test_always_include_belongs_to_canon_alone_both_ways(campaign):
    reference = import_fixture(campaign, "reference.md", always_include=True)
    assert reference.always_include is False
    canon = import_fixture(campaign, "canon.md", always_include=True)
    assert canon.always_include
    canon.classification = "reference"
    canon.save(update_fields=["classification"])
    canon.refresh_from_db()
    assert canon.always_include is False
    with pytest.raises(IntegrityError):
        Source.objects.filter(pk=canon.pk).update(always_include=True)


def test_vectors_are_stored_as_float32_with_their_model_and_nomic_prefixes(campaign, narrator_server):
    source = import_fixture(campaign, "canon.md")
    assert embed_source(source) == "ready"
    passage = source.passages.first()
    assert passage.embedding_model == "nomic-embed-text" and passage.embedding_dims == 64
    assert len(bytes(passage.embedding)) == 64 * 4 and passage.embedded_at is not None
    texts = [text for body in narrator_server.bodies("/api/embed") for text in body["input"]]
    assert texts and all(text.startswith("search_document: ") for text in texts)


def test_without_an_embedding_model_the_source_stays_lexical_and_says_why(campaign, settings):
    settings.STORYTELLER_LLM_URL = "http://127.0.0.1:9"  # nothing answers: the built-in narrator plays
    settings.STORYTELLER_LLM_URL_CONFIGURED = False
    source = import_fixture(campaign, "canon.md")
    assert embed_source(source) == "unavailable"
    source.refresh_from_db()
    assert source.lexical_state == "ready" and "No embedding model" in source.semantic_detail
    assert not source.passages.filter(embedding__isnull=False).exists()


def test_a_failing_model_server_is_recorded_and_lexical_retrieval_stays(campaign, narrator_server):
    narrator_server.not_found("nomic-embed-text")
    source = import_fixture(campaign, "canon.md")
    assert embed_source(source) == "failed"
    source.refresh_from_db()
    assert source.semantic_state == "failed" and "nomic-embed-text" in source.semantic_detail
    assert source.lexical_state == "ready"
