"""The recorder: after a turn is accepted, ask the model what changed, as typed state events.

The reply itself never changes the state, however it is worded ("Mara is
dead" is prose until an event says so and passes validation). The model sees
the state the turn started from and the turn, and answers JSON constrained by
``SCHEMA`` (Ollama ``format``, OpenAI ``response_format``, a grammar for the
built-in narrator); ``campaigns.state.apply_events`` validates and writes.

A failure — server down, timeout, text that is not JSON, JSON of the wrong
shape, even a failed write — is recorded on the reply's RecorderRun after the
failed work rolled back, and never touches the accepted turn; the next turn
simply uses the last applied state, and the person can retry.

A game master's reply (one whose snapshot holds ``report["voices"]``) is
recorded only at a stage boundary (docs/voices.md): until its narration
says a new stage begins (``NARRATION.new_stage``), it waits unrecorded
(``RecorderRun`` "waiting") and the play page counts it. The reply that
ends the stage is recorded with every reply still waiting on its line, in
one call, and they are all marked recorded in the same transaction. A
failure there writes nothing and keeps them all waiting (its reason on the
boundary's run, for the status line), never an error into the story.
"""

import asyncio
import logging
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction

from campaigns import lineage
from campaigns import state as story_state
from campaigns.models import Campaign, ContextSnapshot, Node, RecorderRun, Round
from campaigns.state import selection

from .. import llm
from ..context import rules
from ..llm import bounds, failures, priority
from . import Step, prompts

logger = logging.getLogger(__name__)

# Past this many entities the recorder is shown only those in the scene or
# named in the turn: the full list would cost more tokens than the turn itself.
MAX_LISTED = 60

# The events the recorder may propose, each with its own fields and every string and list bounded
# (campaigns/state/registry.py; the same schema docs/events.md documents). A turn's request leaves out the
# story time and world rules types its line has no use for (``schema_for``).
SCHEMA = story_state.recorder_schema()

# Ten events with their data are about 1,000 tokens of JSON. The longest answer SCHEMA allows is far longer
# (every optional field of forty item_changes), so the limit is what a recording needs: a server model stops
# when its JSON closes, and the built-in narrator, whose grammar would let it write every field out, fits the
# schema to this limit itself (llm.builtin), so its answers close within it.
MAX_TOKENS = 1600

RULES = """You keep the record of an interactive story. Read the latest turn and list, as JSON events, only the changes to the story state that the turn clearly establishes. Record nothing that is merely said, feared, planned or guessed, and nothing already in the state. Use the exact names from the state; introduce any new person, place, item or faction before other events name it.

Event types (subject / object / value; "data" holds the rest):
- introduce: name / kind (character, place, item or faction) / a one-line description; a new item says in data.holder who or what holds it
- move: who / place / "" — only along open exits; arrive: who / place (or "" for the scene's place) / ""; leave: who / place they go to (or "") / ""
- item_changes: who / "" / "" with data.ops, in order: take, drop, give (to), put (to a container), wear, remove, open, close, lock, unlock (key; or exit for a door), reveal
- exit_change: place / destination / "" — a new way, or one blocked or cleared (data.state); locks change only by item_changes with the key
- feature: place / feature name / what it is      place_edit: place / "" / its new description
- item_edit: item / "" / "" — its condition or notability changed (data)
- add_fact: who it is about (or "") / the fact it replaces (or "") / the fact, one sentence
- retract_fact: "" / "" / the exact fact that is no longer true
- relationship: one / the other / how the first now sees the other (data: label, and familiarity, trust, closeness, tension from -1 to 1)
- know: who / what they learned exists (a place, item, person or lore) / "" (data.how: told, read or inferred)
- open_thread: "" / "" / the unresolved question or goal      resolve_thread: "" / outcome / the exact thread
- set_condition: who / "" / their condition now (wounded, asleep, ...); data: activity, mood, and inner (what they feel inside)
- scene: "" / place (or "") / one line saying where the scene stands now
- slot: a new wear slot / "" / "" (data.capacity)
Set narrator_only to true only for something the protagonist does not know. What a character sees on arriving somewhere is recorded for you; do not record it.
Answer {"events": []} when nothing changed."""

# The rules' types (campaigns/state/time/rulebook.py), each with its line of RULES; a turn is offered those its line
# uses (``rules.recorder_types``): a small model reads the schema in its prompt, and every variant costs time
# (measured: the whole set took a three-turn recording on llama-cpp-python past its 120 s timeout).
RULE_LINES = {
    "elapse": '- elapse: "" / "" / "" — how long the turn took in story time when it was clearly more than a moment '
              '(data.seconds, at most 86400)',
    "engagement": '- engagement: "" / "" / "" — an appointment made (data: who, at, place, what)',
    "engagement_edit": '- engagement_edit: "" / "" / "" — data.id, and status kept, missed or cancelled once the turn '
                       'shows it',
    "intent_add": '- intent_add: who / "" / "" — a goal taken up (data: plan, priority and urgency 1-5, deadline)',
    "intent_edit": '- intent_edit: who / "" / "" — data.id, and status done or dropped',
    "variable_change": '- variable_change: object (character, item, place or "world") / variable name / "" — data.to '
                       '(a value) or data.by (a number change), with data.reason',
    "roll": '- roll: who / "" / "" — dice the story calls for (data.check: a check\'s key, or data.expression like '
            '2d6; data.reason)',
    "beat_addressed": '- beat_addressed: trigger id / "" / "" — the reply took up a pending beat',
}


def schema_for(names):
    """Return SCHEMA with the rules' types left out but ``names``."""
    events = SCHEMA["properties"]["events"]
    variants = [v for v in events["items"]["anyOf"]
                if v["properties"]["type"]["const"] not in RULE_LINES or v["properties"]["type"]["const"] in names]
    return {**SCHEMA, "properties": {"events": {**events, "items": {"anyOf": variants}}}}


def rules_for(names):
    """Return RULES with the lines of the rules' types ``names`` among the event types."""
    extra = "\n".join(RULE_LINES[name] for name in RULE_LINES if name in names)
    if not extra:
        return RULES
    head, _, tail = RULES.partition("\nSet narrator_only")
    return f"{head}\n{extra}\nSet narrator_only{tail}"


@dataclass(frozen=True)
class _Job:
    node: Node
    narrator_model: str  # the campaign's, "" for the default
    messages: list
    options: llm.ChatOptions
    attempt: int
    schema: dict
    waiting: tuple = ()  # earlier replies of a game master's stage recorded with this one (their ids)
    staged: bool = False  # a game master's reply: a failure keeps it waiting instead of failing


async def record(node_id):
    """Record the state events of reply ``node_id``; return the RecorderRun status, or None if already recorded."""
    job = await database_sync_to_async(_prepare)(node_id)
    if job is None or job == RecorderRun.Status.WAITING:
        return job
    # Off the database's thread: choosing the narrator may probe the model server.
    narrator = await llm.anarrator_for(job.narrator_model or None)
    model = narrator.model
    try:
        reply = await priority.call(
            lambda: asyncio.wait_for(narrator.complete_json(job.messages, job.schema, job.options), _timeout()))
        events = _events_of(reply, model)
        await database_sync_to_async(_apply)(job, events, model)
    except Exception as error:  # noqa: BLE001 — whatever failed, the turn stands and the failure is recorded
        if not isinstance(error, (llm.NarratorError, TimeoutError)):
            logger.exception("the recorder failed for node %s", node_id)
        if job.staged:
            await database_sync_to_async(_keep_waiting)(job.node, _describe(error, model), attempt=job.attempt,
                                                        model=model)
            return RecorderRun.Status.WAITING
        await database_sync_to_async(story_state.record_failure)(
            job.node, _describe(error, model), attempt=job.attempt, model=model
        )
        return RecorderRun.Status.FAILED
    return RecorderRun.Status.APPLIED


STEP = Step(record, "Recording what the reply changed…", "Recording", RecorderRun, kind="recorder")


def _apply(job, events, model):
    """Apply the recording at the reply, and mark the stage's earlier replies recorded with it, in one transaction."""
    with transaction.atomic():
        story_state.apply_events(job.node, events, source="recorder", attempt=job.attempt, model=model)
        if job.waiting:
            RecorderRun.objects.filter(node_id__in=job.waiting, status=RecorderRun.Status.WAITING).update(
                status=RecorderRun.Status.APPLIED, error="", model=model)


def _keep_waiting(node, error, *, attempt, model):
    """Keep a game master's reply waiting after a failed recording at its stage boundary, saying why."""
    RecorderRun.objects.update_or_create(node=node, defaults={
        "status": RecorderRun.Status.WAITING, "error": str(error)[:2000], "attempts": attempt, "model": model})


def stage_ends(report):
    """Return whether a reply's context report says a new stage begins, or None when no game master played it.

    The game master's turn keeps its narration step's answer (``NARRATION``)
    in ``report["voices"]["narration"]``.
    """
    voices = (report or {}).get("voices")
    if not isinstance(voices, dict):
        return None
    narration = voices.get("narration") if isinstance(voices.get("narration"), dict) else {}
    return bool(narration.get("new_stage", voices.get("new_stage", False)))


def waiting_on(path, before_depth):
    """Return the replies on ``path`` above ``before_depth`` that wait for a stage boundary, oldest first."""
    return list(RecorderRun.objects.filter(path.clause("node__"), node__campaign_id=path.campaign_id,
                                           node__depth__lt=before_depth, status=RecorderRun.Status.WAITING)
                .order_by("node__depth").select_related("node"))


def _prepare(node_id):
    node = Node.objects.filter(pk=node_id, role=Node.Role.NARRATOR).first()
    if node is None:
        return None
    run = RecorderRun.objects.filter(node=node).first()
    if run is not None and run.status == RecorderRun.Status.APPLIED:
        return None
    campaign = Campaign.objects.get(pk=node.campaign_id)
    report = ContextSnapshot.objects.filter(node=node).values_list("report", flat=True).first()
    ends = stage_ends(report)
    if ends is False and campaign.game_master:
        # A game master's reply within a stage: it waits, with no model call, until the stage ends.
        RecorderRun.objects.update_or_create(node=node, defaults={"status": RecorderRun.Status.WAITING})
        return RecorderRun.Status.WAITING
    path = lineage.path_at(campaign.pk, node.branch_id, node.depth)
    waiting = waiting_on(path, node.depth)
    first = waiting[0].node.depth if waiting else node.depth
    turns = {n.depth: n for n in path.nodes().filter(depth__gte=first - 1)}
    before = path.capped(first - 2)
    pairs = [(turns.get(depth - 1), turns[depth]) for depth in range(first, node.depth + 1, 2) if depth in turns]
    text = "\n".join(f"{player.text if player else ''}\n{reply.text}" for player, reply in pairs)
    state = story_state.state_for_turn(before, campaign, text)
    names = rules.recorder_types(state)
    messages = prompts.continuing(prompts.narration_of(node), rules_for(names),
                                  _prompt(state, pairs, _rounds(pairs) if ends is not None else {}),
                                  room=prompts.room_for(campaign, MAX_TOKENS))
    options = llm.ChatOptions(num_predict=prompts.answer_limit(campaign, messages, MAX_TOKENS),
                              num_ctx=campaign.context_token_budget, temperature=0.0)
    return _Job(node, campaign.narrator_model, messages, options, attempt=(run.attempts if run else 0) + 1,
                schema=schema_for(names), waiting=tuple(r.node_id for r in waiting),
                staged=ends is not None and campaign.game_master)


def _rounds(pairs):
    """Return {reply id: [line]}: what each voice said in the game master's rounds of these replies."""
    lines = {}
    for each in Round.objects.filter(node__in=[reply for _, reply in pairs], kind=Round.Kind.GM).order_by("number"):
        lines.setdefault(each.node_id, []).extend(
            f"Round {each.number}, {out.get('speaker', '')}: {out.get('text', '')}" for out in each.outputs
            if isinstance(out, dict) and out.get("text"))
    return lines


def _prompt(state, pairs, rounds=None):
    """Return what the recorder reads: the state the turn (or the stage) started from, then its turns."""
    text = "\n".join(f"{player.text if player else ''}\n{node.text}" for player, node in pairs)
    chosen = selection.select(state, text)
    entities = state.entities()
    if len(entities) > MAX_LISTED:
        focus = selection.mentioned(state, text) | set(state.present()) | {story_state.PROTAGONIST}
        entities = [state.entity(key) for key in focus]
    entities.sort(key=lambda record: record.value)
    lines = ["Known entities (name — kind — aliases):"]
    lines += [f"- {e.value} — {e.data.get('kind')} — {', '.join(e.data.get('aliases', [])) or 'none'}"
              for e in entities]
    lines.append(f"Protagonist: {state.name_of(story_state.PROTAGONIST)}")
    if chosen.location:
        lines.append(f"Location: {chosen.location}")
    if chosen.scene:
        lines.append(f"Scene: {chosen.scene}")
    lines += ["Current state:", *[f"- {line.text}" for line in [*chosen.here, *chosen.lines]]]
    lines += rules.recorder_lines(state)
    holding = [f"- {rule.text}" for rule in state.canon if rule.scope == "initial" and not state.superseded(rule.id)]
    if holding:
        lines += ["Initial canon that still holds (retract or replace it by its exact text if the story changes it):",
                  *holding]
    lines += ["", "The turn to record:" if len(pairs) == 1 else f"The {len(pairs)} turns to record, in order:"]
    for player, node in pairs:
        if player is not None:
            lines.append(f"Player ({player.mode}): {player.text}")
        lines += (rounds or {}).get(node.pk, [])
        lines.append(f"Narrator: {node.text}")
    return "\n".join(lines)


def _events_of(reply, model):
    events = reply.get("events")
    if not isinstance(events, list):
        raise llm.NarratorError(
            f"The model {model} answered JSON without an \"events\" list ({str(reply)[:80]}), "
            "so nothing was recorded. Retry, or choose a larger narrator model."
        )
    return events


def _describe(error, model):
    if isinstance(error, TimeoutError):
        return (f"The model {model} did not finish recording within {_timeout():g} s. "
                "Retry when the server is less busy, or raise STORYTELLER_RECORDER_TIMEOUT.")
    if isinstance(error, llm.NarratorError):
        return failures.in_words(error, model)
    return f"Recording failed ({type(error).__name__}: {error}); nothing was written. Retry."


def _timeout():
    return settings.STORYTELLER_RECORDER_TIMEOUT
