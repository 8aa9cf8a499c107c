"""The scripting interface: write a story turn by turn from a file, and read its state after any depth.

``manage.py story append`` and ``manage.py story state`` are this module's
face; docs/events.md documents both. A script is JSON Lines, one turn a line:

    {"action": {"mode": "do", "text": "open the chest"}, "reply": "The lid creaks.",
     "events": [{"type": "item_changes", "subject": "Edrin", "data": {"ops": [{"op": "open", "item": "chest"}]}}]}

Each turn is committed through the normal write path (``campaigns.story``),
and its events are validated and applied exactly as the recorder's would be
(source ``script``: the recorder's rules); an optional ``corrections`` list is
applied after them as a person's corrections. The whole file is read and
checked before the first turn is written, so a malformed line loses nothing.
"""

from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction

from campaigns import lineage, story, storytime, uploads
from campaigns.forms import ActionForm
from campaigns.models import Campaign, Node, StateEvent
from campaigns.state import apply_events, state_at
from campaigns.state.minds import whereabouts
from campaigns.state.time import rulebook
from campaigns.state.world import world

from memory import recall_index

from .context import node_tokens

MODES = tuple(Node.Mode.values)
LINE_KEYS = {"action", "reply", "events", "corrections"}
MAX_EVENTS_PER_TURN = 200
# One line of a script: a turn's action, reply and events (a reply of the longest a node holds fits).
LINE_LIMITS = uploads.Limits("script line", 1024 * 1024, max_depth=24)


class ScriptRefused(Exception):
    """The script cannot be run; ``reasons`` lists every malformed line, and nothing was written."""

    def __init__(self, reasons):
        self.reasons = list(reasons)
        super().__init__("The script was not run; nothing was written: " + "; ".join(self.reasons[:20])
                         + (f"; and {len(self.reasons) - 20} more" if len(self.reasons) > 20 else ""))


@dataclass(frozen=True)
class Turn:
    line: int
    mode: str
    text: str
    direction: str
    reply: str
    events: list
    corrections: list


def read(text):
    """Return the Turns of a JSON Lines script, or raise ScriptRefused naming every malformed line."""
    turns, problems = [], []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        where = f"line {number}"
        try:
            line = uploads.parse(raw, LINE_LIMITS, where)
        except uploads.UploadRefused as error:
            problems.append(str(error).rstrip("."))
            continue
        if not isinstance(line, dict):
            problems.append(f"{where} must be an object with action, reply and events")
            continue
        unknown = set(line) - LINE_KEYS
        if unknown:
            problems.append(f"{where} has unknown keys {', '.join(sorted(unknown))} (a line has "
                            f"{', '.join(sorted(LINE_KEYS))})")
        action = line.get("action")
        if not isinstance(action, dict):
            problems.append(f"{where}: action must be an object like {{\"mode\": \"do\", \"text\": \"...\"}}")
            continue
        mode = action.get("mode", "do")
        text = str(action.get("text") or "").strip()
        if not isinstance(mode, str) or mode not in MODES:
            problems.append(f"{where}: action.mode must be one of {', '.join(MODES)}, not {str(mode)[:40]!r}")
        elif mode != "continue" and not text:
            problems.append(f"{where}: action.text is empty (only a continue has no text)")
        else:  # the play page's own limits on an action and its direction
            form = ActionForm({"mode": mode, "text": text, "direction": str(action.get("direction") or "")})
            problems += [f"{where}: action.{name}: {' '.join(errors)}" for name, errors in form.errors.items()]
        reply = line.get("reply")
        if not isinstance(reply, str) or not reply.strip():
            problems.append(f"{where}: reply must be the narrator's text")
        else:
            try:
                Node._meta.get_field("text").run_validators(reply)
            except ValidationError as error:
                problems.append(f"{where}: reply: {' '.join(error.messages)}")
        lists = {}
        for name in ("events", "corrections"):
            value = line.get(name, [])
            if not isinstance(value, list) or len(value) > MAX_EVENTS_PER_TURN:
                problems.append(f"{where}: {name} must be a list of at most {MAX_EVENTS_PER_TURN} events")
                value = []
            lists[name] = value
        turns.append(Turn(number, mode, text, str(action.get("direction") or "").strip(), str(reply or ""),
                          lists["events"], lists["corrections"]))
    if problems:
        raise ScriptRefused(problems)
    return turns


def append(campaign, turns):
    """Commit each of ``turns`` after the campaign's head; return one result per event, in order.

    A result is ``{"line", "node", "depth", "source", "type", "status", "reason"}``; the
    application's own observation events are included (source as the batch, type ``observe``).
    """
    results = []
    for turn in turns:
        campaign.refresh_from_db()
        action = story.PlayerAction(mode=turn.mode, text=turn.text, direction=turn.direction,
                                    tokens=node_tokens("player", turn.mode, turn.text))
        reply = story.Reply(text=turn.reply, tokens=node_tokens("narrator", "", turn.reply),
                            report={"scripted": True, "budget": {}, "sections": []}, model="script", api="script")
        with transaction.atomic():  # as a played turn commits: the story, then its round of story time
            node = story.commit_turn(campaign.pk, (campaign.head_branch_id, campaign.head_depth), action, reply)
            storytime.advance(node)
        stored = apply_events(node, turn.events, source=StateEvent.Source.SCRIPT, attempt=1, model="script")
        if turn.corrections:
            stored += apply_events(node, turn.corrections, source=StateEvent.Source.CORRECTION)
        results += [{"line": turn.line, "node": node.pk, "depth": node.depth, "source": event.source,
                     "type": event.payload.get("type", ""), "status": event.status, "reason": event.reason}
                    for event in stored]
    campaign.refresh_from_db()
    recall_index.sync(campaign.pk)  # what characters perceived and believe, searchable as a turn leaves it
    return results


def state_after(campaign, depth):
    """Return the state of the campaign's current line after ``depth`` as JSON-ready values."""
    path = lineage.path_of(campaign)
    if not 0 <= depth <= path.head_depth:
        raise ValueError(f"depth {depth} is not on the current line (0 to {path.head_depth})")
    line = path.capped(depth)
    node = line.nodes().filter(depth=depth).values_list("pk", "branch_id").get()
    state = state_at(line, campaign)
    return {"campaign": campaign.pk, "depth": depth, "node": node[0], "branch": node[1], **world.snapshot(state),
            **rulebook.snapshot(state, campaign.time_zone), "minds": whereabouts.minds_at(line, campaign).as_json()}


def campaign_for(pk):
    try:
        return Campaign.objects.get(pk=pk)
    except Campaign.DoesNotExist:
        raise ValueError(f"there is no campaign {pk}") from None
