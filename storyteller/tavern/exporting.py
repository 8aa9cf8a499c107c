"""A campaign written back in the formats it came from: V3 cards (PNG and JSON), World Info, a SillyTavern chat.

Each character brought from a card is written as a V3 card: its card as it
came in (every field, ``extensions`` and their unknown keys unchanged),
with what the campaign now says of it where that changed, its own lorebook
as its ``character_book``, and its portrait as the picture of a PNG card
that carries both ``ccv3`` and ``chara`` chunks. Every keyed lorebook is
written as SillyTavern World Info. The current line of the story is a
``.jsonl`` chat: each reply with its versions as swipes (``swipe_id`` the
one on the line), the "continue" between two replies left out, narrator
notes as system messages. Importing what this writes gives the same
campaign again.
"""

import copy
import io
import json
import zipfile
from dataclasses import dataclass

from django.utils.text import slugify

from campaigns import lineage
from campaigns.models import CharacterCard, Node
from knowledge import worldinfo
from knowledge.models import Source
from storyteller.context import layers

from . import books, cards, chats, png


@dataclass(frozen=True)
class Exported:
    """One file of an export: where it goes (``characters/Mara.png``) and its bytes."""

    path: str
    data: bytes


def export(campaign):
    """Return every file of ``campaign``'s export: its characters' cards, its lorebooks and its current line."""
    files = []
    sources = {source.lore_book: source for source in Source.objects.filter(campaign=campaign, keyed=True)}
    names = set()
    for card in CharacterCard.objects.filter(campaign=campaign).order_by("position", "pk"):
        name = _unique(slugify(card.name) or f"character-{card.pk}", names)
        v3 = card_v3(campaign, card, sources.get(card.book_key))
        files.append(Exported(f"characters/{name}.json", _json(v3)))
        files.append(Exported(f"characters/{name}.png",
                              png.card_png(v3, cards.v2(v3), bytes(card.portrait) or None, card.name)))
    for source in sources.values():
        name = _unique(slugify(source.title) or f"lorebook-{source.pk}", names)
        files.append(Exported(f"lorebooks/{name}.json", _json(books.world_info(worldinfo.parse(source.text)))))
    chat = chat_jsonl(campaign)
    if chat is not None:
        files.append(Exported(f"chats/{_unique(slugify(campaign.title) or 'chat', names)}.jsonl", chat.encode()))
    return files


def zipped(campaign):
    """Return the export as one zip (the page's download)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for item in export(campaign):
            archive.writestr(item.path, item.data)
    return out.getvalue()


def _unique(name, taken):
    result, number = name, 2
    while result in taken:
        result, number = f"{name}-{number}", number + 1
    taken.add(result)
    return result


def _json(value):
    return json.dumps(value, ensure_ascii=False, indent=2).encode()


def card_v3(campaign, character, source=None):
    """Return the V3 card of ``character`` (a CharacterCard): its card as it came, what changed here written in."""
    original = copy.deepcopy(character.card.get("data") or {})
    card = cards.Card(character.card.get("spec", "V3"), character.name, original, nickname=original.get("nickname")
                      if isinstance(original.get("nickname"), str) else "")
    for field, now in (("description", character.description), ("personality", character.personality),
                       ("mes_example", character.examples), ("creator_notes", character.creator_notes)):
        before = original.get(field) if isinstance(original.get(field), str) else ""
        if cards.fill_char(before, card) != now:
            original[field] = now
    original["name"] = character.name
    book = books.character_book(worldinfo.parse(source.text)) if source is not None else None
    assets = original.get("assets") if isinstance(original.get("assets"), list) else None
    if assets is None or not any(isinstance(a, dict) and a.get("type") == "icon" for a in assets):
        assets = [{"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png"}, *(assets or [])]
    return cards.v3(original, book=book, assets=assets)


def chat_jsonl(campaign):
    """Return the current line as a SillyTavern chat (its swipes the versions of each reply), or None."""
    path = lineage.path_of(campaign)
    nodes = list(path.nodes().only("id", "depth", "role", "mode", "text", "note", "created_at", "branch_id"))
    if len(nodes) < 2:
        return None
    versions = _versions(campaign.pk, nodes)
    user = layers.player_name(campaign)
    character = next(iter(CharacterCard.objects.filter(campaign=campaign).order_by("position", "pk")
                          .values_list("name", flat=True)), campaign.title)
    speakers = list(CharacterCard.objects.filter(campaign=campaign).values_list("name", flat=True))
    header = {"user_name": user, "character_name": character,
              "create_date": f"{campaign.created_at:%Y-%-m-%-d @%Hh %Mm %Ss} 000ms", "chat_metadata": _metadata(campaign)}
    lines = []
    imported_shape = len(nodes) > 1 and nodes[1].role == Node.Role.PLAYER and nodes[1].mode == Node.Mode.CONTINUE \
        and not nodes[1].text
    for node in nodes:
        if node.depth == 0:
            if not imported_shape:
                lines.append(_message(character, False, [node.text], 0, node))
            if node.note:
                lines.append(_note(node))
            continue
        if node.role == Node.Role.PLAYER and node.mode == Node.Mode.CONTINUE and not node.text:
            continue  # the continue between two replies: SillyTavern holds them one after the other
        texts, chosen = versions.get(node.pk, ([node.text], 0))
        if node.role == Node.Role.PLAYER:
            lines.append(_message(user, True, texts, chosen, node))
        else:
            name, _ = chats.speaker_of(texts[chosen], speakers) if len(speakers) > 1 else ("", "")
            said = [chats.speaker_of(text, speakers)[1] if name else text for text in texts]
            lines.append(_message(name or character, False, said, chosen, node))
        if node.note:
            lines.append(_note(node))
    return chats.jsonl(header, lines)


def _versions(campaign_id, nodes):
    """Return {node id: (every version's text, oldest first, the index of the one on the line)}."""
    groups = lineage.version_groups(campaign_id, nodes)
    texts = dict(Node.objects.filter(pk__in={pk for members in groups.values() for pk in members})
                 .values_list("pk", "text"))
    return {pk: ([texts[member] for member in members], members.index(pk)) for pk, members in groups.items()}


def _message(name, is_user, texts, chosen, node):
    date = chats.human_date(int(node.created_at.timestamp() * 1000))
    line = {"name": name, "is_user": is_user, "is_system": False, "send_date": date, "mes": texts[chosen],
            "extra": {}}
    if len(texts) > 1:
        line.update({"swipe_id": chosen, "swipes": texts,
                     "swipe_info": [{"send_date": date, "extra": {}} for _ in texts]})
    return line


def _note(node):
    date = chats.human_date(int(node.created_at.timestamp() * 1000))
    return {"name": "System", "is_user": False, "is_system": True, "send_date": date, "mes": node.note,
            "extra": {"type": "narrator"}}


def _metadata(campaign):
    note = campaign.author_notes.filter(branch__isnull=True).first()
    if note is None or not note.text.strip():
        return {}
    return {"note_prompt": note.text, "note_interval": note.interval, "note_depth": note.depth,
            "note_role": {"system": 0, "user": 1, "assistant": 2}.get(note.role, 0)}
