"""Chats people bring: SillyTavern ``.jsonl`` and Kobold saves, read into one shape and written back, pure.

A SillyTavern chat is a header line (``user_name``, ``character_name``,
``create_date``, ``chat_metadata`` with the author's note) and then one
message a line (``name, is_user, is_system, send_date, mes, extra,
swipe_id, swipes``; ``mes`` is ``swipes[swipe_id]``). A group chat has no
header and several names. A Kobold save is a prompt, ``actions`` (with
Lite's ``{{[INPUT]}}``/``{{[OUTPUT]}}`` markers in chat mode), a memory and
an author's note. ``Chat.turns`` pairs the messages the way the story tree
holds them: each of the person's messages a player action, each
character's message a reply with its swipes as versions, consecutive
replies separated by a "continue", consecutive actions joined, and
``is_system`` messages kept as notes beside the message before them.
"""

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

MAX_SWIPES = 100
MAX_TEXT = 100_000  # a reply's limit (campaigns.models.NODE_CHARS)
# SillyTavern's human dates: "September 28, 2024 1:02am", and its create_date "2023-5-12 @21h 32m 29s 228ms".
_HUMAN = ("%B %d, %Y %I:%M%p", "%B %d, %Y %I:%M %p", "%b %d, %Y %I:%M%p")
_CREATE = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2}) ?@(\d{1,2})h ?(\d{1,2})m ?(\d{1,2})s(?: ?(\d{1,3})ms)?$")
INPUT_MARK, OUTPUT_MARK = "{{[INPUT]}}", "{{[OUTPUT]}}"


class ChatRefused(ValueError):
    """The file is not a chat this reads; the message says why in words."""


@dataclass
class Message:
    name: str
    is_user: bool
    text: str  # what was shown: ``mes``
    swipes: list = field(default_factory=list)  # every version, the shown one at ``swipe_id``
    swipe_id: int = 0
    is_system: bool = False
    sent_ms: int | None = None
    send_date: object = None  # as the file had it


@dataclass
class Turn:
    """One player action and its reply as the tree holds them (either side may be a "continue")."""

    action: str  # "" for a continue
    reply: list  # the reply's versions, in swipe order
    chosen: int  # which version is on the line
    speaker: str = ""  # who wrote the reply (its name)
    action_versions: list = field(default_factory=list)  # an action's own swipes, when it has more than one
    action_chosen: int = 0
    note: str = ""  # narrator notes (is_system messages) after the reply
    action_note: str = ""


@dataclass
class Chat:
    kind: str  # "SillyTavern chat", "SillyTavern group chat", "Kobold save"
    user_name: str = ""
    character_name: str = ""
    messages: list = field(default_factory=list)
    metadata: dict = field(default_factory=dict)  # chat_metadata
    create_date: str = ""
    problems: list = field(default_factory=list)
    unplaced: list = field(default_factory=list)
    opening: str = ""  # a Kobold save's prompt
    memory: str = ""  # a Kobold save's memory
    note: str = ""  # the author's note (chat_metadata.note_prompt, a Kobold authorsnote)
    note_depth: int | None = None
    note_interval: int | None = None
    note_role: int | None = None
    worldinfo: list = field(default_factory=list)  # a Kobold save's worldinfo entries

    @property
    def speakers(self):
        """Return the names of the characters who speak, in the order they first do."""
        seen = []
        for message in self.messages:
            if not message.is_user and not message.is_system and message.name and message.name not in seen:
                seen.append(message.name)
        return seen

    @property
    def swipe_count(self):
        return sum(len(message.swipes) for message in self.messages if len(message.swipes) > 1)


def is_chat_header(value):
    return isinstance(value, dict) and "mes" not in value and ("user_name" in value or "chat_metadata" in value)


def is_message(value):
    return isinstance(value, dict) and "mes" in value and ("is_user" in value or "name" in value)


def is_kobold(value):
    return isinstance(value, dict) and ("prompt" in value or "savedsettings" in value) and (
        "actions" in value or "memory" in value or "gamestarted" in value)


def read_jsonl(values, name="The chat"):
    """Return the Chat of a SillyTavern ``.jsonl`` file, its lines parsed (``values``), or raise ChatRefused."""
    if not values:
        raise ChatRefused(f"{name} is empty.")
    chat = Chat("SillyTavern chat")
    lines = list(values)
    if is_chat_header(lines[0]):
        header = lines.pop(0)
        chat.user_name = _text(header.get("user_name"))[:100]
        chat.character_name = _text(header.get("character_name"))[:200]
        chat.create_date = _text(header.get("create_date"))[:100]
        chat.metadata = header.get("chat_metadata") if isinstance(header.get("chat_metadata"), dict) else {}
        _metadata(chat)
    for number, value in enumerate(lines, 2 if chat.user_name or chat.metadata else 1):
        if not is_message(value):
            chat.problems.append(f"line {number} is not a message (it has no “mes”); it was left out")
            continue
        chat.messages.append(_message(value, number, chat.problems))
    if not chat.messages:
        raise ChatRefused(f"{name} holds no messages.")
    if len(chat.speakers) > 1:
        chat.kind = "SillyTavern group chat"
    if not chat.character_name and chat.speakers:
        chat.character_name = chat.speakers[0]
    if not chat.user_name:
        chat.user_name = next((m.name for m in chat.messages if m.is_user and m.name), "")
    return chat


def _metadata(chat):
    meta = chat.metadata
    if isinstance(meta.get("note_prompt"), str) and meta["note_prompt"].strip():
        chat.note = meta["note_prompt"]
        chat.note_depth = _int(meta.get("note_depth"))
        chat.note_interval = _int(meta.get("note_interval"))
        chat.note_role = _int(meta.get("note_role"))
    shown = {"integrity": "SillyTavern's integrity check", "main_chat": "the chat it branched from (a branch here "
             "is part of the story tree)", "variables": "chat variables", "timedWorldInfo": "SillyTavern's world "
             "info timers (timers here are counted on the story's own line)", "world_info": "a linked World Info "
             "file's name (bring the file itself)", "tainted": "SillyTavern's edit mark", "scenario": "a chat "
             "scenario override", "persona": "the persona SillyTavern locked to it"}
    for key, what in shown.items():
        if meta.get(key) not in (None, "", {}, [], False):
            chat.unplaced.append(f"{what}: not used here")


def _message(value, number, problems):
    text = _text(value.get("mes"))
    swipes = value.get("swipes")
    chosen = 0
    if isinstance(swipes, list) and swipes:
        kept = [_text(s)[:MAX_TEXT] for s in swipes[:MAX_SWIPES]]
        if len(swipes) > MAX_SWIPES:
            problems.append(f"line {number} has {len(swipes):,} swipes; the first {MAX_SWIPES} were kept")
        chosen = _int(value.get("swipe_id"))
        if chosen is None or not 0 <= chosen < len(kept):
            problems.append(f"line {number}'s swipe_id {str(value.get('swipe_id'))[:20]} is not one of its "
                            f"{len(kept)} swipes; the message shown was taken as the chosen one")
            chosen = kept.index(text[:MAX_TEXT]) if text[:MAX_TEXT] in kept else 0
        if kept[chosen] != text[:MAX_TEXT]:
            kept[chosen] = text[:MAX_TEXT]  # ``mes`` is what SillyTavern showed
        swipes = kept
    else:
        swipes = [text[:MAX_TEXT]]
    if len(text) > MAX_TEXT:
        problems.append(f"line {number} is {len(text):,} characters long; the first {MAX_TEXT:,} were kept")
    return Message(name=_text(value.get("name"))[:200], is_user=value.get("is_user") is True,
                   text=text[:MAX_TEXT], swipes=swipes, swipe_id=chosen, is_system=value.get("is_system") is True,
                   sent_ms=date_ms(value.get("send_date")), send_date=value.get("send_date"))


def turns(chat):
    """Return the Turns of ``chat``: the messages paired as the story tree holds them, and what was left out.

    Returns (turns, left_out in words): a last message of the person's with
    no reply after it cannot be a turn, and is named.
    """
    result, pending, pending_note, left_out = [], [], "", []
    group = len(chat.speakers) > 1
    for message in chat.messages:
        if message.is_system:
            note = f"{message.name}: {message.text}" if message.name and message.name != "System" else message.text
            if result and not pending:
                result[-1].note = _joined(result[-1].note, note)
            else:
                pending_note = _joined(pending_note, note)
            continue
        if message.is_user:
            pending.append(message)
            continue
        versions = [_said(text, message.name, group) for text in message.swipes]
        action, action_versions, chosen_action = _action(pending)
        result.append(Turn(action=action, reply=versions, chosen=message.swipe_id, speaker=message.name,
                           action_versions=action_versions, action_chosen=chosen_action, action_note=pending_note))
        pending, pending_note = [], ""
    if pending:
        shown = " ".join(pending[-1].text.split())[:80]
        left_out.append(f"the last message, {pending[-1].name or 'yours'} (“{shown}”), has no reply after it, so it "
                        "is not part of the story: send it again to play on")
    return result, left_out


def _action(pending):
    """Return (the action's text, its versions when the one message had swipes, the chosen) of the person's
    messages before a reply: several are joined in order."""
    if not pending:
        return "", [], 0
    if len(pending) == 1 and len(pending[0].swipes) > 1:
        return pending[0].text, list(pending[0].swipes), pending[0].swipe_id
    return "\n\n".join(message.text for message in pending), [], 0


def _said(text, name, group):
    """Return a reply's text as history carries it: in a group chat, who said it first (SillyTavern's prompt)."""
    return f"{name}: {text}" if group and name else text


def speaker_of(text, names):
    """Return (name, text without it) when ``text`` begins with one of ``names`` and ": " (a group chat's reply)."""
    for name in sorted(names, key=len, reverse=True):
        if name and text.startswith(f"{name}: "):
            return name, text[len(name) + 2:]
    return "", text


def _joined(first, second):
    return f"{first}\n\n{second}" if first else second


def read_kobold(value, name="The save"):
    """Return the Chat of a Kobold Lite or KoboldAI save (parsed JSON), or raise ChatRefused."""
    if not is_kobold(value):
        raise ChatRefused(f"{name} is not a Kobold save (it has no prompt and no actions).")
    chat = Chat("Kobold save", opening=_text(value.get("prompt")), memory=_text(value.get("memory")),
                note=_text(value.get("authorsnote")))
    actions = value.get("actions")
    if isinstance(actions, dict) and isinstance(actions.get("actions"), dict):  # KoboldAI United v2
        actions = [_text(item.get("Selected Text")) for _, item in sorted(actions["actions"].items(),
                                                                          key=lambda pair: _int(pair[0]) or 0)
                   if isinstance(item, dict)]
    actions = [_text(item) for item in actions or [] if isinstance(item, str)] if isinstance(actions, list) else []
    story = "".join(actions)
    if INPUT_MARK in chat.opening + story or OUTPUT_MARK in chat.opening + story:
        whole = chat.opening + story
        chat.opening = ""
        for part in re.split(r"(\{\{\[(?:INPUT|OUTPUT)\]\}\})", whole):
            if part in (INPUT_MARK, OUTPUT_MARK):
                chat.messages.append(Message("", part == INPUT_MARK, ""))
            elif chat.messages:
                chat.messages[-1].text += part
            elif part.strip():
                chat.opening = part.strip()
        chat.messages = [Message(m.name, m.is_user, m.text.strip(), [m.text.strip()]) for m in chat.messages
                         if m.text.strip()]
    else:
        chat.messages = [Message("", False, text.strip(), [text.strip()]) for text in actions if text.strip()]
    chat.worldinfo = value.get("worldinfo") if isinstance(value.get("worldinfo"), list) else []
    if isinstance(value.get("wisearchdepth"), (int, str)):
        chat.unplaced.append("the world info search depth (entries here scan their own depth)")
    for key, what in (("anotetemplate", "the author's note template"), ("personal_notes", "personal notes"),
                      ("savedsettings", "Kobold's saved settings"), ("altbranches", "alternative branches"),
                      ("actions_metadata", "alternatives for each action"), ("wifolders_d", "world info folders")):
        if value.get(key) not in (None, "", {}, []):
            chat.unplaced.append(f"{what}: not used here")
    return chat


def date_ms(value):
    """Return a message's ``send_date`` as epoch milliseconds (human text, ISO, or epoch ms), or None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        number = int(value)
        return number if number > 10**11 else number * 1000
    text = str(value).strip()
    if text.isdigit():
        return date_ms(int(text))
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return int((parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).timestamp() * 1000)
    except ValueError:
        pass
    found = _CREATE.match(text)
    if found:
        y, mo, d, h, mi, s, ms = (int(part or 0) for part in found.groups())
        try:
            return int(datetime(y, mo, d, h, mi, s, ms * 1000, tzinfo=timezone.utc).timestamp() * 1000)
        except ValueError:
            return None
    for form in _HUMAN:
        try:
            return int(datetime.strptime(text, form).replace(tzinfo=timezone.utc).timestamp() * 1000)
        except ValueError:
            continue
    return None


def human_date(ms):
    """Return epoch milliseconds as SillyTavern writes a send_date ("September 28, 2024 1:02am")."""
    moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return f"{moment:%B} {moment.day}, {moment.year} {(moment.hour % 12) or 12}:{moment:%M}{moment:%p}".replace(
        "AM", "am").replace("PM", "pm")


def jsonl(header, messages):
    """Return a SillyTavern chat file: the header line, then one message a line."""
    return "\n".join(json.dumps(line, ensure_ascii=False) for line in [header, *messages]) + "\n"


def _text(value):
    return value if isinstance(value, str) else "" if value is None else str(value)


def _int(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None
