"""The minds step of the post-turn worker: the recorder's second call, then the recall index (issue 14, D11).

After the state's recording has applied (``recorder``), the model is asked,
in a small schema of its own, what happened in the turn as events, how each
character there perceived them, what they came to believe, and where someone
was seen or heard to put an item. The application turns the answer into
typed events (``event``, ``perception``, ``belief``, ``notice``: the ids are
its own) and checks them first; with ``memory_verify`` on, an answer with
refusals is asked for once more, carrying every refused draft and its
reason, and only the second answer is kept (drafts are never stored). Then
the recall index takes in what the records now hold (``recall_index.sync``)
and what has no vector is embedded, off the database's thread.

The prompt names who is present and who is nearby (one open exit away): the
application, not the model, decides who could have perceived anything, and
the pipeline refuses a perception from anyone else. A failure is recorded
on the reply's MindsRun and never touches the accepted turn.
"""

import asyncio
import json
import logging
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction

from campaigns import lineage
from campaigns import state as story_state
from campaigns.models import Campaign, Node, RecorderRun, StateRecord
from campaigns.state import registry, selection
from campaigns.state.minds import minds as mind_events
from campaigns.state.world import world
from knowledge.importer import embedding_model, prefixes
from memory import recall_index
from memory.models import MindsRun

from .. import llm
from ..llm import failures, priority
from . import Step, prompts

logger = logging.getLogger(__name__)

# What one turn records at most: a scene's few events, each perceived by the few there. Kept small: a
# model that fills every list (SmolLM2 does) writes until the limit, twice when the JSON breaks, on every turn.
MAX_EVENTS = 4
MAX_PERCEPTIONS = 10
MAX_BELIEFS = 3
MAX_NOTICES = 3
MAX_LIST = 6
SHORT = 60  # a name, an id, a tag
LINE = 200  # an event's text, a wording, a belief
# Three events and eight perceptions of a sentence each are about 600 tokens of JSON.
MAX_TOKENS = 800
# Earlier events shown, so a perception learned later or a belief can name them.
EARLIER_EVENTS = 8
# Names listed: past these the prompt names only those in the scene or the turn.
MAX_NAMES = 40
EMBED_BATCH = 64
DEFAULT_TIMEOUT = 180.0


def _string(length):
    return {"type": "string", "maxLength": length}


def _list(length, items=MAX_LIST):
    return {"type": "array", "items": _string(length), "maxItems": items}


def _object(properties, required):
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


SCHEMA = _object({
    "events": {"type": "array", "maxItems": MAX_EVENTS, "items": _object({
        "id": _string(SHORT), "text": _string(LINE), "importance": {"type": "integer", "minimum": 1, "maximum": 5},
        "tags": _list(SHORT, 4), "participants": _list(SHORT), "location": _string(SHORT), "items": _list(SHORT, 4),
        "gist": _string(LINE)}, ("id", "text", "importance"))},
    "perceptions": {"type": "array", "maxItems": MAX_PERCEPTIONS, "items": _object({
        "event": _string(SHORT), "who": _string(SHORT), "mode": {"enum": list(mind_events.MODES)},
        "wording": _string(LINE), "gist": _string(LINE), "accuracy": {"enum": list(mind_events.ACCURACY)}},
        ("event", "who", "mode", "wording"))},
    "beliefs": {"type": "array", "maxItems": MAX_BELIEFS, "items": _object({
        "who": _string(SHORT), "id": _string(SHORT), "text": _string(LINE),
        "confidence": {"enum": list(mind_events.CONFIDENCE)}, "supports": _list(SHORT, 4),
        "contradicts": _list(SHORT, 4)}, ("who", "text", "confidence"))},
    "notices": {"type": "array", "maxItems": MAX_NOTICES, "items": _object({
        "item": _string(SHORT), "by": _string(SHORT), "holder": _string(SHORT), "to": _list(SHORT, 4)},
        ("item",))},
}, ("events", "perceptions", "beliefs", "notices"))

# The labels a perception's rightness takes are the schema's choices; the words never appear in a prompt.
RULES = """You record what the characters of an interactive story perceived in the latest turn. Answer JSON with four lists.
- events: what happened in the turn, each short, past tense and objective ("Mara hid the key in the teapot."), with an id of your choosing (e1, e2...), importance 1 (a trifle) to 5 (never to be forgotten), a few tags, the participants, the location and the items by their exact names, and a vague gist.
- perceptions: for each event, how each character who was PRESENT or NEARBY saw or heard it, in that character's own words (what they think happened, which may be incomplete or mistaken), with how they learned it (witnessed; heard, for those nearby) and how right their version is (for checking only). Someone not present or nearby perceives nothing unless the turn shows them being told (told) or working it out (inferred). One perception per character per event; name the event by its id.
- beliefs: an understanding a character formed beyond one event ("Aldric is the thief"), with how sure they are and the events (ids) of their own perceptions that support or contradict it.
- notices: where an item was openly seen or said to be in the turn (item, who said it, where they said it is, and to whom if told privately).
Use the exact names given. Record nothing the turn does not show. Answer {"events": [], "perceptions": [], "beliefs": [], "notices": []} when nothing happened."""

# Measured on the Kitchen's hiding turn: one minds call of the built-in SmolLM2-135M took 30 s of CPU and answered
# an event whose participant is "Aldric, Mara, Mara, Mara…" and a perceiver "Aldric, Mara": validation refuses it
# all. It is not asked, so a fresh machine's every turn does not pay that; a person's corrections still count.
SMALL_MODEL = ("The built-in narrator is too small to record what the characters perceive, so it is not asked; "
               "start Ollama (`ollama serve`) for a recorder that keeps their minds, or record them by hand.")

TURNED_OFF = ("Recording what the characters perceive is turned off (STORYTELLER_RECORD_MINDS); record it by hand "
              "in the Who believes what panel.")

AGAIN = ("Some of what you recorded was refused. Each refused entry, with the reason:\n{refusals}\n\n"
         "Answer again with the whole record for the turn, corrected: fix what can be fixed and leave out what "
         "cannot be recorded.")


@dataclass(frozen=True)
class _Job:
    node: Node
    campaign: Campaign
    turn: int
    messages: list
    options: llm.ChatOptions
    attempt: int
    recorded: bool  # the state's recording applied: only then are minds recorded


async def record(node_id):
    """Record the minds of reply ``node_id`` and bring the recall index up to date; return the MindsRun status."""
    job = await database_sync_to_async(_prepare)(node_id)
    if job is None:
        return None
    status, counts, error, model, note = MindsRun.Status.WAITING, (0, 0, False), "", "", ""
    if job.recorded and settings.STORYTELLER_RECORD_MINDS:
        narrator = await llm.anarrator_for(job.campaign.narrator_model or None)
        model = narrator.model
    if job.recorded and not settings.STORYTELLER_RECORD_MINDS:
        status, note = MindsRun.Status.NOTHING, TURNED_OFF
    elif job.recorded and model == llm.BUILTIN_MODEL:
        status, note = MindsRun.Status.NOTHING, SMALL_MODEL
    elif job.recorded:
        try:
            counts = await _record(job, narrator)
            status = MindsRun.Status.RECORDED if counts[0] + counts[1] else MindsRun.Status.NOTHING
        except Exception as failure:  # noqa: BLE001 — whatever failed, the turn stands and the failure is recorded
            if not isinstance(failure, (llm.NarratorError, TimeoutError)):
                logger.exception("the minds recorder failed for node %s", node_id)
            status, error = MindsRun.Status.FAILED, _describe(failure, model)
    indexed, embedded, embedding_note = 0, 0, ""
    try:
        indexed = await database_sync_to_async(recall_index.sync)(job.campaign.pk)
        embedded, embedding_note = await embed_missing(job.campaign)
    except Exception as failure:  # noqa: BLE001
        logger.exception("indexing minds failed for node %s", node_id)
        status, error = MindsRun.Status.FAILED, error or f"Indexing what characters perceived failed ({failure})."
    await database_sync_to_async(_record_run)(job, status=status, counts=counts, indexed=indexed, embedded=embedded,
                                              embedding_note=embedding_note, note=note, error=error, model=model)
    return status


STEP = Step(record, "Recording what the characters perceived…", "Minds step", MindsRun, kind="minds")


async def _record(job, narrator):
    """Ask, check, maybe ask again, apply; return (applied, rejected, asked again)."""
    ask = lambda messages: priority.call(lambda: asyncio.wait_for(  # noqa: E731
        narrator.complete_json(messages, SCHEMA, job.options), _timeout()))
    reply = _answer(await ask(job.messages), narrator.model)
    events, refusals = await database_sync_to_async(_checked)(job, reply)
    asked_again = False
    if refusals and job.campaign.memory_verify:
        asked_again = True
        messages = [*job.messages, {"role": "assistant", "content": json.dumps(_unlabelled(reply), ensure_ascii=False)},
                    {"role": "user", "content": AGAIN.format(refusals="\n".join(refusals))}]
        events, _ = await database_sync_to_async(_checked)(job, _answer(await ask(messages), narrator.model))
    stored = await database_sync_to_async(_apply)(job, events, narrator.model)
    applied = sum(1 for event in stored if event.status == "applied")
    return applied, len(stored) - applied, asked_again


def _unlabelled(reply):
    """Return the answer without its accuracy labels: shown back to the model, it is a prompt, and none carries one."""
    perceptions = [{k: v for k, v in entry.items() if k != "accuracy"} if isinstance(entry, dict) else entry
                   for entry in reply.get("perceptions", [])]
    return {**reply, "perceptions": perceptions}


def _prepare(node_id):
    node = Node.objects.filter(pk=node_id, role=Node.Role.NARRATOR).first()
    if node is None:
        return None
    run = MindsRun.objects.filter(node=node).first()
    if run is not None and run.status in (MindsRun.Status.RECORDED, MindsRun.Status.NOTHING):
        return None
    campaign = Campaign.objects.get(pk=node.campaign_id)
    recorded = RecorderRun.objects.filter(node=node, status=RecorderRun.Status.APPLIED).exists()
    path = lineage.path_at(campaign.pk, node.branch_id, node.depth)
    player = path.nodes().filter(depth=node.depth - 1).first()
    text = f"{player.text if player else ''}\n{node.text}"
    state = story_state.state_for_turn(path, campaign, text)
    messages = prompts.continuing(prompts.narration_of(node), RULES, _prompt(state, path, player, node, text),
                                  room=prompts.room_for(campaign, MAX_TOKENS))
    options = llm.ChatOptions(num_predict=prompts.answer_limit(campaign, messages, MAX_TOKENS),
                              num_ctx=campaign.context_token_budget, temperature=0.0)
    return _Job(node, campaign, node.depth // 2, messages, options, (run.attempts + 1) if run else 1, recorded)


def _prompt(state, path, player, node, text):
    """Return what the minds recorder reads: who could perceive what, the names to use, earlier events, the turn."""
    name = state.name_of
    place = state.place()
    earshot = mind_events.within_earshot(state, place) if place else {}
    present = [name(key) for key, how in earshot.items() if how == "present"]
    nearby = [f"{name(key)} (in {name(state.location_of(key))})" for key, how in earshot.items() if how == "nearby"]
    people = world.characters(state)
    named = selection.mentioned(state, text)
    if len(people) > MAX_NAMES:
        people = [key for key in people if key in earshot or key in named]
    items = {item.key for item in world.visible_items(state, story_state.PROTAGONIST, place)} if place else set()
    items |= {key for key in named if world.kind_of(state, key) == "item"}
    lines = [f"The player's character: {name(story_state.PROTAGONIST)}",
             f"Where the turn happens: {name(place) if place else 'unknown'}",
             f"Present there: {', '.join(present) or 'nobody'}",
             f"Nearby (one open door away; they may hear it): {', '.join(nearby) or 'nobody'}",
             f"Characters: {', '.join(sorted(name(key) for key in people))}",
             f"Items: {', '.join(sorted(name(key) for key in items)) or 'none named'}"]
    earlier = _earlier_events(path, node.depth)
    if earlier:
        lines += ["Earlier events (by id; a character may learn of one later, told or inferred):",
                  *[f"- {slot.split(':', 1)[1]}: {value}" for slot, value in earlier]]
    lines += ["", "The turn:"]
    if player is not None:
        lines.append(f"Player ({player.mode}): {player.text}")
    lines.append(f"Narrator: {node.text}")
    return "\n".join(lines)


def _earlier_events(path, depth):
    """Return (slot, text) of the newest public events on ``path`` before ``depth``, oldest first."""
    rows = (StateRecord.objects.filter(path.clause(), campaign_id=path.campaign_id, kind="event", depth__lt=depth,
                                       retracted=False, narrator_only=False)
            .order_by("-depth", "-id").values_list("slot", "value")[:EARLIER_EVENTS])
    return list(reversed(rows))


def _answer(reply, model):
    if not isinstance(reply, dict) or not all(isinstance(reply.get(name), list) for name in
                                              ("events", "perceptions", "beliefs", "notices")):
        raise llm.NarratorError(f"The model {model} answered JSON without the four lists of a minds record "
                                f"({str(reply)[:80]}), so nothing was recorded. Retry, or choose a larger narrator "
                                "model.")
    return reply


def typed(reply, turn, held=frozenset()):
    """Return the typed events an answer stands for, and {the application's event id: the answer's own id}.

    The application names the events (``t<turn>-<n>``); ``held`` are the
    belief slots' ids each character already holds (``{(who, id)}``): a belief
    the model names again is an edit. Entries that are not objects are left out.
    """
    ids = {}
    events = []
    for number, entry in enumerate(_objects(reply.get("events")), 1):
        key = f"t{turn}-{number}"
        ids[str(entry.get("id", "")).strip().lower()] = key
        events.append({"type": "event", "object": key, "value": entry.get("text", ""), "data": _only(
            entry, ("importance", "tags", "participants", "location", "items", "gist"))})

    def event_of(label):
        text = str(label or "").strip()
        return ids.get(text.lower(), text)

    for entry in _objects(reply.get("perceptions")):
        events.append({"type": "perception", "subject": entry.get("who", ""), "object": event_of(entry.get("event")),
                       "value": entry.get("wording", ""), "data": _only(entry, ("mode", "gist", "accuracy"))})
    for entry in _objects(reply.get("beliefs")):
        data = _only(entry, ("confidence",))
        for name in ("supports", "contradicts"):
            if isinstance(entry.get(name), list):
                data[name] = [event_of(label) for label in entry[name]]
        who, key = str(entry.get("who", "")), mind_events.event_id(entry.get("id", ""))
        kind = "belief_edit" if key and (story_state.key_for(who), key) in held else "belief"
        events.append({"type": kind, "subject": who, "object": key, "value": entry.get("text", ""), "data": data})
    for entry in _objects(reply.get("notices")):
        events.append({"type": "notice", "subject": entry.get("item", ""),
                       "data": _only(entry, ("by", "holder", "to"))})
    return events, {key: label for label, key in ids.items()}


def _objects(value):
    return [entry for entry in value if isinstance(entry, dict)] if isinstance(value, list) else []


def _only(entry, names):
    return {name: entry[name] for name in names if entry.get(name) not in (None, "", [])}


def _checked(job, reply):
    """Return (the typed events of ``reply``, the refusals of a dry run, each "type who/what: reason")."""
    node = job.node
    path = lineage.path_at(node.campaign_id, node.branch_id, node.depth)
    held = {tuple(slot.split(":", 2)[1:]) for slot in StateRecord.objects.filter(
        path.clause(), campaign_id=node.campaign_id, kind="belief").values_list("slot", flat=True)}
    events, labels = typed(reply, job.turn, held)
    cleaned = [registry.clean(event) for event in events]
    state = story_state.state_for_events(path, job.campaign, cleaned)
    refusals = []
    for outcome in story_state.validate_batch(state, cleaned, "recorder"):
        if outcome.status != "applied":
            payload = outcome.payload
            # The model's own ids, not the application's: it is the model who reads this.
            what = " ".join(labels.get(part, part) for part in (payload["subject"], payload["object"]) if part)
            refusals.append(f"- {payload['type']} {what}: {outcome.reason}")
    return events, refusals


def _apply(job, events, model):
    """Apply the answer's events at the reply node and mark the run, in one transaction; return the stored events."""
    with transaction.atomic():
        done = MindsRun.objects.filter(node=job.node, status__in=(MindsRun.Status.RECORDED,
                                                                   MindsRun.Status.NOTHING)).exists()
        if done or not events:
            return []
        return story_state.apply_events(job.node, events, source="recorder", attempt=job.attempt, model=model,
                                        mark=False)


async def embed_missing(campaign):
    """Embed the recall items of ``campaign`` that have no vector from its model; return (count, note)."""
    model = embedding_model(campaign)
    pending = await database_sync_to_async(lambda: list(recall_index.needing_vectors(campaign.pk, model)
                                                        .values_list("id", "text", "gist")))()
    if not pending:
        return 0, ""
    embedder = await asyncio.to_thread(llm.embedder_for, model)
    document = prefixes(model)[0]
    done = 0
    try:
        for start in range(0, len(pending), EMBED_BATCH):
            batch = pending[start:start + EMBED_BATCH]
            vectors = await embedder.embed([document + (text or gist) for _, text, gist in batch])
            stored, note = await database_sync_to_async(recall_index.store_vectors)(
                campaign.pk, model, [(pk, vector) for (pk, _, _), vector in zip(batch, vectors)])
            if note:
                return done, note
            done += stored
    except llm.EmbeddingUnavailable:
        return done, (f"No embedding model is available ({embedder.model} cannot embed), so characters recall by "
                      "cues and words only.")
    except llm.NarratorError as failure:
        return done, (f"{len(pending) - done} recall items could not be embedded with {model} ({failure}); "
                      "they are recalled by cues and words until the next pass embeds them.")
    return done, ""


def _record_run(job, *, status, counts, indexed, embedded, embedding_note, note, error, model):
    applied, rejected, asked_again = counts
    MindsRun.objects.update_or_create(node=job.node, defaults={
        "campaign": job.campaign, "status": status, "applied": applied, "rejected": rejected,
        "asked_again": asked_again, "indexed": indexed, "embedded": embedded,
        "embedding_note": embedding_note[:2000], "note": note[:2000], "error": error[:2000], "attempts": job.attempt,
        "model": model})


def _describe(error, model):
    if isinstance(error, TimeoutError):
        return (f"The model {model} did not record what the characters perceived within {_timeout():g} s; "
                "retry when the server is less busy.")
    if isinstance(error, llm.NarratorError):
        return failures.in_words(error, model)
    return f"Recording what the characters perceived failed ({type(error).__name__}: {error}); nothing was kept."


def _timeout():
    return getattr(settings, "STORYTELLER_RECORDER_TIMEOUT", DEFAULT_TIMEOUT)
