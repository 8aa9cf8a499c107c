"""SQLite is set up for one writer and many readers: WAL, IMMEDIATE transactions, a busy timeout."""

import pytest
from django.db import connection

from storyteller import vendors

# SQLite's own settings; PostgreSQL's counterparts (row and advisory locks) are tests/postgres/test_locks.py.
pytestmark = pytest.mark.skipif(vendors.is_postgres(), reason="SQLite's pragmas and transaction mode")


@pytest.mark.django_db
def test_the_database_runs_in_wal_mode_with_foreign_keys():
    with connection.cursor() as cursor:
        assert cursor.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert cursor.execute("PRAGMA foreign_keys").fetchone()[0] == 1


@pytest.mark.django_db
def test_transactions_take_the_write_lock_up_front_and_wait_for_it():
    assert connection.settings_dict["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    with connection.cursor() as cursor:
        assert cursor.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000
