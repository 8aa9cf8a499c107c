"""PostgreSQL only: the text search configuration the passages' and memories' full-text columns use (issue 31).

It does what FTS5's ``porter unicode61 remove_diacritics 2`` tokenizer does on
SQLite: accents folded (unaccent as a filtering dictionary), English stems
(snowball, porter's successor), and no stop words, because FTS5 drops none and
the queries already leave out the words that carry no meaning; PostgreSQL's
own ``english`` configuration would silently drop a query term such as "again"
or "only" that FTS5 matches. On SQLite nothing happens here.

unaccent is a trusted extension (PostgreSQL 13+): the database's owner may
create it without superuser rights.
"""

from django.db import migrations

from storyteller.vendors import POSTGRES, RunSQLOn

CREATE = [
    "CREATE EXTENSION IF NOT EXISTS unaccent",
    "CREATE TEXT SEARCH DICTIONARY storyteller_stem (TEMPLATE = snowball, LANGUAGE = english)",
    "CREATE TEXT SEARCH CONFIGURATION storyteller (COPY = simple)",
    ("ALTER TEXT SEARCH CONFIGURATION storyteller ALTER MAPPING FOR "
     "asciiword, asciihword, hword_asciipart, word, hword, hword_part WITH unaccent, storyteller_stem"),
]

DROP = [
    "DROP TEXT SEARCH CONFIGURATION storyteller",
    "DROP TEXT SEARCH DICTIONARY storyteller_stem",
]


class Migration(migrations.Migration):
    dependencies = [("campaigns", "0021_table_rounds")]

    operations = [RunSQLOn(POSTGRES, sql=CREATE, reverse_sql=DROP)]
