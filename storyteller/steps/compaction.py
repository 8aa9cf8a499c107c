"""Compaction: ask the summariser for a new checkpoint when the story outgrows the prompt (seed 001).

The builder decides when and how far (``NeedsCompaction`` carries a
``Compaction`` plan: the path, the depth to cover through, the summary's
budget, the stable prefix's hash); this module asks the model and hands the
text to ``memory.checkpoints.write``. The Plot panel's rebuild and a summary
the person types come through here too. The
summariser is shown only what is eligible: the previous eligible checkpoint's
summary and the path's nodes after it, never a sibling line's. A long stretch
goes in bounded rolling chunks and only the final, self-contained summary is
kept. Nothing is written unless the summary is whole; no transaction is open
while the model writes.

The post-turn step ``checkpoint`` compacts ahead of need, from the early
watermark, so most turns never wait for a summary; its failure is recorded on
the reply's CheckpointRun and never touches the accepted turn.
"""

import asyncio
import logging
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.conf import settings

from campaigns import lineage
from campaigns.models import Campaign, Node
from memory import blocks, checkpoints
from memory.models import Checkpoint, CheckpointRun

from .. import context, llm, tokens
from ..context import budget, layers
from ..llm import failures, priority
from . import Step

logger = logging.getLogger(__name__)

# The JSON around the summary ({"summary": "..."}) and the drift between our count and the model's.
JSON_SLACK = 48
# Below this many tokens per chunk the summariser would see a sentence at a time: refuse instead.
MIN_CHUNK_TOKENS = 200

SCHEMA = {
    "type": "object",
    # An empty summary covers nothing: it is asked for again like any answer that misses the schema.
    "properties": {"summary": {"type": "string", "minLength": 1}},
    "required": ["summary"],
}

RULES = (
    "You keep the running summary of an interactive story. You are given the summary so far (if any) and the "
    "passages that follow it. Write ONE new self-contained summary of the whole story up to the end of those "
    "passages, in at most {words} words: major events in order, the player's actual choices, what was "
    "discovered, promises and goals, how relationships changed, unresolved threads and lasting consequences. "
    "Use the characters' names. Write only what the text states; do not invent, do not guess at thoughts, do not "
    "copy style. The events recorded for those passages, when given, are the story's own record of what happened: "
    "build on them. Answer as JSON: {{\"summary\": \"...\"}}."
)


class CompactionFailed(Exception):
    """The summariser could not write the checkpoint; nothing was stored."""


@dataclass(frozen=True)
class _Job:
    campaign: Campaign
    plan: budget.Compaction
    previous: str
    passages: list  # (depth, rendered text), oldest first
    events: list  # (depth, text) of the sealed public events in the range (seed 002, D1), oldest first
    options: llm.ChatOptions
    chunk_tokens: int
    words: int


async def compact(plan):
    """Write the checkpoint ``plan`` asks for and return it, or raise CompactionFailed saying why."""
    job = await database_sync_to_async(_prepare)(plan)
    # Off the database's thread: choosing the narrator may probe the model server.
    narrator = await llm.anarrator_for(job.campaign.narrator_model or None)
    summary = job.previous
    model = narrator.model
    for start, end, text in _chunks(job.passages, job.chunk_tokens, job.events):
        events = [text for depth, text in job.events if start <= depth <= end]
        messages = [
            {"role": "system", "content": RULES.format(words=job.words)},
            {"role": "user", "content": _request(summary, start, end, text, events)},
        ]
        try:
            reply = await priority.call(
                lambda: asyncio.wait_for(narrator.complete_json(messages, SCHEMA, job.options), _timeout()))
        except TimeoutError as error:
            raise CompactionFailed(f"The model {model} did not write the summary within {_timeout():g} s.") from error
        except llm.NarratorError as error:
            raise CompactionFailed(f"The summariser failed: {failures.in_words(error, model)}") from error
        summary = _summary_of(reply, model)
    try:
        return await database_sync_to_async(checkpoints.write)(
            plan.path, plan.through, summary, plan.prefix_hash, model=model)
    except ValueError as error:
        raise CompactionFailed(f"The model {model} wrote a summary that cannot be used: {error}") from error


async def checkpoint(node_id):
    """The post-turn step: compact ahead of need after reply ``node_id``; return the CheckpointRun status.

    None when there is nothing to do: not a reply, or already done without failing.
    """
    plan, node, error = await database_sync_to_async(_early_plan)(node_id)
    if node is None:
        return None
    status = CheckpointRun.Status.NOT_NEEDED
    if plan is not None:
        try:
            await compact(plan)
            status = CheckpointRun.Status.WRITTEN
        except CompactionFailed as failure:
            error = f"{failure} It is retried after the next reply."
        except Exception as failure:  # noqa: BLE001 — whatever failed, the turn stands and the failure is recorded
            logger.exception("the checkpoint step failed for node %s", node_id)
            error = f"Writing the summary failed ({type(failure).__name__}: {failure}); nothing was kept."
    if error:
        status = CheckpointRun.Status.FAILED
    await database_sync_to_async(checkpoints.record_run)(node, status=status, error=error)
    return status


STEP = Step(checkpoint, "Writing the summary…", "Summary step", CheckpointRun, kind="summary")


async def rebuild(campaign_id):
    """Write the current line's summary afresh from its passages alone (the Plot panel's rebuild); return it.

    It covers what the current summary covers (or, with none, all but the
    newest turn) and is seeded from nothing, so a bad summary is not carried on.
    """
    plan = await database_sync_to_async(_rebuild_plan)(campaign_id)
    return await compact(plan)


def write_by_hand(campaign, text):
    """Record the summary the person typed, sitting at the head where they typed it; return it.

    It covers what the current summary covers, so the passages after it stay
    verbatim; with no summary yet, everything but the newest turn. Raise
    ValueError saying what to change.
    """
    path = lineage.path_of(campaign)
    prefix = context.prefix_hash(campaign)
    current = checkpoints.eligible_checkpoint(path, prefix)
    end = current.source_end if current else _uncovered_end(campaign.head_depth)
    return checkpoints.write(path, end, text, prefix, anchor=(campaign.head_branch_id, campaign.head_depth),
                             origin=Checkpoint.Origin.PERSON)


def _uncovered_end(head_depth):
    if head_depth < 2:
        raise ValueError("The story has nothing to summarise before its newest passage yet; play a turn first.")
    return head_depth - 2


def _rebuild_plan(campaign_id):
    campaign = Campaign.objects.get(pk=campaign_id)
    path = lineage.path_of(campaign)
    try:
        # Only the room and the current summary are wanted here, so the build never asks to compact.
        report = context.build(campaign, path, context.Action(mode="continue"), compact_above=float("inf")).report
    except context.ContextOverflow as error:
        raise CompactionFailed(str(error)) from error
    current = report["checkpoint"]
    try:
        end = current["source_end"] if current else _uncovered_end(path.head_depth)
    except ValueError as error:
        raise CompactionFailed(str(error)) from error
    room = report["budget"]["branch_allowance"]
    return budget.Compaction(path, end, budget.summary_budget(room, checkpoints.MAX_SUMMARY_TOKENS),
                             context.prefix_hash(campaign))


def _early_plan(node_id):
    """Return (the compaction due from the early watermark or None, the node, an error) for reply ``node_id``."""
    node = Node.objects.filter(pk=node_id, role=Node.Role.NARRATOR).first()
    done = CheckpointRun.objects.filter(node_id=node_id).exclude(status=CheckpointRun.Status.FAILED).exists()
    if node is None or done:  # a step run again (the worker's retry) redoes only what failed
        return None, None, ""
    campaign = Campaign.objects.get(pk=node.campaign_id)
    path = lineage.path_at(campaign.pk, node.branch_id, node.depth)
    try:
        context.build(campaign, path, context.Action(mode="continue"), compact_above=budget.EARLY_WATERMARK)
    except context.NeedsCompaction as need:
        return need.plan, node, ""
    except context.ContextOverflow as error:
        return None, node, str(error)
    return None, node, ""


def _prepare(plan):
    campaign = Campaign.objects.get(pk=plan.path.campaign_id)
    previous = ""
    if plan.previous_end >= 0:
        current = checkpoints.eligible_checkpoint(plan.path, plan.prefix_hash)
        # Seeded only from a summary that is itself eligible and whole on this path (seed 000 §11).
        if current is None or current.source_end != plan.previous_end:
            raise CompactionFailed("The summary this one continues is no longer usable; play the turn again.")
        previous = current.text
    rows = plan.path.nodes().filter(depth__gt=plan.previous_end, depth__lte=plan.through).values_list(
        "depth", "role", "mode", "text")
    passages = [(depth, layers.render_action(mode, text) if role == Node.Role.PLAYER else text)
                for depth, role, mode, text in rows]
    words = max(20, plan.summary_budget * 3 // 4)
    num_predict = plan.summary_budget + JSON_SLACK
    rules = tokens.count(RULES.format(words=words))
    chunk = (campaign.context_token_budget - budget.reply_reserve(num_predict) - rules - num_predict
             - 4 * budget.MESSAGE_OVERHEAD - JSON_SLACK)
    if chunk < MIN_CHUNK_TOKENS or plan.summary_budget <= 0:
        raise CompactionFailed(
            f"The {campaign.context_token_budget:,}-token window leaves no room to summarise the story "
            f"({chunk:,} tokens a chunk).")
    options = llm.ChatOptions(num_predict=num_predict, num_ctx=campaign.context_token_budget, temperature=0.0)
    events = checkpoints.public_events(plan.path, plan.previous_end, plan.through)
    return _Job(campaign, plan, previous, passages, events, options, chunk, words)


def _chunks(passages, limit, events=()):
    """Yield (first depth, last depth, text) of consecutive passages within ``limit`` tokens each.

    A passage's cost includes the events recorded at its depth, which go with
    it. A passage longer than the limit alone is sent as its opening and its
    end (memory.blocks.excerpt): the summariser sees it, the prompt never cuts it.
    """
    recorded = {}
    for depth, text in events:
        recorded[depth] = recorded.get(depth, 0) + tokens.count(text) + 2
    pending, spent = [], 0
    for depth, text in passages:
        cost = tokens.count(text) + 2 + recorded.get(depth, 0)
        if pending and spent + cost > limit:
            yield pending[0][0], pending[-1][0], "\n\n".join(t for _, t in pending)
            pending, spent = [], 0
        if cost > limit:
            text, cost = blocks.excerpt([text], limit - 2), limit
        pending.append((depth, text))
        spent += cost
    if pending:
        yield pending[0][0], pending[-1][0], "\n\n".join(t for _, t in pending)


def _request(summary, start, end, text, events=()):
    before = f"Summary of the story so far (depths 0–{start - 1}):\n{summary}\n\n" if summary else ""
    recorded = ("Events recorded in these passages:\n" + "\n".join(f"- {event}" for event in events) + "\n\n"
                if events else "")
    return (f"{before}{recorded}The story continues (depths {start}–{end}):\n\n{text}\n\n"
            f"Write the new summary of the whole story through depth {end}.")


def _summary_of(reply, model):
    text = reply.get("summary") if isinstance(reply, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise CompactionFailed(f"The model {model} answered without a summary ({str(reply)[:80]}).")
    return text.strip()


def _timeout():
    return settings.STORYTELLER_CHECKPOINT_TIMEOUT
