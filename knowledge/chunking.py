"""Cut a source's text into passages: deterministic, heading-aware, no overlap (seed 003 §76).

A heading closes the passage being packed only once it holds MIN_TOKENS;
below that the packer runs on through the heading and writes it into the
passage, so a document of one-line sections becomes usable passages instead
of a hundred fragments. No passage exceeds MAX_TOKENS: a longer paragraph is
split at sentence boundaries. A passage's ``heading_path`` is the trail of
headings above it that its own text does not contain, so the trail gives it
context without repeating any of it.

Markdown stays inert text. Code blocks are kept whole as text; an image
becomes a placeholder without its address, so nothing downstream can be led
to fetch it; links, HTML and everything else are characters, nothing more.
"""

import hashlib
import re
from dataclasses import dataclass

from storyteller import tokens

# Bump either when the output for the same text would change: a source records
# the versions that cut it, and "Rebuild index" re-cuts with the current ones.
PARSER_VERSION = 1
CHUNKING_VERSION = 1

MIN_TOKENS = 60
MAX_TOKENS = 800

HEADING_SEPARATOR = " › "

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")
_IMAGE = re.compile(r"!\[([^\]\n]*)\]\([^)\n]*\)")
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"'”’)\]]*\s+")


@dataclass(frozen=True)
class Chunk:
    index: int
    heading_path: str
    text: str
    tokens: int
    content_hash: str


@dataclass(frozen=True)
class _Block:
    text: str
    level: int = 0  # a heading's level; 0 for everything else
    title: str = ""


def chunk(text, *, markdown=True):
    """Return the passages of ``text`` in document order."""
    packer = _Packer()
    for block in _blocks(text, markdown):
        if block.level:
            packer.heading(block)
        else:
            for piece in _pieces(block.text):
                packer.content(piece)
    return packer.finish()


def inert(text):
    """Return ``text`` with every Markdown image replaced by a placeholder that keeps no address."""
    return _IMAGE.sub(lambda match: f"[image: {match.group(1)}]" if match.group(1).strip() else "[image]", text)


class _Packer:
    def __init__(self):
        self.stack = []  # (level, title) of the headings in force
        self.parts = []
        self.estimate = 0
        self.has_content = False
        self.path = ()
        self.chunks = []

    def heading(self, block):
        if self.has_content and tokens.count("\n\n".join(self.parts)) >= MIN_TOKENS:
            self._close()
        self.stack = [entry for entry in self.stack if entry[0] < block.level]
        if not self.parts:
            self.path = tuple(title for _, title in self.stack)
        self.stack.append((block.level, block.title))
        self._add(block.text)

    def content(self, text):
        cost = tokens.count(text) + 1
        if self.has_content and self.estimate + cost > MAX_TOKENS:
            self._close()
        if not self.parts:
            self.path = tuple(title for _, title in self.stack)
        self._add(text, cost)
        self.has_content = True

    def finish(self):
        if self.parts:
            self._close()
        return self.chunks

    def _add(self, text, cost=None):
        self.parts.append(text)
        self.estimate += tokens.count(text) + 1 if cost is None else cost

    def _close(self):
        text = "\n\n".join(self.parts)
        self.chunks.append(Chunk(
            index=len(self.chunks),
            heading_path=HEADING_SEPARATOR.join(self.path),
            text=text,
            tokens=tokens.count(text),
            content_hash=hashlib.sha256(text.encode()).hexdigest(),
        ))
        self.parts, self.estimate, self.has_content = [], 0, False


def _blocks(text, markdown):
    """Yield headings, fenced code blocks and paragraphs (blank-line separated)."""
    lines = text.split("\n")
    paragraph = []
    position = 0
    while position < len(lines):
        line = lines[position]
        if markdown and _FENCE.match(line):
            if paragraph:
                yield _Block(inert("\n".join(paragraph)))
                paragraph = []
            fence = _FENCE.match(line).group(1)
            end = position + 1
            while end < len(lines) and not lines[end].lstrip().startswith(fence):
                end += 1
            yield _Block("\n".join(lines[position:end + 1]))
            position = end + 1
            continue
        heading = _HEADING.match(line) if markdown else None
        if heading or not line.strip():
            if paragraph:
                yield _Block(inert("\n".join(paragraph)) if markdown else "\n".join(paragraph))
                paragraph = []
            if heading:
                yield _Block(line.strip(), level=len(heading.group(1)), title=heading.group(2) or "(untitled)")
        else:
            paragraph.append(line.rstrip())
        position += 1
    if paragraph:
        yield _Block(inert("\n".join(paragraph)) if markdown else "\n".join(paragraph))


def _pieces(text):
    """Return ``text`` whole, or cut at sentence ends (then at words) into pieces under MAX_TOKENS."""
    if tokens.count(text) < MAX_TOKENS:
        return [text]
    pieces = []
    for sentence in _SENTENCE_END.split(text):
        if tokens.count(sentence) < MAX_TOKENS:
            pieces.append(sentence)
        else:
            pieces.extend(_by_words(sentence))
    return _pack(pieces, " ")


def _by_words(text):
    words = text.split()
    return _pack(words, " ") if all(tokens.count(word) < MAX_TOKENS for word in words) else _by_tokens(text)


def _by_tokens(text):
    pieces = []
    while text:
        piece = tokens.cut(text, MAX_TOKENS - 2)
        pieces.append(piece)
        text = text[len(piece):]
    return pieces


def _pack(parts, separator):
    """Join neighbouring parts while they stay under MAX_TOKENS."""
    packed = []
    current = ""
    for part in parts:
        candidate = f"{current}{separator}{part}" if current else part
        if current and tokens.count(candidate) >= MAX_TOKENS - 1:
            packed.append(current)
            candidate = part
        current = candidate
    if current:
        packed.append(current)
    return packed
