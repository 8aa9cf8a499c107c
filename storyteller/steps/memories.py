"""The memory step of the post-turn worker: write memories for due blocks, embed, evict.

The model writes a memory's text from the cast brief and the block; the
application decides everything else (which block, its anchor, its authority,
what is kept). A failure — server down, timeout, empty or malformed JSON — is
recorded on the reply's MemoryRun after the failed work rolled back, and never
touches the accepted turn; the blocks stay due and the next reply retries them.
An embedding failure keeps the memories (lexical ranking still finds them) and
is reported; the next pass embeds what still has no vector.
"""

import asyncio
import logging
from dataclasses import dataclass, replace

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction

from campaigns import lineage
from campaigns import state as story_state
from campaigns.models import Campaign, Node
from knowledge.importer import embedding_model, prefixes
from memory import bank, blocks
from memory.models import MemoryRun

from .. import llm, warming
from ..context import layers
from ..llm import failures, priority
from . import Step, prompts

logger = logging.getLogger(__name__)

# "1-2 plain sentences": fifty words is about seventy tokens; twice that leaves the JSON room.
MAX_TOKENS = 160
MAX_WORDS = 50
DEFAULT_TIMEOUT = 120.0
# Ollama embeds a batch in one request; 64 short memories are one small request.
EMBED_BATCH = 64

SCHEMA = {
    "type": "object",
    "properties": {"memory": {"type": "string"}},
    "required": ["memory"],
}

RULES = (
    "You keep the long-term memory of an interactive story. Read the stretch of story and write, in 1-2 plain "
    f"sentences (at most {MAX_WORDS} words), the specific details worth remembering later: who did what, promises, "
    "discoveries, where things were left, names. Use the characters' names. Write only what the stretch states; "
    'if you are inferring, say so ("seemed", "probably"). Answer as JSON: {"memory": "..."}.'
)


@dataclass(frozen=True)
class _Block:
    start: int
    end: int
    branch_id: int
    messages: list


@dataclass(frozen=True)
class _Job:
    node: Node
    campaign: Campaign
    blocks: list
    narrator: object
    options: llm.ChatOptions


async def remember(node_id):
    """Write the memories due after reply ``node_id``, embed what has no vector, evict; return the MemoryRun status."""
    job = await database_sync_to_async(_prepare)(node_id)
    if job is None:
        return None
    # Off the database's thread: choosing the narrator may probe the model server.
    job = replace(job, narrator=await llm.anarrator_for(job.campaign.narrator_model or None))
    written, error = [], None
    for block in job.blocks:
        try:
            reply = await priority.call(lambda: asyncio.wait_for(
                job.narrator.complete_json(block.messages, SCHEMA, job.options), _timeout()))
            written.append(bank.Written(block.start, block.end, block.branch_id, _memory_of(reply, job.narrator.model),
                                        job.narrator.model))
        except Exception as failure:  # noqa: BLE001 — whatever failed, the turn stands and the failure is recorded
            if not isinstance(failure, (llm.NarratorError, TimeoutError)):
                logger.exception("the memory summariser failed for node %s", node_id)
            error = _describe(failure, job.narrator.model, block)
            break
    try:
        new_ids, evicted = await database_sync_to_async(_store)(job.campaign.pk, written)
    except Exception as failure:  # noqa: BLE001
        logger.exception("storing memories failed for node %s", node_id)
        new_ids, evicted = [], []
        error = f"Storing memories failed ({type(failure).__name__}: {failure}); nothing was kept."
    embedded, note = await embed_missing(job.campaign)
    status = (MemoryRun.Status.FAILED if error else
              MemoryRun.Status.WRITTEN if new_ids else MemoryRun.Status.NOTHING_DUE)
    await database_sync_to_async(bank.record_run)(
        job.node, status=status, written=len(new_ids), evicted=len(evicted), embedded=embedded,
        embedding_note=note, error=error or "")
    if new_ids or evicted or embedded:
        warming.start(job.campaign.pk)  # the next turn finds the bank's index holding what was just written
    return status


STEP = Step(remember, "Writing memories…", "Memory step", MemoryRun, kind="memory")


async def embed_missing(campaign):
    """Embed every unforgotten memory of ``campaign`` that has no vector from its model; return (count, note).

    The note says, in words, why vectors were not made (no embedding model,
    server down); memories without vectors are still ranked on their words.
    """
    model = embedding_model(campaign)
    pending = await database_sync_to_async(lambda: list(bank.needing_vectors(campaign.pk, model)
                                                        .values_list("id", "text")))()
    if not pending:
        return 0, ""
    embedder = await asyncio.to_thread(llm.embedder_for, model)
    document = prefixes(model)[0]
    done = 0
    try:
        for start in range(0, len(pending), EMBED_BATCH):
            batch = pending[start:start + EMBED_BATCH]
            vectors = await embedder.embed([document + text for _, text in batch])
            await database_sync_to_async(bank.store_vectors)(model, [(pk, v) for (pk, _), v in zip(batch, vectors)])
            done += len(batch)
    except llm.EmbeddingUnavailable:
        return done, (f"No embedding model is available ({embedder.model} cannot embed), "
                      "so memories are ranked on their words only.")
    except llm.NarratorError as failure:
        return done, (f"{len(pending) - done} memories could not be embedded with {model} ({failure}); "
                      "they are ranked on their words until the next pass embeds them.")
    return done, ""


def _prepare(node_id):
    node = Node.objects.filter(pk=node_id, role=Node.Role.NARRATOR).first()
    if node is None:
        return None
    campaign = Campaign.objects.get(pk=node.campaign_id)
    path = lineage.path_at(campaign.pk, node.branch_id, node.depth)
    due = blocks.due_blocks(node.depth, bank.cursor(campaign.pk, path))
    found = []
    # The memory continues the narration's prompt up to its tail only: the tail holds the state's narrator-only
    # lines, and a memory carries no secrecy mark (docs/decisions.md, "Where each request sits").
    narration = prompts.narration_of(node) if due else None
    if due:
        nodes = list(path.nodes().filter(depth__gte=due[0][0], depth__lte=due[-1][1])
                     .values_list("depth", "branch_id", "role", "mode", "text"))
        for start, end in due:
            rows = [row for row in nodes if start <= row[0] <= end]
            texts = block_texts(rows)
            brief = _cast_brief(campaign, path.capped(end), "\n".join(texts))
            messages = prompts.before_tail(narration, RULES,
                                           f"{brief}\n\nStory excerpt:\n\n{blocks.excerpt(texts)}\n\nMemory:",
                                           room=prompts.room_for(campaign, MAX_TOKENS))
            found.append(_Block(start, end, rows[-1][1], messages))
    limit = min([prompts.answer_limit(campaign, block.messages, MAX_TOKENS) for block in found] or [MAX_TOKENS])
    options = llm.ChatOptions(num_predict=limit, num_ctx=campaign.context_token_budget, temperature=0.0)
    return _Job(node, campaign, found, None, options)


def block_texts(rows):
    """Return a block's texts as the summariser reads them, from rows of (depth, branch, role, mode, text)."""
    return [layers.render_action(mode, text) if role == Node.Role.PLAYER else text for _, _, role, mode, text in rows]


def read_block(path, start, end):
    """Return the texts of depths ``start``..``end`` on ``path``, as the summariser reads them."""
    return block_texts(path.nodes().filter(depth__gte=start, depth__lte=end)
                       .values_list("depth", "branch_id", "role", "mode", "text"))


def _cast_brief(campaign, path, text):
    """Return who the story is about: the protagonist, then the known characters this stretch names."""
    state = story_state.state_at(path, campaign)
    lowered = text.lower()
    # Narrator-only people stay out: a memory carries no secrecy mark, so a secret must not reach its text.
    named = [record for record in state.entities()
             if record.data.get("kind") == "character" and record.subject != story_state.PROTAGONIST
             and not record.narrator_only and record.value.lower() in lowered]
    lines = ["Cast:", f"- The player's character: {campaign.protagonist}"]
    lines += [f"- {record.value}: {record.data.get('description', '')}".rstrip(": ") for record in named]
    return "\n".join(lines)


def _store(campaign_id, written):
    with transaction.atomic():
        rows = bank.write(campaign_id, written)
        new_ids = [row.pk for row in rows]
        evicted = bank.evict(campaign_id, capacity(), frozen=new_ids)
    return new_ids, evicted


def _memory_of(reply, model):
    text = reply.get("memory") if isinstance(reply, dict) else None
    if not isinstance(text, str) or not blocks.strip_marker(text):
        raise llm.NarratorError(
            f"The model {model} answered without a memory ({str(reply)[:80]}), so none was written for this "
            "stretch; it is retried after the next reply. Choose a larger narrator model if this repeats.")
    return text


def _describe(error, model, block):
    where = f"depths {block.start}–{block.end}"
    if isinstance(error, TimeoutError):
        return (f"The model {model} did not write the memory of {where} within {_timeout():g} s; "
                "it is retried after the next reply.")
    if isinstance(error, llm.NarratorError):
        return f"No memory of {where}: {failures.in_words(error, model)}"
    return f"Writing the memory of {where} failed ({type(error).__name__}: {error}); nothing was kept."


def capacity():
    """Return how many unforgotten memories a campaign keeps (``memory_bank_capacity``)."""
    return getattr(settings, "STORYTELLER_MEMORY_BANK_CAPACITY", bank.eviction.MEMORY_BANK_CAPACITY)


def _timeout():
    return getattr(settings, "STORYTELLER_MEMORY_TIMEOUT", DEFAULT_TIMEOUT)
