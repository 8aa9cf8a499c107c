"""The judge: after a turn is recorded, decide the world triggers' free-text conditions (seed 002 世界触发器).

A trigger may wait on a condition only a reader can decide ("Mara has
admitted what is in the vault"). After the recorder, this step asks the
model, in one small JSON call, whether each such condition holds now, and
writes its answers as ``judgment`` events; firing is still code reading
those judgments, in the same batch (``rulebook.after_batch``). The model sees
each condition's text and the latest turn, nothing else of any trigger, so
what a secret trigger does never reaches a prompt. With nothing to judge no
model is asked at all.
"""

import asyncio
import logging
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction

from campaigns import lineage
from campaigns import state as story_state
from campaigns.models import Campaign, JudgeRun, Node
from campaigns.state.time import rulebook, triggers

from .. import llm
from ..llm import failures, priority
from . import Step, prompts

logger = logging.getLogger(__name__)

# Each answer is an id and a boolean: a few tokens each.
MAX_TOKENS = 300
MAX_QUESTIONS = 20

SCHEMA = {"type": "object", "properties": {"judgments": {
    "type": "array", "maxItems": MAX_QUESTIONS, "items": {
        "type": "object", "properties": {"id": {"type": "string", "maxLength": 120}, "holds": {"type": "boolean"}},
        "required": ["id", "holds"], "additionalProperties": False}}},
    "required": ["judgments"], "additionalProperties": False}

RULES = """You judge statements about an interactive story. For each numbered statement, answer whether it is true of the story now, after the latest turn, as the turn and the story so far establish it. Answer false when the story does not clearly establish it. Answer JSON: {"judgments": [{"id": "<the statement's id>", "holds": true or false}]}, one entry per statement."""


@dataclass(frozen=True)
class _Job:
    node: Node
    narrator_model: str
    messages: list
    options: llm.ChatOptions
    questions: list


async def judge(node_id):
    """Decide the judged conditions after reply ``node_id``; return the JudgeRun status, or None if already done."""
    job = await database_sync_to_async(_prepare)(node_id)
    if job is None:
        return None
    if not job.questions:
        await database_sync_to_async(record_run)(job.node, JudgeRun.Status.NOTHING)
        return JudgeRun.Status.NOTHING
    narrator = await llm.anarrator_for(job.narrator_model or None)
    try:
        reply = await priority.call(
            lambda: asyncio.wait_for(narrator.complete_json(job.messages, SCHEMA, job.options), _timeout()))
        events = _events_of(reply, job.questions, narrator.model)
        await database_sync_to_async(_apply)(job.node, events, narrator.model)
    except Exception as error:  # noqa: BLE001 — whatever failed, the turn stands and the failure is recorded
        if not isinstance(error, (llm.NarratorError, TimeoutError)):
            logger.exception("the judge failed for node %s", node_id)
        await database_sync_to_async(record_run)(job.node, JudgeRun.Status.FAILED, _describe(error, narrator.model),
                                                 narrator.model)
        return JudgeRun.Status.FAILED
    return JudgeRun.Status.APPLIED


STEP = Step(judge, "Judging the world's triggers…", "Judge step", JudgeRun, kind="judge")


def _prepare(node_id):
    node = Node.objects.filter(pk=node_id, role=Node.Role.NARRATOR).first()
    if node is None or JudgeRun.objects.filter(node=node).exclude(status=JudgeRun.Status.FAILED).exists():
        return None
    campaign = Campaign.objects.get(pk=node.campaign_id)
    path = lineage.path_at(campaign.pk, node.branch_id, node.depth)
    state = story_state.state_for_events(path, campaign, [])
    questions = triggers.questions(rulebook.triggers_of(state))[:MAX_QUESTIONS]
    player = path.nodes().filter(depth=node.depth - 1).first()
    # With nothing to judge no model is asked, so the narration's prompt is not read either.
    messages = (prompts.continuing(prompts.narration_of(node), RULES, _prompt(questions, player, node),
                                   room=prompts.room_for(campaign, MAX_TOKENS)) if questions else [])
    options = llm.ChatOptions(num_predict=prompts.answer_limit(campaign, messages, MAX_TOKENS),
                              num_ctx=campaign.context_token_budget, temperature=0.0)
    return _Job(node, campaign.narrator_model, messages, options, questions)


def _prompt(questions, player, node):
    lines = ["The latest turn:"]
    if player is not None:
        lines.append(f"Player ({player.mode}): {player.text}")
    lines += [f"Narrator: {node.text}", "", "Statements:"]
    lines += [f"- {ident}: {text}" for ident, text in questions]
    return "\n".join(lines)


def _events_of(reply, questions, model):
    answers = reply.get("judgments")
    if not isinstance(answers, list):
        raise llm.NarratorError(f"The model {model} answered JSON without a \"judgments\" list, so no trigger "
                                "condition was judged. Retry, or choose a larger narrator model.")
    asked = {ident for ident, _ in questions}
    decided = {str(a.get("id")): a.get("holds") for a in answers if isinstance(a, dict)}
    return [{"type": "judgment", "subject": ident, "data": {"holds": holds}}
            for ident, holds in decided.items() if ident in asked and isinstance(holds, bool)]


def _apply(node, events, model):
    with transaction.atomic():
        story_state.apply_events(node, events, source="judge")
        record_run(node, JudgeRun.Status.APPLIED, model=model)


def record_run(node, status, error="", model=""):
    """Record what the judge did after ``node`` (one row per reply)."""
    JudgeRun.objects.update_or_create(node=node, defaults={"status": status, "error": error[:2000], "model": model})


def _describe(error, model):
    if isinstance(error, TimeoutError):
        return (f"The model {model} did not finish judging within {_timeout():g} s. "
                "Retry when the server is less busy, or raise STORYTELLER_RECORDER_TIMEOUT.")
    if isinstance(error, llm.NarratorError):
        return failures.in_words(error, model)
    return f"Judging failed ({type(error).__name__}: {error}); nothing was written. Retry."


def _timeout():
    return settings.STORYTELLER_RECORDER_TIMEOUT
