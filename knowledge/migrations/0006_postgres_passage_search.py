"""PostgreSQL only: the passages' full-text index, the counterpart of 0002's FTS5 table (issue 31).

A ``tsvector`` column the database computes itself (GENERATED ALWAYS ... STORED)
from the same two columns FTS5 indexes, so no trigger and no application code
can let it drift, and storing a vector never rewrites it; a GIN index answers
``@@``. The column is not on the model: only retrieval reads it, in raw SQL,
as it reads the FTS5 table on SQLite. On SQLite nothing happens here.
"""

from django.db import migrations

from storyteller.vendors import POSTGRES, RunSQLOn

CREATE = [
    """
    ALTER TABLE knowledge_passage ADD COLUMN search tsvector GENERATED ALWAYS AS (
        to_tsvector('storyteller'::regconfig, heading_path || ' ' || text)
    ) STORED
    """,
    "CREATE INDEX knowledge_passage_search ON knowledge_passage USING gin (search)",
]

DROP = [
    "DROP INDEX knowledge_passage_search",
    "ALTER TABLE knowledge_passage DROP COLUMN search",
]


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0005_keyed_lorebooks"), ("campaigns", "0022_postgres_search_config")]

    operations = [RunSQLOn(POSTGRES, sql=CREATE, reverse_sql=DROP)]
