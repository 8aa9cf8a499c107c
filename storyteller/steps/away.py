"""Off stage after a turn (seed 002 离场行动): characters away from the player act, and the "Meanwhile" card.

A post-turn step (``postturn.STEPS``), so it runs only after a turn was
delivered: no timer, no token while the player is away. At the reply, the
items due off stage (``offstage.due_items``: pending engagements past their
time, active goals past their deadline, of characters not with the player)
are selected under the campaign's limits (``offstage.select``), and each run
is played one at a time:

1. read (database thread): the state at the reply, the character's brief
   (``briefs.compose``: its place, what it knows, its day, its lore titles,
   what it recalls), unobserved;
2. ask (no transaction, off the database thread): ``complete_json`` with
   ``schemas.OFFSTAGE_REPLY``;
3. commit, one transaction: its move (ignoring exits when the item is an
   engagement with a place: a commitment made with someone else is the
   seed's medium-high commitment), its activity, the ``offscene`` marker
   (source ``world``: the game master's rights), the event and the
   perceptions of the participants only (the minds records, as the
   recorder's second call writes them), the ``Round`` (kind ``offstage``,
   numbered from 100) under the reply, and the away note on the reply's
   ContextSnapshot.

A run that fails writes nothing: its item is not marked and waits for the
next turn; the step records the failure on the reply's OffstageRun.

The away note (``report["away_note"]``) is the accounts that passed
``check_account`` and the turn's schedule moves (story time's catch-up).
The play page shows it under the head reply only; the context builder never
reads it, so it is never part of a prompt's history.
"""

import asyncio
import logging
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import connection, transaction

from campaigns import lineage
from campaigns import state as story_state
from campaigns.models import Campaign, ContextSnapshot, Node, OffstageRun, Round, StateEvent, StateRecord
from campaigns.state.reading import PROTAGONIST
from campaigns.state.time import agenda, calendar, rulebook, triggers, variables
from campaigns.state.time.rules import Refused
from campaigns.state.world import lore, offscene, world
from campaigns.state.world.offscene import ITEM_KINDS
from knowledge import lorebooks
from memory import recall as memory_recall
from memory import recall_index

from .. import llm
from ..llm import failures, priority
from ..voices import briefs, offstage, rounds, schemas
from ..voices.limits import limits_of
from . import Step

logger = logging.getLogger(__name__)

# An answer of OFFSTAGE_REPLY is four short strings: about 200 tokens written out.
MAX_TOKENS = 400
WORLD = StateEvent.Source.WORLD
RECORDER = StateEvent.Source.RECORDER
# How much an off-stage event matters to those who took part (1 a trifle, 5 never forgotten): it happened to them.
IMPORTANCE = 2

RULES = """You play one character of an interactive story while the player is elsewhere: nobody is watching. From the brief alone (what the character knows, where they are, their day and plans), decide what they do now about what calls them. Answer JSON:
- action: what they do, in one or two sentences;
- moves_to: the exact name of a place they know, to go there; "" to stay;
- activity: what they are doing afterwards, in a few words;
- account: the same for a note the player reads later: at most 300 characters, third person, past tense ("Mara went to the forge and paid her debt."), only what was done: no thoughts, feelings or secrets."""


@dataclass(frozen=True)
class _Step:
    node: Node
    campaign: Campaign
    runs: tuple  # offstage.Run, in order
    waiting: int
    why_none: str  # why nothing runs ("" when something does)
    status: str  # the OffstageRun status when nothing runs
    attempt: int


@dataclass(frozen=True)
class _Ask:
    messages: list
    brief: dict


async def play(node_id):
    """Play the off-stage runs due at reply ``node_id``, one at a time; return the OffstageRun status (None: done)."""
    step = await database_sync_to_async(_prepare)(node_id)
    if step is None:
        return None
    if not step.runs:
        await database_sync_to_async(_finish)(step, step.status, note=step.why_none)
        return step.status
    narrator = await llm.anarrator_for(step.campaign.narrator_model or None)
    options = llm.ChatOptions(num_predict=MAX_TOKENS, num_ctx=step.campaign.context_token_budget,
                              temperature=step.campaign.temperature)
    played, errors = 0, []
    for run in step.runs:
        try:
            ask = await asyncio.to_thread(_ask_for, step, run)
            if ask is None:
                continue  # answered meanwhile (a retry raced this one)
            reply = await priority.call(lambda: asyncio.wait_for(  # noqa: B023 — awaited in this iteration
                narrator.complete_json(ask.messages, schemas.OFFSTAGE_REPLY, options), _timeout()))
            if await database_sync_to_async(_commit)(step, run, ask, reply, narrator.model):
                played += 1
        except Exception as error:  # noqa: BLE001 — the run fails alone; its item is not marked and waits
            if not isinstance(error, (llm.NarratorError, TimeoutError)):
                logger.exception("an off-stage run failed for node %s", node_id)
            errors.append(f"{run.due.who}: {_describe(error, narrator.model)}")
    await database_sync_to_async(_finish)(step, OffstageRun.Status.FAILED if errors else OffstageRun.Status.PLAYED,
                                          error=" ".join(errors),
                                          note=f"{played} played" + (f"; {step.waiting} wait for a later turn"
                                                                     if step.waiting else ""))
    return OffstageRun.Status.FAILED if errors else OffstageRun.Status.PLAYED


STEP = Step(play, "Playing what happens off stage…", "Off-stage step", OffstageRun, kind="off stage")


def _prepare(node_id):
    node = Node.objects.filter(pk=node_id, role=Node.Role.NARRATOR).first()
    if node is None or node.depth == 0:
        return None
    run = OffstageRun.objects.filter(node=node).first()
    if run is not None and run.status != OffstageRun.Status.FAILED:
        return None
    campaign = Campaign.objects.get(pk=node.campaign_id)
    attempt = (run.attempts + 1) if run else 1
    limits = limits_of(campaign)
    if limits.offstage_per_turn == 0:
        return _Step(node, campaign, (), 0, "off stage is off for this campaign (offstage_per_turn is 0)",
                     OffstageRun.Status.OFF, attempt)
    path = lineage.path_at(campaign.pk, node.branch_id, node.depth)
    if not StateRecord.objects.filter(path.clause(), campaign_id=campaign.pk, kind__in=ITEM_KINDS).exists():
        # No engagement or goal on the line: nothing can be due, and the whole state need not be read.
        return _Step(node, campaign, (), 0, "nothing is due off stage", OffstageRun.Status.NOTHING_DUE, attempt)
    state = read_due(path, campaign)
    due = due_at(state)
    if due is None:
        return _Step(node, campaign, (), 0, "the story clock has not started, so nothing is due off stage",
                     OffstageRun.Status.NOTHING_DUE, attempt)
    # A retry after a failed run plays what this reply has left of its limits.
    done = [who for activated in Round.objects.filter(node=node, kind=Round.Kind.OFFSTAGE)
            .values_list("activated", flat=True) for who in [a.get("who") for a in activated[:1]]]
    due = [d for d in due if done.count(d.who) < limits.offstage_per_character]
    chosen = offstage.select(due, per_turn=max(0, limits.offstage_per_turn - len(done)),
                             per_character=limits.offstage_per_character)
    return _Step(node, campaign, chosen.runs, len(chosen.waiting), "" if chosen.runs else "nothing is due off stage",
                 OffstageRun.Status.NOTHING_DUE, attempt)


def read_due(path, campaign):
    """Return the part of the State after ``path`` that ``due_at`` reads: the base, where every character is, the
    clock, the engagements, the goals and the handled markers (a world's exits, items and facts are not read)."""
    state = story_state.state_for_events(path, campaign, [])
    state.load("location", [r.subject for r in state.entities() if r.data.get("kind") == "character"])
    found = state.fetch_where("kind IN ('engagement', 'intent', 'offscene') OR slot = 'clock'", [])
    state.add({slot: record for slot, record in found.items() if slot not in state.slots})
    return state


def due_at(state):
    """Return the off-stage Due items of ``state`` (the whole State, or ``read_due``'s part), oldest first, or None
    before the clock starts."""
    now = rulebook.now_of(state)
    if now is None:
        return None
    positions = {r.subject: r.value for r in state.of_kind("location")}
    excluded = {who for who in positions
                if (record := state.entity(who)) is not None and (record.data.get("background")
                                                                  or record.data.get("crowd"))}
    return offstage.due_items(positions=positions, protagonist_place=state.location_of(PROTAGONIST),
                              engagements=rulebook.engagements_of(state), intents=rulebook.intents_of(state),
                              now_ms=now, handled=offscene.handled(state), excluded=frozenset(excluded))


def _part(node, campaign, due):
    """Return the part of the State at ``node`` one run's commit reads: names, the actor, the marker, the clock."""
    state = story_state.state_for_events(lineage.path_at(campaign.pk, node.branch_id, node.depth), campaign, [])
    state.prefetch([f"offscene:{due.item}", f"location:{due.who}", f"condition:{due.who}", "clock"])
    return state


def _ask_for(step, run):
    """Return the messages of one run and the brief they carry, from the state as it is now; None if answered.

    Read on a worker thread of its own, with its own connection, not the
    database thread every page and socket shares: a brief reads the whole
    state (about 300 ms on a 1,000-place world), and nothing here writes.
    """
    try:
        return _compose(step, run)
    finally:
        connection.close()  # this worker thread's own connection


def _compose(step, run):
    node, campaign, due = step.node, step.campaign, run.due
    path = lineage.path_at(campaign.pk, node.branch_id, node.depth)
    state = story_state.state_at(path, campaign)
    if due.item in offscene.handled(state):
        return None
    brief = briefs.compose(state, due.who, _given(campaign, path, state, due))
    calls = f"What calls you now: {due.text}"
    if due.place:
        calls += f" (at {state.name_of(due.place)})"
    others = [state.name_of(key) for key in due.participants if key != due.who]
    if others:
        calls += f", with {', '.join(others)}"
    messages = [{"role": "system", "content": RULES},
                {"role": "user", "content": f"{brief.text}\n\n{calls}."}]
    return _Ask(messages, brief.data())


def _given(campaign, path, state, due):
    """Return what story time, lore and recall hand the brief of ``due.who``, each filtered for that character."""
    who, name_of = due.who, state.name_of
    current = rulebook.clock_of(state)
    now = current.at if current else None
    tz = current.time_zone if current else campaign.time_zone
    cal = rulebook.calendar_of(state)
    day = announced = ()
    if now is not None:
        plan = agenda.agenda_at(who, calendar.moment(now, tz), routine=rulebook.routines_of(state).get(who),
                                engagements=rulebook.engagements_of(state), intents=rulebook.intents_of(state),
                                cal=cal)
        day = tuple(plan.lines(now, tz, name_of))
        announced = tuple(triggers.announcements_for(who, rulebook.triggers_of(state),
                                                     world=rulebook.StateWorld(state), now_ms=now, tz=tz))
    entries = [*lorebooks.entries_of(campaign.pk), *lore.world_lore(state)]
    titles = tuple(lore.titles(entries, lore.known_lore(state, who)))
    place = state.location_of(who)
    present = [key for key in state.at(place) if key != who] if place else []
    seen = variables.view(defs=rulebook.definitions_of(state), values=rulebook.values_of(state),
                          kind_of=lambda key: world.kind_of(state, key) or None, viewer=who, present=present,
                          temperaments=rulebook.temperaments_of(state), name_of=name_of)
    situation = memory_recall.Situation(text=due.text, people=frozenset(k for k in due.participants if k != who),
                                        location=place or "")
    found = recall_index.recall(path, campaign, who, situation, now, flaky=campaign.memory_flaky,
                                recall=campaign.memory_recall, over_retrieve=campaign.memory_over_retrieve,
                                diversity=campaign.memory_diversity, associate=campaign.memory_associate)
    # Cues are left out: each is given once, and an off-stage run would spend it unseen.
    return briefs.Given(now=calendar.describe_instant(now, tz, cal) if now is not None else "", agenda=day,
                        variables=tuple(seen.lines), announced=announced, lore=titles,
                        memories=tuple(m.text for m in found.memories if not m.associated),
                        associated=tuple(m.text for m in found.memories if m.associated))


def _commit(step, run, ask, reply, model):
    """Write one run in one transaction; return whether it was written (False: answered meanwhile)."""
    node, campaign, due = step.node, step.campaign, run.due
    with transaction.atomic():
        state = _part(node, campaign, due)
        if state.get(f"offscene:{due.item}") is not None:
            return False
        who, name = due.who, state.name_of
        number = rounds.offstage_number(list(Round.objects.filter(node=node)))
        action = " ".join(str(reply.get("action", "")).split())
        account, refused_account, account_note = _account(reply.get("account", ""))
        target, ignore = _destination(state, due, reply.get("moves_to", ""))
        events = []
        if target and target != state.location_of(who):
            events.append({"type": "move", "subject": name(who), "object": name(target),
                           "data": {"ignore_exits": ignore}})
        activity = " ".join(str(reply.get("activity", "")).split())
        if activity:
            events.append({"type": "set_condition", "subject": name(who), "data": {"activity": activity}})
        events.append({"type": "offscene", "subject": due.item, "value": (action or account or due.text)[:300],
                       "data": {"round": number, "who": who}})
        stored = story_state.apply_events(node, events, source=WORLD, model=model)
        refused = [[event.payload.get("type", ""), event.reason] for event in stored
                   if event.status != StateEvent.Status.APPLIED]
        marker = next(event for event in stored if event.payload.get("type") == "offscene")
        if marker.status != StateEvent.Status.APPLIED:
            raise Refused(f"the off-stage item {due.item} could not be marked answered: {marker.reason}")
        perceived = _record_minds(node, campaign, run.due, f"offstage-{node.pk}-{number}", account or action or due.text,
                                  model)
        Round.objects.create(
            node=node, number=number, kind=Round.Kind.OFFSTAGE, started_ms=rulebook.now_of(state),
            resolution={"item": due.item, "what": due.text, "place": due.place, "moves_to": target,
                        "ignore_exits": ignore, "refused": refused, "account": account,
                        "account_refused": refused_account, "account_note": account_note,
                        "perceived_by": perceived},
            activated=[{"who": who, "why": due.text}],
            outputs=[{"speaker": who, "text": action}] if action else [],
            briefs={who: ask.brief})
        write_note(node, campaign)
    return True


def _account(text):
    """Return (the account as kept, why it was refused, what was trimmed): a refused one is left out of the note."""
    try:
        checked = offstage.check_account(text)
    except Refused as refusal:
        return "", str(refusal), ""
    return checked.text, "", checked.note


def _destination(state, due, moves_to):
    """Return (where the character goes, whether it ignores exits): an engagement's place, ignoring exits, or the
    place the answer names, along open exits."""
    if due.kind == "engagement" and due.place:
        return due.place, True
    key = state.resolve(moves_to) if moves_to else None
    if key is None or (state.entity(key) is not None and state.entity(key).data.get("kind") != "place"):
        return "", False
    return key, False


def _record_minds(node, campaign, due, ident, text, model):
    """Write the round's event and the perceptions of its participants who were there; return who perceived it."""
    state = _part(node, campaign, due)
    name = state.name_of
    place = state.location_of(due.who) or due.place
    if not place:
        return []
    story_state.apply_events(node, [{"type": "event", "object": ident, "value": text[:300], "data": {
        "importance": IMPORTANCE, "tags": ["off stage"], "participants": [name(k) for k in due.participants],
        "location": name(place)}}], source=RECORDER, mark=False, model=model)
    # Minds records are kept out of the state's fold: read the event where it was just written.
    data = (StateRecord.objects.filter(campaign_id=campaign.pk, branch_id=node.branch_id, depth=node.depth,
                                       slot=f"event:{ident}").values_list("data", flat=True).first())
    if data is None:
        return []
    there = data.get("perceived_by", {})
    # Only those who took part perceive an off-stage round, and only if they were there (or within earshot).
    perceivers = [key for key in due.participants if key in there]
    if perceivers:
        story_state.apply_events(node, [{"type": "perception", "subject": name(key), "object": ident, "value": text[:300],
                                         "data": {"mode": "witnessed" if there[key] == "present" else "heard"}}
                                        for key in perceivers], source=RECORDER, mark=False, model=model)
    return perceivers


def write_note(node, campaign):
    """Keep the away note of reply ``node`` on its ContextSnapshot: the accounts of its off-stage rounds, then the
    turn's schedule moves; no note when there is nothing to say or the campaign has the card off."""
    snapshot = ContextSnapshot.objects.select_for_update().filter(node=node).first()
    if snapshot is None:
        return None
    accounts = [r.resolution.get("account", "") for r in Round.objects.filter(node=node, kind=Round.Kind.OFFSTAGE)
                .order_by("number")]
    note = offstage.away_note([a for a in accounts if a], schedule_moves(node, campaign))
    report = dict(snapshot.report)
    if campaign.offstage_summary and note.lines:
        report["away_note"] = note.data()
    else:
        report.pop("away_note", None)
    if report != snapshot.report:
        snapshot.report = report
        snapshot.save(update_fields=["report"])
    return note


def schedule_moves(node, campaign):
    """Return the lines of story time's catch-up written at ``node`` ("Mara went to the Forge"), if any."""
    record = (StateRecord.objects.filter(campaign_id=campaign.pk, branch_id=node.branch_id, depth=node.depth,
                                         slot="catch_up", retracted=False).order_by("-id").values_list("data", flat=True)
              .first())
    return list((record or {}).get("lines", []))


def note_of(campaign):
    """Return the away note (``AwayNote.data()``, with the reply's id as ``node``) of ``campaign``'s head reply, or
    None: the "Meanwhile" card."""
    if not campaign.offstage_summary or campaign.head_depth == 0:
        return None
    path = lineage.path_of(campaign)
    found = (ContextSnapshot.objects.filter(path.clause("node__"), node__campaign_id=campaign.pk,
                                            node__depth=campaign.head_depth, node__role=Node.Role.NARRATOR)
             .values_list("node_id", "report").first())
    note = (found[1] or {}).get("away_note") if found else None
    return {**note, "node": found[0]} if note and note.get("lines") else None


def _finish(step, status, *, note="", error=""):
    """Record the step's run on the reply (``played`` counts every off-stage round under it, retries included)."""
    played = Round.objects.filter(node=step.node, kind=Round.Kind.OFFSTAGE).count()
    OffstageRun.objects.update_or_create(node=step.node, defaults={
        "status": status, "played": played, "waiting": step.waiting, "note": note[:2000], "error": error[:2000],
        "attempts": step.attempt})
    with transaction.atomic():
        write_note(step.node, step.campaign)


def _describe(error, model):
    if isinstance(error, TimeoutError):
        return f"the model {model} did not answer within {_timeout():g} s; the item waits for the next turn."
    if isinstance(error, llm.NarratorError):
        return f"{failures.in_words(error, model)} The item waits for the next turn."
    return f"the run failed ({type(error).__name__}: {error}); nothing of it was kept, and the item waits."


def _timeout():
    return settings.STORYTELLER_RECORDER_TIMEOUT
