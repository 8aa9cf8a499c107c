"""Write a Plan: a new campaign staged until whole, or what it adds to a chosen one, joined in one transaction.

A new campaign goes through the world file's import (``worldfile.prepare``:
its characters, with the knowledge of their own lorebooks' entries, are
typed events validated whole before anything is written) and its staged
write (``campaigns.staging``): short transactions, nobody sees the campaign
until every row is in. After the world come the cards, the keyed lorebooks
(``knowledge.importer.import_keyed``), the author's note, the persona, and
the story: the greetings as versions of the opening reply, or each chat as
a line — each of the person's messages an action, each character's message
a reply with its swipes as versions, the one chosen on the line.

Added to a campaign that exists, the books' entries and the chats' nodes
are written first in short transactions on lines nothing reaches yet, then
one transaction adds the characters at the opening (they belong to every
line of the story) and moves the head to the first chat added, each chat a
line of its own from the opening; a failure removes what was written. Nothing here runs the recorder over an imported history: that is
the person's choice (``read_into_state``).
"""

import asyncio
import json
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from campaigns import lineage, playing, staging, worldfile
from campaigns.models import (AuthorNote, Branch, Campaign, CharacterCard, ContextSnapshot, Node, Persona,
                              StateEvent)
from campaigns.state import PROTAGONIST, apply_events, state_at
from campaigns.state.registry import MAX_TEXT
from campaigns.state.world import lore, world
from knowledge import importer, lorebooks
from storyteller import context
from storyteller.context import builder
from storyteller.llm import priority
from storyteller.steps import minds, postturn, recorder

from . import plan as plans
from . import png


class ImportRefused(Exception):
    """Nothing was imported; the message says why and what to change."""


@dataclass
class Written:
    """What an import made, for the page's summary and the command's JSON."""

    campaign: Campaign
    characters: list = field(default_factory=list)  # [{key, name}]
    greetings: list = field(default_factory=list)  # [{character, text}]: the opening reply and its versions
    entries: list = field(default_factory=list)  # [{id, book, keys, constant}]
    turns: int = 0
    swipes: int = 0
    lines: int = 0

    def as_json(self):
        return {"campaign": self.campaign.pk, "title": self.campaign.title, "characters": self.characters,
                "greetings": self.greetings, "lorebook_entries": self.entries, "turns": self.turns,
                "swipes": self.swipes, "lines": self.lines}


def create(owner, plan, *, title="", progress=None, writes=None):
    """Create a campaign of ``plan`` for ``owner``, staged until whole; return what was Written."""
    if not plan.usable:
        raise ImportRefused(nothing_imported(plan))
    persona = _persona(owner, plan.persona)
    document = _world(plan, title or plan.title, persona)
    try:
        prepared = worldfile.prepare(owner, document)
    except worldfile.WorldRefused as refusal:
        raise ImportRefused(f"The characters could not be made: {'; '.join(refusal.reasons[:10])}. Nothing was "
                            "imported.") from None
    story_rows = _story_rows(plan)
    written = Written(None)

    writes = writes if writes is not None else staging.Writes()

    def then(campaign):
        staging.transact(lambda: _settings(campaign, plan, persona), writes)
        staging.transact(lambda: _cards(campaign, plan, written), writes)
        for book in plan.books:
            _book_in_batches(campaign, book, written, writes, progress)
        staging.transact(lambda: _note_and_memory(campaign, plan), writes)
        root = campaign.head_branch_id
        head = _write_story(campaign, root, story_rows, writes, progress)
        return {"head_branch_id": head[0], "head_depth": head[1]} if head else {}

    campaign = prepared.write(progress=progress, writes=writes, then=then)
    written.campaign = campaign
    _count(written, plan, story_rows)
    return written


def add(owner, campaign, plan, *, writes=None):
    """Add ``plan`` to ``campaign`` (the owner's); return what was Written, or refuse in words, nothing added.

    The bulk (each book's entries, each chat's nodes and versions) is written
    first in short transactions (``campaigns.staging``), on lines nothing
    reaches yet, while the campaign's turns wait (``playing.lore_change``);
    then one short transaction adds the characters, the cards and the persona
    and moves the head. A failure anywhere removes what was written.
    """
    if not plan.usable:
        raise ImportRefused(nothing_imported(plan))
    persona = _persona(owner, plan.persona) if plan.persona and not campaign.persona_id else None
    story_rows = _story_rows(plan, greetings=False)
    written = Written(campaign)
    writes = writes if writes is not None else staging.Writes()
    made = _Made()
    with playing.lore_change(campaign.pk):
        try:
            _free_book_keys(campaign, plan)
            opening = Node.objects.get(campaign=campaign, depth=0)
            for book in plan.books:
                made.sources.append(_book_in_batches(campaign, book, written, writes).pk)
            head = None
            for rows in story_rows:
                line = staging.transact(lambda: Branch.objects.create(campaign=campaign, parent_id=opening.branch_id,
                                                                      fork_depth=0).pk, writes)
                made.lines.append(line)
                head = head or _write_rows(campaign, line, rows, 0, opening.tokens_through, writes=writes)
            staging.transact(lambda: _join(campaign, opening, plan, persona, head, written), writes)
        except BaseException:
            _discard(made, writes)
            raise
    campaign.refresh_from_db()
    _count(written, plan, story_rows)
    return written


def _free_book_keys(campaign, plan):
    """Give each book of ``plan`` a key no book of ``campaign`` has: another book (or the same one again) may come
    from a file of the same name, and entries are known by their book's key."""
    from knowledge.models import Source

    taken = set(Source.objects.filter(campaign=campaign).exclude(lore_book="").values_list("lore_book", flat=True))
    taken.add(lore.WORLD_BOOK)
    for book in plan.books:
        base, number = book.key, 2
        while book.key in taken:
            book.key, number = f"{base}-{number}", number + 1
        taken.add(book.key)


@dataclass
class _Made:
    """What an addition wrote before its last transaction: removed again if it fails."""

    sources: list = field(default_factory=list)
    lines: list = field(default_factory=list)


def _join(campaign, opening, plan, persona, head, written):
    """Add the characters at the opening, their cards and the persona, and move the head to the first chat added:
    the one transaction that makes an addition part of the campaign."""
    if plan.characters:
        place = state_at(lineage.path_at(campaign.pk, opening.branch_id, 0), campaign).location_of(PROTAGONIST)
        stored = apply_events(opening, _introductions(plan, place), source=StateEvent.Source.WORLD)
        refused = [event for event in stored if event.status != StateEvent.Status.APPLIED]
        if refused:
            raise ImportRefused("The characters could not be added: " + "; ".join(
                f"{event.payload.get('subject') or event.payload.get('type')}: {event.reason}"
                for event in refused[:10]) + ". Nothing was imported.")
    _cards(campaign, plan, written)
    if persona is not None:
        Campaign.objects.filter(pk=campaign.pk).update(persona=persona)
    if head:
        Campaign.objects.filter(pk=campaign.pk).update(head_branch_id=head[0], head_depth=head[1],
                                                       updated_at=timezone.now())


def _discard(made, writes):
    """Remove the books and lines an addition wrote before it failed, in batches as they were written."""
    from knowledge.models import Source

    versions = list(Branch.objects.filter(parent_id__in=made.lines).values_list("pk", flat=True))
    nodes = list(Node.objects.filter(branch_id__in=[*versions, *made.lines]).values_list("pk", flat=True))
    staging.in_batches(nodes, lambda chunk: Node.objects.filter(pk__in=chunk).delete(), writes=writes)
    staging.transact(lambda: Branch.objects.filter(pk__in=versions).delete(), writes)
    staging.transact(lambda: Branch.objects.filter(pk__in=made.lines).delete(), writes)
    for source in made.sources:
        staging.transact(lambda source=source: Source.objects.filter(pk=source).delete(), writes)


def existing_names(campaign):
    """Return the names and aliases of every character ``campaign`` has at its head, the player's own included (a
    card called one of them is not added: the story would not know which is meant)."""
    now = state_at(lineage.path_of(campaign), campaign)
    names = []
    for key in [PROTAGONIST, *world.characters(now)]:
        entity = now.entity(key)
        if entity is not None:
            names += [entity.value, *entity.data.get("aliases", ())]
    return names


def existing_books(campaign):
    """Return ``campaign``'s keyed lorebooks as {plan.entries_hash: title}: a book brought again is not added
    twice (their texts are World Info JSON this import wrote, so they read back)."""
    from knowledge.models import Source

    found = {}
    for text, title in Source.objects.filter(campaign=campaign, keyed=True).values_list("text", "title"):
        try:
            found[plans.entries_hash(json.loads(text).get("entries", {}))] = title
        except (ValueError, AttributeError):
            continue  # not World Info after all: it cannot be the same book
    return found


@dataclass(frozen=True)
class Unread:
    """The imported replies of the current line the recorder has not read, and what reading them costs."""

    nodes: tuple  # ids, oldest first
    prompt_tokens: int  # about: each call reads the story up to its reply (capped at the window), and its rules
    done: int = 0  # imported replies on the line already read

    @property
    def total(self):
        """Return how many imported replies the line has, read or not: what progress is counted against."""
        return self.done + len(self.nodes)


def unread(campaign):
    """Return the Unread imported replies on ``campaign``'s current line (the recorder never reads them itself)."""
    path = lineage.path_of(campaign)
    rows = list(Node.objects.filter(path.clause(), campaign_id=campaign.pk, role=Node.Role.NARRATOR,
                                    snapshot__api=IMPORTED).order_by("depth")
                .values_list("pk", "tokens", "recorderrun__status"))
    waiting = [(pk, count) for pk, count, status in rows if status is None]
    return Unread(tuple(pk for pk, _ in waiting), sum(count + RECORDER_READS for _, count in waiting),
                  len(rows) - len(waiting))


# What a recorder call reads beside the reply: its rules and schema, the state the turn starts from, the action.
RECORDER_READS = 1_200
IMPORTED = "imported"  # the api an imported reply's context snapshot names


async def read_story(campaign_id, nodes):
    """Have the recorder, then the minds step, read each imported reply of ``nodes`` (oldest first) into the world
    state, as background work a turn interrupts (``llm.priority``); one reading per campaign at a time."""
    for node in nodes:
        for step in (recorder.STEP, minds.STEP):
            with priority.background(f"the {step.name.lower()} of a brought-in story",
                                     elsewhere=postturn.turns_elsewhere()):
                await step.run(node)


_reading: dict[int, asyncio.Task] = {}


def start_reading(campaign_id, nodes):
    """Start ``read_story`` for the campaign unless it already reads; return whether it started."""
    if reading(campaign_id):
        return False
    _reading[campaign_id] = asyncio.get_running_loop().create_task(read_story(campaign_id, nodes))
    return True


def reading(campaign_id):
    """Return whether the campaign's brought-in story is being read (in this process)."""
    task = _reading.get(campaign_id)
    return task is not None and not task.done()


def nothing_imported(plan):
    """Return why nothing of ``plan`` can be imported, in words: each file's refusal, or what to choose."""
    if plan.refused:
        return "Nothing could be read: " + " ".join(reading.refused for reading in plan.refused) + \
            " Nothing was imported."
    return "Choose one or more files to bring in: character cards, lorebooks, chats or Kobold saves."


def _count(written, plan, rows):
    written.greetings = [] if plan.lines else [{"character": who, "text": text} for who, text in plan.greetings]
    written.turns = plan.turn_count
    written.swipes = plan.swipe_count
    written.lines = len(plan.lines)


def _persona(owner, name):
    """Return the owner's persona called ``name`` (made if new): what {{user}} means, remembered per person."""
    name = name.strip()[:100]
    if not name:
        return None
    persona = Persona.objects.filter(owner=owner, name__iexact=name).order_by("-updated_at").first()
    return persona or Persona.objects.create(owner=owner, name=name)


def _world(plan, title, persona):
    """Return the world document of ``plan``: the campaign's fields and its characters with what they know."""
    known = {}
    for book in plan.books:
        for uid, keys in book.knowers.items():
            for key in keys:
                known.setdefault(key, []).append(f"{book.key}:{lore.entry_id(uid)}")
    characters = [{"id": c.key, "name": c.name, "description": plans.entity_description(c), "place": SCENE,
                   "knowledge": {"lore": [{"name": entry, "how": "world"} for entry in known.get(c.key, [])]}}
                  for c in plan.characters]
    # The cards' characters are with the player in one scene, where a game master finds them to speak, and the
    # player's character knows them: they play together from the first line.
    characters.append({"protagonist": True, "name": persona.name if persona else "you", "place": SCENE,
                       "relationships": [{"to": c.name, "label": "acquaintance"} for c in plan.characters]})
    document = {"characters": characters,
                "places": [{"id": SCENE, "name": "The scene", "description": _scene(plan.opening)}]}
    fields = {"title": title[:200], "protagonist": persona.name if persona else "you", "opening": plan.opening}
    if plan.narrator_rules.strip():
        fields["narrator_rules"] = plan.narrator_rules
    return {"campaign": fields, **document}


SCENE = "scene"  # the one place a campaign made from cards starts with: where the story opens


def _scene(opening):
    text = " ".join(opening.split())
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1].rsplit(" ", 1)[0] + "…"


def _introductions(plan, place=""):
    known = {}
    for book in plan.books:
        for uid, keys in book.knowers.items():
            for key in keys:
                known.setdefault(key, []).append(f"{book.key}:{lore.entry_id(uid)}")
    events = []
    for character in plan.characters:
        events.append({"type": "introduce", "subject": character.name, "object": "character",
                       "value": plans.entity_description(character), "data": {"id": character.key}})
        events += [{"type": "know", "subject": character.key, "object": entry, "data": {"kind": "lore", "how": "world"}}
                   for entry in known.get(character.key, [])]
        events.append({"type": "relationship", "subject": PROTAGONIST, "object": character.key,
                       "data": {"label": "acquaintance"}})
        if place:  # where the player's character is when the story opens: they meet there
            events.append({"type": "move", "subject": character.key, "object": place, "data": {"ignore_exits": True}})
    return events


def _settings(campaign, plan, persona):
    Campaign.every.filter(pk=campaign.pk).update(
        style_examples=plan.style_examples, reply_direction=plan.reply_direction, game_master=plan.game_master,
        persona=persona)


def _cards(campaign, plan, written):
    start = CharacterCard.objects.filter(campaign=campaign).count()
    books = plan.books
    CharacterCard.objects.bulk_create([CharacterCard(
        campaign=campaign, entity=c.key, name=c.name, description=c.description, personality=c.personality,
        examples=c.examples, creator_notes=c.creator_notes, portrait=c.portrait,
        portrait_type=png.picture_type(c.portrait) if c.portrait else "", spec=c.card.spec,
        card={"spec": c.card.spec, "data": c.card.data}, book_key=books[c.book].key if c.book is not None else "",
        position=start + number) for number, c in enumerate(plan.characters)])
    written.characters += [{"key": c.key, "name": c.name} for c in plan.characters]


def _book_in_batches(campaign, book, written, writes, progress=None):
    """Write ``book`` as a keyed source, its entries in batches: a book of a thousand is a second of writing, far
    past one short transaction. Return the source."""
    source = staging.transact(lambda: _book(campaign, book, written), writes)
    parsed = list(enumerate(lorebooks.parsed_entries(source)))
    staging.in_batches(parsed, lambda chunk: lorebooks.add_entries(source, chunk), writes=writes, progress=progress)
    return source


def _book(campaign, book, written):
    try:
        source = importer.import_keyed(campaign, book.file, book.converted.book, book.level, lore_scope=book.scope,
                                       key=book.key, entries=False)
    except importer.ImportRefused as refusal:
        raise ImportRefused(str(refusal)) from None
    written.entries += [{"id": f"{source.lore_book}:{lore.entry_id(entry.uid)}", "book": source.title,
                         "keys": list(entry.keys), "constant": entry.constant}
                        for entry in book.entries]
    return source


def _note_and_memory(campaign, plan):
    if plan.note is not None and plan.note["text"].strip():
        AuthorNote.objects.create(campaign=campaign, text=plan.note["text"], depth=plan.note["depth"],
                                  interval=plan.note["interval"], role=plan.note["role"])
    if plan.memory.strip():
        try:
            importer.import_source(campaign, "memory.md", plan.memory.encode(), "canon", always_include=True,
                                   notes="A Kobold save's memory: always in force.")
        except importer.ImportRefused as refusal:
            raise ImportRefused(str(refusal)) from None


# --- the story ----------------------------------------------------------------------------------------------------


@dataclass
class _Row:
    """One node to write: its depth on its line, its role and mode, its versions (the first on the line)."""

    depth: int
    role: str
    mode: str
    versions: list  # texts, in the order they were written; ``chosen`` is on the line
    chosen: int = 0
    note: str = ""
    source: str = ""  # the file it came from, for its context snapshot
    counts: list = field(default_factory=list)


def _story_rows(plan, *, greetings=True):
    """Return the lines of story to write: [[_Row…] per line], the first becoming the campaign's own."""
    lines = []
    if plan.lines:
        for line in plan.lines:
            rows, depth = [], 1
            for turn in line.turns:
                rows.append(_Row(depth, Node.Role.PLAYER, Node.Mode.DO if turn.action else Node.Mode.CONTINUE,
                                 [turn.action], note=turn.action_note, source=line.file))
                rows.append(_Row(depth + 1, Node.Role.NARRATOR, "", list(turn.reply), turn.chosen, turn.note,
                                 line.file))
                depth += 2
            lines.append(rows)
    elif greetings and plan.greetings:
        lines.append([_Row(1, Node.Role.PLAYER, Node.Mode.CONTINUE, [""]),
                      _Row(2, Node.Role.NARRATOR, "", [text for _, text in plan.greetings], 0,
                           source="greetings")])
    for rows in lines:  # counted before any transaction opens: tokenising thousands of messages takes a while
        for row in rows:
            row.counts = [context.node_tokens(row.role, row.mode, text) for text in row.versions]
    return lines


def _write_story(campaign, root, lines, writes, progress):
    """Write ``lines`` of the staged ``campaign`` in batches; return the head (the first line's tip) or None."""
    head = None
    opening = Node.objects.get(campaign=campaign, depth=0)
    for number, rows in enumerate(lines):
        branch = root if number == 0 else staging.transact(
            lambda: Branch.objects.create(campaign=campaign, parent_id=root, fork_depth=0).pk, writes)
        tip = _write_rows(campaign, branch, rows, 0, opening.tokens_through, writes=writes, progress=progress)
        head = head or tip
    return head


def _write_rows(campaign, branch, rows, fork, through, *, writes=None, progress=None):
    """Write one line's ``rows`` on ``branch`` (its other versions on branches of their own) and return its tip.

    Inside the caller's transaction when ``writes`` is None (one campaign's
    addition); else each batch in a short transaction of its own, counted in
    ``writes`` (a staged campaign).
    """
    # Branches first (each version but the chosen one has its own, forked just before it), then the nodes in
    # version order, so each group's ids run in the order its versions were written.
    wanted = [(row, index) for row in rows for index in range(len(row.versions)) if index != row.chosen]
    made = {}

    def branches(chunk):
        first = Branch.next_number(campaign.pk)  # a bulk create does not call save(), which numbers one
        created = Branch.objects.bulk_create([Branch(campaign_id=campaign.pk, parent_id=branch, number=first + n,
                                                     fork_depth=row.depth - 1) for n, (row, _) in enumerate(chunk)])
        made.update({(id(row), index): b.pk for (row, index), b in zip(chunk, created)})

    nodes, snapshots = [], []
    for row in rows:
        parent = through
        for index, text in enumerate(row.versions):
            on_line = index == row.chosen
            nodes.append((row, index, text, parent + row.counts[index], on_line))
        through = parent + row.counts[row.chosen]
    _run(wanted, branches, writes, progress)

    def write(chunk):
        created = Node.objects.bulk_create([
            Node(campaign_id=campaign.pk, branch_id=branch if on_line else made[(id(row), index)], depth=row.depth,
                 role=row.role, mode=row.mode, text=text, note=row.note if on_line else "",
                 tokens=row.counts[index], tokens_through=total)
            for row, index, text, total, on_line in chunk])
        ContextSnapshot.objects.bulk_create([
            ContextSnapshot(node=node, report=_imported(row), model=IMPORTED, api=IMPORTED)
            for node, (row, *_rest) in zip(created, chunk) if row.role == Node.Role.NARRATOR])

    _run(nodes, write, writes, progress)
    return (branch, rows[-1].depth) if rows else None


def _run(items, write, writes, progress):
    if writes is None:
        if items:
            write(items)
        if progress is not None:
            progress(len(items))
        return
    staging.in_batches(items, write, writes=writes, progress=progress)


def _imported(row):
    """Return the context snapshot of an imported reply: it says where the reply came from, and that no narrator
    here was asked for it."""
    return {"version": builder.REPORT_VERSION, "imported": {"from": row.source}}


def rows_of(plan):
    """Return about how many rows writing ``plan`` takes beyond its world (the progress page's total)."""
    swipes = plan.swipe_count
    nodes = 2 * plan.turn_count + swipes + (1 + len(plan.greetings) if not plan.lines and plan.greetings else 0)
    return nodes + swipes
