"""PNG character cards through Pillow: their text chunks read within limits, portraits made safe, cards written.

A card's JSON is base64 in a ``tEXt`` chunk, keyword ``chara`` (V2) or
``ccv3`` (V3); keywords compare case-insensitively and ``ccv3`` wins when
both are there (SillyTavern's reader). The chunks are walked with
Pillow's own chunk reader (``PngImagePlugin.PngStream``): every chunk's
length is checked before it is read, image data is skipped unread, each
checksum is verified, and compressed text (``zTXt``, ``iTXt``) inflates
only within Pillow's limit (``MAX_TEXT_CHUNK``: a compressed-chunk bomb
is refused, not inflated). A portrait is decoded only after its size says
it is a picture and not a bomb (``MAX_PIXELS``), then drawn again small,
so nothing of the file but its pixels is kept.
"""

import base64
import binascii
import hashlib
import io
import json
import struct
import warnings
import zlib

from PIL import Image, PngImagePlugin

MAX_CHUNKS = 10_000  # a card has a dozen; a file of a million empty chunks is a way to spend our time
MAX_PIXELS = 4096 * 4096  # a portrait's picture: 64 MiB decoded at most
PORTRAIT_SIDE = 512
PORTRAIT_BYTES = 512 * 1024  # campaigns.models.PORTRAIT_BYTES
CARD_KEYWORDS = ("ccv3", "chara")  # the first found wins
LOREBOOK_KEYWORD = "naidata"  # NovelAI's lorebook in a PNG
_TEXT = (b"tEXt", b"zTXt", b"iTXt")


class PngRefused(ValueError):
    """The PNG cannot be read; the message says why in words."""


def is_png(head):
    return head[:8] == PngImagePlugin._MAGIC


def text_chunks(data, max_chunk):
    """Return {keyword (lower case): text} of the PNG ``data``'s text chunks, refusing in words a chunk longer
    than ``max_chunk`` bytes, a compressed chunk that inflates past Pillow's limit, or a damaged file."""
    fp = io.BytesIO(data)
    if not is_png(fp.read(8)):
        raise PngRefused("This is not a PNG image (its first bytes are not a PNG's).")
    stream = PngImagePlugin.PngStream(fp)
    found = {}
    try:
        for _ in range(MAX_CHUNKS):
            cid, pos, length = stream.read()
            if cid == b"IEND":
                break
            if pos + length + 4 > len(data):
                raise PngRefused("The PNG ends before its last chunk does (the file may have been cut short).")
            if cid not in _TEXT:
                fp.seek(pos + length + 4)  # image data and everything else: never read
                continue
            if length > min(max_chunk, PngImagePlugin.MAX_TEXT_MEMORY):
                most, why = min((max_chunk, "STORYTELLER_BUNDLE_MAX_MB"),
                                (PngImagePlugin.MAX_TEXT_MEMORY, "all the text Pillow reads from one image"))
                raise PngRefused(f"The PNG holds a text chunk of {length:,} bytes; a card's is at most {most:,} "
                                 f"({why}), so it was not read.")
            before = dict(stream.im_text)
            stream.crc(cid, stream.call(cid, pos, length))
            for keyword, value in stream.im_text.items():
                if before.get(keyword) is not value:
                    found.setdefault(keyword.lower(), str(value))
        else:
            raise PngRefused(f"The PNG holds more than {MAX_CHUNKS:,} chunks; no card does.")
    except ValueError as error:
        if isinstance(error, PngRefused):
            raise
        raise PngRefused(f"A compressed text chunk of this PNG inflates past {PngImagePlugin.MAX_TEXT_CHUNK:,} "
                         "bytes (a decompression bomb, or a card too large to be one); it was not read.") from None
    except (SyntaxError, struct.error, zlib.error, OSError) as error:
        raise PngRefused(f"The PNG is damaged ({_said(error)}).") from None
    return found


def _said(error):
    text = str(error)
    if "checksum" in text or "crc" in text.lower():
        return "a chunk does not match its checksum"
    if "broken" in text:
        return "a chunk's header cannot be read"
    return "it cannot be read to its end"


def decode_base64(text, what):
    """Return the UTF-8 text in base64 ``text``, or raise PngRefused saying that ``what`` is not base64."""
    try:
        raw = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise PngRefused(f"{what} is not base64, so it holds no card.") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PngRefused(f"{what} is base64 of something that is not UTF-8 text.") from None


def portrait(data):
    """Return (PNG bytes of the picture drawn again at most PORTRAIT_SIDE wide, None) or (None, why not)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            width, height = image.size
            if width * height > MAX_PIXELS or not width or not height:
                return None, (f"its picture is {width:,}×{height:,} pixels, more than a portrait may be "
                              f"({MAX_PIXELS:,} pixels); the card was imported without it")
            image.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        return None, "its picture would decode to more pixels than Pillow allows; imported without it"
    except (OSError, SyntaxError, ValueError, struct.error, zlib.error, Image.UnidentifiedImageError):
        return None, "its picture cannot be decoded; the card was imported without it"
    image.thumbnail((PORTRAIT_SIDE, PORTRAIT_SIDE))
    image = image.convert("RGBA" if "A" in image.getbands() or image.mode == "P" else "RGB")
    out = io.BytesIO()
    image.save(out, "PNG", optimize=True)
    if out.tell() > PORTRAIT_BYTES:
        out = io.BytesIO()
        image.convert("RGB").save(out, "JPEG", quality=85)
        return out.getvalue(), None
    return out.getvalue(), None


def picture_type(data):
    """Return the MIME type of a portrait's bytes (made by ``portrait``)."""
    return "image/png" if is_png(data[:8]) else "image/jpeg"


def card_png(card_v3, card_v2, picture=None, name=""):
    """Return PNG bytes of a V3 card: ``picture`` (bytes) or a plain one, with ``chara`` and ``ccv3`` chunks."""
    if picture:
        image = Image.open(io.BytesIO(picture))
        image.load()
    else:
        shade = hashlib.sha256(name.encode()).digest()
        image = Image.new("RGB", (256, 384), (60 + shade[0] % 120, 60 + shade[1] % 120, 60 + shade[2] % 120))
    info = PngImagePlugin.PngInfo()
    info.add_text("chara", base64.b64encode(json.dumps(card_v2, ensure_ascii=False).encode()).decode("ascii"))
    info.add_text("ccv3", base64.b64encode(json.dumps(card_v3, ensure_ascii=False).encode()).decode("ascii"))
    out = io.BytesIO()
    image.save(out, "PNG", pnginfo=info)
    return out.getvalue()

