"""Untrusted bytes to a JSON value at a bounded cost: the one zip reader and JSON reader every import uses.

Campaign bundles and world files both arrive from someone's disk, and both
are read here, so a limit found for one holds for the other (issue 22: the
world-file zip trusted its header and inflated a 1.2 MB upload to 1.2 GB).
Everything is refused while it is being read, in words, before it costs
more than the ``Limits`` allow:

- a zip's end record is read before ``zipfile`` parses anything: too many
  members, or a directory larger than that many members need, is refused
  before one is looked at; each member is inflated in chunks, counted as
  it comes (all members together), never trusting the sizes its headers
  claim (a lying header shows as a bad CRC or as bytes past the limit);
- text must be UTF-8; numbers are parsed with bounded digits and must be
  finite; the values are counted on the text's skeleton before parsing;
  nesting is bounded, and so are lone surrogates (which SQLite cannot store).

``UploadRefused`` carries the reason; each importer words its own ending
("Nothing was imported.").
"""

import io
import json
import math
import re
import zipfile
import zlib
from dataclasses import dataclass

CHUNK = 1024 * 1024
# A number is refused while parsing only when it is absurdly long (Python's
# own limit, 4,300 digits, is reached after quadratic work); each field then
# checks its own range and names itself.
MAX_DIGITS = 64
# Parsed JSON costs up to twenty times its text when it is all tiny values
# ("[[],[],…]"); a real bundle is mostly prose, about one value per hundred
# bytes. One value per 32 bytes of the limit bounds the worst case near the
# text's own size and leaves a real file three times the room it needs.
BYTES_PER_VALUE = 32
# A directory entry is 46 bytes and the member's name; a name of a few dozen characters is plenty.
DIRECTORY_BYTES_PER_MEMBER = 512
_SURROGATE = re.compile("[\ud800-\udfff]")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')


class UploadRefused(ValueError):
    """The upload cannot be read; the message says why in words."""


@dataclass(frozen=True)
class Limits:
    """What one kind of upload may cost: its name in messages, its bytes (zipped or inflated), members, depth."""

    noun: str  # "campaign bundle", "world file"
    max_bytes: int
    max_members: int = 1
    max_depth: int = 32

    @property
    def max_values(self):
        return self.max_bytes // BYTES_PER_VALUE

    @property
    def max_directory(self):
        return max(64 * 1024, self.max_members * DIRECTORY_BYTES_PER_MEMBER)


# JSON typed into a form (a rule on a panel, an event's data in the admin): a world file's worth of triggers is
# far less.
FIELD = Limits("JSON field", 256 * 1024, max_depth=24)


def refuse(reason):
    raise UploadRefused(reason)


def is_zip(head):
    """Return whether the first bytes of an upload are a zip's."""
    return head[:4] in (b"PK\x03\x04", b"PK\x05\x06")


def unzip(stream, size, limits, wanted=lambda name: True):
    """Return [(name, bytes)] of the members of the zip in ``stream`` (``size`` bytes) that ``wanted`` names.

    Members not wanted are never inflated; those wanted are inflated in
    chunks and refused as soon as all of them together pass the limit.
    """
    _check_directory(stream, size, limits)
    try:
        with zipfile.ZipFile(stream) as archive:
            members = [info for info in archive.infolist() if not info.is_dir() and wanted(info.filename)]
            total, parts = 0, []
            for info in members:
                if info.flag_bits & 0x1:
                    refuse("This zip is encrypted; make it again without a password.")
                if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                    refuse("This zip uses a compression method Storyteller does not read; it reads deflate (what "
                           "every zip tool writes by default) and uncompressed zips.")
                text = bytearray()
                with archive.open(info) as member:
                    while chunk := member.read(CHUNK):
                        text += chunk
                        total += len(chunk)
                        if total > limits.max_bytes:
                            refuse(f"The zip unpacks to more than {limits.max_bytes:,} bytes, more than a "
                                   f"{limits.noun} may hold.")
                parts.append((info.filename, bytes(text)))
            return parts
    except (zipfile.BadZipFile, EOFError, zlib.error, ValueError) as error:
        if isinstance(error, UploadRefused):
            raise
        refuse(f"The zip is damaged ({_zip_problem(error)}); make it again.")


def _zip_problem(error):
    if "CRC" in str(error):
        return "its contents do not match the checksum it records, or it is larger than its header says"
    if isinstance(error, EOFError) or "ended before" in str(error):
        return "it ends before its contents do"
    return "its directory cannot be read"


def _check_directory(stream, size, limits):
    """Refuse a zip with more members, or a larger directory, than ``limits`` allow, before zipfile reads it.

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
        refuse("The zip is damaged (its directory cannot be found); make it again.")
    if end >= 20 and tail[end - 20:end - 16] == b"PK\x06\x07":
        refuse(f"This is a ZIP64 archive, far larger than a {limits.noun} can be.")
    members = int.from_bytes(tail[end + 10:end + 12], "little")
    if members > limits.max_members:
        refuse(f"The zip holds {members:,} files; a {limits.noun} zip holds at most {limits.max_members:,}.")
    directory = int.from_bytes(tail[end + 12:end + 16], "little")
    if directory > limits.max_directory:
        refuse(f"The zip's directory is {directory:,} bytes; a {limits.noun} zip's is at most "
               f"{limits.max_directory:,}, so this is not one.")


def decode(data, limits, name=""):
    """Return ``data`` as text (UTF-8, a leading byte-order mark dropped), or refuse naming where it broke."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as error:
        refuse(f"{name or 'This'} is not a {limits.noun}: it is not UTF-8 text (the byte at offset "
               f"{error.start:,} cannot be read).")
    return text.removeprefix("\ufeff")


def parse(text, limits, name=""):
    """Return the JSON value of ``text``, refusing too many values, long numbers, deep nesting or bad Unicode."""
    label = name or f"The {limits.noun}"
    _count_values(text, limits.max_values, label)
    try:
        value = json.loads(text, parse_int=lambda digits: _integer(digits, label),
                           parse_float=lambda digits: _real(digits, label),
                           parse_constant=lambda constant: refuse(f"{label} holds {constant}, which is not a number "
                                                                  "it can carry."))
    except RecursionError:
        refuse(f"{label} is nested more than {limits.max_depth} levels deep; no {limits.noun} Storyteller reads is.")
    except json.JSONDecodeError as error:
        if error.pos >= len(text.rstrip()):
            refuse(f"{label} is not complete JSON: it breaks off before its end (the file may have been cut short).")
        refuse(f"{label} is not valid JSON (there is a mistake at line {error.lineno}, column {error.colno}).")
    _check_shape(value, limits, label)
    return value


def load(source, limits):
    """Return the JSON value of ``source`` (bytes or a binary file holding JSON, not a zip), within ``limits``."""
    stream = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source
    return parse(decode(stream.read(), limits), limits)


def _count_values(text, most, label):
    """Refuse text holding more than ``most`` JSON values, counted on its skeleton (strings left out).

    The separators of the whole text, strings included, bound the count from
    above; only when that bound is too high is the skeleton made (a copy).
    """
    values = text.count(",") + text.count("[") + text.count("{") + 1
    if values > most:
        skeleton = _STRING.sub("", text)
        values = skeleton.count(",") + skeleton.count("[") + skeleton.count("{") + 1
    if values > most:
        refuse(f"{label} holds about {values:,} separate values; one of its size may hold at most {most:,}.")


def _integer(digits, label):
    if len(digits.lstrip("-")) > MAX_DIGITS:
        refuse(f"{label} holds a number {len(digits):,} digits long; no count or setting Storyteller reads is "
               f"longer than {MAX_DIGITS} digits.")
    return int(digits)


def _real(digits, label):
    if len(digits) > MAX_DIGITS:
        refuse(f"{label} holds a number {len(digits):,} characters long; no setting Storyteller reads is.")
    number = float(digits)
    if not math.isfinite(number):
        refuse(f"{label} holds the number {digits[:20]}, too large to be any setting.")
    return number


def _check_shape(value, limits, label):
    """Refuse nesting deeper than the limit and text that is not valid Unicode, without recursing."""
    _check_value(value, label)
    stack = [_children(value, label)]
    while stack:
        child = next(stack[-1], _DONE)
        if child is _DONE:
            stack.pop()
            continue
        _check_value(child, label)
        if isinstance(child, (dict, list)):
            if len(stack) >= limits.max_depth:
                refuse(f"{label} is nested more than {limits.max_depth} levels deep; no {limits.noun} Storyteller "
                       "reads is.")
            stack.append(_children(child, label))


_DONE = object()


def _children(value, label):
    if isinstance(value, dict):
        for key, child in value.items():
            _check_text(key, label)
            yield child
    elif isinstance(value, list):
        yield from value


def _check_value(value, label):
    if isinstance(value, str):
        _check_text(value, label)


def _check_text(text, label):
    if _SURROGATE.search(text):
        refuse(f"{label} holds text that is not valid Unicode (a lone surrogate such as \\ud800).")
