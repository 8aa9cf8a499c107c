"""The events section: earlier events the player's words call up, already folded into the summary (seed 002 压缩).

Seed 002 gives every turn's tail "old events the player's action evokes that
are already folded out of the conversation". Here (decision D1) the fold is
the checkpoint summary: only events recorded at or before the depth the
eligible checkpoint covers are searched, so the section never repeats what
the verbatim history still shows. The search is the game master's recall
(``memory.recall_index.recall`` over events, owner ""): cues from the
player's words (people and items named, those present, the scene's place),
words, and vectors when the turn's one embedding request embedded the
query; only events the search actually hit (and what they bring by
association) are shown, in story order, with the report in the context
snapshot. Read-only and model-free: the query is embedded before the build
(``storyteller.turns.queries_embedded``), and the reranker, a network call,
is never used here.
"""

from dataclasses import dataclass

from django.db import connection

from campaigns.models import StateRecord
from campaigns.state import PROTAGONIST, selection, state_for_turn
from campaigns.state.minds import minds
from campaigns.state.world import world
from knowledge.importer import embedding_model, prefixes
from memory import recall, recall_index
from memory.models import RecallPin

from .. import llm
from .layers import DYNAMIC_TAIL, Section

HEADER = ("Earlier events the player's words call up (the game master's record, objective; they happened before the "
          "story summary's end, so they are not in the recent story). Lines marked [narrator only] are unknown to "
          "the player's character.")
# Enough to remind the narrator of what was folded away, never a second summary.
MAX_EVENTS = 6


@dataclass(frozen=True)
class Query:
    text: str  # the player's words: what evokes an event
    vector: tuple | None = None
    model: str = ""
    note: str = ""


def query_for(action):
    """Return the events Query of ``action`` (not yet embedded): the player's own words."""
    return Query(action.text.strip() if action.mode != "continue" else "")


def query_texts(campaign, query):
    """Return (``query``, the texts to embed for it): none, and why, when the recall index has no such vectors."""
    model = embedding_model(campaign)
    if not query.text:
        return Query("", model=model, note="nothing to search for"), []
    pin = RecallPin.objects.filter(campaign_id=campaign.pk).values_list("model", flat=True).first()
    if pin != model:
        return Query(query.text, model=model, note=f"no recorded event has a vector from {model}; cues and words "
                                                    "only"), []
    return Query(query.text, model=model), [prefixes(model)[1] + query.text]


def embedded(query, vectors=None, *, error=None):
    """Return ``query`` with its vector, or with the reason it has none."""
    if error is not None:
        reason = ("no embedding model is available" if isinstance(error, llm.EmbeddingUnavailable)
                  else f"the query could not be embedded ({error})")
        return Query(query.text, model=query.model, note=f"{reason}; cues and words only")
    return Query(query.text, tuple(vectors[0]), query.model)


def section(campaign, path, action, query, checkpoint, *, current=None):
    """Return (Section or None, report) for the folded-out events ``action`` evokes on ``path``.

    ``checkpoint`` is the one the prompt uses (None: nothing is folded out, so there is nothing to recall);
    ``current`` the turn's part of the state, when the caller has read it.
    """
    query = query or query_for(action)
    report = {"query": query.text, "semantic": {"model": query.model, "note": query.note,
                                                "used": query.vector is not None},
              "covered_end": checkpoint.source_end if checkpoint else None, "used": []}
    if checkpoint is None or not query.text:
        report["note"] = "no summary covers any turn yet" if checkpoint is None else "nothing to search for"
        return None, report
    folded = path.capped(checkpoint.source_end)
    if not recall_index.pool_at(campaign.pk, folded, "").items:
        report["note"] = "no event is recorded in what the summary covers"
        return None, report
    current = current if current is not None else state_for_turn(path, campaign, query.text)
    found = recall_index.recall(folded, campaign, "", _situation(current, query.text), minds.clock_ms(current),
                                vector=query.vector, model=query.model, flaky=campaign.memory_flaky,
                                recall=MAX_EVENTS, over_retrieve=campaign.memory_over_retrieve,
                                diversity=campaign.memory_diversity, associate=campaign.memory_associate)
    chosen = [memory for memory in found.memories if memory.hit or memory.associated]
    report.update(channels=found.report["channels"], considered=found.report["considered"],
                  candidates=found.report["candidates"],
                  scores=[row for row in found.report["scores"] if row["slot"] in {m.slot for m in chosen}])
    if not chosen:
        return None, report
    secret = _narrator_only(path, [m.slot for m in chosen])
    used = []
    for memory in chosen:
        used.append({"type": "event", "slot": memory.slot, "id": memory.id, "text": memory.text,
                     "wording": memory.wording, "associated": memory.associated, "score": round(memory.score, 4),
                     "narrator_only": memory.slot in secret})
    report["used"] = used
    lines = [HEADER, *(f"- {'[narrator only] ' if entry['narrator_only'] else ''}{entry['text']}" for entry in used)]
    return Section("events", "Earlier events", "Level 2 accepted events (folded into the summary)", DYNAMIC_TAIL,
                   "\n".join(lines), protected=True, components=used), report


def _narrator_only(path, slots):
    """Return which of the event ``slots`` the narrator alone knows (written out: the ORM took longer to build this
    read than SQLite to answer it, bench "minds")."""
    on_line, params = path.sql()
    marks = ", ".join(["%s"] * len(slots))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT slot FROM {StateRecord._meta.db_table} WHERE campaign_id = %s AND narrator_only"
                       f" AND slot IN ({marks}) AND ({on_line})", [path.campaign_id, *slots, *params])
        return {row[0] for row in cursor.fetchall()}


def _situation(state, text):
    """Return the cues of the moment: the place, those present and those (and the items) the words name."""
    named = selection.mentioned(state, text)
    place = state.place()
    people = {key for key in [*state.present(), *named] if world.kind_of(state, key) == "character"}
    items = {key for key in named if world.kind_of(state, key) == "item"}
    return recall.Situation(text=text, people=frozenset(people - {PROTAGONIST}), location=place,
                            items=frozenset(items))
