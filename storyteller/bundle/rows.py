"""The bundle format's tables: which fields each row may carry, and how each value is checked (docs/bundle.md).

A row names only the fields listed here. Plain fields are checked against the
model field they are written to, as the forms check them: JSON type first
(text is a string, a count is a whole number, never ``true``), then the
field's own rules (lengths, choices, ranges, the text limits of issue 10).
A link is the position of a row in another table of the same bundle, never a
database id; a JSON field is checked for its shape. Anything else in a row —
``id``, ``campaign_id``, ``branch_id`` — is refused, so nothing in a bundle can
name a row the import did not create.
"""

import base64
import binascii
import math
import re
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.db import models
from django.utils.dateparse import parse_datetime

from campaigns.models import (
    REASON_CHARS,
    AuthorNote,
    Branch,
    Campaign,
    CanonRule,
    CharacterCard,
    ContextSnapshot,
    NarrationPart,
    Node,
    RecorderRun,
    Round,
    RoundProposal,
    SavePoint,
    StateEvent,
    StateRecord,
    TableAction,
    TableRound,
)
from campaigns.state.events import MAX_TEXT
from campaigns.state.registry import json_problem
from knowledge.models import Source
from memory.models import Checkpoint, Memory, MemoryRun, RecallUse

from .reading import refuse


@dataclass(frozen=True)
class Table:
    section: str
    name: str
    model: type
    scope: str  # how export finds the campaign's rows
    fields: tuple  # plain fields, carried as they are
    links: dict = field(default_factory=dict)  # bundle field -> (table it points into, may be null)
    shapes: dict = field(default_factory=dict)  # JSON field -> its shape check
    rule: object = None  # rule(checked rows): a check across fields and rows (one the database would enforce)
    only: dict = field(default_factory=dict)  # which of the campaign's rows travel (export filter), if not all


def _text_tree(most_text, most_items=50, most_depth=4):
    """Return a check for a small JSON value: objects, lists, text up to ``most_text``, numbers, true/false/null."""
    def check(value, where, depth=0):
        if depth > most_depth:
            refuse(f"{where} is nested more than {most_depth} levels deep.")
        if isinstance(value, str):
            if len(value) > most_text:
                refuse(f"{where} holds text longer than {most_text:,} characters.")
        elif isinstance(value, dict):
            if len(value) > most_items:
                refuse(f"{where} holds more than {most_items} fields.")
            for key, item in value.items():
                check(item, f"{where} ({key[:40]})", depth + 1)
        elif isinstance(value, list):
            if len(value) > most_items:
                refuse(f"{where} holds more than {most_items} items.")
            for item in value:
                check(item, where, depth + 1)
        elif isinstance(value, float) and not math.isfinite(value):
            refuse(f"{where} holds a number that is not finite.")
    return check


_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
# Story time and world rules store structures (a trigger's conditions and effects, a routine's windows, a world's
# triggers in one event): conditions nest at most four all/any/not deep (campaigns.state.time.triggers.MAX_NESTING),
# which with a definition's own fields is at most sixteen levels from a payload or a record's data.
def _values(value, where):
    """An event's payload or a record's data: what the event pipeline stores, by its own limits (registry)."""
    problem = json_problem(value)
    if problem:
        refuse(f"{where}{problem}.")


_data = _values


def _payload(value, where):
    """An event as the pipeline stores it: named fields of bounded text (events.clean's output, or a new type's)."""
    if not isinstance(value, dict):
        refuse(f"{where} must be an object with the event's type, subject, object and value.")
    if not isinstance(value.get("type", ""), str):
        refuse(f"{where} must name its type as text.")
    for key in value:
        if not _NAME.fullmatch(key):
            refuse(f"{where} has a field named “{key[:40]}”, which is not an event field.")
    _values(value, where)


def _previous(value, where):
    """What an event replaced, slot by slot: [{"slot", "value", "data", "authority"}, …]."""
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        refuse(f"{where} must be a list of the slots the event replaced.")
    _data(value, where)


def _record_data(value, where):
    if not isinstance(value, dict):
        refuse(f"{where} must be an object.")
    _data(value, where)


def _report(value, where):
    """The inspector's record of one prompt: display data, bounded by the reader's depth and size limits."""
    if not isinstance(value, dict):
        refuse(f"{where} must be an object (the record of what the narrator was told).")
    if isinstance(value.get("imported"), dict) and set(value) <= {"version", "imported", "edited"}:
        return  # a reply brought in from another tool: no narrator here was asked for it (storyteller.tavern)
    if value and not (isinstance(value.get("budget"), dict) and isinstance(value.get("sections"), list)):
        refuse(f"{where} lacks the budget and sections every prompt record has.")


# A card's own data: its fields, its extensions (anything a tool put there) and its embedded book (up to a
# lorebook's entries, each nesting its own extensions).
_card = _text_tree(200_000, most_items=10_000, most_depth=12)


def _portraits(checked):
    """Draw every character's portrait again from its pixels (a bundle's bytes are as untrusted as a card's)."""
    from storyteller.tavern import png

    for index, row in enumerate(checked):
        data = row.values.get("portrait") or b""
        if not data:
            row.values["portrait_type"] = ""
            continue
        picture, problem = png.portrait(data)
        if picture is None:
            refuse(f"character_cards row {index + 1} (portrait): {problem.split(';')[0]}.")
        row.values["portrait"], row.values["portrait_type"] = picture, png.picture_type(picture)


# A game master's round: what each character was told is its longest part (a brief: a dozen sections of lines).
_round = _text_tree(20_000, most_items=200, most_depth=5)


def _round_numbers(checked):
    """A game master's rounds are 1 to 99, off-stage rounds 100 on, each number once under a reply (the database's
    round_numbers_by_kind and one_round_per_number)."""
    seen = {}
    for index, row in enumerate(checked):
        where, number, kind = f"rounds row {index + 1}", row.values.get("number"), row.values.get("kind")
        if kind == Round.Kind.GM and not 1 <= number < 100:
            refuse(f"{where} is a game master's round numbered {number}; those are numbered 1 to 99.")
        if kind == Round.Kind.OFFSTAGE and number < 100:
            refuse(f"{where} is an off-stage round numbered {number}; those are numbered from 100.")
        key = (row.links["node"], number)
        if key in seen:
            refuse(f"{where} is round {number} of the same reply as {seen[key]}; a reply has each round once.")
        seen[key] = where


# A table's rounds (issue 30). Seats are people of this install and stay here; what travels is what the story
# is made of: the actions as they were played (each under its character, at its stage), each round's stages, the
# reply's parts by stage, and the proposals the owner answered. An action still waiting, or taken back, is the
# live table's, not the story's.
_stages = _text_tree(2_000, most_items=100, most_depth=4)


def _present(value, where):
    if not isinstance(value, list) or not all(isinstance(key, str) and len(key) <= 200 for key in value):
        refuse(f"{where} must be a list of character keys.")


def _played_actions(checked):
    for index, row in enumerate(checked):
        played = row.values.get("status", TableAction.Status.WAITING) == TableAction.Status.PLAYED
        if not played or row.links["node"] is None:
            refuse(f"table_actions row {index + 1} is not an action played in a round (with its round's node); a "
                   "bundle carries only played actions.")


def _one_round_per_node(checked):
    seen = {}
    for index, row in enumerate(checked):
        node = row.links["node"]
        if node in seen:
            refuse(f"table_rounds row {index + 1} is a second table round of the same node as {seen[node]}.")
        seen[node] = f"table_rounds row {index + 1}"


def _part_numbers(checked):
    seen = {}
    for index, row in enumerate(checked):
        key = (row.links["node"], row.values.get("number"))
        if key in seen:
            refuse(f"narration_parts row {index + 1} is part {key[1]} of the same reply as {seen[key]}; a reply "
                   "has each part once.")
        seen[key] = f"narration_parts row {index + 1}"


def _answered(checked):
    for index, row in enumerate(checked):
        if row.values.get("status", RoundProposal.Status.WAITING) == RoundProposal.Status.WAITING:
            refuse(f"round_proposals row {index + 1} is still waiting; a bundle carries only answered proposals.")


CAMPAIGN_FIELDS = (
    "title", "genre", "protagonist", "opening", "point_of_view", "prose_length", "dialogue_density",
    "descriptive_richness", "violence_level", "pacing", "style_notes", "narrator_rules", "context_token_budget",
    "max_output_tokens", "temperature", "narrator_model", "embed_model", "head_depth", "created_at", "updated_at",
    "game_master", "max_rounds", "max_characters", "offstage_per_turn", "offstage_per_character", "offstage_summary",
    "authoring_enabled", "authoring_per_turn", "authoring_consolidate_after", "round_timer_seconds",
    # Characters' recall. Not the reranker's address: an imported bundle is never a reason to make a request.
    "memory_flaky", "memory_recall", "memory_over_retrieve", "memory_diversity", "memory_associate", "memory_verify",
    # Story time and world rules (issue 13); a bundle without them keeps their defaults.
    "clock_mode", "time_zone", "round_seconds", "max_skip_days", "trigger_cap", "beat_turns", "cue_turns",
    "last_played_at",
    # From character cards (issue 28); a bundle without them keeps them empty.
    "style_examples", "reply_direction",
)
CAMPAIGN_LINKS = {"head_branch": ("branches", False)}

# In the order they are written: every link points back to a table already written.
TABLES = (
    Table("campaigns", "branches", Branch, "campaign", ("fork_depth", "created_at", "name"),
          {"parent": ("branches", True)}),
    Table("campaigns", "nodes", Node, "campaign",
          ("depth", "role", "mode", "text", "direction", "tokens", "tokens_through", "created_at", "thinking", "note"),
          {"branch": ("branches", False)}),
    Table("campaigns", "snapshots", ContextSnapshot, "node__campaign",
          ("report", "model", "api", "prompt_eval_count", "eval_count", "done_reason", "duration_ms"),
          {"node": ("nodes", False)}, {"report": _report}),
    Table("campaigns", "save_points", SavePoint, "campaign", ("name", "depth", "created_at"),
          {"branch": ("branches", False)}),
    Table("campaigns", "canon_rules", CanonRule, "campaign",
          ("text", "scope", "enabled", "position", "created_at", "updated_at")),
    Table("campaigns", "author_notes", AuthorNote, "campaign", ("text", "depth", "interval", "role"),
          {"branch": ("branches", True)}),
    Table("campaigns", "state_events", StateEvent, "campaign",
          ("source", "payload", "status", "reason", "previous", "attempt", "created_at"),
          {"node": ("nodes", False)}, {"payload": _payload, "previous": _previous}),
    Table("campaigns", "state_records", StateRecord, "campaign",
          ("depth", "slot", "kind", "subject", "value", "data", "narrator_only", "authority", "retracted"),
          {"branch": ("branches", False), "event": ("state_events", False), "canon_rule": ("canon_rules", True)},
          {"data": _record_data}),
    Table("campaigns", "recorder_runs", RecorderRun, "node__campaign",
          ("status", "error", "attempts", "model", "updated_at"), {"node": ("nodes", False)}),
    Table("campaigns", "rounds", Round, "node__campaign",
          ("number", "kind", "started_ms", "elapsed_seconds", "resolution", "activated", "outputs", "briefs"),
          {"node": ("nodes", False)},
          {"resolution": _round, "activated": _round, "outputs": _round, "briefs": _round}, _round_numbers),
    Table("memory", "memories", Memory, "campaign",
          ("depth", "source_start", "source_end", "text", "original_text", "revision", "authority", "origin", "model",
           "pinned", "forgotten", "enabled", "use_count", "last_used_at", "created_at"),
          {"branch": ("branches", False)}),
    Table("memory", "memory_runs", MemoryRun, "campaign",
          ("status", "written", "evicted", "embedded", "embedding_note", "error", "attempts", "updated_at"),
          {"node": ("nodes", False)}),
    Table("memory", "checkpoints", Checkpoint, "campaign",
          ("depth", "source_start", "source_end", "text", "tokens", "source_hash", "stable_prefix_hash",
           "schema_version", "prompt_version", "origin", "model", "created_at"),
          {"branch": ("branches", False)}),
    # What characters recalled is play history (it lengthens what they remember); the recall index it
    # refers to by slot is derived and rebuilt from the state records after the import.
    Table("memory", "recall_uses", RecallUse, "campaign", ("depth", "owner", "slot"),
          {"branch": ("branches", False)}),
    Table("knowledge", "sources", Source, "campaign",
          ("title", "filename", "classification", "enabled", "hidden", "always_include", "notes", "text",
           "content_hash", "size_bytes", "parser_version", "chunking_version", "imported_at", "lorebook", "lore_book",
           "lore_scope", "keyed")),
    # A table's rounds (issue 30): see _stages above; each after the nodes it belongs to.
    Table("campaigns", "table_actions", TableAction, "campaign",
          ("character", "depth", "text", "status", "sent_at", "edited_at", "place"),
          {"branch": ("branches", False), "node": ("nodes", True)}, rule=_played_actions,
          only={"status": TableAction.Status.PLAYED, "node__isnull": False}),
    Table("campaigns", "table_rounds", TableRound, "node__campaign", ("stages", "why", "played_at"),
          {"node": ("nodes", False)}, {"stages": _stages}, _one_round_per_node),
    Table("campaigns", "narration_parts", NarrationPart, "node__campaign",
          ("number", "place", "place_name", "present", "text"), {"node": ("nodes", False)}, {"present": _present},
          _part_numbers),
    Table("campaigns", "round_proposals", RoundProposal, "campaign",
          ("kind", "note", "depth", "status", "created_at", "decided_at"),
          {"branch": ("branches", False), "target": ("branches", True)}, rule=_answered,
          only={"status__in": [RoundProposal.Status.ACCEPTED, RoundProposal.Status.DECLINED]}),
    # A character brought from a card: its portrait travels as base64 and is drawn again on import.
    Table("campaigns", "character_cards", CharacterCard, "campaign",
          ("entity", "name", "description", "personality", "examples", "creator_notes", "portrait", "portrait_type",
           "spec", "card", "book_key", "position", "created_at"), shapes={"card": _card}, rule=_portraits),
)
BY_NAME = {table.name: table for table in TABLES}
SECTIONS = {"campaigns": ["campaign"] + [t.name for t in TABLES if t.section == "campaigns"],
            "memory": [t.name for t in TABLES if t.section == "memory"],
            "knowledge": [t.name for t in TABLES if t.section == "knowledge"]}
# A source's number in the exporting install's prompt records: a label the
# importer uses to renumber those records, never to find a row.
SOURCE_LABEL = "id"


@dataclass
class Row:
    """One checked row: model field values, and links as positions in other tables of the bundle."""

    values: dict
    links: dict
    label: int | None = None


# What one bundle may hold: its story's nodes (a 2,000-turn story has 4,001; 50,000 turns of short replies
# still fit the byte limit) and its rows in all. Each import writes them in short transactions (staging).
MAX_NODES = 100_000
MAX_ROWS = 1_000_000


def check_sizes(sizes):
    """Refuse a bundle with more nodes, or rows in all, than an import writes."""
    if sizes.get("nodes", 0) > MAX_NODES:
        refuse(f"The bundle's story has {sizes['nodes']:,} nodes; a bundle holds at most {MAX_NODES:,} "
               f"(about {MAX_NODES // 2:,} turns).")
    if sum(sizes.values()) > MAX_ROWS:
        refuse(f"The bundle holds {sum(sizes.values()):,} rows; a bundle holds at most {MAX_ROWS:,}.")


def check_campaign(row, sizes):
    """Return the checked campaign settings as a Row (head_branch a position in the bundle's branches)."""
    return _check(row, "campaign", Campaign, CAMPAIGN_FIELDS, CAMPAIGN_LINKS, {}, sizes)


def check_table(table, rows, sizes):
    """Return the checked rows of ``table``; ``sizes`` gives the row count of every table a link may point into."""
    if not isinstance(rows, list):
        refuse(f"The bundle's {table.name} must be a list of rows.")
    labelled = table.name == "sources"
    checked = [_check(row, f"{table.name} row {index + 1}", table.model, table.fields, table.links,
                      table.shapes, sizes | {table.name: index}, labelled=labelled, table=table.name)
               for index, row in enumerate(rows)]
    if table.rule is not None:
        table.rule(checked)
    return checked


def _check(row, where, model, fields, links, shapes, sizes, *, labelled=False, table="campaign"):
    if not isinstance(row, dict):
        refuse(f"{where} must be an object of named fields.")
    known = set(fields) | set(links) | ({SOURCE_LABEL} if labelled else set())
    for key in row:
        if key not in known:
            refuse(f"{where} has a field “{key[:60]}” that is not part of the bundle format (a bundle names rows "
                   "by their place in it, never by database id; see docs/bundle.md).")
    values = {}
    for name in fields:
        model_field = model._meta.get_field(name)
        if name not in row:
            if not model_field.has_default() and not model_field.null and not model_field.blank:
                refuse(f"{where} has no {name}.")
            continue
        if name in shapes:
            shapes[name](row[name], f"{where} ({name})")
        values[name] = value(model_field, row[name], f"{where} ({name})")
    checked_links = {}
    for name, (target, nullable) in links.items():
        position = row.get(name)
        if position is None:
            if not nullable:
                refuse(f"{where} names no {name}.")
            checked_links[name] = None
            continue
        if not isinstance(position, int) or isinstance(position, bool):
            refuse(f"{where} ({name}) must be the position of a row in the bundle's {target}, a whole number.")
        if not 0 <= position < sizes.get(target, 0):
            refuse(f"{where} ({name}) points at row {position + 1} of the bundle's {target}, which "
                   f"{'is not an earlier row' if target == table else 'does not exist'}.")
        checked_links[name] = position
    label = row.get(SOURCE_LABEL) if labelled else None
    if label is not None and (not isinstance(label, int) or isinstance(label, bool)):
        refuse(f"{where} ({SOURCE_LABEL}) must be a whole number.")
    return Row(values, checked_links, label)


def value(model_field, raw, where):
    """Return ``raw`` as the value of ``model_field``, checked as a form would check it; refuse in words otherwise."""
    if raw is None:
        if model_field.null:
            return None
        refuse(f"{where} cannot be empty (null).")
    if isinstance(model_field, models.BooleanField):
        if not isinstance(raw, bool):
            refuse(f"{where} must be true or false.")
    elif isinstance(model_field, (models.CharField, models.TextField)):
        if not isinstance(raw, str):
            refuse(f"{where} must be text.")
    elif isinstance(model_field, models.IntegerField):
        if not isinstance(raw, int) or isinstance(raw, bool):
            refuse(f"{where} must be a whole number.")
    elif isinstance(model_field, models.FloatField):
        if not isinstance(raw, (int, float)) or isinstance(raw, bool):
            refuse(f"{where} must be a number.")
    elif isinstance(model_field, models.DateTimeField):
        raw = _moment(raw, where)
    elif isinstance(model_field, models.JSONField):
        return raw  # its shape is checked by the table's own check; an empty record ({}) is a record
    elif isinstance(model_field, models.BinaryField):
        return _binary(raw, where)
    try:
        return model_field.clean(raw, None)
    except ValidationError as error:
        refuse(f"{where}: {' '.join(error.messages)}")


PICTURE_BYTES = 512 * 1024  # campaigns.models.PORTRAIT_BYTES


def _binary(raw, where):
    """Return the bytes of base64 text (a portrait), refusing what is not base64 or is larger than a portrait."""
    if not isinstance(raw, str):
        refuse(f"{where} must be base64 text.")
    if len(raw) > PICTURE_BYTES * 4 // 3 + 4:
        refuse(f"{where} is larger than a portrait may be ({PICTURE_BYTES:,} bytes).")
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        refuse(f"{where} is not base64.")


def _moment(raw, where):
    try:
        moment = parse_datetime(raw) if isinstance(raw, str) else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        refuse(f"{where} must be a date and time with its time zone, such as 2026-12-01T09:30:00Z; "
               f"{str(raw)[:40]!r} is not.")
    return moment
