"""A file a person chose, kept between tries of a form: a browser empties a file input whenever the page is drawn
again, so a world file refused for a missing title, or one whose problems are being read, is kept here instead.

Each is under the data folder, named by its owner and a random token the form carries in a hidden field;
another person's token finds nothing. A kept file lasts a day at most, and goes once it is used.
"""

import re
import secrets
import time
from pathlib import Path

from django.conf import settings

# Long enough to go and fix a title, short enough that an abandoned form leaves nothing for long.
KEPT_SECONDS = 24 * 3600
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")
MAX_NAME = 200


def _folder():
    folder = Path(settings.DATA_DIR) / "kept"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def _path(user, token, suffix):
    return _folder() / f"{int(user.pk)}-{token}.{suffix}"


def keep(user, name, data):
    """Keep ``data`` (the file called ``name``) for ``user``; return the token that finds it again."""
    _sweep()
    token = secrets.token_urlsafe(18)
    _path(user, token, "data").write_bytes(data)
    _path(user, token, "name").write_text(str(name)[:MAX_NAME], encoding="utf-8")
    return token


def find(user, token):
    """Return (name, bytes) of the file ``user`` kept under ``token``, or None (unknown, another's, or expired)."""
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        return None
    path = _path(user, token, "data")
    try:
        if time.time() - path.stat().st_mtime > KEPT_SECONDS:
            forget(user, token)
            return None
        return _path(user, token, "name").read_text(encoding="utf-8"), path.read_bytes()
    except FileNotFoundError:
        return None


def forget(user, token):
    """Remove the file ``user`` kept under ``token`` (nothing when there is none)."""
    if isinstance(token, str) and _TOKEN.fullmatch(token):
        for suffix in ("data", "name"):
            _path(user, token, suffix).unlink(missing_ok=True)


def _sweep():
    cutoff = time.time() - KEPT_SECONDS
    for path in _folder().iterdir():
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink(missing_ok=True)
        except FileNotFoundError:
            continue
