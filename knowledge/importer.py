"""The one write path for imported knowledge: import a file, re-cut a source, (re)build its vectors.

``import_source`` validates, normalises, hashes and cuts a file, then writes
the source, its passages and their FTS5 rows in one transaction: a failure
leaves nothing behind, and the person's file is only ever read. Vectors come
afterwards (``embed_source``), outside any transaction, because they need the
model server and are a rebuildable cache: when they fail, lexical retrieval
carries the source and the failure is recorded on it (seed 003 §58).
"""

import asyncio
import hashlib
from contextlib import nullcontext
import unicodedata
from pathlib import PurePath

import numpy as np
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from storyteller import llm

from campaigns import playing

from . import chunking, lorebooks, worldinfo
from .models import TEXT_CHARS, Passage, Source

MAX_BYTES = 1024 * 1024  # seed 003 §76: sources are capped at 1 MiB
EXTENSIONS = {".md": True, ".markdown": True, ".txt": False}  # suffix -> parsed as Markdown

KEYED_DETAIL = "a keyed lorebook's entries are found by their keys in the story, not by search"

# Passages per /api/embed request: large enough that a 1 MiB source needs a
# few dozen requests, small enough that one request never nears a timeout.
EMBED_BATCH = 64


class ImportRefused(Exception):
    """The file was not imported; the message says why and what to do. Nothing was stored."""


class DuplicateSource(ImportRefused):
    def __init__(self, filename, existing):
        self.existing = existing
        super().__init__(
            f"{filename} has the same content as “{existing.title}”, already imported on "
            f"{existing.imported_at:%Y-%m-%d}. Nothing was imported; import it again as a separate copy if you "
            "really want two."
        )


def import_source(campaign, filename, data, classification, *, hidden=False, always_include=False, notes="",
                  allow_duplicate=False, lorebook=False, lore_scope=Source.LoreScope.LISTED):
    """Import the bytes of file ``filename`` into ``campaign`` and return the new Source.

    Raise ImportRefused (with nothing stored) for a file that is not .md or
    .txt, larger than 1 MiB, not UTF-8, or already imported into this campaign
    (unless ``allow_duplicate``); a ``lorebook`` also for Markdown without an
    entry, or with two entries of one id, and while a turn is played.
    """
    name = PurePath(filename).name
    suffix = PurePath(name).suffix.lower()
    if suffix not in EXTENSIONS:
        raise ImportRefused(f"{name} is not a .md or .txt file; only Markdown and plain text can be imported.")
    if classification not in Source.Classification.values:
        raise ImportRefused(f"Choose Canon, Reference or Inspiration for {name}.")
    check_size(name, len(data))
    text = _decode(name, data)
    content_hash = hashlib.sha256(text.encode()).hexdigest()
    chunks = chunking.chunk(text, markdown=EXTENSIONS[suffix])
    entries = _lore_entries(name, text, suffix) if lorebook else None
    with (playing.lore_change(campaign.pk) if lorebook else nullcontext()), transaction.atomic():
        existing = Source.objects.filter(campaign=campaign, content_hash=content_hash).first()
        if existing and not allow_duplicate:
            raise DuplicateSource(name, existing)
        source = Source.objects.create(
            campaign=campaign,
            title=_title(name, text, suffix),
            filename=name,
            classification=classification,
            hidden=hidden,
            always_include=always_include and classification == Source.Classification.CANON,
            notes=notes,
            text=text,
            content_hash=content_hash,
            size_bytes=len(data),
            parser_version=chunking.PARSER_VERSION,
            chunking_version=chunking.CHUNKING_VERSION,
            lexical_state=Source.IndexState.READY,
            lorebook=lorebook,
            lore_scope=lore_scope,
            lore_book=lorebooks.book_key_for(campaign.pk, _title(name, text, suffix)) if lorebook else "",
        )
        _write_passages(source, chunks)
        if entries is not None:
            lorebooks.write_entries(source, entries)
    return source


def _lore_entries(name, text, suffix):
    if not EXTENSIONS[suffix]:
        raise ImportRefused(f"{name} is plain text; a lorebook is Markdown with a heading for each entry "
                            "(## The Flood). Nothing was imported.")
    try:
        return lorebooks.parse(text)
    except lorebooks.LoreRefused as refusal:
        raise ImportRefused(f"{name} cannot be a lorebook: {refusal}. Nothing was imported.") from None


def import_keyed(campaign, filename, book, classification, *, lore_scope=Source.LoreScope.EVERYONE, key="",
                 entries=True):
    """Write World Info ``book`` (a worldinfo.Book) as a keyed lorebook of ``campaign`` inside the caller's
    transaction; return the Source. ``key`` is the book's key when the caller chose it (an import that also
    writes knowledge of its entries), else one is made from its title. With ``entries`` False the caller writes
    the entries itself (``lorebooks.add_entries``: a staged import, in batches).

    Raise ImportRefused when the book is empty or larger than a source may be.
    """
    name = PurePath(filename).name[:255] or "lorebook.json"
    if classification not in Source.Classification.values:
        raise ImportRefused(f"Choose Canon, Reference or Inspiration for {name}.")
    if not book.entries:
        raise ImportRefused(f"{name} has no entries, so it adds nothing. Nothing was imported.")
    text = worldinfo.dump(book)
    if len(text) > TEXT_CHARS:
        raise ImportRefused(f"The lorebook {book.name or name} is {len(text):,} characters as it is kept; a lorebook "
                            f"may be at most {TEXT_CHARS:,}. Split it into smaller books and bring those. Nothing "
                            "was imported.")
    title = (book.name or PurePath(name).stem)[:200] or "Lorebook"
    source = Source.objects.create(
        campaign=campaign, title=title, filename=name, classification=classification, text=text,
        content_hash=hashlib.sha256(text.encode()).hexdigest(), size_bytes=len(text.encode()),
        parser_version=chunking.PARSER_VERSION, chunking_version=chunking.CHUNKING_VERSION,
        lexical_state=Source.IndexState.READY, semantic_state=Source.IndexState.UNAVAILABLE,
        semantic_detail=KEYED_DETAIL,
        lorebook=True, keyed=True, lore_scope=lore_scope, lore_book=key or lorebooks.book_key_for(campaign.pk, title))
    if entries:
        lorebooks.write_entries(source, lorebooks.parsed_entries(source))
    return source


def restore_source(campaign, *, text, filename, content_hash, chunks, **fields):
    """Recreate an exported source from its stored text and its passages ``cut`` beforehand, inside the caller's
    transaction (campaign import): the cutting is the slow part and must not hold the write lock."""
    source = Source.objects.create(campaign=campaign, text=text, filename=filename, content_hash=content_hash,
                                   lexical_state=Source.IndexState.READY, **fields)
    _write_passages(source, chunks)
    if source.lorebook:
        lorebooks.write_entries(source, lorebooks.parsed_entries(source))
    if (source.parser_version, source.chunking_version) != (chunking.PARSER_VERSION, chunking.CHUNKING_VERSION):
        source.parser_version, source.chunking_version = chunking.PARSER_VERSION, chunking.CHUNKING_VERSION
        source.save(update_fields=["parser_version", "chunking_version"])
    return source


def cut(text, filename, *, keyed=False):
    """Return the passages of a source's ``text``, parsed as Markdown unless ``filename`` says plain text; a keyed
    lorebook has none (its entries are found by their keys, never by relevance)."""
    if keyed:
        return []
    return chunking.chunk(text, markdown=EXTENSIONS.get(PurePath(filename).suffix.lower(), True))


def check_size(name, size):
    """Raise ImportRefused when a file of ``size`` bytes is over the limit (before reading it all)."""
    if size > MAX_BYTES:
        raise ImportRefused(
            f"{name} is {size:,} bytes; a source may be at most {MAX_BYTES:,} bytes (1 MiB). "
            "Split it into smaller files and import those."
        )


def recut_source(source):
    """Re-cut ``source`` from its stored text with the current chunking; its vectors must be rebuilt after."""
    chunks = cut(source.text, source.filename, keyed=source.keyed)
    # A lorebook's entries come from its text, not from the passages: re-read, they keep their keys.
    entries = lorebooks.parsed_entries(source) if source.lorebook else None
    with transaction.atomic():
        source.passages.all().delete()
        _write_passages(source, chunks)
        if entries is not None:
            lorebooks.write_entries(source, entries)
        source.parser_version = chunking.PARSER_VERSION
        source.chunking_version = chunking.CHUNKING_VERSION
        source.lexical_state = Source.IndexState.READY
        source.semantic_state = Source.IndexState.UNAVAILABLE if source.keyed else Source.IndexState.PENDING
        source.semantic_detail = KEYED_DETAIL if source.keyed else ""
        source.save()


def embed_source(source, embedder=None):
    """Embed every passage of ``source`` and record the outcome on it; return the semantic state.

    Never raises for a model failure: the source stays usable lexically and
    ``semantic_detail`` says what went wrong. It waits for the model on the
    calling thread: for commands and tests; pages and sockets use
    ``aembed_source``.
    """
    embedder = embedder or llm.embedder_for(embedding_model(source.campaign))
    passages = _passages(source)
    try:
        vectors = async_to_sync(_vectors)(embedder, passages)
    except llm.NarratorError as error:
        return _record_semantic(source, *_failure(error, embedder.model))
    return _store_vectors(source, embedder.model, passages, vectors)


async def aembed_source(source, embedder=None):
    """See embed_source(): the database on its own thread, the model asked from the event loop.

    A slow model server then holds up nobody else's database work (issue 10).
    """
    if embedder is None:
        model = await sync_to_async(lambda: embedding_model(source.campaign))()
        embedder = await asyncio.to_thread(llm.embedder_for, model)
    passages = await sync_to_async(_passages)(source)
    try:
        vectors = await _vectors(embedder, passages)
    except llm.NarratorError as error:
        return await sync_to_async(_record_semantic)(source, *_failure(error, embedder.model))
    return await sync_to_async(_store_vectors)(source, embedder.model, passages, vectors)


def _passages(source):
    return list(source.passages.order_by("index").only("id", "text", "heading_path"))


async def _vectors(embedder, passages):
    vectors = []
    for start in range(0, len(passages), EMBED_BATCH):
        batch = passages[start:start + EMBED_BATCH]
        vectors += await embedder.embed([document_text(embedder.model, p) for p in batch])
    return vectors


def _failure(error, model):
    """Return (semantic state, detail in words) for an embedding that failed with ``error``."""
    if isinstance(error, llm.EmbeddingUnavailable):
        return Source.IndexState.UNAVAILABLE, f"No embedding model: {error} Retrieval uses the full-text index only."
    return (Source.IndexState.FAILED, f"Embedding with {model} failed: {error} Retrieval uses the full-text index "
                                      "only until the index is rebuilt.")


def _store_vectors(source, model, passages, vectors):
    now = timezone.now()
    for passage, vector in zip(passages, vectors):
        array = np.asarray(vector, dtype=np.float32)
        passage.embedding = array.tobytes()
        passage.embedding_model = model
        passage.embedding_dims = array.shape[0]
        passage.embedded_at = now
    with transaction.atomic():
        Passage.objects.bulk_update(passages, ["embedding", "embedding_model", "embedding_dims", "embedded_at"],
                                    batch_size=500)
        _record_semantic(source, Source.IndexState.READY, "")
    return Source.IndexState.READY


def embedding_model(campaign):
    """Return the name of the model that embeds ``campaign``'s knowledge."""
    return campaign.embed_model or getattr(settings, "STORYTELLER_EMBED_MODEL", "nomic-embed-text")


def document_text(model, passage):
    """Return what is embedded for ``passage``: nomic-embed-text wants its task prefix."""
    body = f"{passage.heading_path}\n{passage.text}" if passage.heading_path else passage.text
    return f"{prefixes(model)[0]}{body}"


def prefixes(model):
    """Return (document prefix, query prefix) for embedding ``model``."""
    if model.split(":")[0].endswith("nomic-embed-text"):
        return "search_document: ", "search_query: "
    return "", ""


def _record_semantic(source, state, detail):
    Source.objects.filter(pk=source.pk).update(semantic_state=state, semantic_detail=detail, updated_at=timezone.now())
    source.semantic_state, source.semantic_detail = state, detail
    return state


def _write_passages(source, chunks):
    Passage.objects.bulk_create(
        [Passage(source=source, campaign_id=source.campaign_id, index=c.index, heading_path=c.heading_path,
                 text=c.text, tokens=c.tokens, content_hash=c.content_hash) for c in chunks],
        batch_size=500,
    )


def _decode(name, data):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ImportRefused(
            f"{name} is not valid UTF-8: the byte at offset {error.start:,} (0x{data[error.start]:02x}) cannot be "
            "decoded. Save the file as UTF-8 in your editor and import it again. Nothing was imported."
        ) from error
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    # One spelling of every character, so the same words hash and match alike (seed 003 §61).
    return unicodedata.normalize("NFC", text)


def _title(name, text, suffix):
    if EXTENSIONS[suffix]:
        for line in text.split("\n"):
            if line.startswith("# ") and line[2:].strip():
                return line[2:].strip()[:200]
    return PurePath(name).stem[:200] or name[:200]
