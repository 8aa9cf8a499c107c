"""What importing the files a person brought would make, before anything is written: the preview, pure.

``make`` joins the Readings of one drop into one Plan: the characters
(each card's, with its portrait, description, personality, examples and
creator's notes, ``{{char}}`` read as its name), the opening scene and the
greetings (the first card's first message and every alternate greeting,
then the other cards'), the lorebooks (a card's own and those brought
beside it, each at the level the person chose, with who knows its entries),
the lines of story (each chat's turns, swipes as versions) and the
campaign's settings (the narrator's rules, the reply direction, style
examples, the author's note). Every field with no place here and every
part that was bad is listed with the file it came from; a file that could
not be read at all is listed as refused, and nothing of it is used.
"""

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import PurePath

from campaigns.models import NODE_CHARS, NOTES_CHARS, OPENING_CHARS
from campaigns.state.world import lore
from campaigns.state.reading import key_for
from campaigns.state.registry import MAX_TEXT
from knowledge import worldinfo

from . import books, cards, chats

LEVELS = ("canon", "reference", "inspiration")
LEVEL_WORDS = {"canon": "Canon (true in this story)", "reference": "Reference (detail, never fact)",
               "inspiration": "Inspiration (tone only)"}
EXAMPLES_CHARS = OPENING_CHARS  # style examples sit in the stable prefix, as the opening's length allows
CARD_CHARS = 20_000  # a character's description, personality or examples, each
ORIGINAL = re.compile(r"\{\{original\}\}", re.IGNORECASE)


@dataclass
class Character:
    name: str
    key: str  # the entity's key
    card: object  # cards.Card
    file: str
    portrait: bytes = b""
    description: str = ""
    personality: str = ""
    examples: str = ""
    creator_notes: str = ""
    book: int | None = None  # the index of its own lorebook in Plan.books


@dataclass
class Book:
    title: str
    key: str  # the lorebook's key (entries are "<key>:<uid>")
    converted: object  # books.Converted
    file: str
    level: str = "canon"
    scope: str = lore.EVERYONE
    knowers: dict = field(default_factory=dict)  # entry uid -> [character keys] who know it
    known_to: list = field(default_factory=list)  # the names of those characters, for the preview

    @property
    def entries(self):
        return self.converted.book.entries


@dataclass
class Line:
    """One chat as a line of the story: its turns (swipes as versions) and what could not be a turn."""

    file: str
    chat: object  # chats.Chat
    turns: list
    left_out: list = field(default_factory=list)

    @property
    def swipes(self):
        return sum(len(turn.reply) - 1 for turn in self.turns)


@dataclass
class Plan:
    readings: list
    persona: str
    characters: list = field(default_factory=list)
    books: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    title: str = ""
    opening: str = ""
    greetings: list = field(default_factory=list)  # [(who, text)], versions of the opening reply
    narrator_rules: str = ""
    reply_direction: str = ""
    style_examples: str = ""
    note: dict | None = None  # {text, depth, interval, role}
    memory: str = ""  # a Kobold save's memory: canon always in force
    game_master: bool = False
    notes: list = field(default_factory=list)  # [(file, words)]: what was done other than asked, in words
    unplaced: list = field(default_factory=list)  # [(file, words)]: what has no place here

    @property
    def refused(self):
        return [reading for reading in self.readings if reading.refused]

    @property
    def usable(self):
        return bool(self.characters or self.books or self.lines)

    @property
    def entry_count(self):
        return sum(len(book.entries) for book in self.books)

    @property
    def turn_count(self):
        return sum(len(line.turns) for line in self.lines)

    @property
    def swipe_count(self):
        return sum(line.swipes for line in self.lines)

    @property
    def summary(self):
        """Return what the import makes, in counted words, leaving out what it makes none of."""
        parts = [_counted(len(self.characters), "character"), _counted(len(self.greetings), "greeting"),
                 _counted(self.entry_count, "lorebook entry", "lorebook entries")]
        if self.swipe_count:
            parts.append(f"{_counted(self.turn_count, 'turn')} with {_counted(self.swipe_count, 'other version')}")
        else:
            parts.append(_counted(self.turn_count, "turn"))
        if self.game_master:
            parts.append("played with a game master, each character in its own voice")
        return [part for part in parts if part]


def make(readings, persona="", levels=None, existing=None, existing_books=None):
    """Return the Plan of ``readings`` (files.Reading) played as ``persona``; ``levels`` {book index: level};
    ``existing`` the names of the characters of the campaign the files are added to (None: a new campaign),
    ``existing_books`` its keyed books' {entries_hash: title} (a book it has already is not added again)."""
    plan = Plan(list(readings), persona.strip()[:100])
    taken = {key_for(name) for name in existing or ()}
    book_keys = set()
    for reading in plan.readings:
        if reading.refused:
            continue
        plan.notes += [(reading.name, problem) for problem in reading.problems]
        if reading.card is not None:
            _character(plan, reading, taken, book_keys)
        if reading.book is not None and reading.card is None:
            title = (existing_books or {}).get(book_hash(reading.book.book))
            if title is not None:
                plan.notes.append((reading.name, f"the campaign has this lorebook already (“{title}”), entry for "
                                                 "entry, so it is not added again"))
            else:
                _book(plan, reading.book, reading.name, book_keys, scope=lore.EVERYONE)
        if reading.chat is not None:
            _line(plan, reading)
    _once(plan)
    for number, book in enumerate(plan.books):
        wanted = (levels or {}).get(number)
        if wanted in LEVELS:
            book.level = wanted
    _knowers(plan)
    _campaign(plan)
    if existing is not None and plan.greetings:
        cards = "cards" if len(plan.characters) > 1 else "card"
        plan.notes.append(("", f"{len(plan.greetings)} greeting(s) are kept with the {cards} and not added: the "
                               "campaign has its own opening"))
        plan.greetings = []
    return plan


def book_hash(book):
    """Return the hash of World Info ``book``'s entries, whatever the book or its file is called: the same book
    brought again under another name is still the same book."""
    return entries_hash(json.loads(worldinfo.dump(book))["entries"])


def entries_hash(entries):
    """Return the hash of a World Info document's ``entries`` (as a keyed lorebook's text holds them)."""
    return hashlib.sha256(json.dumps(entries, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _character(plan, reading, taken, book_keys):
    card = reading.card
    plan.unplaced += [(reading.name, words) for words in card.unplaced]
    plan.notes += [(reading.name, problem) for problem in card.problems]
    key = key_for(card.name)
    if key in taken:
        plan.notes.append((reading.name, f"the campaign already has a character called {card.name} (or your own "
                                         "character goes by that name), so this card was not added; rename the "
                                         "character in the card to bring it in"))
        return
    taken.add(key)
    filled = {name: cards.fill_char(getattr(card, name), card) for name in ("description", "personality",
                                                                            "mes_example", "creator_notes")}
    for name, text in filled.items():
        if len(text) > CARD_CHARS:
            plan.notes.append((reading.name, f"{card.name}'s {name.replace('_', ' ')} is {len(text):,} characters; "
                                             f"the first {CARD_CHARS:,} are kept"))
    character = Character(card.name, key, card, reading.name, reading.portrait, filled["description"][:CARD_CHARS],
                          filled["personality"][:CARD_CHARS], filled["mes_example"][:CARD_CHARS],
                          filled["creator_notes"][:CARD_CHARS])
    if card.book is not None and card.book.book.entries:
        character.book = len(plan.books)
        book = _book(plan, card.book, reading.name, book_keys, scope=lore.LISTED)
        book.knowers = {entry.uid: [key] for entry in book.entries}
        book.known_to = [card.name]
    plan.characters.append(character)


def _book(plan, converted, file, book_keys, scope):
    title = (converted.book.name or file)[:200]
    key = base = lore.book_key(title)
    number = 2
    while key in book_keys or key == lore.WORLD_BOOK:
        key, number = f"{base}-{number}", number + 1
    book_keys.add(key)
    plan.unplaced += [(file, words) for words in converted.unplaced]
    plan.notes += [(file, problem) for problem in converted.book.problems if (file, problem) not in plan.notes]
    book = Book(title, key, converted, file, scope=scope)
    plan.books.append(book)
    return book


def _line(plan, reading):
    chat = reading.chat
    plan.unplaced += [(reading.name, words) for words in chat.unplaced]
    plan.notes += [(reading.name, problem) for problem in chat.problems]
    if reading.kind == "kobold":
        plan.opening = plan.opening or chat.opening
        plan.memory = "\n\n".join(part for part in (plan.memory, chat.memory.strip()) if part)
    turns, left_out = chats.turns(chat)
    if not turns:
        plan.notes.append((reading.name, "it holds no reply, so it adds no line of story"))
        return
    for turn in turns:
        for number, text in enumerate(turn.reply):
            if len(text) > NODE_CHARS:
                turn.reply[number] = text[:NODE_CHARS]
                plan.notes.append((reading.name, f"a reply of {len(text):,} characters was cut to {NODE_CHARS:,}"))
    plan.lines.append(Line(reading.name, chat, turns, left_out))
    plan.notes += [(reading.name, words) for words in left_out]
    if chat.note and plan.note is None:
        plan.note = {"text": chat.note, "depth": chat.note_depth if chat.note_depth is not None else 4,
                     "interval": chat.note_interval if chat.note_interval is not None else 1,
                     "role": {0: "system", 1: "user", 2: "assistant"}.get(chat.note_role, "system")}


def _once(plan):
    """Bring a lorebook in once: a standalone book with the same entries as a card's own (a character exported with
    its book beside it) is the card's, and is named instead of added again."""
    def shape(book):
        return tuple((entry.uid, entry.keys, entry.content) for entry in book.entries)

    owned = {shape(book) for book in plan.books if book.scope == lore.LISTED and book.known_to}
    kept = []
    for book in plan.books:
        if not book.known_to and shape(book) in owned:
            plan.notes.append((book.file, f"the lorebook “{book.title}” has the same entries as a card's own book, "
                                          "so it is brought in once, with the card"))
            continue
        kept.append(book)
    for character in plan.characters:
        if character.book is not None:
            character.book = kept.index(plan.books[character.book])
    plan.books = kept


def _knowers(plan):
    """Give the characters named by an entry's character filter the knowledge of it (seed 002's lore rule): such an
    entry is known only to them (its scope ``listed``), whatever the book's scope.

    SillyTavern's filter names a character by its card's file name without the extension
    (``getCharaFilename``), which is often, not always, the character's name: either is read as naming it.
    """
    by_name = {}
    for character in plan.characters:
        by_name.setdefault(character.name.lower(), character)
        by_name.setdefault(PurePath(character.file).stem.lower(), character)
    for book in plan.books:
        for entry in book.entries:
            named = [by_name[name.lower()] for name in entry.characters if name.lower() in by_name]
            if named and not entry.exclude_characters:
                book.knowers[entry.uid] = sorted({*book.knowers.get(entry.uid, []), *(c.key for c in named)})
                book.known_to = sorted({*book.known_to, *(c.name for c in named)})


def _campaign(plan):
    """Fill in the campaign's title, opening, greetings and settings from the characters and lines, named when cut."""
    people = plan.characters
    first = people[0] if people else None
    line = plan.lines[0] if plan.lines else None
    names = [c.name for c in people] or ([line.chat.character_name] if line and line.chat.character_name else [])
    plan.title = (_names(names) or (plan.books[0].title if plan.books else "") or "A story brought in")[:200]
    scenes = [cards.fill_char(c.card.scenario, c.card).strip() for c in people if c.card.scenario.strip()]
    plan.opening = _cut(plan, "the opening scene", plan.opening or "\n\n".join(scenes) or
                        (f"The story of {plan.title} begins." if names else "The story begins."), OPENING_CHARS)
    if not plan.lines:
        for character in people:
            plan.greetings += [(character.name, cards.fill_char(text, character.card))
                               for text in character.card.greetings]
    several = len(people) > 1
    rules = [(c.name, cards.fill_char(c.card.system_prompt, c.card).strip()) for c in people
             if c.card.system_prompt.strip()]
    plan.narrator_rules = _cut(plan, "the narrator's rules (system prompts)", _labelled(rules, several),
                               NOTES_CHARS)
    direction = [(c.name, ORIGINAL.sub("", cards.fill_char(c.card.post_history_instructions, c.card)).strip())
                 for c in people if c.card.post_history_instructions.strip()]
    if any(ORIGINAL.search(c.card.post_history_instructions) for c in people):
        plan.notes.append(("", "{{original}} in the post-history instructions stands for instructions of your own "
                               "that this campaign does not have; it was left out"))
    plan.reply_direction = _cut(plan, "the reply direction (post-history instructions)",
                                _labelled(direction, several), NOTES_CHARS)
    examples = [(c.name, c.examples.strip()) for c in people if c.examples.strip()]
    plan.style_examples = _cut(plan, "the style examples", _labelled(examples, several), EXAMPLES_CHARS)
    if plan.note is None and first is not None and first.card.depth_prompt:
        depth = first.card.depth_prompt
        plan.note = {"text": cards.fill_char(depth["prompt"], first.card), "depth": _number(depth.get("depth"), 4),
                     "interval": 1, "role": depth.get("role") if depth.get("role") in ("system", "user", "assistant")
                     else "system"}
    for line in plan.lines:
        if line.chat.kind == "Kobold save" and line.chat.note.strip() and plan.note is None:
            plan.note = {"text": line.chat.note, "depth": 3, "interval": 1, "role": "system"}
    if plan.note is not None:
        plan.note["text"] = _cut(plan, "the author's note", plan.note["text"], 1_000)
        plan.note["depth"] = max(0, min(50, plan.note["depth"]))
        plan.note["interval"] = max(0, min(100, plan.note["interval"]))
    plan.game_master = several or any(len(line.chat.speakers) > 1 for line in plan.lines)


def _names(names):
    names = [name for name in names if name]
    if len(names) <= 2:
        return " and ".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"


def _labelled(parts, several):
    if not several:
        return "\n\n".join(text for _, text in parts)
    return "\n\n".join(f"For {name}:\n{text}" for name, text in parts)


def _cut(plan, what, text, limit):
    if len(text) > limit:
        plan.notes.append(("", f"{what} is {len(text):,} characters; the first {limit:,} are kept (edit it in the "
                               "campaign's settings)"))
    return text[:limit]


def _number(value, default):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def entity_description(character):
    """Return the one line the world state keeps for a character: its description's start (the whole is kept
    with its card and read into the prompt's cast section)."""
    text = " ".join(character.description.split())
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1].rsplit(" ", 1)[0] + "…"


def _counted(number, one, many=""):
    """Return "1 turn", "3 turns" ("" for none): a count as the preview says it."""
    if not number:
        return ""
    return f"{number:,} {one if number == 1 else many or one + 's'}"
