"""Lorebooks: knowledge sources whose entries characters know by key (seed 002 实体知识, decision D10).

A lorebook is a Markdown source with a heading per entry. An entry's id is
the one written on its heading (``## The Flood {#flood}``) or else its
heading path (``history/the-flood``), and its key ``<book>:<id>``: taken
from the text, never from how passages are cut, so "Rebuild index" gives
every entry back its key and the knowledge that names it still holds. A
heading may also say who knows it without learning it
(``{#flood scope=everyone}``); otherwise the book's scope holds.

A keyed lorebook (SillyTavern's World Info, issue 28) is the same kind of
book: its text is World Info JSON and each entry's id is its uid
(``parsed_entries``), and its entries also fire by their keys in the
story (``keyed_index``, read by the context builder).

``parse`` is pure. The rest reads and writes: entries are written with the
source, in its transaction; a lorebook that a character's knowledge still
names, on any line of the story, cannot be removed or unmade; and no
lorebook changes while a turn is played (``campaigns.playing``).
"""

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import Max

from campaigns import lineage, playing
from campaigns.models import Node, StateRecord
from campaigns.state import state_for_events
from campaigns.state.world import lore

from . import chunking, keyed, worldinfo
from .models import LoreEntry, Source

_ATTRIBUTES = re.compile(r"\s*\{([^{}]*)\}\s*$")


class LoreRefused(Exception):
    """The lorebook cannot be read, made, unmade or removed; the message says why and what to change."""


@dataclass(frozen=True)
class Parsed:
    entry: str  # the entry's id
    title: str
    heading_path: str
    text: str
    scope: str  # "" (the book's), "listed" or "everyone"


def parse(text):
    """Return the Parsed entries of a lorebook's Markdown ``text``, or raise LoreRefused naming what to change.

    Every heading with text of its own (or an explicit id) is an entry; a
    file's single level-1 heading is its title, not an entry. Two entries
    may not share an id.
    """
    found = chunking.blocks(text)
    titled = sum(1 for block in found if block.level == 1) == 1
    entries, trail, current, problems = [], [], None, []
    for block in found:
        if not block.level:
            if current is not None:
                current["parts"].append(block.text)
            continue
        _close(current, entries)
        current = None
        if titled and block.level == 1:
            trail = []
            continue
        title, attributes = _attributes(block.title, problems)
        trail = [entry for entry in trail if entry[0] < block.level] + [(block.level, title)]
        explicit = attributes.get("id", "")
        current = {"entry": lore.entry_id(explicit) if explicit else lore.entry_id("/".join(t for _, t in trail)),
                   "title": title, "path": chunking.HEADING_SEPARATOR.join(t for _, t in trail), "parts": [],
                   "scope": attributes.get("scope", ""), "explicit": bool(explicit)}
    _close(current, entries)
    seen = {}
    for entry in entries:
        if entry.entry in seen:
            problems.append(f"the headings “{seen[entry.entry]}” and “{entry.heading_path}” both give the id "
                            f"{entry.entry!r}; give one of them its own id, like {{#{entry.entry}-2}}")
        seen.setdefault(entry.entry, entry.heading_path)
    if problems:
        raise LoreRefused("; ".join(problems))
    if not entries:
        raise LoreRefused("a lorebook needs a heading for each entry (## The Flood), with the entry's text under "
                          "it; this file has none")
    return entries


def parsed_entries(source):
    """Return the Parsed entries of lorebook ``source``: its headings, or, for a keyed book, its World Info
    entries (each entry's id its uid; an entry a character filter names is known only to those it names)."""
    if not source.keyed:
        return parse(source.text)
    try:
        book = worldinfo.parse(source.text, f"“{source.title}”")
    except worldinfo.BookRefused as refusal:
        raise LoreRefused(str(refusal)) from None
    return [Parsed(lore.entry_id(entry.uid), entry.title, "", entry.content,
                   lore.LISTED if entry.characters and not entry.exclude_characters else "")
            for entry in book.entries]


def _attributes(title, problems):
    """Return (the heading without its ``{…}``, {"id", "scope"}) of a heading ``title``."""
    found = _ATTRIBUTES.search(title)
    if not found:
        return title, {}
    attributes = {}
    for token in found.group(1).split():
        if token.startswith("#") and len(token) > 1:
            attributes["id"] = token[1:]
        elif token.startswith("scope=") and token[6:] in lore.SCOPES:
            attributes["scope"] = token[6:]
        else:
            problems.append(f"the heading “{title.strip()}” has {token!r} in its {{…}}; a heading may give an id "
                            f"({{#flood}}) and a scope ({{scope=everyone}} or {{scope=listed}})")
    return title[:found.start()].strip() or attributes.get("id", "(untitled)"), attributes


def _close(current, entries):
    if current is not None and (current["parts"] or current["explicit"]):
        entries.append(Parsed(current["entry"], current["title"], current["path"], "\n\n".join(current["parts"]),
                              current["scope"]))


# --- writing ------------------------------------------------------------------------------------------------------


def book_key_for(campaign_id, title):
    """Return a key for a new lorebook called ``title`` that no other book of the campaign (nor the world) has."""
    base = lore.book_key(title)
    taken = set(Source.objects.filter(campaign_id=campaign_id).exclude(lore_book="")
                .values_list("lore_book", flat=True)) | {lore.WORLD_BOOK}
    key, number = base, 2
    while key in taken:
        key, number = f"{base}-{number}", number + 1
    return key


def write_entries(source, parsed):
    """Replace ``source``'s entries with ``parsed`` (inside the caller's transaction)."""
    source.lore_entries.all().delete()
    add_entries(source, enumerate(parsed))


def add_entries(source, numbered):
    """Write ``numbered`` ((position, Parsed) pairs) as entries of ``source``: a staged import's batch, or the
    whole of ``write_entries``."""
    LoreEntry.objects.bulk_create([
        LoreEntry(source=source, campaign_id=source.campaign_id, key=f"{source.lore_book}:{entry.entry}",
                  title=entry.title[:300], heading_path=entry.heading_path, text=entry.text, scope=entry.scope,
                  position=position) for position, entry in numbered], batch_size=500)


def save_settings(form):
    """Save a source's settings form; a change to what it is as lore is checked first, or refused in words.

    Making a source a lorebook reads its entries (refused if it has none or
    two share an id); unmaking one, or disabling it, is refused while a
    character's knowledge names its entries; any change to a lorebook is
    refused while a turn is played.
    """
    source = form.instance
    stored = Source.objects.get(pk=source.pk)
    lore_changed = (stored.lorebook, stored.lore_scope, stored.enabled) != (source.lorebook, source.lore_scope,
                                                                           source.enabled)
    if not (stored.lorebook or source.lorebook) or not lore_changed:
        form.save()
        return
    parsed = parsed_entries(source) if source.lorebook else None
    with playing.lore_change(source.campaign_id), transaction.atomic():
        if stored.lorebook and (not source.lorebook or not source.enabled):
            _refuse_if_known(stored, "unmade" if not source.lorebook else "disabled")
        if source.lorebook and not source.lore_book:
            source.lore_book = book_key_for(source.campaign_id, source.title)
        form.save()
        if parsed is not None and not stored.lorebook:
            write_entries(source, parsed)
        elif not source.lorebook:
            source.lore_entries.all().delete()


def delete_source(source):
    """Delete ``source``; a lorebook only when no turn is played and no character's knowledge names it."""
    if not source.lorebook:
        source.delete()
        return
    with playing.lore_change(source.campaign_id), transaction.atomic():
        _refuse_if_known(source, "removed")
        source.delete()


def _refuse_if_known(source, what):
    named = references(source)
    if named:
        shown = "; ".join(f"{who} knows {', '.join(sorted(keys)[:4])}" for who, keys in sorted(named.items())[:6])
        raise LoreRefused(f"“{source.title}” cannot be {what}: characters' knowledge still names its entries "
                          f"({shown}). Withdraw that knowledge first (the world panel's “does not know”), on "
                          "every line of the story that holds it; nothing was changed.")


# --- reading ------------------------------------------------------------------------------------------------------


def lines(campaign_id):
    """Return the Path of every line of the story: each branch followed to its deepest node."""
    tips = dict(Node.objects.filter(campaign_id=campaign_id).values_list("branch_id").annotate(Max("depth")))
    return [lineage.path_at(campaign_id, branch, depth) for branch, depth in tips.items()]


def edges(campaign_id, book, paths):
    """Return {who: {entry key}} of every knowledge record of ``book``'s entries live on any of ``paths``."""
    rows = list(StateRecord.objects.filter(campaign_id=campaign_id, kind="knows", value__startswith=f"{book}:")
                .values_list("slot", "subject", "value", "branch_id", "depth", "id", "retracted"))
    found = {}
    for path in paths:
        best = {}
        for row in rows:
            current = best.get(row[0])
            if path.contains(row[3], row[4]) and (current is None or (row[4], row[5]) > (current[4], current[5])):
                best[row[0]] = row
        for slot, who, key, *_, retracted in best.values():
            if not retracted:
                found.setdefault(who, set()).add(key)
    return found


def references(source):
    """Return {who (a name): {entry key}}: the knowledge of ``source``'s entries on any line of the story."""
    if not source.lore_book:
        return {}
    campaign = source.campaign
    found = edges(campaign.pk, source.lore_book, lines(campaign.pk))
    state = state_for_events(lineage.path_of(campaign), campaign, [])
    return {state.name_of(who): keys for who, keys in found.items()}


def knowers(campaign, keys):
    """Return {entry key: [names]}: who knows each of ``keys`` at the campaign's head (and every one for
    ``everyone`` entries is said by the page, not listed)."""
    path = lineage.path_of(campaign)
    state = state_for_events(path, campaign, [])
    known = {}
    for book in sorted({key.split(":", 1)[0] for key in keys}):
        for who, entries in edges(campaign.pk, book, [path]).items():
            for key in entries:
                known.setdefault(key, []).append(state.name_of(who))
    return {key: sorted(names, key=str.lower) for key, names in known.items()}


def world_lore_at(campaign):
    """Return the world file's lore entries on the line at the campaign's head."""
    return lore.world_lore(state_for_events(lineage.path_of(campaign), campaign, []))


def entries_of(campaign_id):
    """Return the lore.Entry of every entry of the campaign's enabled lorebooks, with its scope as it holds."""
    rows = (LoreEntry.objects.filter(campaign_id=campaign_id, source__lorebook=True, source__enabled=True)
            .order_by("source_id", "position").values_list("key", "title", "text", "scope", "source__lore_scope"))
    return [lore.Entry(key, title, text, scope or book_scope) for key, title, text, scope, book_scope in rows]


@dataclass(frozen=True)
class Known:
    """The lore one character has at one point of the story: the titles for its brief, the entries it recalls."""

    titles: list
    recalled: list  # lore.Entry


def lore_for(campaign, path, who, text="", *, limit=lore.RECALL):
    """Return what ``who`` knows of the campaign's lore on the line ``path``: titles, and the entries ``text``
    calls up (only among those it knows, or that everyone knows)."""
    state = state_for_events(path, campaign, [])
    entries = [*lore.world_lore(state), *entries_of(campaign.pk)]
    known = lore.known_lore(state, who)
    return Known(lore.titles(entries, known), lore.recall(entries, known, text, limit=limit) if text else [])


# --- keyed entries ------------------------------------------------------------------------------------------------


def keyed_index(campaign_id):
    """Return the keyed.Index of the campaign's enabled keyed lorebooks (None when it has none), kept while no
    book changes: one small read a turn, and the books' keys compiled once per change (bench "tavern")."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, updated_at FROM knowledge_source WHERE campaign_id = %s AND keyed AND enabled "
                       "ORDER BY id", [campaign_id])
        stamp = tuple(cursor.fetchall())
    if not stamp:
        return None
    with _keyed_lock:
        cached = _keyed.get(campaign_id)
        if cached is not None and cached[0] == stamp:
            _keyed.move_to_end(campaign_id)
            return cached[1]
    items = []
    for source in Source.objects.filter(pk__in=[pk for pk, _ in stamp]).order_by("pk"):
        book = worldinfo.parse(source.text, f"“{source.title}”")
        items += [keyed.Keyed(f"{source.lore_book}:{lore.entry_id(entry.uid)}", source.title,
                              source.classification, entry, source.pk) for entry in book.entries]
    index = keyed.Index(items)
    with _keyed_lock:
        _keyed[campaign_id] = (stamp, index)
        while len(_keyed) > CACHED_BOOKS:
            _keyed.popitem(last=False)
    return index


def forget_keyed():
    """Drop every cached keyed index (tests do: a rolled-back test's ids come back with other rows)."""
    with _keyed_lock:
        _keyed.clear()


CACHED_BOOKS = 8  # campaigns
_keyed = OrderedDict()
_keyed_lock = threading.Lock()
