"""SillyTavern World Info: the text of a keyed lorebook, read into entries and written back, pure (issue 28).

A keyed lorebook's source text is World Info JSON (``{"entries": {"<uid>":
{…}}}``, an object keyed by uid): what SillyTavern writes, and what every
other lorebook format is converted to before it is stored
(``storyteller.tavern.books``). Its entries are derived from that text, as
a Markdown lorebook's are from its headings, so "Rebuild index" and a
campaign bundle give every entry back its settings and its key. Each entry
keeps every field it came with — unknown ones included — so an export
writes back what was read; ``Entry`` is the typed view the keyed scan uses
(``knowledge.keyed``).

Values of the wrong type are read the way SillyTavern's own files hold them
(``"0.5"``, ``"true"``, keys as one comma-separated string); a value that
cannot be read falls back to SillyTavern's default and is named in
``Book.problems``, never silently.
"""

import json
import math
from dataclasses import dataclass, field

# selectiveLogic: how secondary keys combine with a primary key's match (SillyTavern's world_info_logic).
AND_ANY, NOT_ALL, NOT_ANY, AND_ALL = 0, 1, 2, 3
LOGIC = {AND_ANY: "and any", NOT_ALL: "not all", NOT_ANY: "not any", AND_ALL: "and all"}
# position: where SillyTavern puts an entry (world_info_position).
POSITIONS = {0: "before the character", 1: "after the character", 2: "above the author's note",
             3: "below the author's note", 4: "at a depth", 5: "above the example messages",
             6: "below the example messages", 7: "an outlet"}
ROLES = {0: "system", 1: "user", 2: "assistant"}
DEFAULT_ORDER = 100
DEFAULT_DEPTH = 4
DEFAULT_WEIGHT = 100
# A scan reaches at most this many messages back: each is read every turn (SillyTavern allows 1,000).
MAX_SCAN_DEPTH = 200
# Timers and delays beyond this are a typo, not a plan: a story of 100,000 turns is longer than any played.
MAX_TIMER = 100_000
MAX_KEYS = 100  # per list, per entry
MAX_KEY_CHARS = 500
MAX_ENTRIES = 10_000
MAX_CONTENT_CHARS = 100_000


class BookRefused(ValueError):
    """The lorebook cannot be read at all; the message says why in words."""


@dataclass(frozen=True)
class Entry:
    """One World Info entry as the keyed scan reads it; ``raw`` is the entry as stored (every field kept)."""

    uid: str
    keys: tuple = ()
    secondary: tuple = ()
    logic: int = AND_ANY
    selective: bool = True
    constant: bool = False
    enabled: bool = True
    order: int = DEFAULT_ORDER
    position: int = 0
    depth: int = DEFAULT_DEPTH
    role: int | None = None
    probability: int = 100
    use_probability: bool = True
    groups: tuple = ()
    group_override: bool = False
    group_weight: int = DEFAULT_WEIGHT
    group_scoring: bool | None = None
    scan_depth: int | None = None
    case_sensitive: bool | None = None
    whole_words: bool | None = None
    exclude_recursion: bool = False
    prevent_recursion: bool = False
    delay_until_recursion: int = 0  # 0: off; 1 or more: the recursion level it waits for
    sticky: int = 0
    cooldown: int = 0
    delay: int = 0
    ignore_budget: bool = False
    characters: tuple = ()  # SillyTavern's characterFilter names
    exclude_characters: bool = False
    comment: str = ""
    content: str = ""
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def title(self):
        """Return what a person calls the entry: its comment (SillyTavern's title), else its first keys."""
        if self.comment.strip():
            return self.comment.strip()[:300]
        return ", ".join(self.keys[:3])[:300] or f"Entry {self.uid}"

    @property
    def timed(self):
        return bool(self.sticky or self.cooldown or self.delay)


@dataclass
class Book:
    name: str
    entries: list  # Entry, in the file's order
    problems: list = field(default_factory=list)  # what was read other than it said, in words
    extra: dict = field(default_factory=dict)  # the file's other top-level fields, kept for export


def read(value, name="The lorebook"):
    """Return the Book of a World Info document ``value`` (parsed JSON), or raise BookRefused in words.

    ``entries`` must be an object keyed by uid (SillyTavern's form); a list
    is read too, each entry's uid its ``uid`` or its place.
    """
    if not isinstance(value, dict) or "entries" not in value:
        raise BookRefused(f"{name} is not World Info: it has no “entries”.")
    entries = value["entries"]
    if isinstance(entries, list):
        pairs = [(str(item.get("uid", index)) if isinstance(item, dict) else str(index), item)
                 for index, item in enumerate(entries)]
    elif isinstance(entries, dict):
        pairs = [(str(uid), item) for uid, item in entries.items()]
    else:
        raise BookRefused(f"{name}'s “entries” must be an object of entries keyed by their uid.")
    if len(pairs) > MAX_ENTRIES:
        raise BookRefused(f"{name} holds {len(pairs):,} entries; a lorebook may hold at most {MAX_ENTRIES:,}. "
                          "Split it into several books.")
    book = Book(str(value.get("name") or "")[:200], [], [],
                {key: item for key, item in value.items() if key != "entries"})
    seen = set()
    for uid, item in pairs:
        if not isinstance(item, dict):
            book.problems.append(f"entry {uid[:40]} is not an object and was left out")
            continue
        uid = str(item.get("uid", uid))[:60] if item.get("uid") is not None else uid[:60]
        if uid in seen:
            book.problems.append(f"two entries have the uid {uid!r}; the second was left out")
            continue
        seen.add(uid)
        book.entries.append(entry(uid, item, book.problems))
    return book


def entry(uid, raw, problems):
    """Return the Entry of the World Info entry ``raw`` (uid ``uid``), naming in ``problems`` what it misread."""
    where = f"entry {uid}" + (f" “{str(raw.get('comment'))[:60]}”" if raw.get("comment") else "")
    get = _Reader(raw, where, problems)
    filter_ = raw.get("characterFilter") if isinstance(raw.get("characterFilter"), dict) else {}
    return Entry(
        uid=uid,
        keys=get.keys("key"),
        secondary=get.keys("keysecondary"),
        logic=get.choice("selectiveLogic", LOGIC, AND_ANY),
        selective=get.flag("selective", True),
        constant=get.flag("constant", False),
        enabled=not get.flag("disable", False),
        order=get.number("order", DEFAULT_ORDER, -1_000_000, 1_000_000),
        position=get.choice("position", POSITIONS, 0),
        depth=get.number("depth", DEFAULT_DEPTH, 0, 10_000),
        role=get.choice("role", ROLES, None),
        probability=get.number("probability", 100, 0, 100),
        use_probability=get.flag("useProbability", True),
        groups=tuple(part.strip() for part in str(raw.get("group") or "").split(",") if part.strip()),
        group_override=get.flag("groupOverride", False),
        group_weight=get.number("groupWeight", DEFAULT_WEIGHT, 0, 1_000_000),
        group_scoring=get.flag("useGroupScoring", None),
        scan_depth=get.number("scanDepth", None, 0, MAX_SCAN_DEPTH),
        case_sensitive=get.flag("caseSensitive", None),
        whole_words=get.flag("matchWholeWords", None),
        exclude_recursion=get.flag("excludeRecursion", False),
        prevent_recursion=get.flag("preventRecursion", False),
        delay_until_recursion=get.level("delayUntilRecursion"),
        sticky=get.number("sticky", 0, 0, MAX_TIMER),
        cooldown=get.number("cooldown", 0, 0, MAX_TIMER),
        delay=get.number("delay", 0, 0, MAX_TIMER),
        ignore_budget=get.flag("ignoreBudget", False),
        characters=tuple(str(name)[:200] for name in (filter_.get("names") or [])[:MAX_KEYS]
                         if isinstance(name, str) and name.strip()),
        exclude_characters=filter_.get("isExclude") is True,
        comment=get.text("comment", 2_000),
        content=get.text("content", MAX_CONTENT_CHARS),
        raw=raw,
    )


class _Reader:
    """Read one entry's fields as SillyTavern's files hold them, naming what had to fall back to a default."""

    def __init__(self, raw, where, problems):
        self.raw, self.where, self.problems = raw, where, problems

    def _bad(self, name, value, used):
        self.problems.append(f"{self.where}: {name} {_shown(value)} cannot be read; {used} was used")

    def flag(self, name, default):
        value = self.raw.get(name)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", ""):
            return value.strip().lower() in ("true", "1")
        self._bad(name, value, json.dumps(default))
        return default

    def number(self, name, default, low, high):
        value = self.raw.get(name)
        if value is None or value == "":
            return default
        number = value
        if isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                number = None
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
            self._bad(name, value, "none" if default is None else default)
            return default
        if not low <= number <= high:
            clamped = int(min(max(number, low), high))
            self.problems.append(f"{self.where}: {name} {_shown(value)} is outside {low:,}–{high:,}; "
                                 f"{clamped:,} was used")
            return clamped
        return int(number)

    def choice(self, name, choices, default):
        value = self.raw.get(name)
        if value is None or value == "":
            return default
        number = self.number(name, default, min(choices), max(choices))
        return number if number in choices or number is None else default

    def level(self, name):
        """Return delayUntilRecursion as a level: false 0, true 1, a number itself."""
        value = self.raw.get(name)
        if value in (None, False, "", 0):
            return 0
        if value is True:
            return 1
        return self.number(name, 0, 0, 100)

    def keys(self, name):
        value = self.raw.get(name)
        if value is None or value == "":
            return ()
        if isinstance(value, str):
            value = value.split(",")
        if not isinstance(value, list):
            self._bad(name, value, "no keys")
            return ()
        found = []
        for key in value[:MAX_KEYS]:
            if isinstance(key, (int, float)) and not isinstance(key, bool):
                key = str(key)
            if isinstance(key, str) and key.strip():
                found.append(key.strip()[:MAX_KEY_CHARS])
        if len(value) > MAX_KEYS:
            self.problems.append(f"{self.where}: {name} has {len(value):,} keys; the first {MAX_KEYS} were kept")
        return tuple(found)

    def text(self, name, limit):
        value = self.raw.get(name)
        if value is None:
            return ""
        if not isinstance(value, str):
            self._bad(name, value, "no text")
            return ""
        if len(value) > limit:
            self.problems.append(f"{self.where}: {name} is {len(value):,} characters; the first {limit:,} are used")
        return value[:limit]


def _shown(value):
    return repr(value)[:40]


def dump(book):
    """Return ``book`` as the World Info JSON stored as its source's text: every entry as it came, compact."""
    document = {**book.extra, "entries": {item.uid: {**item.raw, "uid": _uid_value(item)} for item in book.entries}}
    if book.name and "name" not in book.extra:
        document["name"] = book.name
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def _uid_value(item):
    """Return the uid as SillyTavern writes it: a number when it is one."""
    original = item.raw.get("uid")
    if isinstance(original, (int, str)) and not isinstance(original, bool) and str(original) == item.uid:
        return original
    return int(item.uid) if item.uid.isdigit() else item.uid


def parse(text, name="The lorebook"):
    """Return the Book stored as a keyed lorebook's source ``text`` (written by ``dump``)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise BookRefused(f"{name} is not World Info JSON ({error.msg}).") from None
    return read(value, name)
