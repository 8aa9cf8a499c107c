"""One file someone dropped, read into what it is: a card, a lorebook, a chat or a Kobold save (or refused).

Every file is untrusted. Bytes are read by the bounded readers every
import shares (``campaigns.uploads``: JSON nesting, numbers and values
bounded, zips counted as they inflate), a PNG's chunks by Pillow within
our limits (``png``), and the limit is the bundle import's
(``STORYTELLER_BUNDLE_MAX_MB``). A CHARX archive gives up only the members
its card names that sit inside it: a path that climbs out (``../``) or an
asset address that points to the network is named and never read, let
alone fetched. ``read`` refuses a file whole in words (``Reading.refused``)
or reads it with each bad part named (``Reading.problems``).
"""

import io
import posixpath
from dataclasses import dataclass, field
from pathlib import PurePath

from campaigns import uploads

from . import books, cards, chats, png

# A CHARX holds a card and its pictures; sprites and backgrounds for a whole cast stay well under this.
MAX_MEMBERS = 1_000
MAX_DEPTH = 32  # a card nests about six levels (data > character_book > entries > extensions > …)
ASSET_PREFIXES = ("embeded://", "embedded://", "__asset:")
PICTURES = (".png", ".jpg", ".jpeg", ".webp", ".gif")


@dataclass
class Reading:
    """What one file is, read: its kind and value, its portrait, and what was wrong with parts of it."""

    name: str
    kind: str = ""  # card, lorebook, chat, kobold; "" when refused
    card: object = None  # cards.Card
    book: object = None  # books.Converted
    chat: object = None  # chats.Chat
    portrait: bytes = b""
    refused: str = ""
    problems: list = field(default_factory=list)

    @property
    def reason(self):
        """Return why the file was refused without its name in front: for a page that shows the name beside it."""
        return self.refused.removeprefix(f"{self.name}: ")

    @property
    def label(self):
        if self.refused:
            return "not imported"
        if self.card is not None:
            return f"character card ({self.card.spec}{', SillyTavern hybrid' if self.card.hybrid else ''})"
        if self.chat is not None:
            return self.chat.kind
        return self.book.kind if self.book is not None else ""


def read(name, data, limit):
    """Return the Reading of the bytes ``data`` of a file called ``name``, at most ``limit`` bytes read."""
    name = PurePath(str(name)).name[:200] or "a file"
    reading = Reading(name)
    if len(data) > limit:
        reading.refused = (f"{name} is {len(data):,} bytes; a file brought in may be at most {limit:,} "
                           "(STORYTELLER_BUNDLE_MAX_MB).")
        return reading
    limits = uploads.Limits("character card or chat", limit, max_members=MAX_MEMBERS, max_depth=MAX_DEPTH)
    try:
        if png.is_png(data[:8]):
            _png(reading, data, limits)
        elif uploads.is_zip(data[:4]):
            _charx(reading, data, limits)
        else:
            _text(reading, uploads.decode(data, limits, name), limits)
    except (uploads.UploadRefused, png.PngRefused, cards.CardRefused, chats.ChatRefused) as refusal:
        reading.kind, reading.card, reading.book, reading.chat = "", None, None, None
        reading.refused = f"{name}: {refusal}"
    except books.worldinfo.BookRefused as refusal:
        reading.kind, reading.book = "", None
        reading.refused = f"{name}: {refusal}"
    return reading


def _png(reading, data, limits):
    texts = png.text_chunks(data, limits.max_bytes)
    for keyword in png.CARD_KEYWORDS:
        if keyword not in texts:
            continue
        try:
            value = _json(png.decode_base64(texts[keyword], f"Its {keyword} chunk"), limits, reading.name)
            reading.card = cards.read(value, reading.name)
            break
        except (png.PngRefused, uploads.UploadRefused, cards.CardRefused) as refusal:
            if keyword == png.CARD_KEYWORDS[-1] or reading.card is not None:
                raise
            reading.problems.append(f"its {keyword} chunk could not be read ({refusal}); its chara chunk was read")
    if reading.card is None and png.LOREBOOK_KEYWORD in texts:
        value = _json(png.decode_base64(texts[png.LOREBOOK_KEYWORD], "Its naidata chunk"), limits, reading.name)
        return _book(reading, value)
    if reading.card is None:
        raise cards.CardRefused("this PNG holds no character card (no chara or ccv3 text chunk).")
    reading.kind = "card"
    picture, problem = png.portrait(data)
    reading.portrait = picture or b""
    if problem:
        reading.problems.append(problem)
    _assets(reading, members={})


def _charx(reading, data, limits):
    seen = []

    def wanted(member):
        seen.append(member)
        return _safe(member) and (member == "card.json" or PurePath(member).suffix.lower() in PICTURES)

    parts = dict(uploads.unzip(io.BytesIO(data), len(data), limits, wanted=wanted))
    climbing = [member for member in seen if not _safe(member)]
    if climbing:
        reading.problems.append(f"the archive names {len(climbing)} path(s) outside itself ({climbing[0][:80]!r}); "
                                "they were not read")
    if "card.json" not in parts:
        raise cards.CardRefused("this zip has no card.json at its root, so it is not a CHARX character card.")
    reading.card = cards.read(_json(uploads.decode(parts["card.json"], limits, "card.json"), limits, "card.json"),
                              reading.name)
    reading.kind = "card"
    _assets(reading, parts)


def _safe(member):
    """Return whether a zip member's path stays inside the archive (no ``..``, no absolute path, no drive)."""
    if member.startswith(("/", "\\")) or ":" in member.split("/")[0]:
        return False
    normal = posixpath.normpath(member.replace("\\", "/"))
    return not (normal == ".." or normal.startswith("../"))


def _assets(reading, members):
    """Take the card's icon as its portrait when it sits inside the file; name every asset that does not."""
    card = reading.card
    for asset in card.assets:
        uri, kind = asset.get("uri", ""), asset.get("type", "")
        if uri.startswith(("http://", "https://", "//", "ftp:")):
            reading.problems.append(f"the asset “{str(asset.get('name', ''))[:40]}” points to the network "
                                    f"({uri[:80]}); it was not fetched (only files inside the card are read)")
            continue
        if uri == "ccdefault:" or uri.startswith("data:"):
            continue
        path = next((uri[len(prefix):] for prefix in ASSET_PREFIXES if uri.startswith(prefix)), None)
        if path is None:
            reading.problems.append(f"the asset “{str(asset.get('name', ''))[:40]}” has an address this does not "
                                    f"read ({uri[:60]}); it was left out")
            continue
        if not _safe(path):
            reading.problems.append(f"the asset {path[:80]!r} points outside the card; it was not read")
            continue
        if kind == "icon" and not reading.portrait and asset.get("name") in ("main", None, ""):
            picture = members.get(posixpath.normpath(path))
            if picture is None:
                reading.problems.append(f"the card's picture {path[:80]!r} is not in the file; imported without it")
                continue
            portrait, problem = png.portrait(picture)
            reading.portrait = portrait or b""
            if problem:
                reading.problems.append(problem)
    others = [a for a in card.assets if a.get("type") != "icon" and a.get("uri") != "ccdefault:"]
    if others:
        card.unplaced.append(f"{len(others)} other asset(s) (expressions, backgrounds, sounds): not used here")


def _text(reading, text, limits):
    lines = [line for line in text.split("\n") if line.strip()]
    if reading.name.lower().endswith(".jsonl") or (len(lines) > 1 and all(line.lstrip().startswith("{")
                                                                          for line in lines[:3])):
        values = [uploads.parse(line, limits, f"Line {number} of {reading.name}")
                  for number, line in enumerate(lines, 1)]
        reading.chat, reading.kind = chats.read_jsonl(values, reading.name), "chat"
        return
    value = _json(text, limits, reading.name)
    if books.kind_of(value) and not cards.is_card(value):
        return _book(reading, value)
    if cards.is_card(value):
        reading.card, reading.kind = cards.read(value, reading.name), "card"
        _assets(reading, {})
        return
    if chats.is_kobold(value):
        reading.chat, reading.kind = chats.read_kobold(value, reading.name), "kobold"
        if reading.chat.worldinfo:
            reading.book = books.from_kobold(reading.chat.worldinfo, f"{PurePath(reading.name).stem} world info")
        return
    raise cards.CardRefused("this is JSON, but not a character card, a lorebook, a SillyTavern chat or a Kobold "
                            "save (it has none of their fields).")


def _book(reading, value):
    reading.book = books.convert(value, PurePath(reading.name).stem[:200])
    reading.kind = "lorebook"
    reading.problems += reading.book.book.problems


def _json(text, limits, name):
    return uploads.parse(text, limits, name)
