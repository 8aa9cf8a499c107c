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

Cutting is linear in the text, whatever the text (issue 10): no pattern can
backtrack across a line, no token count ever sees more than LONG_CHARS
characters, and each sentence, word or slice is counted once, then packed on
the sum of its counts (a 1 MiB file with no paragraph breaks took 42 s when
every candidate passage was counted afresh).
"""

import hashlib
import re
from dataclasses import dataclass

from storyteller import tokens

# Bump either when the output for the same text would change: a source records
# the versions that cut it, and "Rebuild index" re-cuts with the current ones.
PARSER_VERSION = 2  # 2: a line over MAX_HEADING_CHARS is text, not a heading
CHUNKING_VERSION = 2  # 2: pieces packed on the sum of their counts

MIN_TOKENS = 60
MAX_TOKENS = 800
# The longest stretch whose tokens are counted at once: a token is rarely
# longer than 16 characters, so a stretch this long that fits is whole.
LONG_CHARS = 16 * MAX_TOKENS
# A heading is a title; a longer "# …" line is a paragraph that starts with a hash.
MAX_HEADING_CHARS = 300

HEADING_SEPARATOR = " › "

_HEADING = re.compile(r"(#{1,6})[ \t]+(.*)")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")
_ALT_END = re.compile(r"[\]\n]")
_ADDRESS_END = re.compile(r"[)\n]")
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


def blocks(text, *, markdown=True):
    """Return the headings, fenced code blocks and paragraphs of ``text`` in document order (what is packed)."""
    return list(_blocks(text, markdown))


def inert(text):
    """Return ``text`` with every Markdown image replaced by a placeholder that keeps no address.

    An image is ``![alt](address)`` with neither part crossing a line. Written
    as a scan rather than one pattern, which backtracks over the rest of a
    line for every "![" on it: quadratic on a long line of them. Each stretch
    is searched once: an address that runs into the line's end without ")"
    (``dead_end``) fails every later image that starts before that end.
    """
    out, position, dead_end = [], 0, -1
    while (start := text.find("![", position)) >= 0:
        alt = _ALT_END.search(text, start + 2)
        if alt is None:
            break
        middle = alt.start()
        if text.startswith("](", middle) and middle + 2 >= dead_end:
            found = _ADDRESS_END.search(text, middle + 2)
            if found and found.group() == ")":
                words = text[start + 2:middle]
                out += [text[position:start], f"[image: {words}]" if words.strip() else "[image]"]
                position = found.end()
                continue
            dead_end = found.start() if found else len(text)
        out.append(text[position:middle])
        position = middle
    out.append(text[position:])
    return "".join(out)


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
        heading = _HEADING.fullmatch(line) if markdown and len(line) <= MAX_HEADING_CHARS else None
        if heading or not line.strip():
            if paragraph:
                yield _Block(inert("\n".join(paragraph)) if markdown else "\n".join(paragraph))
                paragraph = []
            if heading:
                title = heading.group(2).rstrip(" \t").rstrip("#").rstrip(" \t")
                yield _Block(line.strip(), level=len(heading.group(1)), title=title or "(untitled)")
        else:
            paragraph.append(line.rstrip())
        position += 1
    if paragraph:
        yield _Block(inert("\n".join(paragraph)) if markdown else "\n".join(paragraph))


def _pieces(text):
    """Return ``text`` whole, or cut at sentence ends (then at words, then anywhere) into pieces under MAX_TOKENS."""
    if _fits(text):
        return [text]
    parts = []
    for sentence in _SENTENCE_END.split(text):
        parts += [(sentence, False)] if _fits(sentence) else _by_words(sentence)
    return _pack(parts)


def _fits(text):
    # A token is at least one byte, so a text of fewer bytes than MAX_TOKENS fits uncounted.
    return len(text) < MAX_TOKENS // 4 or (len(text) <= LONG_CHARS and (len(text.encode()) < MAX_TOKENS or
                                                                       tokens.count(text) < MAX_TOKENS))


def _by_words(text):
    """Return (word, glued) parts; a word too long to fit is sliced, its slices glued to one another."""
    parts = []
    for word in text.split():
        parts += [(word, False)] if _fits(word) else _by_tokens(word)
    return parts


def _by_tokens(text):
    """Return (slice, glued) parts of MAX_TOKENS - 2 tokens each, counting LONG_CHARS characters at a time."""
    parts, position = [], 0
    while position < len(text):
        window = text[position:position + LONG_CHARS]
        piece = tokens.cut(window, MAX_TOKENS - 2)
        while piece and not window.startswith(piece):  # a cut inside a character decodes to U+FFFD: step back
            piece = piece[:-1]
        piece = piece or window[0]
        parts.append((piece, bool(parts)))
        position += len(piece)
    return parts


def _pack(parts):
    """Join neighbouring parts (with a space, or nothing between slices of one word) while they stay under
    MAX_TOKENS: each run of parts is counted once and runs are packed on the sum of their counts; a piece the
    sum misjudged is split again."""
    packed, group, spent = [], [], 0
    for run in _runs(parts):
        cost = tokens.count(run[0])
        if group and spent + cost >= MAX_TOKENS - 1:
            packed += _joined(group)
            group, spent = [], 0
        group.append(run)
        spent += cost
    if group:
        packed += _joined(group)
    return packed


# Parts shorter than this are counted in runs: counting a few-character word
# alone costs as much as counting sixty characters.
RUN_CHARS = 64


def _runs(parts):
    """Return the parts joined into runs of about RUN_CHARS characters; a longer part is a run of its own."""
    runs, current, size = [], [], 0
    for part in parts:
        if len(part[0]) >= RUN_CHARS and current:
            runs.append(_run(current))
            current, size = [], 0
        current.append(part)
        size += len(part[0])
        if size >= RUN_CHARS:
            runs.append(_run(current))
            current, size = [], 0
    if current:
        runs.append(_run(current))
    return runs


def _run(parts):
    return _text(parts), parts[0][1]


def _text(parts):
    return parts[0][0] + "".join(part if glued else f" {part}" for part, glued in parts[1:])


def _joined(group):
    text = _text(group)
    if len(group) == 1 or tokens.count(text) < MAX_TOKENS - 1:
        return [text]
    middle = len(group) // 2
    return _joined(group[:middle]) + _joined(group[middle:])
