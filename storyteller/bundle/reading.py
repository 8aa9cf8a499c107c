"""Bytes to a bundle's JSON value at a bounded cost, whatever the bytes are (issue 10, point 2), and its checksum.

An upload is untrusted: a zip may inflate a thousandfold or lie about its
size, JSON may nest a hundred thousand levels or spell a number in a
megabyte of digits. The bytes are read by ``campaigns.uploads``, the one
bounded reader world files use too, with a bundle's limits: one member
(campaign.json), at most ``limit`` bytes zipped or inflated, 32 levels deep.

The checksum is SHA-256 over the canonical JSON of the sections: it finds
corruption, nothing more, because anyone can compute it (decisions.md).
"""

import hashlib
import io
import json

from campaigns import uploads

MEMBER = "campaign.json"
# The deepest value a real bundle holds is about ten levels down
# (sections > campaigns > snapshots > report > knowledge > used > entry > terms).
MAX_DEPTH = 32
# A bundle zip holds campaign.json; a zip tool may add a few files beside it (__MACOSX/…), never thousands.
MAX_MEMBERS = 100


class BundleRefused(Exception):
    """The bundle was not imported; the message says why in words. Nothing was written."""


def refuse(reason):
    raise BundleRefused(f"{reason} Nothing was imported.")


def load(source, limit):
    """Return the JSON value of ``source`` (bytes or a binary file: a bundle, or a zip holding one as
    campaign.json), reading at most ``limit`` bytes of it and of the text it unpacks to."""
    limits = uploads.Limits("campaign bundle", limit, max_members=MAX_MEMBERS, max_depth=MAX_DEPTH)
    stream = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source
    size = stream.seek(0, io.SEEK_END)
    if size > limit:
        refuse(f"The file is {size:,} bytes; a bundle may be at most {limit:,} bytes.")
    stream.seek(0)
    head = stream.read(4)
    stream.seek(0)
    try:
        if uploads.is_zip(head):
            parts = uploads.unzip(stream, size, limits, wanted=lambda name: name == MEMBER)
            if not parts:
                refuse(f"This zip holds no {MEMBER}, so it is not a campaign bundle exported by Storyteller.")
            return uploads.parse(uploads.decode(parts[0][1], limits), limits, "The bundle")
        return uploads.parse(uploads.decode(stream.read(), limits), limits, "The bundle")
    except uploads.UploadRefused as refusal:
        refuse(str(refusal))


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
