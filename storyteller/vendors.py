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
