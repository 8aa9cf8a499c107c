"""The world author (seed 002 扩展世界): more world when the story needs it, and consolidation after.

``ask`` answers the game master's ``expand_world`` during a turn: the
request is checked first (the author on, a need over the threshold, the
turn's cap, nobody existing who already serves — refused naming whom to
reuse, without asking the model), then the model answers ``EDIT_WORLD``
and the edit is checked on a copy of the state the turn sees, through the
typed events and world_lint (``campaigns.state.world.authoring``). Nothing is
written: the Proposal's events are committed with the turn (``commit``).

``consolidate`` is what the post-turn step (``steps.consolidation``) asks:
when enough new things wait, or one has waited four turns, the model
completes their passages and relationships (``CONSOLIDATE``: it can create
nothing), the answer is checked the same way, and the completions and the
emptied queue are written in one transaction — or, on any failure, nothing
is, and the queue stays.

No model call is made on the database's thread or inside a transaction:
the reads and the writes go through ``database_sync_to_async``, the calls
are awaited between them.
"""

import asyncio
from dataclasses import dataclass, field

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction

from campaigns import lineage
from campaigns import state as story_state
from campaigns.models import Campaign, Node, StateEvent, StateRecord
from campaigns.state.time.rules import Refused
from campaigns.state.world import authoring, world
from campaigns.state.world.authoring import AuthorRefused, Request

from .. import llm
from ..llm import failures, priority, usage
from . import schemas
from .limits import limits_of

# Two characters, two places and two items with their exits and relationships, written out, are about 1,000
# tokens of JSON; a server model stops when its JSON closes, the built-in narrator fits the schema to this.
MAX_TOKENS = 1200
# Past this many entities the author sees those at the scene and those the request's words name.
MAX_LISTED = 60
# The world author writes with a world file's rights: it places people where it creates them, ignoring exits.
SOURCE = StateEvent.Source.WORLD

RULES = """You are the world author of an interactive story. The game master asks you for more world only when the story truly needs it. Look first at what exists. If an existing person, place or thing can serve, answer "reuse" with its exact name. If the request is only atmosphere, a passer-by, a crowd or something mentioned in passing, answer "refuse" with the reason. Otherwise answer "create" with the fewest new things that serve, never more than you are allowed:
- a new place has at least one exit to a place that exists (both_ways true unless the way is one-way), and a few features;
- a new character has a place, a one-line description, and a relationship to anyone there it already knows;
- a new item has a holder: a place, a character or a container.
Use the exact names of what exists. Never give something new a name or alias that something else has. Leave the lists of what you do not create empty."""

CONSOLIDATION_RULES = """You complete the world of an interactive story after new people and places were added to it. For each new thing listed, add only what is missing: exits that join a new place to its neighbours (both ways unless the way is one-way), and relationships between a new character and those who know it, in both directions. Create nothing new: name only places and characters that exist. Answer with empty lists when nothing is missing."""


@dataclass(frozen=True)
class Proposal:
    """The author's answer to one ``expand_world``: what it would create (events), or whom to reuse, or why not."""

    status: str  # "created" | "reused" | "refused" | "failed" (the model did not answer)
    reason: str
    request: Request
    turn: int
    events: list = field(default_factory=list)
    created: list = field(default_factory=list)  # keys of the new entities
    reuse: str = ""  # the name of the existing one that serves
    findings: list = field(default_factory=list)  # world_lint's warnings, left for consolidation
    state: object = None  # created: the copy of the state with the edit made, for the rest of the turn


async def ask(narrator, state, request, *, limits, turn, created_before=0):
    """Return the Proposal answering ``request`` on ``state`` (a whole State: the one the turn sees now).

    ``created_before`` is what the author made earlier in this turn and not
    yet committed; what it made in this turn and committed is counted from
    the queue. Nothing is written; nothing but the model call leaves the
    event loop.
    """
    made = created_before + authoring.created_in(state, turn)
    try:
        authoring.check_request(request, enabled=limits.authoring_enabled, per_turn=limits.authoring_per_turn,
                                created=made)
        authoring.refuse_if_fitting(state, request)
    except Refused as refusal:
        return Proposal("refused", str(refusal), request, turn)
    messages = [{"role": "system", "content": RULES},
                {"role": "user", "content": _prompt(state, request, limits.authoring_per_turn - made)}]
    options = llm.ChatOptions(num_predict=MAX_TOKENS, temperature=0.2)
    try:
        with usage.asking("world author"):
            reply = await priority.call(lambda: asyncio.wait_for(
                narrator.complete_json(messages, schemas.EDIT_WORLD, options), _timeout()))
    except (llm.NarratorError, TimeoutError) as error:
        return Proposal("failed", _failure(error, narrator.model), request, turn)
    return decide(state, request, reply, turn=turn, per_turn=limits.authoring_per_turn, created_before=made)


def decide(state, request, reply, *, turn, per_turn, created_before=0):
    """Return the Proposal the author's ``reply`` (EDIT_WORLD) makes on ``state``, checked whole (pure)."""
    decision = reply.get("decision")
    if decision == "refuse":
        return Proposal("refused", f"the world author declined: {reply.get('reason') or 'the story can do without'}",
                        request, turn)
    if decision == "reuse":
        key = state.resolve(reply.get("reuse", ""))
        if key is None:
            return Proposal("refused", f"the world author would reuse {reply.get('reuse')!r}, which does not exist",
                            request, turn)
        return Proposal("reused", reply.get("reason", ""), request, turn, reuse=state.name_of(key))
    checked = authoring.check_edit(state, reply, turn=turn, per_turn=per_turn, created_before=created_before)
    if not checked.kept:
        return Proposal("refused", "; ".join(checked.problems), request, turn)
    warnings = [f.text for f in checked.findings if f.severity == "warning"
                and any(authoring.concerns(f, key) for key in checked.created)]
    return Proposal("created", reply.get("reason", ""), request, turn, events=checked.events,
                    created=checked.created, findings=warnings, state=checked.state)


async def propose(campaign_id, request, *, created_before=0):
    """See ask(): at the campaign's head, for a turn about to be played (its number the head's next)."""
    campaign, state = await database_sync_to_async(_head)(campaign_id)
    narrator = await llm.anarrator_for(campaign.narrator_model or None)
    return await ask(narrator, state, request, limits=limits_of(campaign), turn=campaign.head_depth // 2 + 1,
                     created_before=created_before)


def _head(campaign_id):
    campaign = Campaign.objects.get(pk=campaign_id)
    return campaign, story_state.state_at(lineage.path_of(campaign), campaign)


def commit(node, proposal):
    """Write a created Proposal's events at ``node`` (the turn's reply), all of them or none; return them.

    Call it inside the turn's one transaction: the events are validated
    again against the state at ``node``, and if any is now refused (the
    world changed since the proposal), AuthorRefused undoes the lot.
    """
    if proposal.status != "created":
        raise AuthorRefused(f"only a created proposal is written; this one was {proposal.status}")
    with transaction.atomic():
        stored = story_state.apply_events(node, proposal.events, source=SOURCE)
        rejected = [f"{event.payload.get('type')} {event.payload.get('subject')}: {event.reason}"
                    for event in stored if event.status != StateEvent.Status.APPLIED]
        if rejected:
            raise AuthorRefused("the world changed since the author's edit was checked: " + "; ".join(rejected))
    return stored


def _prompt(state, request, remaining):
    name = state.name_of
    place = state.place()
    lines = [f"Request ({request.need}): {request.what}", f"You may create at most {remaining} new things now."]
    if place:
        view = world.place_view(state, place, everything=True)
        lines.append(f"The scene is at {name(place)}: {view.description or 'no description'}.")
        lines.append("Exits from there: " + (", ".join(f"to {name(e.to)}" for e in view.exits) or "none"))
        lines.append("There now: " + (", ".join(name(k) for k in view.people) or "nobody"))
    lines += ["", "What exists (name — kind — aliases — description):"]
    lines += [f"- {r.value} — {r.data.get('kind')} — {', '.join(r.data.get('aliases', [])) or 'none'} — "
              f"{r.data.get('description', '')}" for r in _listed(state, request)]
    return "\n".join(lines)


def _listed(state, request):
    # Everything, secrets too: the author, like the game master, must not make a second of what exists.
    entities = state.entities()
    if len(entities) > MAX_LISTED:
        wanted = authoring.terms(request.what)
        place = state.place()
        focus = {place, *state.at(place)} if place else set()
        entities = [r for r in entities if r.subject in focus or r.data.get("kind") == "place"
                    or wanted & authoring.terms(f"{r.value} {r.data.get('description', '')}")][:MAX_LISTED]
    return sorted(entities, key=lambda r: (r.data.get("kind", ""), r.value.lower()))


# --- consolidation ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Consolidation:
    status: str  # "not due" | "applied" | "failed"
    reason: str = ""
    events: list = field(default_factory=list)  # the stored StateEvents, when applied


async def consolidate(campaign_id, node_id, *, force=False):
    """Complete the passages and relationships of what the author created, at reply ``node_id``, when due.

    Due when ``authoring_consolidate_after`` things wait or one has waited
    four turns (``force`` skips the check). On any failure — the model, a
    refused completion, a world_lint error — nothing is written and the
    queue stays, with the reason returned.
    """
    if not force and not await database_sync_to_async(_anything_queued)(campaign_id, node_id):
        # After every turn of every campaign: the whole state is not read (on the database's one thread, which
        # pages and turns share) to learn that nothing waits.
        return Consolidation("not due", "nothing the author created waits")
    node, campaign, state = await database_sync_to_async(_at)(campaign_id, node_id)
    limits = limits_of(campaign)
    queued = authoring.queue(state)
    turn = node.depth // 2
    if not force and not authoring.consolidation_due(queued, turn=turn,
                                                     consolidate_after=limits.authoring_consolidate_after):
        return Consolidation("not due")
    plan = authoring.plan(state, queued)
    if not plan.items:
        return Consolidation("not due", "nothing the author created waits")
    narrator = await llm.anarrator_for(campaign.narrator_model or None)
    messages = [{"role": "system", "content": CONSOLIDATION_RULES},
                {"role": "user", "content": _consolidation_prompt(state, plan)}]
    options = llm.ChatOptions(num_predict=MAX_TOKENS, temperature=0.0)
    try:
        reply = await priority.call(lambda: asyncio.wait_for(
            narrator.complete_json(messages, schemas.CONSOLIDATE, options), _timeout()))
    except (llm.NarratorError, TimeoutError) as error:
        return Consolidation("failed", f"{_failure(error, narrator.model)} The queue is kept for the next try.")
    checked = authoring.check_consolidation(state, reply, queued)
    if not checked.kept:
        return Consolidation("failed", "The completion was refused, and the queue is kept: "
                                       + "; ".join(checked.problems))
    try:
        stored = await database_sync_to_async(_write)(node, checked.events)
    except AuthorRefused as refusal:
        return Consolidation("failed", f"{refusal}. The queue is kept.")
    return Consolidation("applied", f"{len(plan.items)} new things completed", stored)


def _anything_queued(campaign_id, node_id):
    """Return whether any consolidation record is on the line at reply ``node_id`` (one indexed query)."""
    node = Node.objects.get(pk=node_id, campaign_id=campaign_id)
    path = lineage.path_at(campaign_id, node.branch_id, node.depth)
    return StateRecord.objects.filter(path.clause(), campaign_id=campaign_id, kind="consolidation").exists()


def _at(campaign_id, node_id):
    node = Node.objects.get(pk=node_id, campaign_id=campaign_id)
    campaign = Campaign.objects.get(pk=campaign_id)
    return node, campaign, story_state.state_at(lineage.path_at(campaign_id, node.branch_id, node.depth), campaign)


def _write(node, events):
    with transaction.atomic():
        stored = story_state.apply_events(node, events, source=SOURCE)
        rejected = [f"{event.payload.get('type')}: {event.reason}" for event in stored
                    if event.status != StateEvent.Status.APPLIED]
        if rejected:
            raise AuthorRefused("the world changed since the completion was checked: " + "; ".join(rejected))
    return stored


def _consolidation_prompt(state, plan):
    name = state.name_of
    lines = ["New things to complete:"]
    for item in plan.items:
        kind = world.kind_of(state, item.key)
        lines.append(f"- {name(item.key)} ({kind}, added in turn {item.turn})")
        if plan.nearby.get(item.key):
            lines.append(f"  near: {', '.join(plan.nearby[item.key])}")
        if plan.seen_by.get(item.key):
            lines.append(f"  known to: {', '.join(plan.seen_by[item.key])}")
        lines += [f"  missing: {gap}" for gap in plan.gaps.get(item.key, [])] or ["  missing: nothing found"]
    lines += ["", "Places: " + ", ".join(name(k) for k in world.places(state)),
              "Characters: " + ", ".join(name(k) for k in world.characters(state))]
    return "\n".join(lines)


def _failure(error, model):
    if isinstance(error, TimeoutError):
        return f"The model {model} did not answer the world author within {_timeout():g} s."
    return failures.in_words(error, model)


def _timeout():
    return settings.STORYTELLER_RECORDER_TIMEOUT
