"""Lore by what each character knows (seed 002 实体知识, digest D.3, decision D10), pure.

A lore entry is known by its key, ``<book>:<entry>``: the lorebook's key
and the entry's own id (an explicit one in the file, or its heading path),
so it survives re-indexing however the passages are re-cut (``lore_key``,
``entry_id``, ``book_key``: the world's, since a ``know`` event names lore
by it). A world file's ``lore`` section is the book ``world``. A character
recalls only lore it has a knowledge edge to (``knows:<who>:lore:<key>``)
or lore whose scope is ``everyone``; unknown lore is never searched, and a
brief lists the titles alone. The game master searches every entry.
"""

import functools
from dataclasses import dataclass

from ..reading import words
from .world import WORLD_BOOK, book_key, entry_id, knowledge, lore_key  # noqa: F401 — lore's keys are the world's

LISTED, EVERYONE = "listed", "everyone"
SCOPES = (LISTED, EVERYONE)
# Lore a character is reminded of at once; the brief's titles are all it knows, and it asks for the rest.
RECALL = 3
# Words that say nothing of what an entry is about (memory.ranking's list; campaigns imports no other app).
FUNCTION_WORDS = frozenset("""a an and as at but by for from he her his i if in it its of on or she so that the their
then there these they this those to we when where while who you your""".split())


@dataclass(frozen=True)
class Entry:
    key: str  # "<book>:<entry>"
    title: str
    text: str
    scope: str = LISTED

    @property
    def book(self):
        return self.key.split(":", 1)[0]


def world_entries(content):
    """Return the Entries of a world file's ``lore`` section (``world:lore``): ``[{id, title, text, scope}]``."""
    entries = []
    for item in content or []:
        if isinstance(item, dict) and item.get("id"):
            entries.append(Entry(f"{WORLD_BOOK}:{entry_id(item['id'])}", str(item.get("title") or item["id"]),
                                 str(item.get("text") or ""), item.get("scope") if item.get("scope") in SCOPES
                                 else LISTED))
    return entries


def recallable(entries, known):
    """Return the entries a character may recall: those whose key it knows (``known``), and those for everyone."""
    return [entry for entry in entries if entry.key in known or entry.scope == EVERYONE]


def titles(entries, known):
    """Return the titles a character's brief lists: what it may recall, never a body."""
    return [entry.title for entry in recallable(entries, known)]


def recall(entries, known, text, *, limit=RECALL):
    """Return the entries a character recalls for ``text``: only what it may recall, those sharing most words first.

    Unknown lore is never searched, so however well an unknown entry matches
    it cannot come back. An entry sharing no word with ``text`` is not recalled.
    """
    wanted = _terms(text)
    scored = []
    for position, entry in enumerate(recallable(entries, known)):
        shared = len(wanted & _terms(f"{entry.title} {entry.text}"))
        title = len(wanted & _terms(entry.title))
        if shared:
            scored.append((-title, -shared, position, entry))
    return [entry for *_, entry in sorted(scored, key=lambda row: row[:3])[:limit]]


@functools.lru_cache(maxsize=4096)
def _terms(text):
    # Cached: the same entries are searched for every character of every round.
    return {word for word in words(text) if len(word) > 2 and word not in FUNCTION_WORDS}


def known_lore(state, who):
    """Return the keys of the lore entries ``who`` has a knowledge edge to on this line."""
    return set(knowledge(state, who).get("lore", {}))


def world_lore(state):
    """Return the world file's lore entries on this line (the ``world:lore`` record)."""
    record = state.get("world:lore")
    return world_entries(record.data.get("content")) if record else []
