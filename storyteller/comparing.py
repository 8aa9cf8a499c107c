"""Two lines of the story side by side, turn by turn: a replay and the line it played again (issue 29).

``compare(replay)`` reads both lines in a fixed number of queries (their
nodes, the replies' timings and counts, their events, their recordings and
the state records that say who is where, who holds what and what each
believes) and folds the state along each line once, so a 200-turn replay
compares in milliseconds. The rest is pure: ``word_diff`` and the summary.
"""

import difflib
from dataclasses import dataclass, field

from campaigns import lineage
from campaigns.models import ContextSnapshot, Node, RecorderRun, StateEvent, StateRecord

# The state compared after each turn: who is where, who holds what, what each believes (the compare page's rows).
STATE_KINDS = {"location": "Where {subject} is", "holder": "Who holds {subject}", "belief": ""}
# Replies at least this much alike (difflib's quick ratio over their words) are shown as a word diff; less alike,
# they are two different passages, and a diff of them is noise.
CLOSE = 0.6


@dataclass(frozen=True)
class Piece:
    """A run of words of a word diff: the same in both, only in the original (``gone``) or only in the replay."""

    kind: str  # "same" | "gone" | "new"
    text: str


@dataclass
class Side:
    """One line's turn: its reply, what it cost and what its recording made of it."""

    node_id: int | None = None
    text: str = ""
    model: str = ""
    duration_ms: int | None = None
    first_word_ms: int | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cached: int | None = None
    applied: list = field(default_factory=list)  # (type, words)
    refused: list = field(default_factory=list)  # (type, words, reason)
    failure: str = ""  # the recording's failure, in its own words
    recording: str = ""  # the recorder's status: applied, failed, waiting, or "" (not recorded)


@dataclass
class Turn:
    number: int  # 1 for the replay's first
    story_turn: int  # the turn's number in the story
    action: str
    original: Side
    replay: Side
    diff: list | None  # Pieces when the replies are close, else None
    same_text: bool
    state: list  # (label, original value, replay value) where they differ

    @property
    def sides(self):
        """Return (original, replay): the two Sides in the order the page shows them."""
        return self.original, self.replay


@dataclass(frozen=True)
class Summary:
    turns: int
    played: int
    refused_per_turn: tuple  # (original, replay) averages
    structured_failures: tuple  # (original, replay) counts
    first_divergence: int | None  # the first turn (of the story) whose state after it differs
    ms_per_turn: tuple
    first_word_ms: tuple
    tokens_in_per_turn: tuple
    tokens_out_per_turn: tuple
    same_replies: int


def compare(replay):
    """Return (Summary, [Turn]) for ``replay`` against the line it plays again, as far as it has played."""
    original = lineage.path_at(replay.campaign_id, replay.source_id, replay.to_depth)
    played = lineage.path_at(replay.campaign_id, replay.branch_id, max(lineage.tip_depth(replay.branch),
                                                                       replay.branch.fork_depth))
    low, high = replay.from_depth, replay.to_depth
    left, right = _line(original, low, high), _line(played, low, high)
    left_state, right_state = _states(original, low, high), _states(played, low, high)
    rows = []
    for depth in range(low, high + 1, 2):
        action, left_side = left.get(depth, ("", Side()))
        right_side = right.get(depth, ("", Side()))[1]
        done = right_side.node_id is not None
        same = done and left_side.text == right_side.text
        rows.append(Turn(
            number=(depth - low) // 2 + 1, story_turn=(depth + 1) // 2, action=action, original=left_side, replay=right_side,
            diff=word_diff(left_side.text, right_side.text) if done and not same else None, same_text=same,
            state=_state_differences(left_state.get(depth + 1, {}), right_state.get(depth + 1, {})) if done else []))
    return summarise(rows), rows


def summarise(rows):
    """Return the Summary of compared turns (averages over the turns the replay has played)."""
    done = [row for row in rows if row.replay.node_id is not None]

    def mean(values):
        values = [v for v in values if v is not None]
        return round(sum(values) / len(values)) if values else None

    def both(measure):
        return (mean(measure(row.original) for row in done), mean(measure(row.replay) for row in done))

    refused = (round(sum(len(r.original.refused) for r in done) / len(done), 2) if done else 0,
               round(sum(len(r.replay.refused) for r in done) / len(done), 2) if done else 0)
    return Summary(
        turns=len(rows), played=len(done), refused_per_turn=refused,
        structured_failures=(sum(bool(r.original.failure) for r in done), sum(bool(r.replay.failure) for r in done)),
        first_divergence=next((row.story_turn for row in done if row.state), None),
        ms_per_turn=both(lambda side: side.duration_ms), first_word_ms=both(lambda side: side.first_word_ms),
        tokens_in_per_turn=both(lambda side: side.tokens_in), tokens_out_per_turn=both(lambda side: side.tokens_out),
        same_replies=sum(row.same_text for row in done))


def word_diff(before, after):
    """Return the Pieces that turn ``before`` into ``after`` word by word, or None when they are not close."""
    old, new = before.split(), after.split()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    if matcher.real_quick_ratio() < CLOSE or matcher.quick_ratio() < CLOSE:
        return None
    pieces = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pieces.append(Piece("same", " ".join(old[i1:i2])))
            continue
        if i2 > i1:
            pieces.append(Piece("gone", " ".join(old[i1:i2])))
        if j2 > j1:
            pieces.append(Piece("new", " ".join(new[j1:j2])))
    return pieces


def _line(path, low, high):
    """Return {player depth: (action text, Side)} for the turns of ``path`` from ``low`` to ``high``."""
    nodes = list(path.nodes().filter(depth__gte=low, depth__lte=high).values_list("pk", "depth", "role", "text"))
    actions = {depth: text for _, depth, role, text in nodes if role == Node.Role.PLAYER}
    replies = {pk: (depth, text) for pk, depth, role, text in nodes if role == Node.Role.NARRATOR}
    sides = {pk: Side(node_id=pk, text=text) for pk, (_, text) in replies.items()}
    for pk, model, ms, tokens_in, tokens_out, usage in ContextSnapshot.objects.filter(node_id__in=sides).values_list(
            "node_id", "model", "duration_ms", "prompt_eval_count", "eval_count", "report__usage"):
        side, usage = sides[pk], usage or {}
        side.model, side.duration_ms, side.tokens_in, side.tokens_out = model, ms, tokens_in, tokens_out
        side.first_word_ms, side.cached = usage.get("first_word_ms"), usage.get("cached_tokens")
    for pk, status, payload, reason in StateEvent.objects.filter(
            node_id__in=sides, source=StateEvent.Source.RECORDER).values_list("node_id", "status", "payload",
                                                                               "reason").order_by("id"):
        words = " / ".join(str(payload.get(key)) for key in ("subject", "object", "value") if payload.get(key))
        if status == StateEvent.Status.APPLIED:
            sides[pk].applied.append((payload.get("type", ""), words))
        else:
            sides[pk].refused.append((payload.get("type", ""), words, reason))
    for pk, status, error in RecorderRun.objects.filter(node_id__in=sides).values_list("node_id", "status", "error"):
        sides[pk].recording = status
        if status == RecorderRun.Status.FAILED:
            sides[pk].failure = error
    return {depth - 1: (actions.get(depth - 1, ""), sides[pk]) for pk, (depth, _) in replies.items()}


def _states(path, low, high):
    """Return {reply depth: {slot: (label, value)}}: the compared state after each reply of ``path``.

    One read of the line's records of the compared kinds, folded in depth
    order (the deepest record wins; a retracted one ends its slot), as
    ``campaigns.state.reading`` folds a whole state.
    """
    records = (StateRecord.objects.filter(path.clause(), campaign_id=path.campaign_id, kind__in=STATE_KINDS,
                                          depth__lte=high + 1, narrator_only=False)
               .order_by("depth", "id").values_list("depth", "slot", "kind", "subject", "value", "retracted"))
    now, states, depths = {}, {}, list(range(low + 1, high + 2, 2))
    records, at = list(records), 0
    for depth in depths:
        while at < len(records) and records[at][0] <= depth:
            _, slot, kind, subject, value, retracted = records[at]
            if retracted:
                now.pop(slot, None)
            else:
                now[slot] = (_label(kind, slot, subject), value)
            at += 1
        states[depth] = dict(now)
    return states


def _label(kind, slot, subject):
    """Return how a compared slot reads: "Where mara is", "What mara believes (the key)"."""
    if kind == "belief":
        _, who, *about = slot.split(":")
        return f"What {who.replace('-', ' ')} believes ({':'.join(about).replace('-', ' ')})"
    return STATE_KINDS[kind].format(subject=subject.replace("-", " "))


def _state_differences(left, right):
    """Return (label, original, replay) for every compared slot whose value differs after a turn."""
    return [(( left.get(slot) or right.get(slot))[0], (left.get(slot) or ("", "—"))[1] or "—",
             (right.get(slot) or ("", "—"))[1] or "—")
            for slot in sorted(left.keys() | right.keys()) if left.get(slot) != right.get(slot)]


def as_json(replay, summary, rows):
    """Return the comparison as plain values, per turn, for a script comparing several models (``--json``)."""
    def side(s):
        return {"model": s.model, "text": s.text, "first_word_ms": s.first_word_ms, "reply_ms": s.duration_ms,
                "tokens_in": s.tokens_in, "tokens_out": s.tokens_out, "cached_tokens": s.cached,
                "events_applied": len(s.applied),
                "events_refused": [{"type": t, "event": words, "reason": reason} for t, words, reason in s.refused],
                "recording": s.recording, "recording_failure": s.failure}

    return {
        "replay": replay.pk, "branch": replay.branch_id, "source": replay.source_id, "model": replay.model,
        "url": replay.url, "api": replay.api, "same_prompts": replay.same_prompts, "status": replay.status,
        "error": replay.error,
        "summary": {"turns": summary.turns, "played": summary.played,
                    "refused_events_per_turn": summary.refused_per_turn,
                    "structured_output_failures": summary.structured_failures,
                    "first_divergent_turn": summary.first_divergence, "reply_ms_per_turn": summary.ms_per_turn,
                    "first_word_ms_per_turn": summary.first_word_ms,
                    "tokens_in_per_turn": summary.tokens_in_per_turn,
                    "tokens_out_per_turn": summary.tokens_out_per_turn, "same_replies": summary.same_replies},
        "turns": [{"turn": row.story_turn, "action": row.action, "original": side(row.original),
                   "replay": side(row.replay) if row.replay.node_id else None, "same_reply": row.same_text,
                   "state_differences": [{"what": label, "original": a, "replay": b} for label, a, b in row.state]}
                  for row in rows],
    }
