"""Bytes to a bundle's JSON value at a bounded cost, whatever the bytes are (issue 10, point 2).

An upload is untrusted: a zip may inflate a thousandfold or lie about its
size, JSON may nest a hundred thousand levels or spell a number in a
megabyte of digits. Everything here is refused while it is being read, with
a message in words, before it costs more than ``limit`` bytes of text:

- a zip's central directory is measured before ``zipfile`` parses it, and
  its one member is inflated in chunks, counted as it comes, never trusting
  the sizes its headers claim (a lying header shows as a bad CRC);
- the text must be UTF-8; numbers are parsed with bounded digits and must
  be finite; nesting is bounded, and so are lone surrogates (which SQLite
  cannot store).

The checksum is SHA-256 over the canonical JSON of the sections: it finds
corruption, nothing more, because anyone can compute it (decisions.md).
"""

import hashlib
import io
import json
import math
import re
import zipfile
import zlib

MEMBER = "campaign.json"
# A bundle zip holds one member: its central directory is about a hundred
# bytes. 64 KiB still admits a few hundred entries, never the millions a
# crafted directory could make zipfile allocate.
MAX_DIRECTORY_BYTES = 64 * 1024
CHUNK = 1024 * 1024
# The deepest value a real bundle holds is about ten levels down
# (sections > campaigns > snapshots > report > knowledge > used > entry > terms).
MAX_DEPTH = 32
# A number is refused while parsing only when it is absurdly long (Python's
# own limit, 4,300 digits, is reached after quadratic work); each field then
# checks its own range and names itself.
MAX_DIGITS = 64
# Parsed JSON costs up to twenty times its text when it is all tiny values
# ("[[],[],…]"); a real bundle is mostly prose, about one value per hundred
# bytes. One value per 32 bytes of the limit bounds the worst case near the
# text's own size and leaves a real bundle three times the room it needs.
BYTES_PER_VALUE = 32
_SURROGATE = re.compile("[\ud800-\udfff]")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')


class BundleRefused(Exception):
    """The bundle was not imported; the message says why in words. Nothing was written."""


def refuse(reason):
    raise BundleRefused(f"{reason} Nothing was imported.")


def load(source, limit):
    """Return the JSON value of ``source`` (bytes or a binary file: a bundle, or a zip holding one as
    campaign.json), reading at most ``limit`` bytes of it and of the text it unpacks to."""
    stream = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source
    size = stream.seek(0, io.SEEK_END)
    if size > limit:
        refuse(f"The file is {size:,} bytes; a bundle may be at most {limit:,} bytes.")
    stream.seek(0)
    head = stream.read(4)
    stream.seek(0)
    if head in (b"PK\x03\x04", b"PK\x05\x06"):
        return _parse(_decode(_unzip(stream, size, limit)), limit)
    return _parse(_decode(stream.read()), limit)


def checksum(sections):
    """Return "sha256:…" over the canonical JSON of ``sections`` (sorted keys, no spaces), hashed row by row."""
    digest = hashlib.sha256()
    for piece in _canonical(sections, levels=3):
        digest.update(piece.encode("utf-8"))
    return "sha256:" + digest.hexdigest()


def _canonical(value, levels):
    """Yield exactly ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` in pieces,
    splitting the first ``levels`` levels so no piece is larger than one row."""
    if levels and isinstance(value, dict):
        yield "{"
        for index, key in enumerate(sorted(value)):
            yield ("," if index else "") + json.dumps(key, ensure_ascii=False) + ":"
            yield from _canonical(value[key], levels - 1)
        yield "}"
    elif levels and isinstance(value, list):
        yield "["
        for index, item in enumerate(value):
            if index:
                yield ","
            yield from _canonical(item, levels - 1)
        yield "]"
    else:
        yield json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _unzip(stream, size, limit):
    _check_directory(stream, size)
    try:
        with zipfile.ZipFile(stream) as archive:
            try:
                info = archive.getinfo(MEMBER)
            except KeyError:
                refuse(f"This zip holds no {MEMBER}, so it is not a campaign bundle exported by Storyteller.")
            if info.flag_bits & 0x1:
                refuse("This zip is encrypted; export the campaign again without a password.")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                refuse("This zip uses a compression method Storyteller does not read; it reads the zips it writes "
                       "(deflate) and uncompressed ones.")
            text = bytearray()
            with archive.open(info) as member:
                while chunk := member.read(CHUNK):
                    text += chunk
                    if len(text) > limit:
                        refuse(f"The zip unpacks to more than {limit:,} bytes, more than a bundle may hold.")
            return text
    except (zipfile.BadZipFile, EOFError, zlib.error, ValueError) as error:
        refuse(f"The zip is damaged ({_zip_problem(error)}); export the campaign again.")


def _zip_problem(error):
    if "CRC" in str(error):
        return "its contents do not match the checksum it records, or it is larger than its header says"
    if isinstance(error, EOFError) or "ended before" in str(error):
        return "it ends before its contents do"
    return "its directory cannot be read"


def _check_directory(stream, size):
    """Refuse a zip whose central directory is larger than a bundle's could be, before zipfile reads it.

    The end record is found the way zipfile finds it (the last 22 bytes, else
    the last signature within 64 KiB of the end), so both read the same one.
    """
    start = max(0, size - 22 - 0xFFFF - 20)
    stream.seek(start)
    tail = stream.read()
    stream.seek(0)
    if len(tail) >= 22 and tail[-22:-18] == b"PK\x05\x06" and tail[-2:] == b"\x00\x00":
        end = len(tail) - 22
    else:
        end = tail.rfind(b"PK\x05\x06", max(0, len(tail) - 22 - 0xFFFF))
    if end < 0 or len(tail) < end + 22:
        refuse("The zip is damaged (its directory cannot be found); export the campaign again.")
    if end >= 20 and tail[end - 20:end - 16] == b"PK\x06\x07":
        refuse("This is a ZIP64 archive, far larger than a campaign bundle can be.")
    directory = int.from_bytes(tail[end + 12:end + 16], "little")
    if directory > MAX_DIRECTORY_BYTES:
        refuse(f"The zip's directory is {directory:,} bytes; a campaign bundle's is a few hundred, so this is "
               "not one.")


def _decode(data):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        refuse(f"This is not a campaign bundle: it is not UTF-8 text (the byte at offset {error.start:,} cannot be "
               "read).")
    return text.removeprefix("\ufeff")


def _parse(text, limit):
    _count_values(text, limit // BYTES_PER_VALUE)
    try:
        value = json.loads(text, parse_int=_integer, parse_float=_real, parse_constant=_constant)
    except RecursionError:
        refuse(f"The bundle is nested more than {MAX_DEPTH} levels deep; no bundle Storyteller writes is.")
    except json.JSONDecodeError as error:
        if error.pos >= len(text.rstrip()):
            refuse("This is not complete JSON: it breaks off before its end (the file may have been cut short).")
        refuse(f"This is not a campaign bundle: it is not valid JSON (there is a mistake at line {error.lineno}, "
               f"column {error.colno}).")
    _check_shape(value)
    return value


def _count_values(text, most):
    """Refuse text holding more than ``most`` JSON values, counted on its skeleton (strings left out).

    The separators of the whole text, strings included, bound the count from
    above; only when that bound is too high is the skeleton made (a copy).
    """
    values = text.count(",") + text.count("[") + text.count("{") + 1
    if values > most:
        skeleton = _STRING.sub("", text)
        values = skeleton.count(",") + skeleton.count("[") + skeleton.count("{") + 1
    if values > most:
        refuse(f"The bundle holds about {values:,} separate values; a bundle of its size may hold at most {most:,}.")


def _integer(digits):
    if len(digits.lstrip("-")) > MAX_DIGITS:
        refuse(f"The bundle holds a number {len(digits):,} digits long; no count or setting in a bundle is longer "
               f"than {MAX_DIGITS} digits.")
    return int(digits)


def _real(digits):
    if len(digits) > 64:
        refuse(f"The bundle holds a number {len(digits):,} characters long; no setting in a bundle is.")
    number = float(digits)
    if not math.isfinite(number):
        refuse(f"The bundle holds the number {digits[:20]}, too large to be any setting.")
    return number


def _constant(name):
    refuse(f"The bundle holds {name}, which is not a number a bundle can carry.")


def _check_shape(value):
    """Refuse nesting deeper than MAX_DEPTH and text that is not valid Unicode, without recursing."""
    _check_value(value)
    stack = [_children(value)]
    while stack:
        child = next(stack[-1], _DONE)
        if child is _DONE:
            stack.pop()
            continue
        _check_value(child)
        if isinstance(child, (dict, list)):
            if len(stack) >= MAX_DEPTH:
                refuse(f"The bundle is nested more than {MAX_DEPTH} levels deep; no bundle Storyteller writes is.")
            stack.append(_children(child))


_DONE = object()


def _children(value):
    if isinstance(value, dict):
        for key, child in value.items():
            _check_text(key)
            yield child
    elif isinstance(value, list):
        yield from value


def _check_value(value):
    if isinstance(value, str):
        _check_text(value)


def _check_text(text):
    if _SURROGATE.search(text):
        refuse("The bundle holds text that is not valid Unicode (a lone surrogate such as \\ud800).")
