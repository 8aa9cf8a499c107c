"""What each structured request cost, as the server said: collected for whoever asks, per request (issue 27).

The post-turn worker collects the requests each step makes
(``with collecting() as used:``); every client notes each structured
request it sent there (``note``), with the messages as they went and what
the server reported: the prompt tokens it counted, how many of them it read
rather than found in its cache (Ollama's ``prompt_eval_count`` counts only
what it read; llama.cpp's ``timings.prompt_n``; the built-in narrator's
prefix match), and the tokens it wrote. Outside a collection nothing is kept.
"""

import contextlib
import contextvars
from dataclasses import dataclass

_collected = contextvars.ContextVar("storyteller_usage", default=None)
_kind = contextvars.ContextVar("storyteller_usage_kind", default="")


@dataclass(frozen=True)
class Used:
    """One request as it was sent, and what the server reported of it (None: it did not say)."""

    messages: list
    kind: str = ""  # who asked (``asking``): a post-turn step, a game master's step, a character…
    prompt: int | None = None  # the prompt's tokens, by the server's count
    read: int | None = None  # of them, those it read (not found in its prompt cache)
    written: int | None = None
    source: str = ""  # where the figures come from, in words


@contextlib.contextmanager
def collecting():
    """Collect, in a list, every request noted inside the block (tasks started inside it included)."""
    found = []
    token = _collected.set(found)
    try:
        yield found
    finally:
        _collected.reset(token)


@contextlib.contextmanager
def asking(kind):
    """Name the requests noted inside the block as ``kind``'s."""
    token = _kind.set(kind)
    try:
        yield
    finally:
        _kind.reset(token)


def note(messages, *, prompt=None, read=None, written=None, source=""):
    """Keep one request's figures for the collection in progress, if there is one."""
    found = _collected.get()
    if found is not None:
        found.append(Used(list(messages), _kind.get(), prompt, read, written, source))
