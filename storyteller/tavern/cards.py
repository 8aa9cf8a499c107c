"""Character cards, read into one shape and written back as V3, pure.

V1 is six flat strings; V2 ``{spec: "chara_card_v2", data: {…}}`` adds the
creator's notes, a system prompt, post-history instructions, alternate
greetings, an embedded ``character_book``, tags and ``extensions``; V3
(``chara_card_v3``) adds assets, a nickname, group-only greetings, sources
and dates. SillyTavern writes a hybrid (the V1 fields again at the top,
beside ``data``); legacy Pygmalion JSON says ``char_name``,
``char_persona``, ``world_scenario``, ``char_greeting``,
``example_dialogue``. ``read`` takes any of them; every field Storyteller
has no place for is named in ``Card.unplaced``, and the card's own data is
kept whole (``Card.data``) so an export writes back what came in,
``extensions`` and their unknown keys unchanged.
"""

import copy
import re
from dataclasses import dataclass, field

from . import books

V1_FIELDS = ("name", "description", "personality", "scenario", "first_mes", "mes_example")
PYGMALION = {"char_name": "name", "char_persona": "description", "world_scenario": "scenario",
             "char_greeting": "first_mes", "example_dialogue": "mes_example"}
TEXT_FIELDS = (*V1_FIELDS, "creator_notes", "system_prompt", "post_history_instructions", "creator",
               "character_version", "nickname")
LIST_FIELDS = ("alternate_greetings", "group_only_greetings", "tags", "source")
# {{char}} and SillyTavern's older <BOT>: the character's name (its nickname on a V3 card), at import.
CHAR_MACRO = re.compile(r"\{\{char\}\}|<bot>", re.IGNORECASE)
# Macros a turn here does not run: left in the text as written, and named.
OTHER_MACRO = re.compile(r"\{\{(random|roll|pick|time|date|idle_duration|setvar|getvar|addvar|incvar|lastMessage"
                         r"|input|trim|noop|banned)\b[^}]*\}\}", re.IGNORECASE)
MAX_TEXT = 200_000  # one card field; a description of 50,000 tokens is already more than any window
MAX_LIST = 500
# Extensions that mean something in SillyTavern's own interface and nothing here (kept for export).
EXTENSION_WORDS = {
    "talkativeness": "talkativeness (how often SillyTavern's group chat picks the character)",
    "fav": "SillyTavern's favourite mark",
    "world": "the name of the World Info file linked in SillyTavern",
    "regex_scripts": "regex scripts",
    "chub": "Chub's own data",
    "risuai": "RisuAI's own data",
}


class CardRefused(ValueError):
    """The file is not a character card this reads; the message says why in words."""


@dataclass
class Card:
    spec: str  # "V1", "V2", "V3", "Pygmalion"
    name: str
    data: dict  # the card's own fields (V2/V3 ``data``), as read: what an export writes back
    description: str = ""
    personality: str = ""
    scenario: str = ""
    first_mes: str = ""
    mes_example: str = ""
    creator_notes: str = ""
    system_prompt: str = ""
    post_history_instructions: str = ""
    nickname: str = ""
    alternate_greetings: list = field(default_factory=list)
    group_only_greetings: list = field(default_factory=list)
    tags: list = field(default_factory=list)
    creator: str = ""
    character_version: str = ""
    extensions: dict = field(default_factory=dict)
    book: object = None  # books.Converted, the embedded character_book
    assets: list = field(default_factory=list)  # V3 [{type, uri, name, ext}]
    depth_prompt: dict = field(default_factory=dict)  # SillyTavern's character note {prompt, depth, role}
    hybrid: bool = False
    unplaced: list = field(default_factory=list)
    problems: list = field(default_factory=list)

    @property
    def called(self):
        """Return what ``{{char}}`` means for this card: its nickname, else its name."""
        return self.nickname.strip() or self.name

    @property
    def greetings(self):
        """Return the first message and every alternate greeting, in order, without empty ones."""
        return [text for text in [self.first_mes, *self.alternate_greetings] if text.strip()]


def is_card(value):
    """Return whether a parsed JSON ``value`` looks like a character card of any version."""
    if not isinstance(value, dict):
        return False
    if value.get("spec") in ("chara_card_v2", "chara_card_v3") and isinstance(value.get("data"), dict):
        return True
    if "char_name" in value and ("char_persona" in value or "char_greeting" in value):
        return True
    return isinstance(value.get("name"), str) and any(key in value for key in V1_FIELDS[1:])


def read(value, name="The card"):
    """Return the Card of ``value`` (parsed JSON), or raise CardRefused naming what is missing."""
    if not isinstance(value, dict):
        raise CardRefused(f"{name} is not a character card: it is not a JSON object.")
    spec = value.get("spec")
    if spec in ("chara_card_v2", "chara_card_v3"):
        data = value.get("data")
        if not isinstance(data, dict):
            raise CardRefused(f"{name} says it is a {spec} card but has no “data” object.")
        card = _card("V3" if spec == "chara_card_v3" else "V2", data, name)
        card.hybrid = any(key in value for key in V1_FIELDS)
        version = value.get("spec_version")
        if spec == "chara_card_v3" and _version(version) > 3.0:
            card.problems.append(f"{name} is a card of spec version {str(version)[:10]}, newer than this reads "
                                 "(3.0); what 3.0 holds was read")
        if spec == "chara_card_v3":
            _v3_parts(card, data)
        return card
    if spec is not None:
        raise CardRefused(f"{name} is a {str(spec)[:40]!r} document, not a character card (chara_card_v2 or v3).")
    if "char_name" in value:
        data = {ours: value.get(theirs, "") for theirs, ours in PYGMALION.items()}
        card = _card("Pygmalion", data, name)
        card.data = copy.deepcopy(value)
        return card
    if not isinstance(value.get("name"), str):
        raise CardRefused(f"{name} is not a character card: it has no name.")
    return _card("V1", value, name)


def _version(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _card(spec, data, where):
    problems, unplaced = [], []
    values = {}
    for key in TEXT_FIELDS:
        value = data.get(key, "")
        if value is None:
            value = ""
        if not isinstance(value, str):
            problems.append(f"{key} is not text ({type(value).__name__}); it was left empty")
            value = ""
        if len(value) > MAX_TEXT:
            problems.append(f"{key} is {len(value):,} characters; the first {MAX_TEXT:,} were kept")
            value = value[:MAX_TEXT]
        values[key] = value
    lists = {}
    for key in LIST_FIELDS:
        value = data.get(key) or []
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",")] if key == "tags" else [value]
        if not isinstance(value, list):
            problems.append(f"{key} is not a list; it was left empty")
            value = []
        lists[key] = [item[:MAX_TEXT] for item in value[:MAX_LIST] if isinstance(item, str)]
    name = values["name"].strip()[:200]
    if not name:
        raise CardRefused(f"{where} is a character card with no name; give the character a name and export it "
                          "again.")
    extensions = data.get("extensions") if isinstance(data.get("extensions"), dict) else {}
    if data.get("extensions") is not None and not isinstance(data.get("extensions"), dict):
        problems.append("extensions is not an object; it was left out")
    card = Card(spec, name, copy.deepcopy(data), values["description"], values["personality"], values["scenario"],
                values["first_mes"], values["mes_example"], values["creator_notes"], values["system_prompt"],
                values["post_history_instructions"], values["nickname"], lists["alternate_greetings"],
                lists["group_only_greetings"], lists["tags"], values["creator"], values["character_version"],
                extensions, problems=problems, unplaced=unplaced)
    depth = extensions.get("depth_prompt")
    if isinstance(depth, dict) and isinstance(depth.get("prompt"), str) and depth["prompt"].strip():
        card.depth_prompt = {"prompt": depth["prompt"][:MAX_TEXT], "depth": depth.get("depth", 4),
                             "role": depth.get("role", "system")}
    for key, words in EXTENSION_WORDS.items():
        if extensions.get(key) not in (None, "", [], {}, False):
            unplaced.append(f"{words}: kept for export, not used here")
    known = {"depth_prompt", *EXTENSION_WORDS}
    others = sorted(key for key in extensions if key not in known)
    if others:
        unplaced.append(f"extensions {', '.join(others[:8])}{' …' if len(others) > 8 else ''}: kept unchanged for "
                        "export, not used here")
    if lists["tags"]:
        unplaced.append(f"tags ({', '.join(lists['tags'][:6])}): kept for export")
    for label, text in (("creator", values["creator"]), ("character version", values["character_version"])):
        if text.strip():
            unplaced.append(f"{label} “{text.strip()[:60]}”: kept for export")
    macros = sorted({match.group(1).lower() for key in TEXT_FIELDS for match in OTHER_MACRO.finditer(values[key])})
    if macros:
        unplaced.append(f"the macros {', '.join('{{' + m + '}}' for m in macros)}: left in the text as written "
                        "(this narrator does not run them)")
    book = data.get("character_book")
    if isinstance(book, dict) and isinstance(book.get("entries"), list):
        card.book = books.from_character_book(book, f"{name}'s lorebook")
    elif book not in (None, {}):
        problems.append("character_book is not a lorebook (it needs a list of entries); it was left out")
    return card


def _v3_parts(card, data):
    assets = data.get("assets")
    if isinstance(assets, list):
        card.assets = [asset for asset in assets[:MAX_LIST] if isinstance(asset, dict) and isinstance(asset.get("uri"),
                                                                                                     str)]
    notes = data.get("creator_notes_multilingual")
    if isinstance(notes, dict) and notes:
        card.unplaced.append(f"creator's notes in {', '.join(sorted(map(str, notes))[:6])}: kept for export; the "
                             "English ones (creator_notes) are shown")
    if card.group_only_greetings:
        card.unplaced.append(f"{len(card.group_only_greetings)} greeting(s) for group chats only: kept for export")
    if card.nickname.strip():
        card.unplaced.append(f"the nickname “{card.nickname.strip()[:60]}” is what {{{{char}}}} reads as")


def fill_char(text, card):
    """Return ``text`` with ``{{char}}`` and ``<BOT>`` read as the card's character (``{{user}}`` stays)."""
    return CHAR_MACRO.sub(lambda _: card.called, text) if "{" in text or "<" in text else text


def v3(data, *, book=None, assets=None):
    """Return the V3 card of ``data`` (a card's own fields, as ``Card.data`` or written anew): spec, spec_version,
    data; ``book`` the character_book to carry (None: none), ``assets`` the V3 assets list."""
    data = copy.deepcopy(data)
    if book is not None:
        data["character_book"] = book
    else:
        data.pop("character_book", None)
    if assets is not None:
        data["assets"] = assets
    for key in V1_FIELDS:
        data.setdefault(key, "")
    for key in ("creator_notes", "system_prompt", "post_history_instructions", "creator", "character_version"):
        data.setdefault(key, "")
    for key in ("alternate_greetings", "tags", "group_only_greetings"):
        data.setdefault(key, [])
    data.setdefault("extensions", {})
    return {"spec": "chara_card_v3", "spec_version": "3.0", "data": data}


def v2(card_v3):
    """Return the V2 form of a V3 card (what the ``chara`` chunk holds, as SillyTavern writes it)."""
    card = copy.deepcopy(card_v3)
    card["spec"], card["spec_version"] = "chara_card_v2", "2.0"
    return card
