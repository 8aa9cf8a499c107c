"""Isolation: a recall counts as memory's only when no other layer could have carried the fact (seed 004 §C.3).

Each check looks for any word of the planted fact (``Fact.leaks``, whole
words), which is stricter than carrying the whole fact: a narrator that
mentions the sundial without the teapot has still kept the thread alive.

    state_document    the state after the path's last node (the recall reply), every record in full
    state_snapshots   every state record anchored on the path (retracted ones too)
    later_narration   every reply deeper than the planting block's end and before the recall turn
    summary           the active checkpoint on the path and the recall prompt's summary sections
    knowledge         every imported source of the campaign and the recall prompt's knowledge sections
    recent_history    the recall prompt's history starts after the plant, and does not hold the fact
    state_section     the recall prompt's state section
"""

import json
from dataclasses import asdict, dataclass, field

from campaigns import state as story_state
from campaigns.models import ContextSnapshot, Node, StateRecord
from knowledge.models import Source
from memory import blocks, checkpoints

from .retention import plant_depth, recall_of

CHECKS = ("state_document", "state_snapshots", "later_narration", "summary", "knowledge", "recent_history",
          "state_section")


@dataclass(frozen=True)
class Check:
    passed: bool
    detail: str


@dataclass
class Isolation:
    checks: dict = field(default_factory=dict)  # name -> Check, in CHECKS order

    @property
    def holds(self):
        """Return whether every check passed: only then does a recall count as memory's."""
        return all(check.passed for check in self.checks.values())

    @property
    def failed(self):
        return [name for name, check in self.checks.items() if not check.passed]

    def to_json(self):
        return {"holds": self.holds, "failed": self.failed,
                "checks": {name: asdict(check) for name, check in self.checks.items()}}

    def __str__(self):
        return json.dumps(self.to_json())


def isolation(campaign, path, fact, recall_node):
    """Return the Isolation of ``fact`` on ``path`` (the recall turn's path) at the recall turn ``recall_node``."""
    recall = recall_of(recall_node)
    planted = plant_depth(path, fact)
    report = ContextSnapshot.objects.get(node=recall).report
    sections = {}
    for section in report.get("sections", []):
        sections.setdefault(section["key"], []).append(section)
    result = Isolation()
    checks = result.checks

    document = story_state.state_at(path, campaign)
    held = [record for record in document.slots.values() if fact.leaks(_record_text(record.value, record.data))]
    checks["state_document"] = _check(held, "the state holds no word of the fact",
                                      lambda: f"the state holds it in {', '.join(r.slot for r in held)}")

    records = state_records_holding(path, fact)
    checks["state_snapshots"] = _check(records, "no state record on the path holds the fact",
                                       lambda: f"state records hold it: {records[:5]}")

    after = blocks.MEMORY_INTERVAL * (planted // blocks.MEMORY_INTERVAL + 1) if planted is not None else 0
    narration = [depth for depth, text in path.nodes().filter(
        role=Node.Role.NARRATOR, depth__gte=after, depth__lt=recall.depth).values_list("depth", "text")
        if fact.leaks(text)]
    checks["later_narration"] = _check(narration, f"no reply from depth {after} to the recall restates it",
                                       lambda: f"replies at depths {narration[:10]} restate it")

    active = checkpoints.eligible_checkpoint(path.capped(recall.depth - 2))
    summaries = [s for key, found in sections.items() if "summary" in key or "checkpoint" in key for s in found]
    where = (["the active checkpoint"] if active is not None and fact.leaks(active.text) else [])
    where += [f"the prompt's {s['key']} section" for s in summaries if fact.leaks(s["text"])]
    checks["summary"] = _check(where, "neither the active checkpoint nor the prompt's summary holds it",
                               lambda: f"{' and '.join(where)} holds it")

    sources = [title for title, text in Source.objects.filter(campaign=campaign).values_list("title", "text")
               if fact.leaks(text)]
    sources += [f"the prompt's {key} section" for key, found in sections.items() if key.startswith("knowledge")
                for s in found if fact.leaks(s["text"])]
    checks["knowledge"] = _check(sources, "no imported source or knowledge section holds it",
                                 lambda: f"knowledge holds it: {', '.join(sources)}")

    history = sections.get("history", [{"text": "", "components": []}])[0]
    depths = [c["depth"] for c in history["components"] if "depth" in c]
    floor = min(depths) if depths else recall.depth - 1
    problems = []
    if planted is not None and floor <= planted:
        problems.append(f"the prompt's history starts at depth {floor}, at or before the plant at {planted}")
    if fact.leaks(history["text"]):
        problems.append("the prompt's history holds the fact")
    checks["recent_history"] = _check(problems, f"the prompt's history starts at depth {floor}, after the plant",
                                      lambda: "; ".join(problems))

    state_text = " ".join(s["text"] for s in sections.get("state", []))
    checks["state_section"] = _check([state_text] if fact.leaks(state_text) else [],
                                     "the prompt's state section does not hold it",
                                     lambda: "the prompt's state section holds it")
    return result


def state_records_holding(path, fact):
    """Return (slot, depth) of every state record on ``path``, retracted ones too, holding any word of ``fact``."""
    return [(slot, depth) for slot, depth, subject, value, data in StateRecord.objects.filter(
        path.clause(), campaign_id=path.campaign_id).values_list("slot", "depth", "subject", "value", "data")
        if fact.leaks(f"{subject} {_record_text(value, data)}")]


def _check(problems, passed, failed):
    return Check(False, failed()) if problems else Check(True, passed)


def _record_text(value, data):
    return f"{value} {json.dumps(data, ensure_ascii=False) if data else ''}"
