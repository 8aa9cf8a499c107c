"""The files the tavern's tests bring, made here: cards of every version, lorebooks, chats and saves, and hostile ones.

Each is what the tool it comes from writes (SillyTavern's hybrid cards and its
World Info keyed by uid, its .jsonl chats with swipes, Kobold Lite saves,
NovelAI lorebooks), built field by field so a test can say what it expects.
"""

import base64
import io
import json
import struct
import zipfile
import zlib

from PIL import Image, PngImagePlugin

HOSTILE = "<script>alert('x')</script><b>bold</b>"


def every_field_entry(uid, **fields):
    """Return a SillyTavern World Info entry with every field it writes, and an unknown one."""
    entry = {
        "uid": uid, "key": ["dragon", "wyrm"], "keysecondary": ["fire"], "comment": "Dragons",
        "content": "Dragons of the north breathe blue fire.", "constant": False, "vectorized": False,
        "selective": True, "selectiveLogic": 0, "addMemo": True, "order": 100, "position": 4, "disable": False,
        "ignoreBudget": False, "excludeRecursion": False, "preventRecursion": False,
        "matchPersonaDescription": False, "matchCharacterDescription": False, "matchCharacterPersonality": False,
        "matchCharacterDepthPrompt": False, "matchScenario": False, "matchCreatorNotes": False,
        "delayUntilRecursion": False, "probability": 100, "useProbability": True, "depth": 4, "outletName": "",
        "group": "", "groupOverride": False, "groupWeight": 100, "scanDepth": None, "caseSensitive": None,
        "matchWholeWords": None, "useGroupScoring": None, "automationId": "", "role": 0, "sticky": 0,
        "cooldown": 0, "delay": 0, "triggers": [], "displayIndex": uid,
        "characterFilter": {"isExclude": False, "names": [], "tags": []}, "madeUpByAnotherTool": {"kept": True},
    }
    entry.update(fields)
    return entry


def world_info(**entries):
    return {"entries": {str(entry["uid"]): entry for entry in entries.values()} or
            {"0": every_field_entry(0), "1": every_field_entry(1, key=["ferry"], comment="The ferry",
                                                              content="The ferry runs at dawn.", constant=True,
                                                              vectorized=True)}}


def character_book(name="Mara's book"):
    return {"name": name, "description": "What Mara knows", "scan_depth": 3, "token_budget": 500,
            "recursive_scanning": True, "extensions": {"bookExt": 1}, "entries": [
                {"id": 0, "keys": ["teapot"], "secondary_keys": [], "comment": "The teapot",
                 "content": "{{char}} hides the key in the teapot.", "constant": False, "selective": True,
                 "insertion_order": 50, "enabled": True, "position": "before_char", "use_regex": True,
                 "extensions": {"position": 0, "sticky": 2, "cooldown": 1, "probability": 100,
                                "useProbability": True, "depth": 4, "selectiveLogic": 0, "group": "",
                                "unknown_tool_key": {"deep": [1, 2]}}},
                {"id": 1, "keys": ["cellar"], "secondary_keys": ["dark"], "comment": "The cellar",
                 "content": "The cellar floods.", "constant": True, "selective": True, "insertion_order": 10,
                 "enabled": True, "position": "after_char", "extensions": {}},
            ]}


def card_data(name="Mara", **fields):
    data = {
        "name": name, "description": f"{{{{char}}}} is the abbey's cook. {HOSTILE}",
        "personality": "warm, watchful", "scenario": "The abbey kitchen at dusk, rain on the roof.",
        "first_mes": "*{{char}} looks up from the stove.* You're late, {{user}}.",
        "mes_example": "<START>\n{{user}}: Hello\n{{char}}: *nods* Sit.",
        "creator_notes": f"Made for rainy evenings. {HOSTILE}", "system_prompt": "Write as {{char}}, in past tense.",
        "post_history_instructions": "Keep replies under 150 words.",
        "alternate_greetings": ["*The kettle screams.* Oh! {{user}}!", "*Mara is asleep by the fire.*"],
        "tags": ["cook", "fantasy"], "creator": "someone", "character_version": "1.2",
        "extensions": {"talkativeness": "0.5", "fav": False, "world": "Abbey",
                       "depth_prompt": {"prompt": "Mara never lies.", "depth": 4, "role": "system"},
                       "someones_tool": {"keep": ["this", 1]}},
    }
    data.update(fields)
    return data


def v2(name="Mara", **fields):
    return {"spec": "chara_card_v2", "spec_version": "2.0", "data": card_data(name, **fields)}


def v3(name="Mara", **fields):
    data = card_data(name, **fields)
    data.setdefault("group_only_greetings", [])
    data.setdefault("nickname", "")
    return {"spec": "chara_card_v3", "spec_version": "3.0", "data": data}


def hybrid(name="Mara", **fields):
    """SillyTavern's own export: V2 with the V1 fields again at the top, and its own."""
    card = v2(name, **fields)
    for key in ("name", "description", "personality", "scenario", "first_mes", "mes_example"):
        card[key] = card["data"][key]
    card.update({"chat": f"{name} - 2024-9-28 @01h 02m 03s 004ms", "create_date": "2024-9-28 @01h 02m 03s 004ms",
                 "creatorcomment": card["data"]["creator_notes"], "avatar": "none", "talkativeness": "0.5",
                 "fav": False, "tags": card["data"]["tags"]})
    return card


def v1(name="Mara"):
    return {"name": name, "description": "{{char}} is a cook.", "personality": "warm",
            "scenario": "The kitchen.", "first_mes": "Hello, <USER>. I am <BOT>.", "mes_example": ""}


def pygmalion(name="Mara"):
    return {"char_name": name, "char_persona": "A cook.", "world_scenario": "The kitchen.",
            "char_greeting": "Welcome.", "example_dialogue": "You: Hi\nMara: Hello."}


def picture(size=(64, 96), color=(180, 40, 40)):
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, "PNG")
    return out.getvalue()


def card_png(card, *, keywords=("chara", "ccv3"), image=None):
    """Return a PNG card: ``card`` (a dict) base64 in a tEXt chunk for each keyword, SillyTavern's way."""
    image = Image.open(io.BytesIO(image or picture()))
    info = PngImagePlugin.PngInfo()
    for keyword in keywords:
        payload = dict(card)
        if keyword.lower() == "ccv3":
            payload = {**card, "spec": "chara_card_v3", "spec_version": "3.0"}
        info.add_text(keyword, base64.b64encode(json.dumps(payload).encode()).decode())
    out = io.BytesIO()
    image.save(out, "PNG", pnginfo=info)
    return out.getvalue()


def chunk(cid, body):
    return struct.pack(">I", len(body)) + cid + body + struct.pack(">I", zlib.crc32(cid + body) & 0xFFFFFFFF)


def png_with(*chunks, image=None):
    """Return a PNG with ``chunks`` (bytes) inserted after its header chunk."""
    data = image or picture()
    return data[:33] + b"".join(chunks) + data[33:]


def charx(card, members=None):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("card.json", json.dumps(card))
        for name, data in (members or {"assets/icon/images/main.png": picture()}).items():
            archive.writestr(name, data)
    return out.getvalue()


def chat_header(character="Mara", user="Wren", **meta):
    return {"user_name": user, "character_name": character, "create_date": "2024-9-28 @01h 02m 03s 004ms",
            "chat_metadata": {"note_prompt": "Keep it rainy.", "note_interval": 2, "note_depth": 3, "note_role": 0,
                              "integrity": "abc", **meta}}


def message(name, text, *, user=False, swipes=None, swipe_id=0, system=False, date="September 28, 2024 1:02am"):
    line = {"name": name, "is_user": user, "is_system": system, "send_date": date, "mes": text,
            "extra": {"api": "koboldcpp", "token_count": 12}}
    if swipes is not None:
        line.update({"swipes": swipes, "swipe_id": swipe_id, "mes": swipes[swipe_id],
                     "swipe_info": [{"send_date": date, "extra": {}} for _ in swipes]})
    return line


def chat(*lines, header=True, character="Mara"):
    rows = ([chat_header(character)] if header else []) + list(lines)
    return ("\n".join(json.dumps(row) for row in rows) + "\n").encode()


def mara_chat():
    """A chat with swipes on the greeting and on a reply, a narrator note, and a chosen swipe that is not the first."""
    return chat(
        message("Mara", "", swipes=["*Mara looks up.* You're late.", "*The kettle screams.*"], swipe_id=0),
        message("Wren", "I shake off the rain.", user=True),
        message("Mara", "", swipes=["Sit by the fire.", "Tea?", "Take your boots off."], swipe_id=1),
        message("System", "The storm grows.", system=True),
        message("Wren", "Tea, please.", user=True, date="2024-09-28T01:05:00Z"),
        message("Mara", "She pours.", date=1727485560000),
    )


def group_chat():
    return chat(
        message("Mara", "Welcome back."),
        message("Edrin", "About time."),
        message("Wren", "Hello both.", user=True),
        message("Edrin", "", swipes=["Hmph.", "Sit."], swipe_id=1),
        header=False,
    )


def kobold_save():
    return {"gamestarted": True, "prompt": "The ferry docks at Greyhollow.", "memory": "Wren is a courier.",
            "authorsnote": "Keep it tense.", "anotetemplate": "[Author's note: <|>]",
            "actions": [" The rain starts.", " A bell rings."],
            "worldinfo": [{"key": "bell, tower", "keysecondary": "", "keyanti": "", "content": "The bell tolls.",
                           "comment": "Bell", "folder": None, "selective": False, "constant": False,
                           "probability": 100, "wigroup": "", "widisabled": False}],
            "savedsettings": {"x": 1}}


def novelai_book():
    return {"lorebookVersion": 5, "entries": [
        {"text": "Greyhollow is a river town.", "keys": ["Greyhollow"], "displayName": "Greyhollow",
         "enabled": True, "contextConfig": {"budgetPriority": 400, "insertionPosition": -1}},
        {"text": "The ferryman is blind.", "keys": ["ferryman"], "displayName": "Ferryman", "enabled": False,
         "contextConfig": {"budgetPriority": 10}}], "settings": {"orderByKeyLocations": False}}


def nested(depth):
    return ("[" * depth + "]" * depth).encode()
