"""Every lorebook format people bring, converted to World Info and back, pure.

SillyTavern's World Info is what a keyed lorebook is stored as
(``knowledge.worldinfo``); a card's embedded ``character_book`` (V2, V3,
SillyTavern's spelling of the same settings in snake_case under
``extensions``), NovelAI lorebooks (``lorebookVersion``), Agnai memory books
(``kind: "memory"``), RisuAI books (``type: "risu"``) and a Kobold save's
``worldinfo`` convert to it the way SillyTavern converts them
(``convertCharacterBook``, ``convertNovelLorebook``, …), and every field
that has no place in World Info is named in ``Converted.unplaced``.
``character_book`` writes a book back the way a card holds it, each
entry's own ``extensions`` (unknown keys included) kept.
"""

import json
from dataclasses import dataclass, field

from knowledge import worldinfo

# A card's character_book entry: its own fields -> World Info's; the rest live under ``extensions``.
BOOK_FIELDS = {"keys": "key", "secondary_keys": "keysecondary", "comment": "comment", "content": "content",
               "constant": "constant", "selective": "selective", "insertion_order": "order"}
# ``extensions`` keys (snake_case) -> World Info fields (SillyTavern's convertCharacterBook).
EXTENSION_FIELDS = {
    "position": "position", "exclude_recursion": "excludeRecursion", "prevent_recursion": "preventRecursion",
    "delay_until_recursion": "delayUntilRecursion", "display_index": "displayIndex", "probability": "probability",
    "useProbability": "useProbability", "depth": "depth", "selectiveLogic": "selectiveLogic",
    "outlet_name": "outletName", "group": "group", "group_override": "groupOverride",
    "group_weight": "groupWeight", "scan_depth": "scanDepth", "case_sensitive": "caseSensitive",
    "match_whole_words": "matchWholeWords", "use_group_scoring": "useGroupScoring",
    "automation_id": "automationId", "role": "role", "vectorized": "vectorized", "sticky": "sticky",
    "cooldown": "cooldown", "delay": "delay", "match_persona_description": "matchPersonaDescription",
    "match_character_description": "matchCharacterDescription",
    "match_character_personality": "matchCharacterPersonality",
    "match_character_depth_prompt": "matchCharacterDepthPrompt", "match_scenario": "matchScenario",
    "match_creator_notes": "matchCreatorNotes", "triggers": "triggers", "ignore_budget": "ignoreBudget",
}
# World Info fields a turn here does not use: kept for export, and named in the preview.
UNPLACED = {
    "vectorized": "vector search (entries here fire by their keys)",
    "automationId": "automation ids (SillyTavern's quick replies)",
    "outletName": "outlets",
    "triggers": "generation-type triggers (every turn here is one kind)",
    "matchPersonaDescription": "scanning the persona's description", "matchCharacterDescription":
        "scanning the character's description", "matchCharacterPersonality": "scanning the character's personality",
    "matchCharacterDepthPrompt": "scanning the depth prompt", "matchScenario": "scanning the scenario",
    "matchCreatorNotes": "scanning the creator's notes",
}
# Book-level fields of a character_book.
BOOK_LEVEL = ("name", "description", "scan_depth", "token_budget", "recursive_scanning", "extensions")


@dataclass
class Converted:
    """A lorebook in World Info form: the Book, what it was, and every field that has no place here."""

    book: worldinfo.Book
    kind: str  # "World Info", "character book", "NovelAI lorebook", …
    unplaced: list = field(default_factory=list)  # "3 entries use vector search …"


def kind_of(value):
    """Return the lorebook format of a parsed JSON ``value``, or None when it is not a lorebook."""
    if not isinstance(value, dict):
        return None
    if value.get("spec") == "lorebook_v3" and isinstance(value.get("data"), dict):
        return "lorebook_v3"
    if "lorebookVersion" in value:
        return "novelai"
    if value.get("kind") == "memory" and isinstance(value.get("entries"), list):
        return "agnai"
    if value.get("type") == "risu" and isinstance(value.get("data"), list):
        return "risu"
    if isinstance(value.get("entries"), dict):
        return "worldinfo"
    if isinstance(value.get("entries"), list) and all(isinstance(e, dict) and "keys" in e for e in value["entries"]):
        return "character_book"
    return None


def convert(value, name):
    """Return the Converted lorebook of ``value`` (a parsed JSON document whose ``kind_of`` is not None)."""
    kind = kind_of(value)
    if kind == "lorebook_v3":
        return from_character_book(value["data"], name, "lorebook (V3)")
    if kind == "character_book":
        return from_character_book(value, name, "character book")
    if kind == "novelai":
        return _finish(_novelai(value), name, "NovelAI lorebook", [
            "NovelAI's context settings beyond budget priority (insertion position, reserved tokens, trim)"]
            if any(isinstance(e, dict) and e.get("contextConfig") for e in value.get("entries") or []) else [])
    if kind == "agnai":
        return _finish(_agnai(value), name, "Agnai memory book")
    if kind == "risu":
        return _finish(_risu(value), name, "RisuAI lorebook")
    return _finish(value, name, "World Info")


def _finish(document, name, kind, unplaced=()):
    book = worldinfo.read(document, name)
    book.name = book.name or name
    return Converted(book, kind, [*unplaced, *unplaced_fields(book)])


def unplaced_fields(book):
    """Return, in words, the World Info fields ``book``'s entries set that a turn here does not use."""
    counts = {}
    for item in book.entries:
        for name, what in UNPLACED.items():
            value = item.raw.get(name)
            if value not in (None, False, "", [], 0):
                counts[what] = counts.get(what, 0) + 1
    return [f"{count} entr{'y uses' if count == 1 else 'ies use'} {what}: kept for export, not used here"
            for what, count in counts.items()]


def from_character_book(book, name, kind="character book"):
    """Return a card's ``character_book`` as World Info (SillyTavern's mapping), its own fields kept aside."""
    entries = {}
    used = set()
    for index, item in enumerate(book.get("entries") or []):
        if not isinstance(item, dict):
            continue
        uid = item.get("id")
        if uid is None or str(uid) in used:
            uid = next(n for n in range(index, index + len(used) + 2) if str(n) not in used)
        used.add(str(uid))
        extensions = item.get("extensions") if isinstance(item.get("extensions"), dict) else {}
        entry = {"uid": uid, **{ours: item[theirs] for theirs, ours in BOOK_FIELDS.items() if theirs in item}}
        entry.setdefault("keysecondary", [])
        entry["disable"] = item.get("enabled") is False
        entry["position"] = 0 if item.get("position") == "before_char" else 1
        for theirs, ours in EXTENSION_FIELDS.items():
            if theirs in extensions:
                entry[ours] = extensions[theirs]
        entry["extensions"] = extensions
        kept = {key: item[key] for key in item if key not in {*BOOK_FIELDS, "id", "enabled", "position",
                                                                "extensions"}}
        if kept:
            entry["characterBook"] = kept  # use_regex, priority, name, case_sensitive …: written back as they were
        entries[str(uid)] = entry
    original = {key: book[key] for key in BOOK_LEVEL if key in book}
    document = {"entries": entries, "name": str(book.get("name") or name), "characterBook": original}
    converted = _finish(document, name, kind)
    converted.book.name = str(book.get("name") or name)
    return converted


def character_book(book):
    """Return ``book`` (a World Info Book) as a card's ``character_book`` (SillyTavern's reverse mapping)."""
    original = book.extra.get("characterBook") if isinstance(book.extra.get("characterBook"), dict) else {}
    result = {key: value for key, value in original.items() if key != "entries"}
    result["name"] = book.name or original.get("name", "")
    result.setdefault("extensions", {})
    entries = []
    for item in book.entries:
        raw = item.raw
        extensions = dict(raw.get("extensions") or {}) if isinstance(raw.get("extensions"), dict) else {}
        for theirs, ours in EXTENSION_FIELDS.items():
            if ours in raw:
                extensions[theirs] = raw[ours]
        extensions["position"] = item.position
        entry = {**(raw.get("characterBook") or {}),
                 "id": int(item.uid) if item.uid.isdigit() else item.uid, "keys": list(item.keys),
                 "secondary_keys": list(item.secondary), "comment": item.comment, "content": item.content,
                 "constant": item.constant, "selective": item.selective, "insertion_order": item.order,
                 "enabled": item.enabled, "position": "before_char" if item.position == 0 else "after_char",
                 "extensions": extensions}
        entry.setdefault("use_regex", True)
        entries.append(entry)
    result["entries"] = entries
    return result


def world_info(book):
    """Return ``book`` as the SillyTavern World Info file it exports as (every entry's fields as stored)."""
    return json.loads(worldinfo.dump(book))


def _novelai(value):
    entries = {}
    for index, item in enumerate(value.get("entries") or []):
        if not isinstance(item, dict):
            continue
        config = item.get("contextConfig") if isinstance(item.get("contextConfig"), dict) else {}
        entries[str(index)] = {"uid": index, "key": item.get("keys") or [], "keysecondary": [],
                               "comment": item.get("displayName") or "", "content": item.get("text") or "",
                               "order": config.get("budgetPriority", 0), "position": 0,
                               "disable": item.get("enabled") is False, "selective": False,
                               "novelai": {key: item[key] for key in item
                                           if key not in ("keys", "displayName", "text", "enabled")}}
    return {"entries": entries, "name": str(value.get("name") or ""),
            "novelai": {key: value[key] for key in value if key != "entries"}}


def _agnai(value):
    entries = {}
    for index, item in enumerate(value.get("entries") or []):
        if not isinstance(item, dict):
            continue
        entries[str(index)] = {"uid": index, "key": item.get("keywords") or [], "keysecondary": [],
                               "comment": item.get("name") or "", "content": item.get("entry") or "",
                               "order": item.get("weight", 100), "disable": item.get("enabled") is False,
                               "selective": False, "position": 0}
    return {"entries": entries, "name": str(value.get("name") or ""), "description": value.get("description")}


def _risu(value):
    entries = {}
    for index, item in enumerate(value.get("data") or []):
        if not isinstance(item, dict):
            continue
        percent = item.get("activationPercent")
        entries[str(index)] = {"uid": index, "key": str(item.get("key") or ""),
                               "keysecondary": str(item.get("secondkey") or ""),
                               "comment": item.get("comment") or "", "content": item.get("content") or "",
                               "constant": item.get("alwaysActive") is True, "selective": item.get("selective") is True,
                               "order": item.get("insertorder", 100), "position": 0,
                               "probability": percent if percent is not None else 100,
                               "useProbability": percent is not None}
    return {"entries": entries, "name": str(value.get("name") or "")}


def from_kobold(items, name):
    """Return a Kobold save's ``worldinfo`` list as World Info (keys as comma-separated strings)."""
    entries, unplaced = {}, []
    for index, item in enumerate(items or []):
        if not isinstance(item, dict):
            continue
        secondary, logic = item.get("keysecondary") or "", worldinfo.AND_ANY
        anti = item.get("keyanti") or ""
        if anti and not secondary:
            secondary, logic = anti, worldinfo.NOT_ANY
        elif anti:
            unplaced.append(f"entry {index}'s anti-keys ({str(anti)[:40]}): an entry here has one list of secondary "
                            "keys, and it holds the secondary keys")
        entries[str(index)] = {"uid": index, "key": str(item.get("key") or ""), "keysecondary": str(secondary),
                               "selectiveLogic": logic, "comment": item.get("comment") or "",
                               "content": item.get("content") or "", "constant": item.get("constant") is True,
                               "selective": item.get("selective") is True or bool(secondary),
                               "probability": item.get("probability", 100),
                               "useProbability": item.get("probability") not in (None, 100),
                               "group": item.get("wigroup") or "", "disable": item.get("widisabled") is True,
                               "kobold": {key: item[key] for key in item if key in ("folder", "keyanti")}}
    converted = _finish({"entries": entries, "name": name}, name, "Kobold world info")
    converted.unplaced[:0] = unplaced
    return converted
