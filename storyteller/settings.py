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


def _env_origin(name):
    """Return the origin in ``name`` as scheme://host[:port] (the default port left out, as browsers send it)."""
    from urllib.parse import urlsplit

    value = os.environ.get(name, "").strip()
    if not value:
        return ""
    parts = urlsplit(value)
    defaults = {"http": 80, "https": 443}
    try:
        port = parts.port
    except ValueError:
        port = -1
    if (parts.scheme not in defaults or not parts.hostname or parts.username or parts.path not in ("", "/")
            or parts.query or parts.fragment or port == -1):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{name} is {value!r}; set it to the address people open in their browser, "
                                   "scheme, host and port only, such as http://127.0.0.1:8000.")
    return f"{parts.scheme}://{_host_of(value)}" + ("" if port in (None, defaults[parts.scheme]) else f":{port}")


def _host_of(origin):
    """Return the host of ``origin`` as ALLOWED_HOSTS spells it (an IPv6 address in brackets)."""
    from urllib.parse import urlsplit

    host = urlsplit(origin).hostname
    return f"[{host}]" if ":" in host else host


def _private_folder(path):
    """Create the data folder for its owner alone, or make an existing one private, saying so once.

    The umask makes every file the app creates from here on 0600 from its
    first byte, the SQLite database and its -wal and -shm files included
    (another local user once copied a session key out of a 0644 database).
    A folder or file left open by an earlier version is closed here, and the
    note printed once: the next start finds nothing to fix.
    """
    import stat
    import sys

    os.umask(0o077)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    fixed = 0
    for folder, _, files in os.walk(path):
        for name, mode in [(folder, 0o700)] + [(os.path.join(folder, file), 0o600) for file in files]:
            status = os.lstat(name)
            if not stat.S_ISLNK(status.st_mode) and status.st_mode & 0o077:
                os.chmod(name, mode)
                fixed += 1
    if fixed:
        print(f"Storyteller: {path} and what is in it were readable by other users of this machine; "
              f"{fixed} file(s) and folder(s) are now readable only by you.", file=sys.stderr)


def _secret_key(data_dir):
    """Return the key stored in the data folder, creating it on first run (0600 from its first byte)."""
    import time

    path = data_dir / "secret_key"
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        for _ in range(50):  # another process may be writing it this moment
            key = path.read_text().strip()
            if key:
                return key
            time.sleep(0.02)
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{path} is empty; delete it and start again to generate a new key.")
    with os.fdopen(descriptor, "w") as file:
        file.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


DATA_DIR = Path(_env_str("STORYTELLER_DATA_DIR", str(BASE_DIR / "data"))).resolve()
_private_folder(DATA_DIR)

SECRET_KEY = _secret_key(DATA_DIR)
DEBUG = _env_bool("STORYTELLER_DEBUG")

# Bound to loopback: the app is for the person sitting at this machine.
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
# The origin pages must come from to post or open the play socket: by default
# the loopback address and the port the app is serving on, whatever it is
# (storyteller/origins.py); set it when a proxy serves the app under another.
STORYTELLER_ORIGIN = _env_origin("STORYTELLER_ORIGIN")
if STORYTELLER_ORIGIN:
    ALLOWED_HOSTS.append(_host_of(STORYTELLER_ORIGIN))
CSRF_TRUSTED_ORIGINS = [STORYTELLER_ORIGIN] if STORYTELLER_ORIGIN else []
# Served through a TLS proxy (issue 30): the session and CSRF cookies never travel over plain HTTP.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = STORYTELLER_ORIGIN.startswith("https://")
# Bound beyond loopback without an origin, the server does not start (storyteller/serving.py says why).
def _refuse_unsafe_bind():
    import sys

    from storyteller import serving

    refused = serving.refusal(sys.argv, STORYTELLER_ORIGIN)
    if refused:
        print(refused, file=sys.stderr)
        raise SystemExit(serving.EXIT_CODE)


_refuse_unsafe_bind()

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_tasks",
    "django_tasks_db",
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
    "storyteller.origins.CsrfViewMiddleware",
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
                "storyteller.table_views.guest",  # issue 30: a table guest's header
            ],
        },
    },
]

ASGI_APPLICATION = "storyteller.asgi.application"
# One process keeps its sockets' groups in memory; several (docs/deploy.md) share them through Redis, so a socket
# on one Daphne process hears the turn another played. The socket timeout is above the layer's own 5 s blocking
# read: a Redis that stops answering fails the send or the receive with an error instead of hanging it.
STORYTELLER_REDIS_URL = _env_str("STORYTELLER_REDIS_URL", "")
if STORYTELLER_REDIS_URL:
    CHANNEL_LAYERS = {"default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [{"address": STORYTELLER_REDIS_URL, "socket_timeout": 10,
                              "socket_connect_timeout": 5}]},
    }}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Where the post-turn steps run (storyteller/steps/postturn.py): "in-process" (the default) in the event loop that
# played the turn, as on one machine with no other command; "database" as tasks of Django's tasks interface
# (django-tasks, its database backend) that `manage.py worker` processes run, any number of them, one campaign's
# steps at a time. The backend is configured either way: enqueuing is what the setting decides.
STORYTELLER_TASKS = _env_str("STORYTELLER_TASKS", "in-process").lower()
if STORYTELLER_TASKS not in ("in-process", "database"):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"STORYTELLER_TASKS is {STORYTELLER_TASKS!r}; set it to 'in-process' (the default) "
                               "or 'database' (run `manage.py worker` beside the app).")
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
# How long a worker's claim on a campaign's post-turn work lasts without a heartbeat: a worker that died (kill -9,
# a lost machine) holds it no longer, and its task is run again by another. Its heartbeat comes every quarter.
STORYTELLER_TASK_LEASE = _env_seconds("STORYTELLER_TASK_LEASE", 30.0)

# SQLite in WAL mode so readers never wait for the writer; IMMEDIATE
# transactions take the write lock up front, so two turns committing at once
# queue on the busy timeout instead of failing with "database is locked" halfway.
SQLITE_DATABASE = {
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


def _env_database():
    """Return the database STORYTELLER_DATABASE_URL (or DATABASE_URL) names, or SQLite in the data folder.

    Only PostgreSQL is read from a URL (postgres://user:password@host:port/name?sslmode=...): several
    server processes share one, where SQLite serves one process on one machine (issue 31). The query
    string's parameters go to libpq as they are (sslmode, connect_timeout, application_name ...).
    """
    from urllib.parse import parse_qsl, unquote, urlsplit

    name = "STORYTELLER_DATABASE_URL" if os.environ.get("STORYTELLER_DATABASE_URL", "").strip() else "DATABASE_URL"
    value = os.environ.get(name, "").strip()
    if not value:
        return SQLITE_DATABASE
    parts = urlsplit(value)
    if parts.scheme not in {"postgres", "postgresql"}:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"{name} must be a PostgreSQL URL such as postgres://user:password@127.0.0.1:5432/storyteller "
            f"(its scheme is {parts.scheme or 'missing'!r}); leave it unset to keep the SQLite database.")
    try:
        port = parts.port
    except ValueError:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{name} has a port that is not a number.") from None
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "storyteller",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": unquote(parts.hostname or ""),
        "PORT": str(port or ""),
        "OPTIONS": dict(parse_qsl(parts.query)),
        # As SQLite's: a connection per thread kept a minute, checked before reuse, since a server
        # restart or an idle timeout between turns would otherwise surface as the next turn's error.
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }


DATABASES = {"default": _env_database()}

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
# How long a model server may send nothing (before its first word, or between two) before the call is given up
# with what to do: a big model on a slow machine may take longer than this to read a long prompt.
STORYTELLER_LLM_TIMEOUT = _env_seconds("STORYTELLER_LLM_TIMEOUT", 120.0)
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
# Whether the recorder's second call records what the characters perceived after each reply (issue 14). On a
# slow machine with a small model it costs a model call or two a turn in the background (bench "minds").
STORYTELLER_RECORD_MINDS = _env_bool("STORYTELLER_RECORD_MINDS", True)
# Issue 31: several processes share the work (Daphne processes behind one proxy, task workers). Each turn and
# each table socket then also hold a row in the database, which the others read: a worker's model calls give way
# to any process's turn (campaigns.playing, llm.priority), and a table's panel shows who is here and typing through
# every process (table_rounds). Off for one process, which keeps it in memory and pays nothing. On by default with
# a Redis channel layer (which is what several processes need first) or with the steps in task workers (a worker
# is another process, whose model calls must give way to the web process's turns).
STORYTELLER_SHARED_PLAYING = _env_bool("STORYTELLER_SHARED_PLAYING",
                                       bool(STORYTELLER_REDIS_URL) or STORYTELLER_TASKS == "database")

# What a person's pages need whichever process answers them (issue 31: drafts kept for the next turn, an import's
# progress page): this process's memory by default, Redis when processes share the work. Redis, not the database
# cache: these are read from the event loop, where a database read may not run.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "storyteller"}}
if STORYTELLER_REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                          "LOCATION": STORYTELLER_REDIS_URL, "KEY_PREFIX": "storyteller"}}

# How the post-turn steps lay out their requests (issue 27): "narration" continues the narration's own prompt (its
# messages, the reply, then the step's instructions), so a server with one prompt cache re-reads only what is new;
# "own" gives each step a prompt of its own, shorter but shared with nothing (for a server that caches nothing).
STORYTELLER_STEP_PROMPTS = _env_str("STORYTELLER_STEP_PROMPTS", "narration")
if STORYTELLER_STEP_PROMPTS not in ("narration", "own"):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"STORYTELLER_STEP_PROMPTS is {STORYTELLER_STEP_PROMPTS!r}; set it to 'narration' (the "
                               "default) or 'own'.")
# How long the summariser may take to write one chunk of a checkpoint summary:
# longer than a memory's, since a chunk fills most of the window.
STORYTELLER_CHECKPOINT_TIMEOUT = _env_seconds("STORYTELLER_CHECKPOINT_TIMEOUT", 180.0)
# The largest campaign bundle an import reads, zipped or unpacked. A 2,000-turn
# story at an 8,192-token budget exports to 49 MiB, most of it the record of
# each prompt, and its import peaks about 100 MiB above idle (bench "imports").
STORYTELLER_BUNDLE_MAX_BYTES = _env_count("STORYTELLER_BUNDLE_MAX_MB", 64) * 1024 * 1024

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "storyteller": {"handlers": ["console"], "level": "INFO"},
        "campaigns": {"handlers": ["console"], "level": "INFO"},
    },
}
