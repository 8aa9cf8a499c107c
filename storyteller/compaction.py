"""Compaction: ask the summariser for a new checkpoint when the story outgrows the prompt (seed 001).

The builder decides when and how far (``NeedsCompaction``: the path, the
depth to cover through, the summary's budget, the stable prefix's hash); this
module asks the model and hands the text to ``memory.checkpoints.write``. The
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
from memory.models import CheckpointRun

from . import context, llm, tokens
from .context import budget, layers

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 180.0
# The JSON around the summary ({"summary": "..."}) and the drift between our count and the model's.
JSON_SLACK = 48
# Below this many tokens per chunk the summariser would see a sentence at a time: refuse instead.
MIN_CHUNK_TOKENS = 200

SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
}

RULES = (
    "You keep the running summary of an interactive story. You are given the summary so far (if any) and the "
    "passages that follow it. Write ONE new self-contained summary of the whole story up to the end of those "
    "passages, in at most {words} words: major events in order, the player's actual choices, what was "
    "discovered, promises and goals, how relationships changed, unresolved threads and lasting consequences. "
    "Use the characters' names. Write only what the text states; do not invent, do not guess at thoughts, do not "
    "copy style. Answer as JSON: {{\"summary\": \"...\"}}."
)


class CompactionFailed(Exception):
    """The summariser could not write the checkpoint; nothing was stored."""


@dataclass(frozen=True)
class _Job:
    campaign: Campaign
    need: budget.NeedsCompaction
    previous: str
    passages: list  # (depth, rendered text), oldest first
    narrator: object
    options: llm.ChatOptions
    chunk_tokens: int
    words: int


async def compact(need):
    """Write the checkpoint ``need`` asks for and return it, or raise CompactionFailed saying why and what to do."""
    job = await database_sync_to_async(_prepare)(need)
    summary = job.previous
    model = job.narrator.model
    for start, end, text in _chunks(job.passages, job.chunk_tokens):
        messages = [
            {"role": "system", "content": RULES.format(words=job.words)},
            {"role": "user", "content": _request(summary, start, end, text)},
        ]
        try:
            reply = await asyncio.wait_for(job.narrator.complete_json(messages, SCHEMA, job.options), _timeout())
        except TimeoutError as error:
            raise CompactionFailed(f"The model {model} did not write the summary within {_timeout():g} s.") from error
        except llm.NarratorError as error:
            raise CompactionFailed(f"The summariser failed: {error}") from error
        summary = _summary_of(reply, model)
    try:
        return await database_sync_to_async(checkpoints.write)(
            need.path, need.through, summary, need.prefix_hash, model=model)
    except ValueError as error:
        raise CompactionFailed(f"The model {model} wrote a summary that cannot be used: {error}") from error


async def checkpoint(node_id):
    """The post-turn step: compact ahead of need after reply ``node_id``; return the CheckpointRun status."""
    need, node, error = await database_sync_to_async(_early_need)(node_id)
    if node is None:
        return None
    status = CheckpointRun.Status.NOT_NEEDED
    if need is not None:
        try:
            await compact(need)
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


def _early_need(node_id):
    """Return (the compaction due from the early watermark or None, the node, an error) for reply ``node_id``."""
    node = Node.objects.filter(pk=node_id, role=Node.Role.NARRATOR).first()
    if node is None:
        return None, None, ""
    campaign = Campaign.objects.get(pk=node.campaign_id)
    path = lineage.path_at(campaign.pk, node.branch_id, node.depth)
    try:
        context.build(campaign, path, context.Action(mode="continue"), compact_above=budget.EARLY_WATERMARK)
    except context.NeedsCompaction as need:
        return need, node, ""
    except context.ContextOverflow as error:
        return None, node, str(error)
    return None, node, ""


def _prepare(need):
    campaign = Campaign.objects.get(pk=need.path.campaign_id)
    path = need.path
    previous = ""
    if need.previous_end >= 0:
        current = checkpoints.eligible_checkpoint(path, need.prefix_hash)
        # Seeded only from a summary that is itself eligible and whole on this path (seed 000 §11).
        if current is None or current.source_end != need.previous_end:
            raise CompactionFailed("The summary this one continues is no longer usable; play the turn again.")
        previous = current.text
    rows = path.nodes().filter(depth__gt=need.previous_end, depth__lte=need.through).values_list(
        "depth", "role", "mode", "text")
    passages = [(depth, layers.render_action(mode, text) if role == Node.Role.PLAYER else text)
                for depth, role, mode, text in rows]
    words = max(20, need.summary_budget * 3 // 4)
    num_predict = need.summary_budget + JSON_SLACK
    rules = tokens.count(RULES.format(words=words))
    chunk = (campaign.context_token_budget - budget.reply_reserve(num_predict) - rules - num_predict
             - 4 * budget.MESSAGE_OVERHEAD - JSON_SLACK)
    if chunk < MIN_CHUNK_TOKENS or need.summary_budget <= 0:
        raise CompactionFailed(
            f"The {campaign.context_token_budget:,}-token window leaves no room to summarise the story "
            f"({chunk:,} tokens a chunk).")
    options = llm.ChatOptions(num_predict=num_predict, num_ctx=campaign.context_token_budget, temperature=0.0)
    narrator = llm.narrator_for(campaign.narrator_model or None)
    return _Job(campaign, need, previous, passages, narrator, options, chunk, words)


def _chunks(passages, limit):
    """Yield (first depth, last depth, text) of consecutive passages within ``limit`` tokens each.

    A passage longer than the limit alone is sent as its opening and its end
    (memory.blocks.excerpt): the summariser sees it, the prompt never cuts it.
    """
    pending, spent = [], 0
    for depth, text in passages:
        cost = tokens.count(text) + 2
        if pending and spent + cost > limit:
            yield pending[0][0], pending[-1][0], "\n\n".join(t for _, t in pending)
            pending, spent = [], 0
        if cost > limit:
            text, cost = blocks.excerpt([text], limit - 2), limit
        pending.append((depth, text))
        spent += cost
    if pending:
        yield pending[0][0], pending[-1][0], "\n\n".join(t for _, t in pending)


def _request(summary, start, end, text):
    before = f"Summary of the story so far (depths 0–{start - 1}):\n{summary}\n\n" if summary else ""
    return (f"{before}The story continues (depths {start}–{end}):\n\n{text}\n\n"
            f"Write the new summary of the whole story through depth {end}.")


def _summary_of(reply, model):
    text = reply.get("summary") if isinstance(reply, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise CompactionFailed(f"The model {model} answered without a summary ({str(reply)[:80]}).")
    return text.strip()


def _timeout():
    return getattr(settings, "STORYTELLER_CHECKPOINT_TIMEOUT", DEFAULT_TIMEOUT)
