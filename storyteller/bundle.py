"""Campaign export and import: one JSON bundle, optionally zipped (seed 003 §51-§53).

A bundle holds one section per app. ``campaigns``: the campaign's settings,
the whole story tree (branches, nodes, the context snapshot of every reply),
save points, canon rules and the story state (events, records, recorder
runs). ``memory``: the memories with their flags and use counts, what
the memory step did after each reply, and the story's summaries that are
usable now — a summary the person typed is theirs, not a cache, so it must
survive the move; each is fingerprinted again against the imported story,
whose node ids differ. ``knowledge``: every source's text
with its class, flags and notes. Derived data is left out and rebuilt:
passages are re-cut from the text by the same deterministic chunking and
re-embedded after the import; memories are ranked on their words until the
memory step's next pass (after a turn, or its "rebuild embeddings") embeds
them again.

Rows refer to each other by their position in their table, never by
database ids, so a bundle imports into any install. A SHA-256 over the
sections detects a bundle changed after export; a malformed, tampered or
inconsistent bundle is refused and the import, being one transaction, leaves
nothing behind.
"""

import hashlib
import io
import json
import zipfile

from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, transaction
from django.db.models import DateTimeField
from django.utils import timezone

from campaigns import lineage
from campaigns.models import (
    Branch,
    Campaign,
    CanonRule,
    ContextSnapshot,
    Node,
    RecorderRun,
    SavePoint,
    StateEvent,
    StateRecord,
)
from knowledge import importer
from knowledge.models import Source
from memory import checkpoints
from memory.models import Checkpoint, Memory, MemoryRun

from . import context

FORMAT = "storyteller-campaign"
VERSION = 1
MEMBER = "campaign.json"

# A 2,000-turn story with its snapshots is a few tens of MiB of JSON; this
# bounds what an import will read, zipped or not, well above any real story.
MAX_BYTES = 256 * 1024 * 1024

# Tables of the campaigns section, in an order where every reference points
# back to a table (or an earlier row of the same table) already written.
# Each maps a foreign key to the table it points into; None drops the link
# (a user of this install means nothing in another).
CAMPAIGN_TABLES = [
    ("branches", Branch, "campaign", {"parent": "branches"}),
    ("nodes", Node, "campaign", {"branch": "branches"}),
    ("snapshots", ContextSnapshot, "node__campaign", {"node": "nodes"}),
    ("save_points", SavePoint, "campaign", {"branch": "branches"}),
    ("canon_rules", CanonRule, "campaign", {}),
    ("state_events", StateEvent, "campaign", {"node": "nodes", "author": None}),
    ("state_records", StateRecord, "campaign", {"branch": "branches", "event": "state_events"}),
    ("recorder_runs", RecorderRun, "node__campaign", {"node": "nodes"}),
]
# The memory section points into the campaigns section's branches and nodes.
MEMORY_TABLES = [
    ("memories", Memory, "campaign", {"branch": "branches"}),
    ("memory_runs", MemoryRun, "campaign", {"node": "nodes"}),
]
CHECKPOINT_LINKS = {"branch": "branches"}
TABLES = {"campaigns": CAMPAIGN_TABLES, "memory": MEMORY_TABLES}
# Vectors (MemoryVector, the passages' columns) are a cache of the text and
# are not listed: they are rebuilt after import, never carried (seed 003 §53).
CAMPAIGN_EXCLUDED = {"id", "owner", "head_branch"}
SOURCE_FIELDS = ["title", "filename", "classification", "enabled", "hidden", "always_include", "notes", "text",
                 "content_hash", "size_bytes", "parser_version", "chunking_version", "imported_at"]


class BundleRefused(Exception):
    """The bundle was not imported; the message says why. Nothing was written."""


def export_campaign(campaign):
    """Return the bundle of ``campaign`` as a JSON-ready dict."""
    positions = {}
    sections = json.loads(json.dumps({
        "campaigns": _export_campaigns(campaign, positions),
        "memory": _export_tables(campaign, MEMORY_TABLES, positions) | _export_checkpoints(campaign, positions),
        "knowledge": _export_knowledge(campaign),
    }, cls=DjangoJSONEncoder))
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": timezone.now().isoformat(),
        "checksum": _checksum(sections),
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


def import_bundle(owner, data, *, embed=True):
    """Create a new campaign for ``owner`` from bundle bytes and return it; rebuild its vectors after (``embed``).

    Raise BundleRefused, with nothing written, for anything but an intact bundle.
    """
    bundle = _parse(data)
    sections = bundle["sections"]
    try:
        with transaction.atomic():
            campaign, created = _import_campaigns(owner, sections["campaigns"])
            _import_tables(campaign, sections["memory"], MEMORY_TABLES, created)
            sources = _import_knowledge(campaign, sections["knowledge"])
            _renumber_knowledge_in_reports(created["nodes"], sources)
            _import_checkpoints(campaign, sections["memory"].get("checkpoints", []), created)
    except BundleRefused:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, IntegrityError) as error:
        raise BundleRefused(f"The bundle is not consistent ({type(error).__name__}: {error}). Nothing was "
                            "imported.") from error
    for source in sources.values() if embed else ():
        importer.embed_source(source)
    return campaign


def _parse(data):
    if len(data) > MAX_BYTES:
        raise BundleRefused(f"The bundle is {len(data):,} bytes; at most {MAX_BYTES:,} can be imported.")
    if data[:2] == b"PK":
        data = _unzip(data)
    try:
        bundle = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BundleRefused(f"This is not a campaign bundle: it is not valid JSON ({error}). Nothing was "
                            "imported.") from error
    if not isinstance(bundle, dict) or bundle.get("format") != FORMAT:
        raise BundleRefused("This is not a Storyteller campaign bundle. Nothing was imported.")
    if bundle.get("version") != VERSION:
        raise BundleRefused(f"This bundle has format version {bundle.get('version')!r}; this Storyteller reads "
                            f"version {VERSION}. Nothing was imported.")
    sections = bundle.get("sections")
    if not isinstance(sections, dict) or bundle.get("checksum") != _checksum(sections):
        raise BundleRefused("The bundle's checksum does not match its contents: it was changed or damaged after "
                            "it was exported. Nothing was imported.")
    return bundle


def _unzip(data):
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            info = archive.getinfo(MEMBER)
            if info.file_size > MAX_BYTES:
                raise BundleRefused(f"The zipped bundle unpacks to {info.file_size:,} bytes; at most "
                                    f"{MAX_BYTES:,} can be imported.")
            return archive.read(MEMBER)
    except (zipfile.BadZipFile, KeyError) as error:
        raise BundleRefused(f"This zip is not a campaign bundle ({error}); it must hold {MEMBER}. "
                            "Nothing was imported.") from error


def _checksum(sections):
    canonical = json.dumps(sections, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _export_campaigns(campaign, positions):
    section = {"campaign": {f.attname: getattr(campaign, f.attname) for f in Campaign._meta.concrete_fields
                            if f.name not in CAMPAIGN_EXCLUDED}}
    section |= _export_tables(campaign, CAMPAIGN_TABLES, positions)
    section["campaign"]["head_branch"] = positions["branches"].get(campaign.head_branch_id)
    return section


def _export_tables(campaign, tables, positions):
    """Return {table: rows} for ``tables``, recording each row's position in ``positions`` for later links."""
    section = {}
    for name, model, scope, links in tables:
        rows = list(model.objects.filter(**{scope: campaign}).order_by("pk"))
        positions[name] = {row.pk: index for index, row in enumerate(rows)}
        section[name] = [_row(row, links, positions) for row in rows]
    return section


def _fields(model):
    return {f.attname for f in model._meta.concrete_fields}


def _row(row, links, positions):
    values = {}
    for field in row._meta.concrete_fields:
        if field.name in ("id", "campaign"):
            continue
        if field.name in links:
            if links[field.name] is not None:
                target = getattr(row, field.attname)
                values[field.name] = None if target is None else positions[links[field.name]][target]
            continue
        values[field.attname] = getattr(row, field.attname)
    return values


def _import_campaigns(owner, section):
    fields = {f.attname for f in Campaign._meta.concrete_fields if f.name not in CAMPAIGN_EXCLUDED}
    values = {key: value for key, value in section["campaign"].items() if key in fields}
    campaign = Campaign.objects.create(owner=owner, **values)
    created = {}
    _import_tables(campaign, section, CAMPAIGN_TABLES, created)
    head = section["campaign"]["head_branch"]
    Campaign.objects.filter(pk=campaign.pk).update(
        head_branch=created["branches"][head] if head is not None else None,
        created_at=values.get("created_at") or campaign.created_at,
        updated_at=values.get("updated_at") or campaign.updated_at,
    )
    campaign.refresh_from_db()
    return campaign, created


def _import_tables(campaign, section, tables, created):
    for name, model, scope, links in tables:
        created[name] = _create(model, section.get(name, []), links, created, campaign, scoped=scope == "campaign")


def _create(model, rows, links, created, campaign, *, scoped):
    names = _fields(model) | set(links)
    objects = []
    for row in rows:
        unknown = set(row) - names
        if unknown:
            raise BundleRefused(f"The bundle has fields this Storyteller does not know ({sorted(unknown)}); "
                                "it may come from a newer version. Nothing was imported.")
        values = {key: value for key, value in row.items() if key not in links}
        for key, table in links.items():
            if table is not None and row.get(key) is not None:
                pool = objects if table_of(model) == table else created[table]
                values[key] = pool[row[key]]
        if scoped:
            values["campaign"] = campaign
        obj = model(**values)
        if model is Branch:  # a branch's parent is an earlier branch: write them one by one
            obj.save()
        objects.append(obj)
    if model is not Branch:
        model.objects.bulk_create(objects, batch_size=500)
    _restore_timestamps(model, rows, objects)
    return objects


def table_of(model):
    """Return the bundle table ``model`` is written to, or None for one written on its own (checkpoints)."""
    found = (name for tables in TABLES.values() for name, table_model, _, _ in tables if table_model is model)
    return next(found, None)


def _restore_timestamps(model, rows, objects):
    """Put back creation and update times, which auto_now(_add) overwrote on insert."""
    stamped = [f for f in model._meta.concrete_fields if isinstance(f, DateTimeField) and (f.auto_now or
                                                                                           f.auto_now_add)]
    if not stamped or not objects:
        return
    for row, obj in zip(rows, objects):
        for field in stamped:
            if row.get(field.attname):
                setattr(obj, field.attname, field.to_python(row[field.attname]))
    model.objects.bulk_update(objects, [field.attname for field in stamped], batch_size=500)


def _export_checkpoints(campaign, positions):
    """Return {"checkpoints": rows} for the summaries usable now; an unusable one is a cache the next turn rebuilds."""
    prefix = context.prefix_hash(campaign)
    usable = [checkpoint for checkpoint in Checkpoint.objects.filter(campaign=campaign).order_by("pk")
              if not checkpoints.problem(checkpoint, lineage.path_at(campaign.pk, checkpoint.branch_id,
                                                                     checkpoint.depth), prefix, fresh=True)]
    return {"checkpoints": [_row(checkpoint, CHECKPOINT_LINKS, positions) for checkpoint in usable]}


def _import_checkpoints(campaign, rows, created):
    """Create the carried summaries and fingerprint them against the imported story and its stable prefix.

    They were usable when exported, and the bundle's checksum says the story
    they cover is the one exported, so only the ids they were hashed with changed.
    """
    objects = _create(Checkpoint, rows, CHECKPOINT_LINKS, created, campaign, scoped=True)
    prefix = context.prefix_hash(campaign)
    for checkpoint in objects:
        path = lineage.path_at(campaign.pk, checkpoint.branch_id, checkpoint.depth)
        checkpoint.stable_prefix_hash = prefix
        checkpoint.source_hash = checkpoints.source_hash(path, checkpoint.source_end, prefix)
    Checkpoint.objects.bulk_update(objects, ["stable_prefix_hash", "source_hash"], batch_size=500)


def _export_knowledge(campaign):
    sources = Source.objects.filter(campaign=campaign).order_by("pk")
    return {"sources": [{"id": source.pk, **{name: getattr(source, name) for name in SOURCE_FIELDS}}
                        for source in sources]}


def _import_knowledge(campaign, section):
    restored = {}
    for row in section["sources"]:
        if hashlib.sha256(row["text"].encode()).hexdigest() != row["content_hash"]:
            raise BundleRefused(f"The text of “{row['title']}” does not match its SHA-256 in the bundle. "
                                "Nothing was imported.")
        fields = {name: row[name] for name in SOURCE_FIELDS if name != "imported_at"}
        source = importer.restore_source(campaign, **fields)
        Source.objects.filter(pk=source.pk).update(imported_at=row["imported_at"])
        restored[row["id"]] = source
    return restored


def _renumber_knowledge_in_reports(nodes, sources):
    """Point the knowledge in restored prompt reports at the restored sources and passages.

    The text each prompt was given is kept verbatim; only the ids that link a
    turn to "its" source change, so the source pages still count their turns.
    """
    new = {old: source.pk for old, source in sources.items()}
    passages = {}
    for source in sources.values():
        for index, pk in source.passages.values_list("index", "pk"):
            passages[(source.pk, index)] = pk
    snapshots = list(ContextSnapshot.objects.filter(node__in=nodes))
    for snapshot in snapshots:
        knowledge = snapshot.report.get("knowledge")
        if not knowledge:
            continue
        knowledge["sources"] = [new[pk] for pk in knowledge.get("sources", []) if pk in new]
        entries = [*knowledge.get("used", []), *knowledge.get("standing", [])]
        entries += [c for s in snapshot.report.get("sections", []) for c in s.get("components", [])
                    if c.get("type") == "knowledge_passage"]
        for entry in entries:
            if entry.get("source") in new:
                entry["source"] = new[entry["source"]]
                entry["id"] = passages.get((entry["source"], entry.get("chunk")), entry.get("id"))
    ContextSnapshot.objects.bulk_update(snapshots, ["report"], batch_size=200)
