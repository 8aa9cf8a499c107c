"""Which database the app uses: SQLite unless STORYTELLER_DATABASE_URL (or DATABASE_URL) names PostgreSQL (issue 31)."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from storyteller import settings


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("STORYTELLER_DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    return monkeypatch


def test_unset_is_the_sqlite_file_in_the_data_folder_as_before(clean_env):
    database = settings._env_database()
    assert database is settings.SQLITE_DATABASE
    assert database["ENGINE"] == "django.db.backends.sqlite3"
    assert database["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


def test_a_postgres_url_is_read_whole_with_its_escapes_and_libpq_options(clean_env):
    clean_env.setenv("STORYTELLER_DATABASE_URL",
                     "postgresql://story%40teller:p%2Fss@db.example:6543/tales?sslmode=require&connect_timeout=5")
    database = settings._env_database()
    assert database["ENGINE"] == "django.db.backends.postgresql"
    assert (database["USER"], database["PASSWORD"], database["HOST"], database["PORT"], database["NAME"]) == (
        "story@teller", "p/ss", "db.example", "6543", "tales")
    assert database["OPTIONS"] == {"sslmode": "require", "connect_timeout": "5"}


def test_database_url_is_the_fallback_and_storyteller_s_own_wins(clean_env):
    clean_env.setenv("DATABASE_URL", "postgres://a@h/one")
    assert settings._env_database()["NAME"] == "one"
    clean_env.setenv("STORYTELLER_DATABASE_URL", "postgres://a@h/two")
    assert settings._env_database()["NAME"] == "two"


@pytest.mark.parametrize("url", ["mysql://a@h/db", "sqlite:///x.db", "h:5432/db", "postgres://a@h:port/db"])
def test_anything_else_is_refused_by_name_before_the_app_starts(clean_env, url):
    clean_env.setenv("STORYTELLER_DATABASE_URL", url)
    with pytest.raises(ImproperlyConfigured, match="STORYTELLER_DATABASE_URL"):
        settings._env_database()
