"""What the post-turn steps' model requests cost after a reply, kept for the inspector (issue 27).

For each request a step made (``llm.usage``), one ``ModelRequest`` row: its
size as a chat template lays it out (cl100k), how much of it begins as the
narration's prompt and reply (what a server with one prompt cache holds
after the narration, ``llm.caching.shared``), and what the server reported
reading. Derived figures: a failure to keep them costs the step nothing.
"""

import logging

from channels.db import database_sync_to_async

from campaigns.models import ModelRequest, Node

from .. import tokens
from ..llm import caching
from . import prompts

logger = logging.getLogger(__name__)


async def arecord(node_id, used):
    """See record(); a failure is logged, never raised: a figure for the inspector is never worth a step or a turn."""
    if not used:
        return
    try:
        await database_sync_to_async(record)(node_id, used)
    except Exception:  # noqa: BLE001
        logger.exception("keeping the model requests' figures failed for node %s", node_id)


def record(node_id, used):
    """Keep one ModelRequest row per request in ``used`` (``llm.usage.Used``) made for reply ``node_id``,
    numbered after those already kept."""
    node = Node.objects.filter(pk=node_id).first()
    if node is None:
        return
    narration = prompts.narration_of(node)
    held = (narration.messages, narration.reply["content"]) if narration else None
    number = ModelRequest.objects.filter(node=node).count()
    rows = []
    for each in used:
        number += 1
        leading = _leading(narration, each.messages)
        rows.append(ModelRequest(
            node=node, number=number, kind=each.kind or "request", messages=len(each.messages), shared_messages=leading,
            asked="\n\n".join(f"[{m['role']}] {m.get('content') or ''}" for m in each.messages[leading:]),
            prompt_tokens=caching.prompt_tokens(each.messages, tokens.count),
            shared_tokens=caching.shared(held, each.messages, tokens.count) if held else 0,
            server_prompt=each.prompt, server_read=each.read, written=each.written, source=each.source[:200]))
    ModelRequest.objects.bulk_create(rows)


def _leading(narration, messages):
    """Return how many of ``messages`` are, from the first, the narration's messages and then its reply."""
    if narration is None:
        return 0
    count = 0
    for held, sent in zip([*narration.messages, narration.reply], messages):
        if held != sent:
            break
        count += 1
    return count
