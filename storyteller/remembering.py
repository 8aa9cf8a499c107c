"""What each character believes and remembers, for the minds panel and "What does Mara remember now?" (issue 14).

The panel (read on the database's thread, no model call): each character's
beliefs about where things are, marked where they differ from the truth,
and what the minds step did after the last reply. The page runs one
character's recall at the head, as a brief of hers would (seed 002
角色如何回忆): ``prepare`` reads what it needs and brings the recall index up
to date (the database's thread); ``recall`` runs the search, reranker
included, on a worker thread, since a reranker is a network call; the query
is embedded by the caller in between (``embed``), off both.

Accuracy labels appear only in the page's records table, in a column marked
as for checking: nothing here is what a character is given.
"""

import asyncio
from dataclasses import dataclass, field

from django.db import connection
from django.db.models import Count
from django.http import Http404

from campaigns import lineage, viewing
from campaigns import state as story_state
from campaigns.models import Node, StateRecord
from campaigns.state import selection
from campaigns.state.minds import minds as mind_events
from campaigns.state.minds import whereabouts
from campaigns.state.world import world
from knowledge.importer import embedding_model, prefixes
from memory import recall, recall_index
from memory.models import MindsRun, RecallPin

from . import llm
from .llm.rerank import reranker_for

# Beliefs listed per character in the panel: the wrong ones first, then as many right ones.
PANEL_BELIEFS = 30


def belief_rows(state, minds, who, limit=None):
    """Return ``who``'s beliefs about where things are, each beside the truth, the mistaken ones first."""
    truth = minds.truth()
    rows = []
    for item, believed in minds.believes(who).items():
        true = truth.get(item)
        rows.append({"item": item, "name": state.name_of(item), "believed": whereabouts.where(state, believed),
                     "true": whereabouts.where(state, true), "wrong": believed != true})
    rows.sort(key=lambda row: (not row["wrong"], story_state.normalize(row["name"]), row["item"]))
    return rows[:limit] if limit else rows


def about_rows(state, minds, who, others):
    """Return, for each of ``others``, where ``who`` thinks they believe things are (beside the truth)."""
    truth = minds.truth()
    found = []
    for other in others:
        items = minds.believes_about(who, other)
        if items:
            found.append({"who": other, "name": state.name_of(other), "rows": sorted((
                {"name": state.name_of(item), "believed": whereabouts.where(state, holder),
                 "true": whereabouts.where(state, truth.get(item)), "wrong": holder != truth.get(item)}
                for item, holder in items.items()), key=lambda row: (not row["wrong"], row["name"].lower()))})
    return found


def panel_context(campaign, *, message="", error=""):
    """Return what ``memory/_minds_panel.html`` renders: for the player, where its character thinks things are and
    what it believes; for the author, every character's beliefs beside the truth, and the minds step's run."""
    path = lineage.path_of(campaign)
    view = viewing.view_of(campaign, path=path, state=story_state.state_for_turn(path, campaign, ""))
    if not view.author:
        return {"campaign": campaign, "view": view, "beliefs": view.beliefs(), "believed": view.belief_records(),
                "minds_message": message, "minds_error": error}
    state = view.everything
    minds = view.minds()
    people = [key for key in minds.characters() if world.kind_of(state, key) == "character"]
    people.sort(key=lambda key: (key != story_state.PROTAGONIST, story_state.normalize(state.name_of(key))))
    characters = []
    for key in people:
        rows = belief_rows(state, minds, key)
        characters.append({"key": key, "name": state.name_of(key), "rows": rows[:PANEL_BELIEFS],
                           "more": max(0, len(rows) - PANEL_BELIEFS), "wrong": sum(row["wrong"] for row in rows),
                           "place": state.name_of(minds.position.get(key, "")) if minds.position.get(key) else ""})
    head = path.nodes().filter(depth=campaign.head_depth, role=Node.Role.NARRATOR).first()
    counts = dict(StateRecord.objects.filter(path.clause(), campaign_id=campaign.pk, retracted=False,
                                             kind__in=recall_index.RECORD_KINDS).order_by()
                  .values_list("kind").annotate(n=Count("*")))
    return {"campaign": campaign, "view": view, "characters": characters, "counts": counts,
            "run": MindsRun.objects.filter(node=head).first() if head else None,
            "minds_message": message, "minds_error": error}


@dataclass
class Prepared:
    campaign: object
    path: object
    who: str
    name: str
    text: str
    situation: object
    now_ms: int | None
    beliefs: list
    about: list
    records: list
    present: list = field(default_factory=list)
    model: str = ""  # the campaign's embedding model
    pinned: bool = False  # whether the recall index holds that model's vectors (only then is the query embedded)


def prepare(campaign, who, text):
    """Read what the page needs at the head for character ``who`` (a key or a name); 404 for anyone else.

    Brings the recall index up to date first (it is derived, and a correction or a script may have written).
    """
    recall_index.sync(campaign.pk)
    path = lineage.path_of(campaign)
    state = story_state.state_for_turn(path, campaign, text)
    key = state.resolve(who) or who
    if world.kind_of(state, key) != "character":
        raise Http404("no such character in this story")
    place = state.location_of(key)
    named = selection.mentioned(state, text) if text else set()
    present = [other for other in state.at(place) if other != key and world.kind_of(state, other) == "character"]
    toward = world.relationships_of(state, key)
    people = {other for other in [*present, *named] if world.kind_of(state, other) == "character"} - {key}
    strength = {other: recall.strength(float(toward[other].data.get("familiarity", 0) or 0),
                                       float(toward[other].data.get("closeness", 0) or 0))
                for other in people if other in toward}
    items = frozenset(item for item in named if world.kind_of(state, item) == "item")
    situation = recall.Situation(text=text, people=frozenset(people), strength=strength, location=place,
                                 items=items)
    minds = whereabouts.minds_at(path, campaign)
    others = sorted({*present, *(other for other in minds.characters() if other != key
                                  and minds.believes_about(key, other))}, key=state.name_of)
    model = embedding_model(campaign)
    pinned = RecallPin.objects.filter(campaign_id=campaign.pk, model=model).exists()
    return Prepared(campaign, path, key, state.name_of(key), text, situation, mind_events.clock_ms(state),
                    belief_rows(state, minds, key), about_rows(state, minds, key, others),
                    _records(state, path, campaign, key), [state.name_of(other) for other in present], model, pinned)


def _records(state, path, campaign, who):
    """Return ``who``'s perceptions and beliefs on the line (the deepest record of each slot), with their events."""
    rows = StateRecord.objects.filter(path.clause(), campaign_id=campaign.pk, subject=who,
                                      kind__in=("perception", "belief")).values_list(
        "slot", "kind", "value", "data", "depth", "id", "retracted")
    deepest = {}
    for row in rows:
        if row[0] not in deepest or (row[4], row[5]) > deepest[row[0]][4:6]:
            deepest[row[0]] = row
    events = dict(StateRecord.objects.filter(path.clause(), campaign_id=campaign.pk, kind="event", slot__in=[
        f"event:{slot.split(':')[1]}" for slot, kind, *_ in deepest.values() if kind == "perception"]).order_by(
        "depth", "id").values_list("slot", "value"))
    records = []
    for slot, kind, value, data, depth, _, retracted in sorted(deepest.values(), key=lambda row: (row[4], row[5])):
        if retracted:
            continue
        event = f"event:{slot.split(':')[1]}" if kind == "perception" else ""
        records.append({"slot": slot, "kind": kind, "text": value, "data": data, "depth": depth,
                        "id": slot.split(":")[1] if kind == "perception" else slot.split(":", 2)[2],
                        "event": events.get(event, "")})
    return records


async def embed(prepared):
    """Return (vector or None, note): the page's words embedded as a query, when the recall index has vectors."""
    if not prepared.text or not prepared.pinned:
        return None, ""
    embedder = await asyncio.to_thread(llm.embedder_for, prepared.model)
    try:
        [vector] = await embedder.embed([prefixes(prepared.model)[1] + prepared.text])
    except llm.NarratorError as error:
        return None, f"the query could not be embedded ({error}); cues and words only"
    return vector, ""


def run_recall(prepared, vector, note):
    """Run the character's recall, reranker included (a network call: on a worker thread, never the database's)."""
    campaign = prepared.campaign
    try:
        found = recall_index.recall(
            prepared.path, campaign, prepared.who, prepared.situation, prepared.now_ms, vector=vector,
            model=prepared.model,
            reranker=reranker_for(campaign), flaky=campaign.memory_flaky, recall=campaign.memory_recall,
            over_retrieve=campaign.memory_over_retrieve, diversity=campaign.memory_diversity,
            associate=campaign.memory_associate)
    finally:
        connection.close()  # this worker thread's own connection
    if note and not found.report["channels"]["vectors"]["note"]:
        found.report["channels"]["vectors"]["note"] = note
    return found
