"""What the post-turn steps' model requests cost after a reply, kept for the inspector (issue 27).

For each request a step made (``llm.usage``), one ``ModelRequest`` row: its
size as a chat template lays it out (cl100k), how much of it begins as the
narration's prompt and reply (what a server with one prompt cache holds
after the narration, ``llm.caching.shared``), and what the server reported
reading. Derived figures: a failure to keep them costs the step nothing.
"""

from campaigns.models import ModelRequest, Node

from .. import tokens
from ..llm import caching
from . import prompts


def record(node_id, kind, used):
    """Keep one ModelRequest row per request in ``used`` (``llm.usage.Used``) that ``kind``'s step made for reply
    ``node_id``, numbered after those already kept."""
    node = Node.objects.filter(pk=node_id).first()
    if node is None:
        return
    narration = prompts.narration_of(node)
    held = (narration.messages, narration.reply["content"]) if narration else None
    number = ModelRequest.objects.filter(node=node).count()
    rows = []
    for each in used:
        number += 1
        rows.append(ModelRequest(
            node=node, number=number, kind=kind, messages=len(each.messages),
            shared_messages=_leading(narration, each.messages),
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
