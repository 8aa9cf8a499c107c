"""Run imports on a thread of their own: never on the event loop, never on the thread the database work shares.

Under ASGI every sync view and every ``database_sync_to_async`` call runs on
one shared thread, so an import there (parsing a bundle, cutting a megabyte
of knowledge, embedding it) froze every other person's play until it ended.
Imports of campaign bundles and knowledge files, rebuilding a knowledge
index, and exporting a bundle (seconds for a long story) run here instead:
one at a time on one worker thread, with its own database connection,
closed after each. SQLite's write lock is taken only in short transactions
(``campaigns.staging``), so turns commit between.

A large import is checked while the person waits, then written in the
background (``start``): the person is shown its ``Progress`` (a page that
asks every second) and the campaign once it is whole.

A handful may wait their turn; past that the next is refused in words
rather than queued behind minutes of work.

The progress page may be asked by any process behind the proxy (issue 31):
the import thread also puts each ``Progress`` in Django's cache (``CACHES``:
this process's memory by default, Redis when processes share the work), at
most every ``SHARE_SECONDS`` and when it ends; another process's page reads
it from there.
"""

import asyncio
import functools
import logging
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import cache
from django.db import connections
from django.utils.module_loading import import_string

from campaigns import staging

logger = logging.getLogger(__name__)

MAX_WAITING = 4
BUSY = (f"{MAX_WAITING} imports or exports are already running or waiting, so nothing was done; "
        "try again in a minute.")

_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="storyteller-import")
_pending = 0
_counting = threading.Lock()  # the event loop and the import thread both count


def upload_view(view):
    """Wrap an async view that takes uploads so its CSRF check reads the form on a thread of its own.

    Checking a form's token reads the whole form, and middleware runs on the one thread every other person's
    turns use: a form holding a large file took seconds to read there (tests/storyteller/test_limits_load.py).
    The CSRF middleware (``storyteller.origins.CsrfViewMiddleware``) leaves a multipart post to a view wrapped
    here unchecked; the wrapper runs the same check before the view, on a thread no database work uses, and
    the view then finds the form already read.
    """
    @functools.wraps(view)
    async def checked(request, *args, **kwargs):
        if getattr(request, "csrf_deferred", False):
            request.csrf_deferred = False
            refusal = await sync_to_async(_csrf_refusal, thread_sensitive=False)(request)
            if refusal is not None:
                return refusal
        return await view(request, *args, **kwargs)

    checked.csrf_read_apart = True
    return checked


def _csrf_refusal(request):
    # The middleware the project is configured with (its rule for origins), named in settings, not imported.
    middleware = import_string(next(path for path in settings.MIDDLEWARE if path.endswith(".CsrfViewMiddleware")))
    return middleware(lambda request: None).process_view(request, None, (), {})


def full():
    """Return whether an import asked for now would be refused (check and ``run`` with no await between)."""
    return _pending >= MAX_WAITING


async def run(function, *args):
    """Run ``function(*args)`` on the import thread; return what it returns, raise what it raises."""
    _count(1)
    try:
        return await asyncio.get_running_loop().run_in_executor(_worker, functools.partial(_call, function, *args))
    finally:
        _count(-1)


def _count(change):
    global _pending
    with _counting:
        _pending += change


@dataclass
class Progress:
    """How far a background write has come, for its owner's progress page."""

    owner: int
    what: str  # what is written, in words: "the world of “Greyhollow”"
    total: int
    done: int = 0
    campaign: int | None = None  # set once the campaign is whole
    error: str = ""
    finished: threading.Event = field(default_factory=threading.Event)

    def add(self, rows):
        self.done = min(self.total, self.done + rows)

    def shared(self):
        """Return the values another process makes this Progress again from (``_shared_progress``)."""
        return {**{name: getattr(self, name) for name in ("owner", "what", "total", "done", "campaign", "error")},
                "finished": self.finished.is_set()}

    @property
    def counted(self):
        """Return "1,050 of 72,026", how far it has come in words."""
        return f"{self.done:,} of {self.total:,}"

    @property
    def percent(self):
        return 100 if not self.total else int(100 * self.done / self.total)


# The progress pages of this process's imports: those still writing, and the newest fifty finished.
_progress: dict[str, Progress] = {}
PROGRESS_KEPT = 50
# How often a running import tells the other processes how far it has come: the page asks every second.
SHARE_SECONDS = 0.5
# How long a finished import's page can still be read from another process: the person was sent on at once.
SHARED_FOR = 3600


def start(owner, what, total, write):
    """Queue ``write(progress.add)`` (it returns the campaign it made) on the import thread; return the token of
    its progress page. Call from the import thread (a check that just passed) or with ``full()`` checked."""
    token = secrets.token_urlsafe(16)
    progress = Progress(owner.pk, what, total)
    _progress[token] = progress
    for old in [key for key, kept in _progress.items() if kept.finished.is_set()][:-PROGRESS_KEPT]:
        _progress.pop(old, None)
    _count(1)
    _share(token, progress)
    shared_at = [0.0]  # the first rows are shared at once: the page may be open already

    def add(rows):
        progress.add(rows)
        if time.monotonic() - shared_at[0] >= SHARE_SECONDS:
            shared_at[0] = time.monotonic()
            _share(token, progress)

    def job():
        try:
            staging.sweep()  # what an import a restart cut short left staged
            progress.campaign = write(add).pk
        except Exception as error:  # written out in words on the page; the log has the traceback
            logger.exception("An import failed while it was written")
            progress.error = str(error)[:500] or type(error).__name__
        finally:
            _count(-1)
            progress.finished.set()
            _share(token, progress)

    _worker.submit(_call, job)
    return token


def progress_of(token, user):
    """Return the Progress behind ``token`` if it is ``user``'s, else None."""
    progress = _progress.get(token) or _shared_progress(cache.get(_key(token)))
    return progress if progress is not None and progress.owner == user.pk else None


def _key(token):
    return f"import-progress:{token}"


def _share(token, progress):
    cache.set(_key(token), progress.shared(), SHARED_FOR)


def _shared_progress(values):
    """Return the Progress another process shared as ``values`` (or None)."""
    if values is None:
        return None
    finished = values.pop("finished")
    progress = Progress(**values)
    if finished:
        progress.finished.set()
    return progress


def _call(function, *args):
    try:
        return function(*args)
    finally:
        connections.close_all()  # this thread's own: nothing stays open between imports
