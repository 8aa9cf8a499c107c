"""Storyteller settings: one module, driven by environment variables.

Every default works on a fresh machine: data lives in ``data/`` inside the
checkout, the secret key is generated there on first run, and the narrator is
looked for at Ollama's default address (falling back to the built-in one).
"""

import os
import secrets
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_str(name, default):
    value = os.environ.get(name, "").strip()
    return value or default


def _env_bool(name, default=False):
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    return value in {"1", "true", "yes", "on"}


def _env_seconds(name, default):
    value = os.environ.get(name, "").strip()
    try:
        return float(value) if value else default
    except ValueError:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{name} is {value!r}; set it to a number of seconds, such as {default:g}.")


def _env_count(name, default):
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{name} is {value!r}; set it to a whole number of at least 1, such as {default}.")
    return int(value)


def _secret_key(data_dir):
    """Return the key stored in the data folder, creating it on first run."""
    path = data_dir / "secret_key"
    if path.exists():
        return path.read_text().strip()
    path.write_text(secrets.token_urlsafe(50))
    path.chmod(0o600)
    return path.read_text().strip()


DATA_DIR = Path(_env_str("STORYTELLER_DATA_DIR", str(BASE_DIR / "data"))).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)

SECRET_KEY = _secret_key(DATA_DIR)
DEBUG = _env_bool("STORYTELLER_DEBUG")

# Bound to loopback: the app is for the person sitting at this machine.
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
CSRF_TRUSTED_ORIGINS = [
    "http://127.0.0.1:8000",
    "http://localhost:8000",
]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "template_partials",
    "campaigns",
    "memory",
    "knowledge",
    "storyteller",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "storyteller.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

ASGI_APPLICATION = "storyteller.asgi.application"
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# SQLite in WAL mode so readers never wait for the writer; IMMEDIATE
# transactions take the write lock up front, so two turns committing at once
# queue on the busy timeout instead of failing with "database is locked" halfway.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": DATA_DIR / "storyteller.sqlite3",
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 10,
            "init_command": (
                "PRAGMA journal_mode=WAL;"
                "PRAGMA synchronous=NORMAL;"
                "PRAGMA foreign_keys=ON;"
            ),
        },
        "TEST": {"NAME": DATA_DIR / "test-storyteller.sqlite3"},
        # Keep each thread's connection for a minute: channels closes an expired one around every
        # database_sync_to_async call, and opening SQLite again (WAL pragma, schema) cost 1.3 ms each,
        # four times before a turn's chat request (bench "overhead").
        "CONN_MAX_AGE": 60,
    }
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = []
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "campaign_list"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]

# The narrator. An explicitly configured server is always used (and its outage
# is reported); with nothing configured, Ollama's default address is probed and
# the built-in narrator takes over when nothing answers there.
STORYTELLER_LLM_URL_CONFIGURED = bool(os.environ.get("STORYTELLER_LLM_URL", "").strip())
STORYTELLER_LLM_URL = _env_str("STORYTELLER_LLM_URL", "http://127.0.0.1:11434").rstrip("/")
STORYTELLER_LLM_API = _env_str("STORYTELLER_LLM_API", "ollama").lower()
STORYTELLER_NARRATOR_MODEL = _env_str("STORYTELLER_NARRATOR_MODEL", "qwen2.5:3b-instruct")
STORYTELLER_EMBED_MODEL = _env_str("STORYTELLER_EMBED_MODEL", "nomic-embed-text")
# How long the post-turn recorder may take to answer with a reply's state
# events: the patience of a narration (llm.base.READ_TIMEOUT), since a 3B model
# on a laptop CPU can take a minute to read a long prompt.
STORYTELLER_RECORDER_TIMEOUT = _env_seconds("STORYTELLER_RECORDER_TIMEOUT", 120.0)
# The same patience for the summariser writing one memory, and how many
# unforgotten memories a campaign keeps (seed 000 §21: 80).
STORYTELLER_MEMORY_TIMEOUT = _env_seconds("STORYTELLER_MEMORY_TIMEOUT", 120.0)
STORYTELLER_MEMORY_BANK_CAPACITY = _env_count("STORYTELLER_MEMORY_BANK_CAPACITY", 80)
# How many memories one turn may use, pins included (seed 000 §20: 5).
STORYTELLER_MEMORY_TOP_K = _env_count("STORYTELLER_MEMORY_TOP_K", 5)
# How long the summariser may take to write one chunk of a checkpoint summary:
# longer than a memory's, since a chunk fills most of the window.
STORYTELLER_CHECKPOINT_TIMEOUT = _env_seconds("STORYTELLER_CHECKPOINT_TIMEOUT", 180.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "storyteller": {"handlers": ["console"], "level": "INFO"},
        "campaigns": {"handlers": ["console"], "level": "INFO"},
    },
}
