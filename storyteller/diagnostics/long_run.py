"""The long-run harness: play a long story through the real turn path and say what memory kept (seed 004 §C.5).

A campaign is played against the configured model server (the fake one with
its deterministic stubs in tests, a real Ollama when a person has one) by
``turns.play_turn`` and the real post-turn worker, settled after every turn
so eviction happens at a known turn. With an independent fact, a story-only
fact is planted as a ``story`` action at depth 3 (turn 2) and never
corrected into state; after every accepted turn the first failures of
``absent_from_state``, ``absent_from_summary`` and
``absent_from_later_narration`` are recorded; at the end a recall question
is played and the §C.5 verdict returned.

Progress lives in the campaign and in the run's JSON file. The campaign's
head says how many turns were committed, and each turn's action is a pure
function of its number, so a run killed anywhere resumes from the last
committed turn: a turn whose entry never reached the file is read back from
the campaign, never played again. The file is rewritten whole (write, then
rename) after every turn, so it is never half written.
"""

import json
import os
import time
from pathlib import Path

from asgiref.sync import sync_to_async
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from campaigns import lineage, story
from campaigns.models import Campaign, Node
from memory import checkpoints
from memory.models import Memory, MemoryRun

from .. import turns
from ..context import Action
from ..context import memories as memory_section
from ..steps import memories, postturn
from .isolation import isolation, state_records_holding
from .retention import diagnose
from .scenarios import F, RECALL
from .stubs import Fact

VERSION = 1

# The scenarios' fact F and recall question (seed 004 §K), planted at depth 3 as §C.5 plants it.
PLANT_TURN = 2  # turn n's action is at depth 2n - 1
# Seed 004 §C.5: narration counts as "later" from six depths past the plant (one memory block).
LATER_NARRATION_GAP = 6

PRECONDITIONS = (
    "planted_turn_outside_history",
    "absent_from_state",
    "absent_from_summary",
    "absent_from_knowledge",
    "absent_from_later_narration",
)
TRACKED = ("absent_from_state", "absent_from_summary", "absent_from_later_narration")
RECOVERED = "recovered_through_memory_independent"
NOT_RECOVERED = {
    "not_created": "not_recovered:not_created",
    "created_but_evicted": "not_recovered:evicted",
    "retained_but_not_ranked": "not_recovered:not_injected",
    "ranked_but_not_selected": "not_recovered:not_injected",
    "selected_but_not_injected": "not_recovered:not_injected",
}

# Filler the player walks through: none of it names the planted fact (tests/storyteller/test_long_run.py).
_PLACES = ("the harbour steps", "the rope walk", "the chandler's yard", "the fish market", "the old mill",
           "the ferry landing", "the salt sheds", "the lamplighter's lane", "the net lofts", "the tide pools",
           "the customs house", "the bell tower stairs", "the orchard gate")
_DEEDS = ("I walk on to {place} and look around.", "I ask a passer-by about {place}.",
          "I rest for a while near {place}.", "I follow the crowd toward {place}.")

CAMPAIGN = {
    "genre": "fantasy",
    "protagonist": "Aldric, a wandering scribe",
    "opening": "Rain drums on the shutters of the Gull and Lantern as Aldric shakes off his cloak by the fire.",
}


class RunError(Exception):
    """The run cannot start or go on; the message says what to change."""


def runs_dir():
    """Return the folder the runs' JSON files live in (under the data folder)."""
    return Path(settings.DATA_DIR) / "long_runs"


def report_path(campaign_id):
    """Return where the run of campaign ``campaign_id`` is written."""
    return runs_dir() / f"campaign-{int(campaign_id)}.json"


def has_run(campaign_id):
    """Return whether campaign ``campaign_id`` has a long run to report."""
    return report_path(campaign_id).exists()


def load(campaign_id):
    """Return the run of campaign ``campaign_id`` as written, or None if it has none."""
    try:
        return json.loads(report_path(campaign_id).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def start(owner, *, turns, independent_fact, context_token_budget=4096, max_output_tokens=200, capacity=None,
          top_k=None):
    """Create the run's campaign and its file; return the run (play it with ``play``).

    ``capacity`` and ``top_k`` are the memory bank's capacity and how many
    memories a turn may use, for this run (default: the configured ones); a
    resumed run keeps them.
    """
    if turns < (PLANT_TURN + 1 if independent_fact else 1):
        raise RunError(f"--turns must be at least {PLANT_TURN + 1} with --independent-fact (the fact is planted at "
                       f"turn {PLANT_TURN} and must be followed by a turn), and at least 1 without.")
    campaign = story.start_campaign(Campaign.objects.create(
        owner=owner, title=f"Long run {timezone.localtime():%Y-%m-%d %H:%M}",
        context_token_budget=context_token_budget, max_output_tokens=max_output_tokens, **CAMPAIGN))
    run = {
        "version": VERSION,
        "campaign": campaign.pk,
        "owner": owner.get_username(),
        "title": campaign.title,
        "turns": turns,
        "fact": {"text": F.text, "words": list(F.words), "turn": PLANT_TURN, "depth": 2 * PLANT_TURN - 1,
                 "recall": RECALL} if independent_fact else None,
        "settings": {
            "llm_url": settings.STORYTELLER_LLM_URL,
            "api": settings.STORYTELLER_LLM_API,
            "narrator_model": settings.STORYTELLER_NARRATOR_MODEL,
            "embed_model": settings.STORYTELLER_EMBED_MODEL,
            "context_token_budget": context_token_budget,
            "max_output_tokens": max_output_tokens,
            "memory_bank_capacity": capacity or memories.capacity(),
            "memory_top_k": top_k or memory_section.memory_top_k(),
        },
        "status": "running",
        "started_at": timezone.now().isoformat(),
        "elapsed_seconds": 0.0,
        "process_starts": 0,
        "first_failures": {name: None for name in TRACKED},
        "timeline": [],
        "recall": None,
        "preconditions": None,
        "diagnosis": None,
        "verdict": None,
    }
    _write(run)
    return run


def resume(campaign_id=None, *, turns=None):
    """Return the run to go on with: campaign ``campaign_id``'s, or the newest unfinished one."""
    if campaign_id is None:
        found = sorted(runs_dir().glob("campaign-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        unfinished = [json.loads(p.read_text(encoding="utf-8")) for p in found]
        unfinished = [run for run in unfinished if run.get("status") != "complete"]
        if not unfinished:
            raise RunError(f"No unfinished long run in {runs_dir()}; start one without --resume.")
        run = unfinished[0]
    else:
        run = load(campaign_id)
        if run is None:
            raise RunError(f"Campaign {campaign_id} has no long run ({report_path(campaign_id)} does not exist).")
    if run["status"] == "complete":
        raise RunError(f"The long run of campaign {run['campaign']} is complete; start a new run without --resume.")
    campaign = Campaign.objects.filter(pk=run["campaign"]).first()
    if campaign is None:
        raise RunError(f"Campaign {run['campaign']} of {report_path(run['campaign'])} no longer exists; "
                       "start a new run without --resume.")
    if turns is not None and turns != run["turns"]:
        if campaign.head_depth // 2 > min(turns, run["turns"]):
            raise RunError(f"The run has already played {campaign.head_depth // 2} turns, so --turns cannot become "
                           f"{turns}; leave --turns out to finish it as planned ({run['turns']}).")
        run["turns"] = turns
    return run


async def play(run, *, stop_after=None, say=lambda line: None):
    """Play ``run`` on from its campaign's last committed turn, then the recall; return the run.

    ``stop_after`` plays at most that many turns in this call and leaves the
    run resumable. ``say`` is told one line per turn.
    """
    run["process_starts"] += 1
    run["status"] = "running"
    started = time.perf_counter()
    try:
        with override_settings(STORYTELLER_MEMORY_BANK_CAPACITY=run["settings"]["memory_bank_capacity"],
                               STORYTELLER_MEMORY_TOP_K=run["settings"]["memory_top_k"]):
            return await _play(run, stop_after, say)
    except BaseException:
        if run["status"] == "running":
            run["status"] = "interrupted"
        raise
    finally:
        run["elapsed_seconds"] = round(run["elapsed_seconds"] + time.perf_counter() - started, 3)
        await sync_to_async(_write)(run)


async def _play(run, stop_after, say):
    committed, unobserved = await sync_to_async(_committed)(run)
    for turn, node_id in unobserved:
        # Committed by a process that died before writing it down: finish its post-turn work, observe it.
        await postturn.run(node_id)
        await sync_to_async(_observe)(run, turn, node_id, None)
    played = 0
    while committed < run["turns"] + (1 if run["fact"] else 0):
        if stop_after is not None and played >= stop_after:
            run["status"] = "stopped"
            return run
        turn = committed + 1
        entry = await _play_one(run, turn)
        say(f"turn {turn}: depth {entry['depth']}, {entry['bank']['active']} memories, "
            f"{entry['seconds']:.2f} s")
        committed, played = turn, played + 1
    if run["fact"]:
        await sync_to_async(_judge)(run)
    run["status"] = "complete"
    return run


async def _play_one(run, turn):
    started = time.perf_counter()
    action = action_for(run, turn)
    try:
        result = await turns.play_turn(run["campaign"], action, _ignore)
    except turns.TurnFailed as error:
        raise RunError(f"Turn {turn} failed: {error} The run keeps its {turn - 1} committed turns; "
                       "fix the model server and run again with --resume.") from error
    await postturn.settle(run["campaign"])
    entry = await sync_to_async(_observe)(run, turn, result.node_id, time.perf_counter() - started)
    await sync_to_async(_write)(run)
    return entry


async def _ignore(text):
    pass


def action_for(run, turn):
    """Return turn ``turn``'s action: a pure function of the turn number, so a resumed run plays the same."""
    fact = run["fact"]
    if fact and turn == fact["turn"]:
        return Action(mode=Node.Mode.STORY, text=fact["text"])
    if fact and turn == run["turns"] + 1:
        return Action(mode=Node.Mode.DO, text=fact["recall"])
    place = _PLACES[turn % len(_PLACES)]
    return Action(mode=Node.Mode.DO, text=_DEEDS[(turn // len(_PLACES)) % len(_DEEDS)].format(place=place))


def _committed(run):
    """Return how many turns the campaign has committed, and the (turn, reply id) pairs the file does not hold.

    Refuse a campaign someone played on outside the harness: its turns are
    not the run's, so nothing it measured would mean what the file says.
    """
    campaign = Campaign.objects.get(pk=run["campaign"])
    nodes = lineage.path_of(campaign).nodes()
    players = dict(nodes.filter(role=Node.Role.PLAYER).values_list("depth", "text"))
    replies = dict(nodes.filter(role=Node.Role.NARRATOR).values_list("depth", "id"))
    committed = campaign.head_depth // 2
    for turn in range(1, committed + 1):
        if players.get(2 * turn - 1) != action_for(run, turn).text:
            raise RunError(f"Campaign {campaign.pk} was played outside the harness (turn {turn} is not the "
                           "harness's action), so the run cannot resume; start a new run without --resume.")
    run["timeline"] = [entry for entry in run["timeline"] if entry["turn"] <= committed]
    known = {entry["turn"] for entry in run["timeline"]}
    return committed, [(turn, replies[2 * turn]) for turn in range(1, committed + 1) if turn not in known]


def _observe(run, turn, node_id, seconds):
    """Record what turn ``turn`` (reply ``node_id``) did and the first failures it shows; return its entry."""
    node = Node.objects.select_related("snapshot").get(pk=node_id)
    campaign = Campaign.objects.get(pk=run["campaign"])
    path = lineage.path_at(campaign.pk, node.branch_id, node.depth)
    report = node.snapshot.report
    history = next((s for s in report["sections"] if s["key"] == "history"), {"components": []})
    floor = min((c["depth"] for c in history["components"]), default=None)
    memory_run = MemoryRun.objects.filter(node=node).first()
    used = [entry["id"] for entry in report.get("memories", {}).get("used", [])]
    entry = {
        "turn": turn,
        "node": node.pk,
        "depth": node.depth,
        "action": report["action"]["text"],
        "seconds": None if seconds is None else round(seconds, 3),
        "prompt_tokens": report["budget"]["prompt_tokens"],
        "history_floor": floor,
        "memories_used": used,
        "bank": {
            "active": Memory.objects.filter(campaign=campaign, forgotten=False).count(),
            "forgotten": Memory.objects.filter(campaign=campaign, forgotten=True).count(),
            "written": memory_run.written if memory_run else 0,
            "evicted": memory_run.evicted if memory_run else 0,
            "status": memory_run.status if memory_run else "not run",
            "error": memory_run.error if memory_run else "",
        },
    }
    summary = checkpoints.eligible_checkpoint(path)
    entry["summary_through"] = summary.source_end if summary else None
    if run["fact"]:
        fact, depth = _fact(run), run["fact"]["depth"]
        checks = _isolation_now(path, node, summary, fact, depth)
        entry["checks"] = checks
        entry["plant_in_history"] = floor is not None and floor <= depth
        covering = Memory.objects.filter(pk__in=used, source_start__lte=depth, source_end__gte=depth)
        entry["fact_memory_used"] = any(fact.carries(text) for text in covering.values_list("text", flat=True))
        # The recall turn's own reply may name the fact: that is the recall, not a leak.
        for name, holds in checks.items():
            if not holds and run["first_failures"][name] is None and turn <= run["turns"]:
                run["first_failures"][name] = turn
    run["timeline"] = sorted([e for e in run["timeline"] if e["turn"] != turn] + [entry], key=lambda e: e["turn"])
    return entry


def _isolation_now(path, node, summary, fact, depth):
    """Return the per-turn preconditions of §C.5 after reply ``node``: True where the fact is still absent.

    The state is every record on the line (a record retracted later was still
    in the state at this turn); the summary is the one a prompt would use now;
    narration counts from LATER_NARRATION_GAP depths past the plant.
    """
    later = node.depth > depth + LATER_NARRATION_GAP
    return {
        "absent_from_state": not state_records_holding(path, fact),
        "absent_from_summary": not (summary and fact.leaks(summary.text)),
        "absent_from_later_narration": not (later and fact.leaks(node.text)),
    }


def planted_fact():
    """Return the fact a run plants, for the stub model server to recognise (``DiagnosticStubs(facts=[...])``)."""
    return F


def _fact(run):
    return Fact(run["fact"]["text"], tuple(run["fact"]["words"]))


def _judge(run):
    """Settle the §C.5 verdict of a finished run from its recall turn and the campaign (read only)."""
    recall_turn = run["turns"] + 1
    entry = next(e for e in run["timeline"] if e["turn"] == recall_turn)
    campaign = Campaign.objects.get(pk=run["campaign"])
    recall = Node.objects.get(pk=entry["node"])
    path = lineage.path_at(campaign.pk, recall.branch_id, recall.depth)
    fact = _fact(run)
    isolated = isolation(campaign, path, fact, recall)
    diagnosis = diagnose(campaign, fact, recall)
    run["recall"] = {"turn": recall_turn, "node": recall.pk, "reply": recall.text}
    run["isolation"] = isolated.to_json()
    run["preconditions"] = preconditions_held(run["first_failures"], isolated.checks)
    run["diagnosis"] = diagnosis.to_json()
    run["verdict"] = verdict(run["preconditions"], diagnosis.verdict)


def preconditions_held(first_failures, checks):
    """Return each §C.5 precondition: held on every turn (``first_failures``) and at recall (``checks``, by name).

    A check the isolation did not make leaves its precondition unknown (None), never held.
    """

    def held(tracked, *names):
        judged = [checks[name].passed if name in checks else None for name in names]
        if (tracked and first_failures[tracked] is not None) or False in judged:
            return False
        return None if None in judged else True

    return {
        "planted_turn_outside_history": held(None, "recent_history"),
        "absent_from_state": held("absent_from_state", "state_document", "state_snapshots", "state_section"),
        "absent_from_summary": held("absent_from_summary", "summary"),
        "absent_from_knowledge": held(None, "knowledge"),
        "absent_from_later_narration": held("absent_from_later_narration", "later_narration"),
    }


def verdict(preconditions, stage_verdict):
    """Return the §C.5 verdict: the first precondition that failed or is unknown, else the stage's outcome.

    ``preconditions`` maps each name of PRECONDITIONS to True, False or None
    (could not be judged); ``stage_verdict`` is the four-stage diagnosis's.
    """
    for name in PRECONDITIONS:
        holds = preconditions.get(name)
        if holds is False:
            return f"precondition_failed:{name}"
        if holds is None:
            return f"precondition_unknown:{name}"
    if stage_verdict == "injected":
        return RECOVERED
    return NOT_RECOVERED[stage_verdict]


def page(campaign, run):
    """Return what ``storyteller/long_run.html`` renders for ``run`` of ``campaign``."""
    recall = run["recall"]
    judged = run["preconditions"] or {}
    return {
        "campaign": campaign,
        "run": run,
        "path": report_path(campaign.pk),
        "chart": chart(run),
        "preconditions": [{"name": name, "holds": judged.get(name), "first_failure": run["first_failures"].get(name)}
                          for name in PRECONDITIONS],
        "stages": _stages(run["diagnosis"]),
        "ranking": _ranking(campaign, run["diagnosis"]),
        "recall_node": recall["node"] if recall and Node.objects.filter(pk=recall["node"], campaign=campaign).exists()
        else None,
    }


def chart(run, *, width=640, height=160):
    """Return the bank over ``run`` in SVG user units (pure): memories kept and forgotten after each turn.

    ``kept`` and ``forgotten`` are polyline points; ``evictions`` marks each
    turn that evicted, with its count; the y axis runs to the larger of the
    capacity and the fullest bank.
    """
    timeline = run["timeline"]
    capacity = run["settings"]["memory_bank_capacity"]
    top = max([capacity, *(e["bank"]["active"] + e["bank"]["forgotten"] for e in timeline), 1])
    step = width / max(len(timeline), 1)

    def y(value):
        return round(height - value * height / top, 1)

    def line(key):
        return " ".join([f"0,{height}"] + [f"{round((i + 1) * step, 1)},{y(e['bank'][key])}"
                                           for i, e in enumerate(timeline)])

    evictions = [{"x": round((i + 1) * step, 1), "turn": e["turn"], "count": e["bank"]["evicted"]}
                 for i, e in enumerate(timeline) if e["bank"]["evicted"]]
    return {"width": width, "height": height, "kept": line("active"), "forgotten": line("forgotten"),
            "evictions": evictions, "capacity": capacity, "capacity_y": y(capacity), "top": top,
            "turns": len(timeline)}


def _write(run):
    """Write ``run`` to its file whole: a temporary file renamed over the old one."""
    run["updated_at"] = timezone.now().isoformat()
    target = report_path(run["campaign"])
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(run, indent=1), encoding="utf-8")
    os.replace(temporary, target)


STAGES = ("created", "retained", "ranked", "injected")


def _stages(diagnosis):
    """Return the four stages for the page, in order: whether each passed (None: not reached) and its fields."""
    found = (diagnosis or {}).get("stages", {})
    passed = {
        "created": lambda stage: stage["created"],
        "retained": lambda stage: stage["retained"],
        "ranked": lambda stage: stage["selected"],
        "injected": lambda stage: stage["in_stored_memories_used"] and stage["text_in_section"],
    }
    return [{"name": name, "passed": passed[name](found[name]) if name in found else None,
             "fields": [(key, value if isinstance(value, (str, int, float, bool, type(None))) else json.dumps(value))
                        for key, value in found.get(name, {}).items()]}
            for name in STAGES] if diagnosis else []


def _ranking(campaign, diagnosis):
    """Return the planted memory's ranking at recall and what the recall turn was shown, with their texts."""
    ranked = (diagnosis or {}).get("stages", {}).get("ranked")
    if not ranked:
        return None
    planted = diagnosis["stages"]["created"]["memory_id"]
    texts = dict(Memory.objects.filter(campaign=campaign, pk__in=ranked["stored_selection"] + [planted])
                 .values_list("id", "text"))
    return {**ranked, "memory_id": planted, "memory_text": texts.get(planted, ""),
            "shown": [{"id": pk, "text": texts.get(pk, ""), "planted": pk == planted}
                      for pk in ranked["stored_selection"]]}
