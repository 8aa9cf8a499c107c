"""Build the narrator's prompt for one turn: deterministic, read-only, fully reported.

Order (ARCHITECTURE rule 6): the stable prefix (narrator rules, campaign
profile, canon) as the system message; then the checkpoint summary, if one is
eligible; then verbatim active-lineage history after it, which only ever grows
at its end; then the dynamic tail (direction and the player's input) as the
last message. Between checkpoint rotations the new prompt therefore starts
with the whole of the previous one's prefix, summary and history, so the model
server can reuse its cache.

The reply is reserved first, protected sections are priced next, and the
story gets what is left: every node of the path is either verbatim or covered
by the checkpoint (seed 001). History is never silently shortened; past the
high watermark the build raises NeedsCompaction and the turn summarises first.
"""

import hashlib
import json
from dataclasses import dataclass

from django.db import connection

from campaigns import notes
from campaigns import state as story_state
from campaigns.models import CanonRule, CharacterCard, Node, Round
from memory import checkpoints

from .. import tokens
from . import budget, knowledge, layers, lorebook
from . import events as events_section
from . import memories as memory_section
from . import rules as rules_section
from . import state as state_section
from .layers import BRANCH_CONTEXT, DYNAMIC_TAIL, STABLE_PREFIX, Section

REPORT_VERSION = 1


@dataclass(frozen=True)
class Action:
    """What the player asked for this turn."""

    mode: str
    text: str = ""
    direction: str = ""


@dataclass
class Context:
    messages: list
    sections: list
    report: dict
    # The first message of the dynamic tail: everything before it is what the next turn's prompt starts with
    # (between checkpoint rotations). The last message, or an author's note placed deeper (``_with_note``).
    tail_start: int = -1
    # The message that holds the tail's sections and the player's input: the last, or the one before an author's
    # note placed after it (depth 0).
    input_at: int = -1

    @property
    def prompt_tokens(self):
        return self.report["budget"]["prompt_tokens"]


def message_for(role, mode, text):
    """Return the chat message a stored node becomes in the prompt."""
    if role == "player":
        return {"role": "user", "content": layers.render_action(mode, text)}
    return {"role": "assistant", "content": text}


def messages_for(role, mode, text, rounds=()):
    """Return the chat messages a stored node becomes in the prompt: one, but a game master's reply (one with
    its ``rounds``) reads as its narration's prompt had it — the game master's notes on the rounds, the request
    to narrate, then the narration — so the next turn's prompt starts with the whole of the narration's."""
    if role == "player" or not rounds:
        return [message_for(role, mode, text)]
    narration = layers.narration_of(rounds)
    return [*notes_messages(rounds), {"role": "assistant", "content": text if narration is None else narration}]


def notes_messages(rounds):
    """Return what a game master's turn adds after the player's action for its narration: its notes on
    ``rounds`` (as the game master's own message) and the request to narrate."""
    return [{"role": "assistant", "content": layers.render_notes(rounds)},
            {"role": "user", "content": layers.NARRATE_REQUEST}]


def node_tokens(role, mode, text, rounds=()):
    """Return the token count stored on a node at commit, so builds never re-count history: a game master's
    reply counts its notes, its request and their messages' overhead too (``messages_for``)."""
    messages = messages_for(role, mode, text, rounds)
    return sum(tokens.count(m["content"]) for m in messages) + (len(messages) - 1) * budget.MESSAGE_OVERHEAD


def build(campaign, path, action, *, model="", api="", seed=None, query=None, memory_query=None, events_query=None,
          compact_above=budget.HIGH_WATERMARK, headroom=0):
    """Return the Context for ``action`` played after the end of ``path``.

    ``query`` is the knowledge query, embedded before the build when semantic
    retrieval is possible (``knowledge_query``); without it the build makes its
    own, lexical only. ``memory_query`` is the story memories' query, embedded
    the same way (``memory_query``). Raise ``ContextOverflow`` when the protected sections
    and the reply reserve do not fit ``campaign.context_token_budget``; ``NeedsCompaction``
    when the summary and verbatim history pass ``compact_above`` of the room left for them
    (the caller summarises and builds again); ``HistoryEntryTooLarge`` when the newest
    passage alone does not fit. ``events_query`` is the events section's query, embedded
    the same way. ``headroom`` is what the prompt must keep free beyond the reply's reserve
    (a game master's turn, ``voices.gm.headroom``): it comes out of the room the high watermark
    leaves free first (``budget.watermarks``), so the story keeps its length while it fits.
    """
    name = layers.player_name(campaign)
    stable, has_knowledge, standing_dropped = _stable_prefix(campaign, name)
    system_text = "\n\n".join(section.text for section in stable)
    stable_hash = checkpoints.prefix_hash(system_text)
    lookup = checkpoints.look_up(path, stable_hash)
    remembered, memory_report = _memory_section(campaign, path, action, memory_query)
    state_text, current = _turn_state(campaign, path, action)
    evoked, events_report = events_section.section(campaign, path, action, events_query, lookup.checkpoint,
                                                   current=current)
    tail = _filled([*remembered, *([evoked] if evoked else []), *_state_section(campaign, path, state_text, current),
                    *_dynamic_tail(campaign, action)], name)
    for section in stable + tail:
        section.tokens = tokens.count(section.text)

    tail_text = "\n\n".join(section.text for section in tail)
    note, note_section = _author_note(path, name)
    protected = (
        tokens.count(system_text) + tokens.count(tail_text) + 2 * budget.MESSAGE_OVERHEAD
        + (note_section.tokens + budget.MESSAGE_OVERHEAD if note_section else 0)
    )
    allowance = budget.history_allowance(campaign.context_token_budget, campaign.max_output_tokens, protected)
    if headroom > allowance:
        raise budget.ContextOverflow(protected + headroom, protected + allowance, campaign.context_token_budget,
                                     budget.reply_reserve(campaign.max_output_tokens))
    found, knowledge_report = [], None
    if has_knowledge:
        found, knowledge_report = knowledge.retrieved_sections(
            campaign, query or knowledge_query(campaign, path, action), allowance)
        found = _filled(found, name)
    keyed, lore_report, lore_tokens = lorebook.sections(campaign, path, action, allowance)
    keyed = _filled(keyed, name)
    if found or keyed:
        # Elastic, after the memories: memories -> knowledge -> lorebook entries -> state -> direction -> input.
        tail = [*remembered, *found, *keyed, *tail[len(remembered):]]
        tail_text = "\n\n".join(section.text for section in tail)
    knowledge_tokens = sum(section.tokens + 1 for section in found)
    allowance -= knowledge_tokens + lore_tokens

    branch = _branch_context(path, lookup, stable_hash, allowance, compact_above, headroom)
    history, history_messages = _history_section(branch.rows, branch.rounds, name)
    summary_messages = [{"role": "system", "content": branch.summary.text}] if branch.summary else []

    messages = [{"role": "system", "content": system_text}, *summary_messages, *history_messages,
                {"role": "user", "content": tail_text}]
    messages, tail_start, placed = _with_note(messages, 1 + len(summary_messages), note, note_section)
    note_sections = [note_section] if note_section else []
    sections = [*stable, *([branch.summary] if branch.summary else []), history,
                *(note_sections if placed < len(messages) - 1 else []), *tail,
                *(note_sections if placed == len(messages) - 1 else [])]
    report = _report(campaign, path, action, sections, protected, allowance, history, [], model, api, seed)
    report["author_note"] = _note_report(note, note_section, messages, placed, path)
    if headroom:
        report["budget"]["game_master_headroom"] = headroom
        report["budget"]["unused"] -= headroom
    _report_branch(report, branch, history)
    _report_state(report)
    report["memories"] = memory_report
    report["events"] = events_report
    if has_knowledge:
        _report_knowledge(report, sections, knowledge_report, standing_dropped, knowledge_tokens)
    if lore_report is not None:
        _report_lorebook(report, lore_report, lore_tokens)
    input_at = len(messages) - (2 if placed == len(messages) - 1 else 1)
    # What the post-turn steps continue (issue 27): the messages are read again from the sections and the nodes the
    # history names (``messages_of``), and the digest says they are the ones sent, byte for byte.
    report["prompt"] = {"name": name, "messages": len(messages), "tail_start": tail_start, "input_at": input_at,
                        "digest": digest(messages)}
    return Context(messages=messages, sections=sections, report=report, tail_start=tail_start, input_at=input_at)


def digest(messages):
    """Return the SHA-256 of ``messages`` (roles and contents, in order): what a prompt read again is checked by."""
    return hashlib.sha256(json.dumps([[m["role"], m["content"]] for m in messages], ensure_ascii=False)
                          .encode("utf-8")).hexdigest()


def messages_of(report):
    """Return the messages a reply's stored context report was sent as, or None when it does not say (a report
    written before issue 27, or one whose history names nodes no longer there).

    Laid out as ``build`` lays them: the stable sections as the system
    message, the summary, the history from the nodes its section names (read
    again, with the player's name the build used), the dynamic tail's sections
    as the last message, and the author's note where it was placed. The caller
    checks them against the report's digest before using them.
    """
    record = report.get("prompt") if isinstance(report, dict) else None
    if not isinstance(record, dict) or "digest" not in record:
        return None
    sections = report.get("sections") or []
    history = next((s for s in sections if s["key"] == "history"), {"components": []})
    ids = [c["id"] for c in history["components"] if c.get("type") == "node"]
    rows = sorted(Node.objects.filter(pk__in=ids).values_list("depth", "tokens", "id", "role", "mode", "text"))
    if len(rows) != len(ids):
        return None
    _, history_messages = _history_section(rows, _rounds([pk for _, _, pk, role, _, _ in rows if role != "player"]),
                                           record["name"])
    summary = [{"role": "system", "content": s["text"]} for s in sections if s["key"] == "summary"]
    tail = [s["text"] for s in sections if s["zone"] == DYNAMIC_TAIL and s["key"] != "author_note"]
    messages = [{"role": "system", "content": "\n\n".join(s["text"] for s in sections if s["zone"] == STABLE_PREFIX)},
                *summary, *history_messages, {"role": "user", "content": "\n\n".join(tail)}]
    note = report.get("author_note") or {}
    written = next((s for s in sections if s["key"] == "author_note"), None)
    if note.get("index") is not None and written is not None:
        messages.insert(note["index"], {"role": note["role"], "content": written["text"]})
    return messages


def _author_note(path, name):
    """Return the author's note holding on ``path``, and its Section when this turn is given it (else None)."""
    note = notes.note_for(path)
    if note is None or not note.due(_turn_of(path)):
        return note, None
    section = layers.author_note(note, name)
    section.tokens = tokens.count(section.text)
    return note, section


def _turn_of(path):
    """Return the number of the turn played after ``path`` (1 for the first)."""
    return path.head_depth // 2 + 1


def _with_note(messages, first, note, section):
    """Return (messages, the tail's first index, the note's index or -1): the note ``note.depth`` messages from the
    end (0: after the player's input), never before the ``first`` messages (the system prompt and summary).

    The note and everything after it are the dynamic tail: the next turn's
    prompt shares the messages before it, so a note at depth 0 or 1 costs
    the cache nothing, and a deeper one the messages it sits above.
    """
    last = len(messages) - 1
    if section is None:
        return messages, last, -1
    at = max(first, len(messages) - note.depth)
    placed = [*messages[:at], {"role": note.role, "content": section.text}, *messages[at:]]
    return placed, min(at, last), at


def _note_report(note, section, messages, placed, path):
    """Say what the note is, whether this turn was given it, exactly where, what it cost, and when it comes next."""
    if note is None:
        return None
    turn = _turn_of(path)
    report = {"text": note.text, "depth": note.depth, "interval": note.interval, "role": note.role,
              "branch": note.branch_id, "turn": turn, "due": section is not None,
              "next_turn": note.next_turn(turn + 1)}
    if section is None:
        return report
    before = messages[placed - 1] if placed > 0 else None
    reread = messages[placed + 1:-1] if placed < len(messages) - 1 else []
    return {**report, "index": placed, "from_end": len(messages) - 1 - placed, "tokens": section.tokens,
            "after": {"role": before["role"], "text": before["content"][-160:]} if before else None,
            # What the next turn reads again beyond its own new messages: the story messages under the note.
            "reread_tokens": sum(tokens.count(m["content"]) + budget.MESSAGE_OVERHEAD for m in reread)}


def _stable_prefix(campaign, name):
    """Return the stable prefix's sections (``{{user}}`` read as ``name``), whether the campaign has knowledge, and
    the standing knowledge left out."""
    stable = [layers.narrator_rules(campaign), layers.campaign_profile(campaign)]
    cards = list(CharacterCard.objects.filter(campaign=campaign).only("pk", "entity", "name", "description",
                                                                      "personality"))
    stable += [section for section in (layers.cast(cards), layers.style_examples(campaign)) if section]
    canon = layers.canon(list(CanonRule.objects.filter(campaign=campaign, enabled=True)))
    if canon:
        stable.append(canon)
    has_knowledge = knowledge.has_knowledge(campaign)
    standing_dropped = _standing_knowledge(campaign, stable) if has_knowledge else []
    return _filled(stable, name), has_knowledge, standing_dropped


def _filled(sections, name):
    """Return ``sections`` with ``{{user}}`` in their text read as ``name`` (the player character's name)."""
    for section in sections:
        section.text = layers.fill_user(section.text, name)
    return sections


def prefix_hash(campaign):
    """Return the hash of the stable prefix a build for ``campaign`` would send now (what a checkpoint is bound to)."""
    stable, _, _ = _stable_prefix(campaign, layers.player_name(campaign))
    return checkpoints.prefix_hash("\n\n".join(section.text for section in stable))


def knowledge_query(campaign, path, action):
    """Return the imported-knowledge query for ``action`` after ``path`` (embed it before ``build``)."""
    return knowledge.query_for(campaign, path, action)


def memory_query(campaign, path, action):
    """Return the story-memory query for ``action`` after ``path`` (embed it before ``build``)."""
    return memory_section.query_for(campaign, path, action)


def _memory_section(campaign, path, action, query):
    """Return ([the memories Section] or [], the memories report): protected, first in the dynamic tail."""
    section, report = memory_section.section(campaign, path, query or memory_query(campaign, path, action))
    return ([section] if section else []), report


def _standing_knowledge(campaign, stable):
    """Add the knowledge rule and always-included Canon to the stable prefix; return what found no room."""
    stable.append(knowledge.rules_section())
    standing, dropped = knowledge.standing_section(campaign)
    if standing:
        stable.append(standing)
    return dropped


def _report_knowledge(report, sections, retrieved, standing_dropped, spent):
    standing = next((s for s in sections if s.key == "knowledge_standing"), None)
    used = [*(standing.components if standing else []), *retrieved["used"]]
    report["knowledge"] = {
        **retrieved,
        "standing": standing.components if standing else [],
        "dropped": [*standing_dropped, *retrieved["dropped"]],
        "sources": sorted({entry["source"] for entry in used}),
        "tokens": spent,
    }
    report["dropped"] += report["knowledge"]["dropped"]
    report["budget"]["knowledge_tokens"] = spent
    report["budget"]["prompt_tokens"] += spent
    report["budget"]["unused"] -= spent


def _report_lorebook(report, lore, spent):
    """Add the keyed lorebook's report (every entry that fired or was held back, why, its cost, the timers the
    next turn reads) and price what it put in."""
    report["lorebook"] = lore
    report["dropped"] += lorebook.dropped_for_report(lore)
    report["budget"]["lorebook_tokens"] = spent
    report["budget"]["prompt_tokens"] += spent
    report["budget"]["unused"] -= spent


def _turn_state(campaign, path, action):
    """Return (the text relevance is judged from: the player's action and the reply it answers, the turn's part of
    the state), read once for the events, state and rules sections."""
    last = path.nodes().filter(depth=path.head_depth).values_list("text", flat=True).first() or ""
    text = f"{action.text}\n{last}"
    return text, story_state.state_for_turn(path, campaign, text)


def _state_section(campaign, path, text, current):
    """Return the current-state section and the story time and rules section after it (each only when it has
    something to say).

    They are protected and read after memories and knowledge, just before the
    input; relevance is judged from ``text`` (``_turn_state``).
    """
    sections = [state_section.section(campaign, path, text, current=current),
                rules_section.section(campaign, path, current)]
    return [section for section in sections if section]


def _report_state(report):
    """Add the state lines the selection left out to what the report says was dropped."""
    for item in report["sections"]:
        if item["key"] == "state":
            report["dropped"] += [
                {"key": "state", "what": component["text"], "tokens": tokens.count(component["text"]),
                 "reason": "beyond the state section's line limit"}
                for component in item["components"] if not component["included"]
            ]


def _dynamic_tail(campaign, action):
    tail = [section for section in (layers.reply_direction(campaign),) if section]
    if action.direction.strip():
        tail.append(Section("direction", "One-turn direction", "player direction", DYNAMIC_TAIL,
                            layers.render_direction(action.direction), protected=True))
    tail.append(Section("player_input", "Player input", "player input", DYNAMIC_TAIL,
                        layers.render_action(action.mode, action.text), protected=True,
                        components=[{"type": "action", "mode": action.mode}]))
    return tail


@dataclass(frozen=True)
class _Branch:
    """The branch context of one prompt: the checkpoint summary (if any) and the verbatim rows after it."""

    summary: Section | None
    checkpoint: object
    rejected: tuple
    rows: list
    room: int
    used: int
    high: float  # the share of ``room`` a turn's branch context may fill (``budget.watermarks``)
    rounds: dict  # reply node id -> its game-master rounds (dicts), in order


def _branch_context(path, lookup, prefix_hash, room, compact_above, headroom=0):
    """Return the summary and verbatim history for ``path`` within ``room`` tokens, or raise.

    ``lookup`` is the checkpoint lookup for the prompt's stable prefix (``prefix_hash``). Every
    node of the path is either verbatim or covered by the checkpoint:
    nothing is silently left out. The cost is priced from two rows
    (``tokens_through``) before any text is read, so a story that needs
    compacting costs no more to check than a short one.
    """
    checkpoint = lookup.checkpoint
    summary = layers.summary(checkpoint) if checkpoint else None
    covered_end = checkpoint.source_end if checkpoint else -1
    if summary:
        summary.tokens = tokens.count(summary.text)
    summary_cost = summary.tokens + budget.MESSAGE_OVERHEAD if summary else 0
    through = _tokens_through(path, [covered_end, path.head_depth])
    head_through = through[path.head_depth]
    verbatim_cost = (head_through - through.get(covered_end, 0)
                     + (path.head_depth - covered_end) * budget.MESSAGE_OVERHEAD)
    used = summary_cost + verbatim_cost
    mark, low = budget.watermarks(room, headroom, compact_above)
    if budget.needs_compaction(used, room, mark):
        uncovered = path.nodes().filter(depth__gt=covered_end, depth__lt=path.head_depth).order_by("depth")
        allowed = budget.summary_budget(room, checkpoints.MAX_SUMMARY_TOKENS)
        point = budget.compaction_point(uncovered.values_list("depth", "tokens_through"), path.head_depth,
                                        head_through, int(low * room) - allowed)
        if point is not None:
            plan = budget.Compaction(path, point, allowed, prefix_hash, covered_end)
            raise budget.NeedsCompaction(plan, used=used, room=room, mark=mark)
        if used > room - headroom:
            raise budget.HistoryEntryTooLarge(depth=path.head_depth, needed=used, room=room - headroom)
    rows = list(path.nodes().filter(depth__gt=covered_end).order_by("depth")
                .values_list("depth", "tokens", "id", "role", "mode", "text"))
    replies = [pk for _, _, pk, role, _, _ in rows if role != "player"]
    return _Branch(summary, checkpoint, lookup.rejected, rows, room, used, budget.watermarks(room, headroom)[0],
                   _rounds(replies))


ROUNDS_PER_READ = 500  # node ids in one statement, well under SQLite's bound on parameters


def _rounds(replies):
    """Return {reply node id: its game-master rounds, in order} for the verbatim ``replies``.

    By their ids, through the cursor: through ``path.clause("node__")`` the
    ORM took 3 ms to build the read of a line with 40 branches, for a table a
    narrator's campaign leaves empty.
    """
    found = {}
    for start in range(0, len(replies), ROUNDS_PER_READ):
        chunk = replies[start:start + ROUNDS_PER_READ]
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT node_id, number, outputs, resolution FROM campaigns_round WHERE kind = %s AND "
                           f"node_id IN ({', '.join(['%s'] * len(chunk))}) ORDER BY node_id, number",
                           [Round.Kind.GM, *chunk])
            for node_id, number, outputs, resolution in cursor.fetchall():
                found.setdefault(node_id, []).append({"number": number, "outputs": json.loads(outputs),
                                                      "resolution": json.loads(resolution)})
    return found


def _tokens_through(path, depths):
    """Return {depth: tokens_through} for the nodes of ``path`` at ``depths``, each found by its exact anchor.

    Through ``path.nodes()`` SQLite chose the range ``depth <= head`` of the
    index and read every node of the line to find two (9 ms at 2,000 turns,
    bench "overhead"); through the cursor, since the ORM took longer to build
    this read than SQLite to answer it.
    """
    anchors = [(segment.branch_id, depth) for depth in depths for segment in path.segments if segment.contains(depth)]
    if not anchors:
        return {}
    where = " OR ".join(["(branch_id = %s AND depth = %s)"] * len(anchors))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT depth, tokens_through FROM campaigns_node WHERE campaign_id = %s AND ({where})",
                       [path.campaign_id, *(value for anchor in anchors for value in anchor)])
        return dict(cursor.fetchall())


def _history_section(rows, rounds, name):
    messages = [{**message, "content": layers.fill_user(message["content"], name)} for _, _, pk, role, mode, text in rows
                for message in messages_for(role, mode, text, rounds.get(pk, ()))]
    text = "\n\n".join(f"[{m['role']}] {m['content']}" for m in messages)
    section = Section(
        "history", "Recent story (active lineage, verbatim)", "Level 3 accepted history", BRANCH_CONTEXT, text,
        protected=False,
        tokens=sum(count + budget.MESSAGE_OVERHEAD for _, count, _, _, _, _ in rows),
        components=[{"type": "node", "id": pk, "depth": depth, "role": role, "tokens": count}
                    for depth, count, pk, role, _, _ in rows],
    )
    return section, messages


def _report_branch(report, branch, history):
    """Say what the checkpoint covered and what stayed verbatim, and price the summary into the prompt."""
    checkpoint = branch.checkpoint
    summary_cost = branch.summary.tokens + budget.MESSAGE_OVERHEAD if branch.summary else 0
    verbatim = [row[0] for row in branch.rows]
    report["checkpoint"] = None if checkpoint is None else {
        "id": checkpoint.pk, "branch": checkpoint.branch_id, "depth": checkpoint.depth,
        "source_start": checkpoint.source_start, "source_end": checkpoint.source_end,
        "tokens": checkpoint.tokens, "origin": checkpoint.origin, "model": checkpoint.model,
    }
    report["history"] = {
        "covered": None if checkpoint is None else [checkpoint.source_start, checkpoint.source_end],
        "verbatim": [verbatim[0], verbatim[-1]] if verbatim else None,
        "verbatim_nodes": len(verbatim),
        "rejected": [{"id": r.checkpoint.pk, "source_end": r.checkpoint.source_end, "reason": r.reason}
                     for r in branch.rejected],
    }
    spent = report["budget"]
    spent["summary_tokens"] = summary_cost
    spent["branch_allowance"] = branch.room
    spent["branch_tokens"] = summary_cost + history.tokens
    spent["high_watermark"] = int(branch.high * branch.room)
    spent["prompt_tokens"] += summary_cost
    spent["unused"] -= summary_cost


def _report(campaign, path, action, sections, protected, allowance, history, dropped, model, api, seed):
    prompt_tokens = protected + history.tokens
    reserve = budget.reply_reserve(campaign.max_output_tokens)
    return {
        "version": REPORT_VERSION,
        "model": model,
        "api": api,
        "settings": {
            "num_ctx": campaign.context_token_budget,
            "num_predict": campaign.max_output_tokens,
            "temperature": campaign.temperature,
            "seed": seed,
        },
        "branch": path.head_branch_id,
        "head_depth": path.head_depth,
        "action": {"mode": action.mode, "text": action.text, "direction": action.direction},
        "budget": {
            "context_token_budget": campaign.context_token_budget,
            "reply_reserve": reserve,
            "protected_tokens": protected,
            "history_allowance": allowance,
            "history_tokens": history.tokens,
            "prompt_tokens": prompt_tokens,
            "unused": campaign.context_token_budget - reserve - prompt_tokens,
        },
        "sections": [section.as_report() for section in sections],
        "dropped": dropped,
        "usage": {"prompt_eval_count": None, "eval_count": None},
    }
