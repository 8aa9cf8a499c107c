"""What differs between the two databases Storyteller runs on, in one place (issue 31).

SQLite is the default: one file, one process, no server. PostgreSQL is chosen
by STORYTELLER_DATABASE_URL for several server processes. Everything else in
the code is written once for both; where the SQL cannot be (full-text search,
reading inside JSON, the lock that makes one turn at a time per campaign), the
code asks this module for its backend's spelling instead of testing
``connection.vendor`` itself, so the next difference found has an obvious home
and a reader sees every one side by side.

A leaf like ``storyteller.llm``: any app may use it, and it imports nothing of ours.
"""

from django.db import connection, connections, migrations

SQLITE, POSTGRES = "sqlite", "postgresql"


def vendor(using=None):
    """Return the backend of the connection ``using`` (the default one when None): "sqlite" or "postgresql"."""
    return (connections[using] if using else connection).vendor


def is_postgres(using=None):
    return vendor(using) == POSTGRES


def is_sqlite(using=None):
    return vendor(using) == SQLITE


class RunSQLOn(migrations.RunSQL):
    """A migration's raw SQL that runs on one backend only, a no-op on the other.

    FTS5 virtual tables and their triggers exist only in SQLite; PostgreSQL
    keeps its own full-text column instead (a later migration, the other way
    round). The migration graph stays one, so a database can be created on
    either backend from the same history.
    """

    def __init__(self, on, sql, reverse_sql=None, **kwargs):
        self.on = on
        super().__init__(sql, reverse_sql, **kwargs)

    def deconstruct(self):
        name, args, kwargs = super().deconstruct()
        return name, [self.on, *args], kwargs

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == self.on:
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == self.on:
            super().database_backwards(app_label, schema_editor, from_state, to_state)

    def describe(self):
        return f"Raw SQL on {self.on} only"


# ---- JSON inside a column ------------------------------------------------------------------------------------
# SQLite keeps a JSONField as text and reads into it with json_extract; PostgreSQL keeps jsonb and reads with
# #>> (text) and #> (jsonb). ``path`` is a tuple of keys.


def json_text(column, *path):
    """Return SQL for the value at ``path`` inside the JSON ``column``, as text (numbers and strings alike)."""
    if is_postgres():
        return f"({column} #>> '{{{','.join(path)}}}')"
    return f"json_extract({column}, '$.{'.'.join(path)}')"


def json_flag(column, *path):
    """Return SQL true where the value at ``path`` inside ``column`` is JSON true (SQLite: 1), else false/NULL."""
    if is_postgres():
        return f"(({column} #> '{{{','.join(path)}}}') = 'true'::jsonb)"
    return f"json_extract({column}, '$.{'.'.join(path)}')"


def group_concat(expression, separator):
    """Return SQL joining ``expression`` over a group's rows with the one-character ``separator`` (its code)."""
    if is_postgres():
        return f"string_agg({expression}, chr({separator}))"
    return f"group_concat({expression}, char({separator}))"


def char(code):
    """Return SQL for the character with ``code`` (a text value to concatenate)."""
    return f"chr({int(code)})" if is_postgres() else f"char({int(code)})"


# ---- Full-text search -----------------------------------------------------------------------------------------
# SQLite: FTS5 tables (knowledge_passage_fts, memory_recallitem_fts) ranked by bm25. PostgreSQL: a generated
# ``search`` tsvector column on the table itself (knowledge 0006, memory 0011) with a GIN index, matched with @@
# and ranked by ts_rank_cd. Both match any of the query's terms, each as a phrase of its words, with the same
# folding (stems, no accents, no stop words); only the scores' scale differs, and every caller divides a score
# by the best one of its query before using it.

SEARCH_CONFIG = "storyteller"  # campaigns/migrations/0022_postgres_search_config.py


def fts5_any(terms):
    """Return the FTS5 expression matching any of ``terms``, each a quoted phrase (no operator inside works)."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def tsquery_any(terms):
    """Return (SQL, params) of the tsquery matching any of ``terms``, each a phrase, as ``fts5_any`` does.

    phraseto_tsquery reads a term as plain words (no operator syntax to escape) and keeps their order, as an
    FTS5 phrase does ("mara's" is mara followed by s); ``||`` between tsqueries is OR.
    """
    sql = " || ".join([f"phraseto_tsquery('{SEARCH_CONFIG}', %s)"] * len(terms))
    return f"({sql})", list(terms)
