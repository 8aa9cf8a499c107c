"""The passages' full-text index: FTS5, external content, kept in step by triggers.

External content means the text is stored once (on knowledge_passage) and the
index holds only what search needs. porter over unicode61 so "drives" finds
"drive" and accented names fold to their plain letters.
"""

from django.db import migrations

from storyteller.vendors import SQLITE, RunSQLOn

CREATE = [
    """
    CREATE VIRTUAL TABLE knowledge_passage_fts USING fts5(
        heading_path, text,
        content='knowledge_passage', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER knowledge_passage_fts_insert AFTER INSERT ON knowledge_passage BEGIN
        INSERT INTO knowledge_passage_fts(rowid, heading_path, text)
        VALUES (new.id, new.heading_path, new.text);
    END
    """,
    """
    CREATE TRIGGER knowledge_passage_fts_delete AFTER DELETE ON knowledge_passage BEGIN
        INSERT INTO knowledge_passage_fts(knowledge_passage_fts, rowid, heading_path, text)
        VALUES ('delete', old.id, old.heading_path, old.text);
    END
    """,
    # Only the indexed columns: storing a vector must not rewrite the index.
    """
    CREATE TRIGGER knowledge_passage_fts_update AFTER UPDATE OF heading_path, text ON knowledge_passage BEGIN
        INSERT INTO knowledge_passage_fts(knowledge_passage_fts, rowid, heading_path, text)
        VALUES ('delete', old.id, old.heading_path, old.text);
        INSERT INTO knowledge_passage_fts(rowid, heading_path, text)
        VALUES (new.id, new.heading_path, new.text);
    END
    """,
]

DROP = [
    "DROP TRIGGER knowledge_passage_fts_update",
    "DROP TRIGGER knowledge_passage_fts_delete",
    "DROP TRIGGER knowledge_passage_fts_insert",
    "DROP TABLE knowledge_passage_fts",
]


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0001_initial")]

    operations = [RunSQLOn(SQLITE, sql=CREATE, reverse_sql=DROP)]
