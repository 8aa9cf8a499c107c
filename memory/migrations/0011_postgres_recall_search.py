"""PostgreSQL only: the recall items' full-text index, the counterpart of 0008's FTS5 table (issue 31).

The same four searched columns as FTS5 (text, gist, keywords and the CJK
pairs) in one generated ``tsvector`` with a GIN index. FTS5's fifth column,
the scope token, is not needed here: PostgreSQL filters on campaign and owner
themselves, in the same statement. On SQLite nothing happens here.
"""

from django.db import migrations

from storyteller.vendors import POSTGRES, RunSQLOn

CREATE = [
    """
    ALTER TABLE memory_recallitem ADD COLUMN search tsvector GENERATED ALWAYS AS (
        to_tsvector('storyteller'::regconfig, text || ' ' || gist || ' ' || keywords || ' ' || bigrams)
    ) STORED
    """,
    "CREATE INDEX memory_recallitem_search ON memory_recallitem USING gin (search)",
]

DROP = [
    "DROP INDEX memory_recallitem_search",
    "ALTER TABLE memory_recallitem DROP COLUMN search",
]


class Migration(migrations.Migration):
    dependencies = [("memory", "0010_step_runs"), ("campaigns", "0022_postgres_search_config")]

    operations = [RunSQLOn(POSTGRES, sql=CREATE, reverse_sql=DROP)]
