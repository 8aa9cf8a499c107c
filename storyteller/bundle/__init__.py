"""Campaign export and import: one JSON bundle, optionally zipped (seed 003 §51-§53; the format is docs/bundle.md).

A bundle holds one section per app. ``campaigns``: the campaign's settings,
the whole story tree (branches, nodes, the context snapshot of every reply),
save points, canon rules and the story state (events, records, recorder
runs). ``memory``: the memories with their flags and use counts, what the
memory step did after each reply, and the story's summaries that are usable
now — a summary the person typed is theirs, not a cache, so it must survive
the move; each is fingerprinted again against the imported story.
``knowledge``: every source's text with its class, flags and notes. Derived
data is left out and rebuilt: passages are re-cut from the text and
re-embedded after the import; memories are ranked on their words until the
memory step's next pass embeds them again.

A bundle is untrusted data, whoever made it (issue 10). The importer reads
only the fields the format names (``rows``), never an id or a foreign key:
rows refer to each other by their position in the bundle, every row gets a
new id, and every link points at a row the same import created, under a new
campaign owned by the person importing. Every value is checked as the forms
check it, and the story's shape (one root, each node after its parent, the
head on a node) before anything is written. The bytes are read at a bounded
cost (``reading``), all the slow work (parsing, checking, cutting passages)
happens before the first write; the rows are written staged, in short
transactions (``campaigns.staging``), and the campaign appears only once
whole; the vectors are rebuilt after it.
The checksum finds corruption; it proves nothing, since anyone can compute it.
"""

import base64
import hashlib
import io
import json
import re
import zipfile
from dataclasses import dataclass

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.db.models import BinaryField, DateTimeField
from django.utils import timezone

from campaigns import lineage, staging
from campaigns.forms import CampaignForm
from campaigns.models import Branch, Campaign, Node
from campaigns.state.world import lore
from knowledge import importer, lorebooks, worldinfo
from knowledge.models import TEXT_CHARS, Source
from memory import checkpoints, recall_index
from memory.models import Checkpoint

from .. import context
from . import rows
from .reading import MEMBER, BundleRefused, checksum, load, refuse

__all__ = ["BundleRefused", "checksum", "dumps", "export_campaign", "import_bundle", "max_bytes", "prepare", "write"]

FORMAT = "storyteller-campaign"
# Version 2 links a state line that supersedes a canon rule to the rule's row
# (version 1 named the rule by its database id, which means nothing elsewhere).
VERSION = 2
READABLE = (1, 2)
TOP_LEVEL = {"format", "version", "exported_at", "checksum", "sections"}
IMPORTED = re.compile(r" \(imported \d{4}-\d{2}-\d{2}\)$")


def max_bytes():
    """Return the largest bundle, zipped or inflated, an import reads (STORYTELLER_BUNDLE_MAX_MB)."""
    return settings.STORYTELLER_BUNDLE_MAX_BYTES


def export_campaign(campaign):
    """Return the bundle of ``campaign`` as a JSON-ready dict."""
    positions = {}
    sections = {"campaigns": {"campaign": None}, "memory": {}, "knowledge": {}}
    for table in rows.TABLES:
        sections[table.section][table.name] = _export_table(campaign, table, positions)
    values = {name: getattr(campaign, name) for name in rows.CAMPAIGN_FIELDS}
    sections["campaigns"]["campaign"] = values | {"head_branch": positions["branches"][campaign.head_branch_id]}
    sections = json.loads(json.dumps(sections, cls=DjangoJSONEncoder))
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": timezone.now().isoformat(),
        "checksum": checksum(sections),
        "sections": sections,
    }


def dumps(campaign, *, zipped=False):
    """Return the bundle of ``campaign`` as bytes: JSON, or a zip holding it as campaign.json."""
    data = json.dumps(export_campaign(campaign), ensure_ascii=False, indent=1).encode()
    if not zipped:
        return data
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(MEMBER, data)
    return buffer.getvalue()


def import_bundle(owner, data, *, progress=None, writes=None):
    """Create a new campaign for ``owner`` from a bundle (bytes or a binary file) and return it; rebuild its
    vectors after.

    Raise BundleRefused, saying in words what is wrong, with nothing written.
    Slow: run it off the event loop and off the database thread (``importing``).
    """
    return write(owner, prepare(data), progress=progress, writes=writes)


def prepare(data):
    """Return the checked Bundle of ``data`` with its sources' passages cut: all the work before any write."""
    bundle = read(data)
    bundle.passages = [importer.cut(row.values["text"], row.values["filename"], keyed=row.values.get("keyed", False))
                       for row in bundle.tables["sources"]]
    return bundle


def write(owner, bundle, *, progress=None, writes=None):
    """Write a prepared bundle as a new campaign of ``owner``, staged and in short transactions
    (``campaigns.staging``), ``progress(rows)`` told after each; publish it, rebuild what is derived, return it."""
    campaign, sources = _write(owner, bundle, progress or (lambda rows: None), writes)
    recall_index.sync(campaign.pk)  # derived: rebuilt from the records (its vectors at the next minds step)
    for source in sources:
        importer.embed_source(source)
    return campaign


@dataclass
class Bundle:
    version: int
    campaign: rows.Row
    tables: dict  # table name -> [rows.Row]
    passages: list = None  # each source's passages, cut before the write
    created: dict = None  # table name -> the rows the write created, in the bundle's order

    @property
    def rows(self):
        """Return how many rows the write stores (a progress's total)."""
        return 1 + sum(len(checked) for checked in self.tables.values())


def read(data):
    """Return the checked contents of a bundle (bytes or a binary file), or refuse in words; nothing is written."""
    bundle = load(data, max_bytes())
    if not isinstance(bundle, dict) or bundle.get("format") != FORMAT:
        refuse("This is not a Storyteller campaign bundle (it does not say “format”: “storyteller-campaign”).")
    if bundle.get("version") not in READABLE:
        refuse(f"This bundle has format version {str(bundle.get('version'))[:20]}; this Storyteller reads versions "
               f"{' and '.join(map(str, READABLE))}. Export it again from an up-to-date Storyteller.")
    unknown = set(bundle) - TOP_LEVEL
    if unknown:
        refuse(f"The bundle has a field “{sorted(unknown)[0][:60]}” that is not part of the bundle format.")
    sections = bundle.get("sections")
    if not isinstance(sections, dict) or bundle.get("checksum") != checksum(sections):
        refuse("The bundle's checksum does not match its contents: it was changed or damaged after it was exported.")
    for name, section in sections.items():
        if name not in rows.SECTIONS or not isinstance(section, dict):
            refuse(f"The bundle has a section “{name[:60]}” that is not part of the bundle format.")
        for table in section:
            if table not in rows.SECTIONS[name]:
                refuse(f"The bundle's {name} section has a table “{table[:60]}” that is not part of the format.")
    listed = {table.name: sections.get(table.section, {}).get(table.name, []) for table in rows.TABLES}
    sizes = {name: len(value) if isinstance(value, list) else 0 for name, value in listed.items()}
    rows.check_sizes(sizes)
    campaign = rows.check_campaign(sections.get("campaigns", {}).get("campaign"), sizes)
    _check_campaign_form(campaign)
    tables = {table.name: rows.check_table(table, listed[table.name], sizes) for table in rows.TABLES}
    result = Bundle(bundle["version"], campaign, tables)
    _Story(result).check()
    _check_sources(tables["sources"])
    return result


def _check_campaign_form(campaign):
    """Refuse settings the campaign form refuses (the reply reserve, the budget's floor) in its own words."""
    form = CampaignForm(data={name: campaign.values.get(name, Campaign._meta.get_field(name).get_default())
                              for name in CampaignForm.Meta.fields})
    if not form.is_valid():
        field, errors = next(iter(form.errors.items()))
        refuse(f"campaign ({field}): {' '.join(errors)}")


def _check_sources(sources):
    books = {}
    for index, row in enumerate(sources):
        where, values = f"sources row {index + 1}", row.values
        if values.get("keyed") and not values.get("lorebook"):
            refuse(f"{where} (keyed): only a lorebook's entries are found by their keys.")
        if values.get("lorebook") or values.get("lore_book"):
            _check_lorebook(where, values, books)
        if not values.get("keyed") and _suffix(values["filename"]) not in importer.EXTENSIONS:
            refuse(f"{where} (filename): {values['filename'][:80]} is not a .md or .txt file; only Markdown and plain "
                   "text sources can be imported.")
        if values.get("keyed") and len(values["text"]) > TEXT_CHARS:
            refuse(f"{where} (text) is longer than {TEXT_CHARS:,} characters, the limit for a lorebook.")
        if not values.get("keyed") and len(values["text"].encode()) > importer.MAX_BYTES:
            refuse(f"{where} (text) is larger than {importer.MAX_BYTES:,} bytes, the limit for a source.")
        if hashlib.sha256(values["text"].encode()).hexdigest() != values["content_hash"]:
            refuse(f"The text of “{values['title'][:80]}” does not match its SHA-256 in the bundle.")
        if values.get("always_include") and values["classification"] != Source.Classification.CANON:
            refuse(f"{where} (always_include): only Canon can be always included, and this source is "
                   f"{values['classification']}.")


def _check_lorebook(where, values, books):
    """Refuse a lorebook whose key is not one a lorebook could have, is another's, or whose text has no entries."""
    key = values.get("lore_book", "")
    if key and (key != lore.book_key(key) or key == lore.WORLD_BOOK):
        refuse(f"{where} (lore_book): {key[:60]!r} is not a lorebook's key (lower-case words joined by '-', and not "
               f"{lore.WORLD_BOOK!r}, the world file's).")
    if key in books:
        refuse(f"{where} (lore_book): {key[:60]!r} is the key of {books[key]} too; each lorebook has its own.")
    books[key] = where
    if values.get("lorebook"):
        if not key:
            refuse(f"{where} (lore_book): a lorebook needs its key, which its entries' knowledge names.")
        try:
            if values.get("keyed"):  # World Info JSON (storyteller.tavern), read as its entries are derived
                worldinfo.parse(values["text"], "It")
            else:
                lorebooks.parse(values["text"])
        except (lorebooks.LoreRefused, worldinfo.BookRefused) as refusal:
            refuse(f"{where} (text) cannot be a lorebook: {refusal}.")


def _suffix(filename):
    return "." + filename.rsplit(".", 1)[-1].lower() if "." in filename else ""


class _Story:
    """The shape every story has, checked on the bundle's rows before anything is written."""

    # A walk up the branch tree costs one step per branch passed; real stories
    # need thousands, a crafted tree could ask for billions.
    MAX_STEPS = 5_000_000

    def __init__(self, bundle):
        self.bundle = bundle
        self.tables = bundle.tables
        branches = self.tables["branches"]
        if not branches:
            refuse("The bundle has no branches; every campaign has at least the one its story starts on.")
        self.forks = [row.values.get("fork_depth", -1) for row in branches]
        self.parents = [row.links["parent"] for row in branches]
        self.depths = [set() for _ in branches]
        self.up = []
        self.steps = 0

    def check(self):
        self._branches()
        self._nodes()
        head = self.bundle.campaign
        if not self.on_line(head.links["head_branch"], head.values.get("head_depth", 0)):
            refuse("campaign (head): the campaign's head does not sit on a node of its branch's line.")
        for name in ("save_points", "memories", "checkpoints"):
            for index, row in enumerate(self.tables[name]):
                if not self.on_line(row.links["branch"], row.values["depth"]):
                    refuse(f"{name} row {index + 1} is anchored at depth {row.values['depth']}, where its branch's "
                           "line has no node.")
                self._range(name, index, row)
        self._replies()
        self._records()

    def _branches(self):
        if self.parents[0] is not None or self.forks[0] != -1:
            refuse("branches row 1 must be the story's first branch: no parent, fork_depth -1.")
        for index in range(1, len(self.forks)):
            if self.parents[index] is None or self.forks[index] < 0:
                refuse(f"branches row {index + 1} must fork from an earlier branch at a depth of 0 or more.")
        for index, fork in enumerate(self.forks):  # the nearest ancestor that forks shallower: see on_line
            above = self.parents[index]
            while above is not None and self.forks[above] >= fork:
                above = self._step(self.up[above])
            self.up.append(above)

    def _nodes(self):
        nodes = self.tables["nodes"]
        for index, row in enumerate(nodes):
            branch, depth, role = row.links["branch"], row.values["depth"], row.values["role"]
            where = f"nodes row {index + 1}"
            if depth <= self.forks[branch]:
                refuse(f"{where}: depth {depth} is not after its branch's fork (depth {self.forks[branch]}).")
            if depth in self.depths[branch]:
                refuse(f"{where}: its branch already has a node at depth {depth}.")
            expected = Node.Role.OPENING if depth == 0 else Node.Role.PLAYER if depth % 2 else Node.Role.NARRATOR
            if role != expected:
                refuse(f"{where}: a node at depth {depth} is the {expected}'s, not the {role}'s.")
            self.depths[branch].add(depth)
        for index, row in enumerate(nodes):
            if row.values["depth"] and not self.on_line(row.links["branch"], row.values["depth"] - 1):
                refuse(f"nodes row {index + 1}: there is no node before it (at depth {row.values['depth'] - 1}) "
                       "on its branch's line.")
        for index in range(1, len(self.forks)):
            if not self.depths[index] or not self.on_line(self.parents[index], self.forks[index]):
                refuse(f"branches row {index + 1} forks where its parent's line has no node, or holds no node.")

    def on_line(self, branch, depth):
        """Return whether the line of ``branch`` has a node at ``depth``.

        Depths up to a branch's fork belong to its ancestors; an ancestor that
        forks no shallower than the branch would hand them on again, so the
        walk jumps to the nearest one that forks shallower (``up``).
        """
        while branch is not None and depth <= self.forks[branch]:
            branch = self._step(self.up[branch])
        return branch is not None and depth in self.depths[branch]

    def _step(self, branch):
        self.steps += 1
        if self.steps > self.MAX_STEPS:
            refuse("The bundle's story tree is too tangled to check (its branches fork from one another too many "
                   "times over).")
        return branch

    def _range(self, name, index, row):
        start, end = row.values.get("source_start", 0), row.values.get("source_end")
        if end is not None and not (start or 0) <= end <= row.values["depth"]:
            refuse(f"{name} row {index + 1} covers depths {start}–{end}, which do not end at or before its anchor "
                   f"(depth {row.values['depth']}).")

    def _replies(self):
        nodes = self.tables["nodes"]
        for name in ("snapshots", "recorder_runs", "memory_runs"):
            seen = set()
            for index, row in enumerate(self.tables[name]):
                node = row.links["node"]
                if nodes[node].values["role"] != Node.Role.NARRATOR or node in seen:
                    refuse(f"{name} row {index + 1} must belong to a reply of its own (node row {node + 1} is not one,"
                           " or already has one).")
                seen.add(node)

    def _records(self):
        nodes, events, canon = self.tables["nodes"], self.tables["state_events"], self.tables["canon_rules"]
        for index, row in enumerate(self.tables["state_records"]):
            where = f"state_records row {index + 1}"
            node = nodes[events[row.links["event"]].links["node"]]
            if (row.links["branch"], row.values["depth"]) != (node.links["branch"], node.values["depth"]):
                refuse(f"{where} must sit where its event's node does.")
            superseding = row.values["kind"] == "superseded_canon"
            if row.values["slot"].startswith("canon:") != superseding:
                refuse(f"{where}: only a superseded canon rule sits in a “canon:” slot.")
            if superseding and row.links.get("canon_rule") is None:
                row.links["canon_rule"] = self._canon_by_text(where, row, canon)

    def _canon_by_text(self, where, row, canon):
        """Find the rule a version 1 record supersedes by its text (version 1 named it by a foreign id)."""
        text = (row.values.get("data") or {}).get("canon")
        found = next((i for i, rule in enumerate(canon) if rule.values["text"] == text), None)
        if found is None or self.bundle.version != 1:
            refuse(f"{where} supersedes a canon rule the bundle does not carry.")
        return found


def _export_table(campaign, table, positions):
    """Return the rows of ``table`` for ``campaign``, recording each row's position for the links after it."""
    found = list(table.model.objects.filter(**{table.scope: campaign}, **table.only).order_by("pk"))
    if table.model is Checkpoint:
        found = _usable(campaign, found)
    positions[table.name] = {row.pk: index for index, row in enumerate(found)}
    exported = []
    binary = [f.name for f in table.model._meta.fields if f.name in table.fields and isinstance(f, BinaryField)]
    for row in found:
        values = {name: getattr(row, name) for name in table.fields}
        for name in binary:  # a portrait: base64 text in the bundle
            values[name] = base64.b64encode(bytes(values[name] or b"")).decode("ascii")
        for link, (target, _) in table.links.items():
            values[link] = _link(row, link, target, positions)
        if table.name == "sources":
            values[rows.SOURCE_LABEL] = row.pk
        exported.append(values)
    return exported


def _link(row, link, target, positions):
    if link == "canon_rule":  # a superseded rule is named in the record's subject (state.events._supersede)
        return positions[target].get(int(row.subject)) if row.kind == "superseded_canon" else None
    pk = getattr(row, f"{link}_id")
    return None if pk is None else positions[target][pk]


def _usable(campaign, found):
    """Keep the summaries usable now; an unusable one is a cache the next turn rebuilds."""
    prefix = context.prefix_hash(campaign)
    return [checkpoint for checkpoint in found
            if not checkpoints.problem(checkpoint, lineage.path_at(campaign.pk, checkpoint.branch_id,
                                                                   checkpoint.depth), prefix, fresh=True)]


def _write(owner, bundle, progress, writes):
    """Create every row of ``bundle`` under a new, staged campaign of ``owner``, table by table in short
    transactions; publish it once whole (a failure discards it); return it and its sources."""
    values = bundle.campaign.values
    settings_only = {k: v for k, v in values.items() if k not in ("head_depth", "created_at", "updated_at")}
    campaign = staging.transact(lambda: Campaign.objects.create(
        owner=owner, staged=True, **settings_only | {"title": marked(values["title"])}), writes)
    progress(1)
    try:
        sources = _write_rows(campaign, bundle, progress, writes)
        head = bundle.campaign.links["head_branch"]
        staging.transact(lambda: Campaign.every.filter(pk=campaign.pk).update(
            head_branch=bundle.created["branches"][head], head_depth=values.get("head_depth", 0),
            created_at=values.get("created_at") or campaign.created_at,
            updated_at=values.get("updated_at") or campaign.updated_at), writes)
        campaign.refresh_from_db()
        _write_checkpoints(campaign, bundle.tables["checkpoints"], bundle.created, progress, writes)
        return staging.publish(campaign), sources
    except BaseException:
        staging.discard(campaign.pk, writes)
        raise


def _write_rows(campaign, bundle, progress, writes):
    created = bundle.created = {"branches": []}

    def branches(batch):
        for row in batch:
            parent = row.links["parent"]
            created["branches"].append(Branch.objects.create(
                campaign=campaign, parent=None if parent is None else created["branches"][parent],
                fork_depth=row.values.get("fork_depth", -1), name=row.values.get("name", "")))
        _restore_times(Branch, batch, created["branches"][-len(batch):])

    staging.in_batches(bundle.tables["branches"], branches, writes=writes, progress=progress)
    created["nodes"] = _create(rows.BY_NAME["nodes"], bundle.tables["nodes"], created, campaign, progress, writes)
    sources, renumber = _write_sources(campaign, bundle.tables["sources"], bundle.passages, progress, writes)
    for row in bundle.tables["snapshots"]:
        renumber(row.values.get("report") or {})
    for name in ("snapshots", "save_points", "canon_rules", "author_notes", "character_cards", "state_events"):
        created[name] = _create(rows.BY_NAME[name], bundle.tables[name], created, campaign, progress, writes)
    for row in bundle.tables["state_records"]:
        rule = row.links.pop("canon_rule", None)
        if rule is not None:
            pk = created["canon_rules"][rule].pk
            row.values |= {"slot": f"canon:{pk}", "subject": str(pk)}
    for name in ("state_records", "recorder_runs", "rounds", "memories", "memory_runs", "recall_uses",
                 "table_actions", "table_rounds", "narration_parts", "round_proposals"):
        created[name] = _create(rows.BY_NAME[name], bundle.tables[name], created, campaign, progress, writes)
    return sources


def marked(title):
    """Return ``title`` marked as imported today, so an import stands apart from the campaign it copies."""
    suffix = f" (imported {timezone.localdate():%Y-%m-%d})"
    title = IMPORTED.sub("", title)
    return title[:Campaign._meta.get_field("title").max_length - len(suffix)] + suffix


def _create(table, checked, created, campaign, progress, writes):
    """Bulk-create the rows of ``table`` in short transactions, each link resolved to a row this import created;
    return them."""
    fixed = {"campaign": campaign} if any(f.name == "campaign" for f in table.model._meta.fields) else {}
    objects = [table.model(**fixed, **row.values, **{link: created[table.links[link][0]][position]
                                                     for link, position in row.links.items() if position is not None})
               for row in checked]

    def batch(pairs):
        table.model.objects.bulk_create([obj for _, obj in pairs], batch_size=500)
        _restore_times(table.model, [row for row, _ in pairs], [obj for _, obj in pairs])

    staging.in_batches(list(zip(checked, objects)), batch, writes=writes, progress=progress)
    return objects


def _restore_times(model, checked, objects):
    """Put back creation and update times, which auto_now(_add) overwrote on insert.

    One UPDATE joined to a list of (id, time) per batch: bulk_update's CASE
    expressions took 4 of the 8 seconds a 2,000-turn import held the write
    lock for (bench "imports").
    """
    table = connection.ops.quote_name(model._meta.db_table)
    for field in model._meta.concrete_fields:
        if not (isinstance(field, DateTimeField) and (field.auto_now or field.auto_now_add)):
            continue
        pairs = [(obj.pk, connection.ops.adapt_datetimefield_value(row.values[field.attname]))
                 for row, obj in zip(checked, objects) if row.values.get(field.attname)]
        column = connection.ops.quote_name(field.column)
        with connection.cursor() as cursor:
            for start in range(0, len(pairs), 500):
                batch = pairs[start:start + 500]
                cursor.execute(f"UPDATE {table} SET {column} = times.column2 FROM (VALUES "
                               f"{', '.join(['(%s, %s)'] * len(batch))}) AS times WHERE {table}.id = times.column1",
                               [value for pair in batch for value in pair])


def _write_sources(campaign, checked, passages, progress, writes):
    """Create the sources from their text and passages cut beforehand; return them and the prompt-record renumbering.

    A prompt record names sources and passages by the exporting install's
    numbers; each is renumbered to the source this import created with the
    same label, or emptied when there is none: a record never keeps a number
    that could name someone else's row.
    """
    sources, by_label, passage_ids = [], {}, {}
    for row, chunks in zip(checked, passages):
        fields = {k: v for k, v in row.values.items() if k != "imported_at"}

        def restore():
            source = importer.restore_source(campaign, chunks=chunks, **fields)
            if row.values.get("imported_at"):
                Source.objects.filter(pk=source.pk).update(imported_at=row.values["imported_at"])
            return source

        source = staging.transact(restore, writes)
        progress(1)
        sources.append(source)
        if row.label is not None:
            by_label[row.label] = source.pk
        passage_ids |= {(source.pk, index): pk for index, pk in source.passages.values_list("index", "pk")}
    old_passages = {}

    def renumber(report):
        knowledge = report.get("knowledge")
        if not isinstance(knowledge, dict):
            return
        if isinstance(knowledge.get("sources"), list):
            knowledge["sources"] = [by_label[pk] for pk in map(_number, knowledge["sources"]) if pk in by_label]
        entries = [*_objects(knowledge.get("used")), *_objects(knowledge.get("standing"))]
        entries += [c for s in _objects(report.get("sections")) for c in _objects(s.get("components"))
                    if c.get("type") == "knowledge_passage"]
        for entry in entries:
            source = by_label.get(_number(entry.get("source")))
            new = passage_ids.get((source, _number(entry.get("chunk"))))
            old_passages.setdefault(_number(entry.get("id")), new)
            entry["source"], entry["id"] = source, new
        for item in [*_objects(knowledge.get("dropped")), *_objects(report.get("dropped"))]:
            if "source" in item or "passage" in item:
                item["source"] = by_label.get(_number(item.get("source")))
                item["passage"] = old_passages.get(_number(item.get("passage"))) if item["source"] else None

    return sources, renumber


def _number(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _objects(value):
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _write_checkpoints(campaign, checked, created, progress, writes):
    """Create the carried summaries and fingerprint them against the imported story and its stable prefix.

    The fingerprint is computed here, from the story as imported: whatever
    the bundle claims, a summary is usable only on the story it now sits in.
    """
    objects = _create(rows.BY_NAME["checkpoints"], checked, created, campaign, progress, writes)
    prefix = context.prefix_hash(campaign)
    for checkpoint in objects:
        path = lineage.path_at(campaign.pk, checkpoint.branch_id, checkpoint.depth)
        checkpoint.stable_prefix_hash = prefix
        checkpoint.source_hash = checkpoints.source_hash(path, checkpoint.source_end, prefix)
    staging.in_batches(objects, lambda batch: Checkpoint.objects.bulk_update(
        batch, ["stable_prefix_hash", "source_hash"], batch_size=500), writes=writes)

