"""Reasoning models' thinking, kept apart from their reply.

Qwen3, DeepSeek-R1 and their distillations think before they answer, and a
server hands that thinking over in one of three ways: a field of its own
(Ollama's ``message.thinking``, an OpenAI-compatible server's
``reasoning_content``), ``<think>…</think>`` at the start of the reply's
text, or only the closing ``</think>`` (the chat template opened the block
in the prompt, as DeepSeek-R1's distillations do). The clients turn all
three into ``Chunk.thinking``, so nothing that reads ``Chunk.text`` — the
story, history, the recorder, token counts, exports — ever holds thinking.

``Splitter`` separates the tags as chunks arrive (a tag may be split between
two chunks); ``split`` does it for a whole reply (the JSON requests).
"""

from dataclasses import dataclass

from .base import Chunk

OPEN = "<think>"
CLOSE = "</think>"

TEXT = "text"
THINKING = "thinking"
# Everything handed out as text so far was thinking (a lone closing tag ended it): take it back.
TAKEN_BACK = "taken_back"


@dataclass(frozen=True)
class Piece:
    kind: str  # TEXT, THINKING or TAKEN_BACK
    text: str


class Splitter:
    """Split a streamed reply into its text and its thinking, chunk by chunk.

    Text that could be the start of a tag is held back until the next chunk
    says what it is, so a tag split between chunks never shows; everything
    else goes out as soon as it arrives.
    """

    def __init__(self):
        self._held = ""
        self._thinking = False
        self._after_block = False  # a thinking block just ended: the reply's text starts at its next word
        self._opened = False  # an opening tag was seen
        self._given = []  # the text handed out before any tag: what a lone closing tag takes back

    def feed(self, text):
        """Return the pieces ``text`` completes, in order."""
        self._held += text
        pieces = []
        while self._held:
            tag = CLOSE if self._thinking else None
            at, found = _first_tag(self._held, tag)
            if found is None:
                keep = _partial_tag(self._held, tag)
                out, self._held = self._held[:len(self._held) - keep], self._held[len(self._held) - keep:]
                if out:
                    pieces += self._out(out)
                break
            before, self._held = self._held[:at], self._held[at + len(found):]
            if before:
                pieces += self._out(before)
            pieces += self._tag(found)
        return _merged(pieces)

    def close(self):
        """Return what is still held back, at the end of the reply (a tag that never finished is plain text)."""
        held, self._held = self._held, ""
        return _merged(self._out(held)) if held else []

    def _out(self, text):
        if self._thinking:
            return [Piece(THINKING, text)]
        if self._after_block:
            text = text.lstrip()
            if not text:
                return []
            self._after_block = False
        if not self._opened:
            self._given.append(text)
        return [Piece(TEXT, text)]

    def _tag(self, tag):
        if tag == OPEN:
            self._thinking = self._opened = True
            return []
        if self._thinking:
            self._thinking, self._after_block = False, True
            return []
        if self._opened:
            return []  # a stray closing tag after a block that closed: drop it, keep the text
        # A lone closing tag: everything so far was thinking.
        taken, self._given = "".join(self._given), []
        self._opened, self._after_block = True, True
        return [Piece(TAKEN_BACK, taken)]


def split(text):
    """Return (thinking, text) of a whole reply."""
    splitter = Splitter()
    reply = Reply()
    for chunk in chunks(splitter.feed(text) + splitter.close()):
        reply.add(chunk)
    return reply.thinking.strip(), reply.text.strip()


class Reply:
    """A reply gathered from a stream's chunks as they come: its text and, apart, its thinking."""

    def __init__(self):
        self._text, self._thinking = [], []

    def add(self, chunk):
        if chunk.taken_back:
            self._text = []
        if chunk.thinking:
            self._thinking.append(chunk.thinking)
        if chunk.text:
            self._text.append(chunk.text)

    @property
    def text(self):
        return "".join(self._text)

    @property
    def thinking(self):
        return "".join(self._thinking)


def _first_tag(text, only):
    """Return (index, tag) of the first tag in ``text`` (``only`` that one, when given), or (-1, None)."""
    found = [(text.find(tag), tag) for tag in ((only,) if only else (OPEN, CLOSE)) if tag in text]
    return min(found) if found else (-1, None)


def _partial_tag(text, only):
    """Return how many characters at the end of ``text`` could begin a tag."""
    tags = (only,) if only else (OPEN, CLOSE)
    for size in range(min(len(text), max(len(tag) for tag in tags) - 1), 0, -1):
        if any(tag.startswith(text[-size:]) for tag in tags):
            return size
    return 0


def _merged(pieces):
    """Return ``pieces`` with neighbours of one kind joined (a taken-back piece stands alone)."""
    merged = []
    for piece in pieces:
        if merged and piece.kind == merged[-1].kind and piece.kind != TAKEN_BACK:
            merged[-1] = Piece(piece.kind, merged[-1].text + piece.text)
        else:
            merged.append(piece)
    return merged


def chunks(pieces):
    """Return ``pieces`` as the Chunks a client yields."""
    return [Chunk(text=piece.text) if piece.kind == TEXT else
            Chunk(thinking=piece.text, taken_back=piece.kind == TAKEN_BACK) for piece in pieces]
