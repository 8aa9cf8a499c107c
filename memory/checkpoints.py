"""Checkpoints: the self-contained summary a prompt shows in place of the story's older passages.

One mechanism serves seed 000 §9-§11 (lineage-safe summaries) and seed 001
(context checkpoints). A checkpoint is eligible exactly when its anchor is on
the active, head-capped path (``Path.clause``), and usable only while the
application's fingerprint of what it covers still matches: the covered nodes
(ids, places, inputs, replies) and the stable prefix the prompt was built
with. Anything else — an edited node, a changed prefix, a bad range, an
oversized or empty text, an older schema — makes it unusable, and the next
turn that needs one writes a new one. Nothing here calls a model or reads the
pipeline: the pipeline asks the summariser and passes the text to ``write``.
"""

import hashlib
import json
from dataclasses import dataclass

from django.db import connection

from campaigns.models import REASON_CHARS, StateRecord
from storyteller import tokens, vendors

from .models import SUMMARY_CHARS, Checkpoint, CheckpointRun

# Bump when what the hash covers changes: every older row becomes unusable and is rebuilt on need.
# 2: the hash covers the sealed events recorded in the range too (seed 002, decision D1).
SCHEMA_VERSION = 2
# Bump when the way a summary is placed in the prompt (or written) changes.
# 2: the summariser is handed the range's sealed public events beside its passages.
PROMPT_VERSION = 2
# A summary longer than this is refused: it would crowd out the verbatim story it stands in for.
MAX_SUMMARY_TOKENS = 1200


@dataclass(frozen=True)
class Rejected:
    """An eligible checkpoint that cannot be used, and why, in words."""

    checkpoint: Checkpoint
    reason: str


@dataclass(frozen=True)
class Lookup:
    """The checkpoint a prompt on a path should use (or None) and the eligible ones passed over."""

    checkpoint: Checkpoint | None
    rejected: tuple[Rejected, ...] = ()


def eligible_checkpoint(path, stable_prefix_hash=None):
    """Return the checkpoint a prompt on ``path`` should use, or None.

    That is the eligible checkpoint covering the most of the path (the newest
    among equals: a person's edit replaces what it edits) whose fingerprint
    still matches. ``stable_prefix_hash`` is the hash of the prompt's current
    stable prefix (``prefix_hash``); the builder passes it so a summary written
    under another prefix is refused. Without it, only the covered story is
    checked.
    """
    return look_up(path, stable_prefix_hash).checkpoint


def look_up(path, stable_prefix_hash=None, *, fresh=False):
    """Return the Lookup for ``path``: what ``eligible_checkpoint`` returns, and what it passed over and why.

    ``fresh`` checks every source hash again instead of trusting this process's earlier check.
    """
    rejected = []
    # Read a few at a time: the first usable one ends the search, and a line may hold dozens.
    for checkpoint in eligible(path).order_by("-source_end", "-id").iterator(chunk_size=4):
        reason = problem(checkpoint, path, stable_prefix_hash, fresh=fresh)
        if not reason:
            return Lookup(checkpoint, tuple(rejected))
        rejected.append(Rejected(checkpoint, reason))
    return Lookup(None, tuple(rejected))


def eligible(path):
    """Return every checkpoint anchored on ``path`` (usable or not)."""
    return Checkpoint.objects.filter(path.clause(), campaign_id=path.campaign_id)


def problem(checkpoint, path, stable_prefix_hash=None, *, fresh=False):
    """Return why ``checkpoint`` cannot be used on ``path``, or "" when it can.

    The source hash is checked in full the first time this process meets the
    checkpoint (or every time, with ``fresh``), then remembered: the
    application never changes a node, so only an edit from outside it can
    break the match, and that is caught when the process next starts, by the
    Plot panel (which always checks afresh), or at once after
    ``forget_checks``. Checking 4,000 covered nodes on every build cost more
    than the rest of the build (bench "checkpoint").
    """
    if checkpoint.schema_version != SCHEMA_VERSION or checkpoint.prompt_version != PROMPT_VERSION:
        return (f"it was written for schema {checkpoint.schema_version}/prompt {checkpoint.prompt_version}, "
                f"not {SCHEMA_VERSION}/{PROMPT_VERSION}")
    if checkpoint.source_start != 0 or checkpoint.source_end > checkpoint.depth:
        return f"its range {checkpoint.source_start}–{checkpoint.source_end} does not end at or before its anchor"
    if not path.contains(checkpoint.branch_id, checkpoint.depth):
        return "its anchor is not on this line"
    if not checkpoint.text.strip() or checkpoint.tokens > MAX_SUMMARY_TOKENS \
            or tokens.count(checkpoint.text) != checkpoint.tokens:
        return f"its text is empty, altered or longer than {MAX_SUMMARY_TOKENS} tokens"
    if stable_prefix_hash is not None and checkpoint.stable_prefix_hash != stable_prefix_hash:
        return "the stable prefix (rules, profile, canon, standing knowledge) changed since it was written"
    if not _matches(checkpoint, path, fresh):
        return f"the story it covers (depths 0–{checkpoint.source_end}) no longer matches its source hash"
    return ""


def forget_checks():
    """Forget which source hashes this process has checked, so each is checked in full again."""
    _checked.clear()


# (id, source hash, prefix hash, end) -> whether the covered story matched. The covered nodes are the anchor's
# own ancestry, the same on every line through the anchor, so the path is not part of the key.
_checked: dict[tuple, bool] = {}
_CHECKED_LIMIT = 4096


def _matches(checkpoint, path, fresh):
    key = (checkpoint.pk, checkpoint.source_hash, checkpoint.stable_prefix_hash, checkpoint.source_end)
    if fresh or key not in _checked:
        if len(_checked) >= _CHECKED_LIMIT:
            _checked.clear()
        found = source_hash(path, checkpoint.source_end, checkpoint.stable_prefix_hash)
        _checked[key] = found == checkpoint.source_hash
    return _checked[key]


def source_hash(path, end, stable_prefix_hash):
    """Return the fingerprint of ``path`` from the opening through ``end`` under ``stable_prefix_hash``.

    Covers the schema and prompt versions, the prefix hash, the campaign,
    every covered node in order (id, branch, depth, role, mode, text) and
    every event record in the range (the summariser writes from them: id,
    depth, slot, its words, whether it is narrator-only or retracted). A path
    missing a depth in that range hashes differently from a whole one.
    """
    header = json.dumps([SCHEMA_VERSION, PROMPT_VERSION, stable_prefix_hash, path.campaign_id])
    covered = path.capped(end)
    nodes = covered.nodes().values_list("id", "branch_id", "depth", "role", "mode", "text")
    sql, params = nodes.query.sql_with_params()
    events = (StateRecord.objects.filter(covered.clause(), campaign_id=path.campaign_id, kind="event")
              .order_by("depth", "id").values_list("id", "depth", "slot", "value", "narrator_only", "retracted"))
    events_sql, events_params = events.query.sql_with_params()
    # SQLite joins the rows (in the subquery's depth order) and Python hashes one string: reading 5,000 rows
    # into Python objects cost ten times as much (bench "checkpoint"). Each text is preceded by its length, so
    # no text can pass for the fields after it; a different join order could only fail a check, never pass one.
    # Booleans as 0/1 on both backends, so one history hashes alike on SQLite and PostgreSQL.
    us = vendors.char(31)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT " + vendors.group_concat(
                f"id || {us} || branch_id || {us} || depth || {us} || role || {us} || mode || {us} || length(text)"
                f" || {us} || text", 30) + f" FROM ({sql}) AS covered", params)
        joined = cursor.fetchone()[0] or ""
        cursor.execute(
            "SELECT " + vendors.group_concat(
                f"id || {us} || depth || {us} || slot || {us} || length(value) || {us} || value || {us}"
                f" || CAST(narrator_only AS integer) || {us} || CAST(retracted AS integer)", 30)
            + f" FROM ({events_sql}) AS covered", events_params)
        recorded = cursor.fetchone()[0] or ""
    return hashlib.sha256(f"{header}\x1e{joined}\x1d{recorded}".encode()).hexdigest()


def public_events(path, start, end):
    """Return [(depth, text)]: the sealed public events recorded on ``path`` after ``start`` through ``end``.

    What the summariser may be handed (seed 002, decision D1): events, never
    perceptions, beliefs or accuracy labels; not one the narrator alone knows;
    not one a person retracted as erroneous (within the range).
    """
    covered = path.capped(end)
    deepest = {}
    for slot, depth, pk, value, narrator_only, retracted in (
            StateRecord.objects.filter(covered.clause(), campaign_id=path.campaign_id, kind="event")
            .values_list("slot", "depth", "id", "value", "narrator_only", "retracted")):
        if slot not in deepest or (depth, pk) > deepest[slot][:2]:
            deepest[slot] = (depth, pk, value, narrator_only, retracted)
    return [(depth, value) for depth, _, value, secret, retracted in sorted(deepest.values())
            if depth > start and not secret and not retracted]


def prefix_hash(text):
    """Return the hash of a prompt's stable prefix, as the builder renders it."""
    return hashlib.sha256(text.encode()).hexdigest()


def write(path, end, text, stable_prefix_hash, *, model="", anchor=None, origin=Checkpoint.Origin.SUMMARISER):
    """Store the summary ``text`` of ``path`` through depth ``end``; return the new Checkpoint.

    It sits on the node at ``end`` unless ``anchor`` (a ``(branch_id, depth)``
    on ``path`` no shallower than ``end``) says otherwise: a person's summary
    sits where they typed it. Raise ValueError, naming what to change, for
    an empty or oversized text or a range the path does not hold.
    """
    text = text.strip()
    if len(text) > SUMMARY_CHARS:  # refused before counting: counting megabytes takes seconds
        raise ValueError(f"The summary is {len(text):,} characters; shorten it to at most {SUMMARY_CHARS:,} "
                         f"characters ({MAX_SUMMARY_TOKENS:,} tokens).")
    count = tokens.count(text)
    if not text:
        raise ValueError("A summary needs some text; write what has happened in the story so far.")
    if count > MAX_SUMMARY_TOKENS:
        raise ValueError(f"The summary is {count:,} tokens; shorten it to at most {MAX_SUMMARY_TOKENS:,}.")
    if not 0 <= end <= path.head_depth:
        raise ValueError(f"A summary through depth {end} is past the end of this line (depth {path.head_depth}).")
    if anchor is None:
        anchor = (_branch_at(path, end), end)
    if anchor[1] < end or not path.contains(*anchor):
        raise ValueError("A summary must sit on this line at or after the last depth it covers.")
    return Checkpoint.objects.create(
        campaign_id=path.campaign_id, branch_id=anchor[0], depth=anchor[1], source_start=0, source_end=end,
        text=text, tokens=count, source_hash=source_hash(path, end, stable_prefix_hash),
        stable_prefix_hash=stable_prefix_hash, schema_version=SCHEMA_VERSION, prompt_version=PROMPT_VERSION,
        origin=origin, model=model,
    )


def delete_all(campaign_id):
    """Delete every checkpoint of the campaign (a cache: the next turn that needs one rebuilds it)."""
    return Checkpoint.objects.filter(campaign_id=campaign_id).delete()[0]


def record_run(node, *, status, error=""):
    """Record what the checkpoint step did after ``node``, counting attempts (a failure's record is written last)."""
    error = error[:REASON_CHARS]
    run, created = CheckpointRun.objects.get_or_create(
        node=node, defaults={"campaign_id": node.campaign_id, "status": status, "error": error})
    if not created:
        run.status, run.error = status, error
        run.attempts += 1
        run.save()
    return run


def _branch_at(path, depth):
    return next((s.branch_id for s in path.segments if s.contains(depth)), None)
