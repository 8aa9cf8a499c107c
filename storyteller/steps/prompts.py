"""Where a post-turn step's request starts: the narration's own prompt, read again from the reply's snapshot (issue 27).

A server with one prompt cache (llama-cpp-python's, the built-in narrator's
one ``Llama``, llama.cpp with one slot, Ollama without memory for parallel
slots) reuses only what a request shares with the one it served before. So
a step continues the narration: its exact messages (stable prefix, summary,
history, tail with the player's input), then the reply as the narrator's own
message, then ONE message with the step's instructions (``continuing``); the
server re-reads only that last message. The messages are read again from the
reply's context report and the nodes it names (``context.messages_of``) and
used only when their digest is the one stored when they were sent: byte for
byte what the server saw.

A step that must not see the dynamic tail (the memory summariser: the tail
holds the state's narrator-only lines, and a memory carries no secrecy mark)
continues the prompt up to its tail (``before_tail``): what the next turn's
narration starts with too, so it costs the cache nothing either.

A reply whose report holds no prompt (made before this, imported from an
older bundle, written by hand), whose prompt no longer reads back the same,
a request that would leave the step less than half its answer limit in
the campaign's window (``room_for``), or any reply when ``STORYTELLER_STEP_PROMPTS`` is
``own``, gets the step's own prompt: its rules as the system message and
what it reads as the user's (``own``), as before issue 27.
"""

import logging
from dataclasses import dataclass

from django.conf import settings

from campaigns.models import ContextSnapshot, Round

from .. import context, tokens
from ..context import layers
from ..llm import caching
from ..voices import gm

logger = logging.getLogger(__name__)

OWN = "own"
NARRATION = "narration"


@dataclass(frozen=True)
class Narration:
    """The prompt a reply was narrated from, and the reply as the narrator's message after it."""

    messages: list  # exactly as sent
    reply: dict  # {"role": "assistant", "content": the reply as history renders it}
    tail_start: int  # the first message of the dynamic tail (what the next narration's prompt no longer starts with)


def narration_of(node):
    """Return the Narration of reply ``node`` from its snapshot, or None (the steps then use their own prompts).

    Database reads; call from the database's thread.
    """
    if layout() != NARRATION:
        return None
    return sent(node)


def sent(node):
    """Return the Narration of reply ``node`` exactly as it was sent (its digest checked), or None when its
    snapshot cannot say (see the module docstring): also what a replay with the same prompts sends again.

    Database reads; call from the database's thread.
    """
    report = ContextSnapshot.objects.filter(node=node).values_list("report", flat=True).first()
    if not isinstance(report, dict) or not isinstance(report.get("prompt"), dict):
        return None
    messages = context.messages_of(report)
    if messages is None:
        return None
    record = report["prompt"]
    rounds = []
    if isinstance(report.get("voices"), dict):
        # A game master's narration: its rules in the system message, its notes on the rounds and the request to
        # narrate after the prompt (voices.gm.narration_messages), from the rounds as stored.
        rounds = [{"number": number, "outputs": outputs, "resolution": resolution} for number, outputs, resolution in
                  Round.objects.filter(node=node, kind=Round.Kind.GM).order_by("number")
                  .values_list("number", "outputs", "resolution")]
        messages = gm.narration_messages(messages, rounds)
    if context.digest(messages) != record["digest"]:
        logger.warning("the narration prompt of node %s does not read back as it was sent; its steps use their own "
                       "prompts", node.pk)
        return None
    said = context.messages_for(node.role, node.mode, node.text, rounds)[-1]
    reply = {"role": "assistant", "content": layers.fill_user(said["content"], record["name"])}
    return Narration(messages, reply, record["tail_start"])


def continuing(narration, rules, prompt, *, room):
    """Return a step's request: ``narration``'s messages, the reply, then ``rules`` and ``prompt`` as one message;
    the step's own prompt (``own``) when there is no narration to continue or the request is longer than ``room``."""
    if narration is None:
        return own(rules, prompt)
    return _within(room, [*narration.messages, narration.reply, {"role": "user", "content": f"{rules}\n\n{prompt}"}],
                   rules, prompt)


def before_tail(narration, rules, prompt, *, room):
    """Return a step's request that must not see the narration's dynamic tail: the prompt up to it, then ``rules``
    and ``prompt`` as one message; the step's own prompt when there is no narration to continue or the request is
    longer than ``room``."""
    if narration is None:
        return own(rules, prompt)
    asked = {"role": "user", "content": f"{rules}\n\n{prompt}"}
    return _within(room, [*narration.messages[:narration.tail_start], asked], rules, prompt)


def room_for(campaign, answer_tokens):
    """Return the prompt tokens a step's request may take when it continues the narration: the campaign's window
    (the ``num_ctx`` every request sends) less half the step's answer limit.

    The narration's prompt is built to fill the window but for the reply's room, so a long story's continued request
    (that prompt, the reply, the step's message) can outgrow the window: llama.cpp refuses such a prompt or cuts the
    answer short, and Ollama cuts the prompt's beginning off. Near the window's edge the step answers in what the
    window leaves (``answer_limit``), never less than half its limit (a recording of one turn is a few hundred
    tokens; the limit is for a stage of several); past that it uses its own prompt.
    """
    return campaign.context_token_budget - answer_tokens // 2


def answer_limit(campaign, messages, answer_tokens):
    """Return the step's answer limit for ``messages``: ``answer_tokens``, or what the campaign's window leaves after
    the prompt when that is less."""
    return max(1, min(answer_tokens, campaign.context_token_budget - caching.prompt_tokens(messages, tokens.count)))


def _within(limit, messages, rules, prompt):
    size = caching.prompt_tokens(messages, tokens.count)
    if size <= limit:
        return messages
    logger.info("a step's request continuing the narration would take %s of the %s prompt tokens it has room for; "
                "it uses its own prompt", size, limit)
    return own(rules, prompt)


def own(rules, prompt):
    """Return a step's own prompt: its rules as the system message, what it reads as the user's."""
    return [{"role": "system", "content": rules}, {"role": "user", "content": prompt}]


def layout():
    """Return how the steps lay out their requests: ``narration`` (continue it), or ``own`` (a prompt each)."""
    return getattr(settings, "STORYTELLER_STEP_PROMPTS", NARRATION)
