"""The game master's turn (seed 002 回合结构; docs/voices.md "The pipeline"): rounds of voices, then the narration.

``play`` runs the rounds of one turn and returns what they did, writing
nothing: the game master answers ``GM_ROUND`` (what the player's move and
the characters' did, who acts next and why, whether to narrate), the
resolution checks it on a copy of the state, each activated character
answers ``CHARACTER_REPLY`` from its brief, and what a character tries
(a move, its items) is resolved at once with its own rights: along open
exits, never forcing a lock. Refusals go back to the game master in its
next step's tail. ``turns`` streams the narration and commits everything
once (``commit``).

Every prompt of the game master keeps the narrator's prompt as it is —
stable prefix, summary, history — with the game master's rules (every
constant instruction) added to its system message: a step adds only its
short request to the last message (``step_messages``), and the narration
adds the game master's notes on the rounds as its own message and a short
request to narrate (``narration_messages``). History renders a past game
master's turn exactly so (``context.messages_for``), so the next turn's
prompt starts with the whole of the last narration's and a model server
reuses its cache across steps and turns (the 200-turn prefix-reuse gate);
the story leaves that room (``headroom``). No model call is made on the
database thread or inside a transaction; the reads go through
``database_sync_to_async``.
"""

import re
from dataclasses import dataclass, field

from channels.db import database_sync_to_async

from campaigns import muting
from campaigns.models import CharacterCard, Round, StateEvent
from campaigns.state import PROTAGONIST, apply_events, normalize, selection, state_at, state_for_turn
from campaigns.state.minds import minds, whereabouts
from campaigns.state.time import agenda, calendar, clock, rulebook, triggers, variables
from campaigns.state.world import authoring, lore, world
from campaigns.state.world.authoring import Request
from memory import recall, recall_index

from .. import context, llm, tokens
from ..llm import usage
from . import author, briefs, resolution, rounds, schemas
from .limits import limits_of

SOURCE = StateEvent.Source.WORLD  # the game master's rights: a world file's
# A game-master step writes at most five actors and eight activations; 700 tokens of JSON close it.
GM_TOKENS = 700
# A character says a few sentences (CHARACTER_REPLY's bounds: 600 + 300 characters).
CHARACTER_TOKENS = 400
NARRATION_TOKENS = 120
# Room for what a step adds to the narrator's prompt after its rules: the round's request and news, or the
# narration's notes (a round's lines and refusals) — a few hundred tokens.
TAIL_TOKENS = 400

GM_RULES = """This story is played by a game master and its characters. A message that ends with a round's request — "Round N of M at <where the player's character is>, with: <the characters there>." (M: the most rounds this turn may have), then what happened since your last step — asks for your step as game master: answer its JSON.
- resolve_round.actors: what the player's character and the characters did that changes the world (a move to a place, item changes, variable changes), each under its exact name; empty when nothing changes.
- activate_characters: who reacts in this round (only characters with the player, never the player's character), each with a short reason.
- expand_world: ask for a new person, place or thing only when the story truly needs it; otherwise leave need empty.
- narrate: true when the round's outcome should now be told to the player; false to let another round play.
When you are asked to narrate the turn, write as the story's narrator, in prose and never JSON, the outcome of the player's action and of the rounds in your notes. The characters' lines are shown to the player already: do not repeat them word for word. Never state anything a refusal in your notes forbids."""

CHARACTER_RULES = """You are one character of an interactive story, acting for yourself this round. You know only what your brief says: never speak of what you could not know. Answer in your own voice: what you say aloud (speech), what you do (action), where you go (moves_to: a place you know, or ""), the item changes you make, and lore: the title of one lore entry on your list you want to look up first (or ""). Keep it short."""

# Seed 002 实体知识: a character with lore is asked once, at its first answer, whether the moment concerns its own
# background 「此刻是否涉及自己的背景」; if so it names the entry to read, and answers again with it.
BACKGROUND_QUESTION = ("Does this moment concern your own background? If it does, put in lore the title of the one "
                       "entry of your lore list to read before you answer; if not, lore is \"\".")


@dataclass
class RoundPlayed:
    """One game-master round as it played: what goes into its Round row and the report."""

    number: int
    resolution: dict
    activated: list  # [{"who", "why"}]
    outputs: list  # [{"speaker", "name", "text", "action"}]
    briefs: dict
    events: list  # the applied events, in order: committed with the turn
    travel_seconds: int = 0
    elapsed_seconds: int | None = None  # as the game master gave it, then as the clock timed the round
    started_ms: int | None = None  # story time the round began (None before the clock starts, or a real clock)
    tail: str = ""  # the game master's prompt tail of the round
    answer: dict = field(default_factory=dict)
    recalled: dict = field(default_factory=dict)  # who -> slots its brief recalled

    def row(self):
        return {"number": self.number, "kind": Round.Kind.GM, "elapsed_seconds": self.elapsed_seconds or 0,
                "started_ms": self.started_ms,
                "resolution": self.resolution, "activated": self.activated, "outputs": self.outputs,
                "briefs": self.briefs}


@dataclass
class Played:
    rounds: list
    narration_messages: list
    proposals: list  # the world author's created Proposals
    rolls: list  # [{"check", "who", "reason", "round"}]
    report: dict
    elapsed: int | None = None  # the turn's story time in seconds (its rounds'), None on a real clock


class StepFailed(Exception):
    """The game master's step could not be played; the message says what happened."""


async def play(campaign, path, ctx, narrator, *, on_voice=None, action=None, people=frozenset()):
    """Play the rounds of one turn after ``ctx`` (the narrator's Context for the player's action) on ``path``.

    ``on_voice(kind, data)``, if given, is awaited as each round begins
    (``"round"``) and as each character speaks (``"voice"``), for the play
    page. Raise StepFailed when a game-master step fails; nothing is written.
    ``action`` (the player's) says whom the player spoke to: they answer in
    the first round; those the player muted for the scene never do, nor
    ``people``: the characters a table's players play themselves.
    """
    limits = limits_of(campaign)
    state = await database_sync_to_async(_read)(campaign, path, _action_line(ctx))
    spoken_to = rounds.addressed(state, action.mode, action.text, action.asked) if action is not None else ()
    muted = frozenset(muting.muted_at(campaign, state.location_of(PROTAGONIST))) | frozenset(people)
    entries = await database_sync_to_async(_lore_entries)(campaign, state)
    done, played, proposals, rolls, news, applied = [], [], [], [], [], []
    report = {"rounds": [], "author": []}
    activation = None
    options = llm.ChatOptions(num_predict=GM_TOKENS, num_ctx=campaign.context_token_budget, temperature=0.3)
    round_state = state
    while True:
        try:
            planned = rounds.plan_round(done, activation, max_rounds=limits.max_rounds)
        except rounds.Refused:
            break
        tail, present = await database_sync_to_async(_round_view)(round_state, planned.number, limits.max_rounds,
                                                                    news)
        try:
            with usage.asking("game master"):
                step = await narrator.complete_json(step_messages(ctx.messages, tail), schemas.GM_ROUND, options)
        except llm.NarratorError as error:
            raise StepFailed(f"The game master's step of round {planned.number} failed: {error}") from error
        news = []
        resolved = await database_sync_to_async(resolution.resolve)(round_state, step.get("resolve_round") or {})
        round_state = resolved.state
        applied += resolved.applied()
        news += [f"Refused ({where}): {reason}" for where, reason in resolved.refused]
        rolls += [{**roll, "round": planned.number} for roll in step.get("rolls") or []]
        asked_author = []
        if (step.get("expand_world") or {}).get("need"):
            proposal = await _expand_world(campaign, path, narrator, step["expand_world"], applied, proposals, limits)
            asked_author.append({"status": proposal.status, "reason": proposal.reason, "reuse": proposal.reuse,
                                 "created": list(proposal.created)})
            report["author"].append({"round": planned.number, **asked_author[-1]})
            news.append(f"The world author {proposal.status}: {proposal.reason or proposal.reuse}")
            if proposal.status == "created":
                proposals.append(proposal)
                round_state = proposal.state
        # Who is with the player after the round's moves (the player's own among them).
        _, present = await database_sync_to_async(_round_view)(round_state, planned.number, limits.max_rounds, [])
        activation = rounds.activate([(a.get("who", ""), a.get("why", "")) for a in step.get("activate_characters")
                                      or []], present=present, resolve=round_state.resolve,
                                     name_of=round_state.name_of, max_characters=limits.max_characters,
                                     addressed=spoken_to if planned.number == 1 else (), muted=muted)
        news += [f"Not activated ({name}): {reason}" for name, reason in activation.refused]
        this = RoundPlayed(planned.number, {**(step.get("resolve_round") or {}),
                                            "refused": [list(r) for r in resolved.refused]},
                           [{"who": key, "name": round_state.name_of(key), "why": activation.why[key]}
                            for key in activation.acting], [], {},
                           resolved.applied(), resolved.travel_seconds, resolved.elapsed_seconds, tail, step)
        if activation.refused:
            this.resolution["not_activated"] = [list(r) for r in activation.refused]
        if asked_author:
            this.resolution["author"] = asked_author
        if on_voice is not None:
            await on_voice("round", {"number": planned.number, "activated": this.activated})
        heard = [f"The player's character ({round_state.name_of(PROTAGONIST)}) acted: {_action_line(ctx)}"]
        for who in activation.acting:
            round_state = await _character(campaign, path, narrator, round_state, who, entries, heard, this, news,
                                           on_voice)
        applied += this.events[len(resolved.applied()):]  # what the characters did, after the game master's
        done.append(rounds.Planned(planned.number, rounds.GM, tuple(activation.acting)))
        played.append(this)
        report["rounds"].append({"number": this.number, "prompt_tail": tail, "answer": step,
                                 "refused": this.resolution["refused"],
                                 "not_activated": this.resolution.get("not_activated", [])})
        if step.get("narrate"):
            break
    # The notes come from the rounds as they will be stored, so history renders them again byte for byte; they say
    # every round's lines and refusals, the last round's news included.
    notes = [this.row() for this in played]
    report["narration_tail"] = "\n\n".join(f"[{m['role']}] {m['content']}" for m in context.notes_messages(notes))
    elapsed = _time_rounds(campaign, state, played)
    return Played(played, narration_messages(ctx.messages, notes), proposals, rolls, report, elapsed)


def _time_rounds(campaign, state, played):
    """Time each round on the story clock (simulated): what the game master said, or the campaign's
    round_seconds, lengthened to the round's journeys; return the turn's seconds, or None on a real clock."""
    current = rulebook.clock_of(state)
    if (current.mode if current is not None else campaign.clock_mode) != "simulated":
        return None
    settings = clock.Settings(campaign.clock_mode, campaign.time_zone, campaign.round_seconds,
                              campaign.max_skip_days)
    total = 0
    for this in played:
        asked = this.elapsed_seconds or None  # 0: the game master said nothing
        taken = max(settings.round_seconds if asked is None else asked, this.travel_seconds)
        if current is not None:
            this.started_ms = current.at + total * 1000
        this.elapsed_seconds = taken
        total += taken
    return total


async def _expand_world(campaign, path, narrator, asked, applied, proposals, limits):
    """Return the world author's Proposal for the game master's ``expand_world`` (docs/voices.md, step 3.4).

    The author checks its edit on the whole state (world_lint reads all of
    it): the line's, with the turn's ``applied`` events so far.
    """
    whole = await database_sync_to_async(_whole)(campaign, path, applied)
    return await author.ask(narrator, whole, Request(asked["need"], asked.get("what", "")), limits=limits,
                            turn=campaign.head_depth // 2 + 1, created_before=sum(len(p.created) for p in proposals))


async def _character(campaign, path, narrator, state, who, entries, heard, this, news, on_voice):
    """Have ``who`` answer from its brief; resolve what it tries with its own rights; return the round's state."""
    name = state.name_of(who)
    brief, slots = await database_sync_to_async(_brief)(campaign, path, state, who, entries, "\n".join(heard))
    this.briefs[who] = {**brief.data(), "name": name}
    this.recalled[who] = slots
    question = f"\n\n{BACKGROUND_QUESTION}" if brief.has_lore else ""
    messages = [{"role": "system", "content": CHARACTER_RULES},
                {"role": "user", "content": f"{brief.text}\n\nThis round so far:\n" + "\n".join(heard)
                                            + f"{question}\n\nAnswer as {name}."}]
    options = llm.ChatOptions(num_predict=CHARACTER_TOKENS, num_ctx=campaign.context_token_budget, temperature=0.7)
    try:
        with usage.asking(f"character ({name})"):
            reply = await narrator.complete_json(messages, schemas.CHARACTER_REPLY, options)
            wanted = _lore_key(reply.get("lore", ""), entries, state, who)
            if wanted:
                messages.append({"role": "assistant", "content": f'{{"lore": "{reply["lore"]}"}}'})
                messages.append({"role": "user", "content": f"{wanted.title}: {wanted.text}\n\nNow answer, with "
                                                            "lore \"\"."})
                reply = await narrator.complete_json(messages, schemas.CHARACTER_REPLY, options)
    except llm.NarratorError as error:
        news.append(f"{name} stayed silent: the model did not answer for them ({error})")
        this.outputs.append({"speaker": who, "name": name, "text": "", "action": "", "failed": str(error)})
        return state
    speech, action = (reply.get("speech") or "").strip(), (reply.get("action") or "").strip()
    this.outputs.append({"speaker": who, "name": name, "text": speech, "action": action})
    heard.append(f"{name}" + (f" said: “{speech}”" if speech else " said nothing") + (f"; did: {action}"
                                                                                      if action else ""))
    if on_voice is not None:
        await on_voice("voice", {"round": this.number, "speaker": who, "name": name, "text": speech, "action": action})
    tried = {"who": name, "moves_to": reply.get("moves_to") or "", "ignore_exits": False,
             "item_changes": reply.get("item_changes") or [], "variable_changes": []}
    if not tried["moves_to"] and not tried["item_changes"]:
        return state
    resolved = await database_sync_to_async(resolution.resolve)(state, {"actors": [tried]})
    this.events += resolved.applied()
    this.travel_seconds = max(this.travel_seconds, resolved.travel_seconds)
    this.resolution.setdefault("characters", []).append(
        {**tried, "refused": [list(r) for r in resolved.refused]})
    news += [f"Refused ({name}, {where}): {reason}" for where, reason in resolved.refused]
    return resolved.state


DICE = re.compile(r"\d*d\d+.*", re.IGNORECASE)


def _roll(asked):
    """Return the ``roll`` event of one of the game master's ``rolls``: a named check, or dice notation."""
    check = (asked.get("check") or "").strip()
    data = {"expression" if DICE.fullmatch(check) else "check": check, "reason": asked.get("reason") or "the round"}
    return {"type": "roll", "subject": asked.get("who") or "", "data": data}


def _lore_key(asked, entries, state, who):
    if not asked:
        return None
    for entry in lore.recallable(entries, lore.known_lore(state, who)):
        if asked.strip().lower() in (entry.key.lower(), entry.title.lower()):
            return entry
    return None


def _read(campaign, path, text):
    """Return the part of the state the turn can need (its base, the scene, what ``text`` names), read once.

    It is a partial state: a slot it lacks is read when first asked for, so
    whatever reads it (the resolution, the briefs) runs on the database thread.
    """
    state = state_for_turn(path, campaign, text)
    _load_scene(state)
    # What every round's copy derives from the base, built once here and kept with the cached base for the next
    # turn: the exit graph, who holds what, the items' names (a round's copy would build its own each time).
    world.graph(state)
    world.holders(state)
    world.items_named(state, "")
    return state


def _load_scene(state):
    """Read, in a few statements, who is at the scene and what the briefs and moves of those there read."""
    place = state.place()
    state.load_occupants([place])
    here = [key for key in state.at(place)]
    for kind in ("location", "condition", "knows", "relationship"):
        state.load(kind, here)


def _whole(campaign, path, applied):
    """Return the whole state after ``path`` with the turn's ``applied`` events so far, for the world author."""
    state = authoring.scratch(state_at(path, campaign))
    authoring.validate(state, applied)
    return state


def _round_view(state, number, most, news):
    """Return (the game master's tail for round ``number``, the characters with the player) on ``state``."""
    _load_scene(state)
    here = [key for key in state.present() if key != PROTAGONIST and world.kind_of(state, key) == "character"]
    return _gm_tail(state, number, most, news), here


def _lore_entries(campaign, state):
    from knowledge import lorebooks  # the pipeline knows every app; imported here to keep startup light

    return [*lorebooks.entries_of(campaign.pk), *lore.world_lore(state)]


def _brief(campaign, path, state, who, entries, heard):
    """Return (its Brief, the slots it recalled) for ``who``, with what minds and lore hand it (database reads)."""
    place = state.location_of(who)
    people = frozenset(k for k in state.at(place) if k != who)
    situation = recall.Situation(text=heard, people=people, location=place)
    found = recall_index.recall(path, campaign, who, situation, minds.clock_ms(state), flaky=campaign.memory_flaky,
                                recall=min(campaign.memory_recall, briefs.MAX_MEMORIES))
    memories = [m.text for m in found.memories if not m.associated]
    associated = [m.text for m in found.memories if m.associated]
    titles = tuple(lore.titles(entries, lore.known_lore(state, who)))
    card = CharacterCard.objects.filter(campaign=campaign, entity=who).values_list("personality", "examples").first()
    given = briefs.Given(**_story_time(campaign, state, who, people), lore=titles, memories=tuple(memories),
                         associated=tuple(associated),
                         whereabouts=_believed(state, whereabouts.minds_at(path, campaign), who, heard),
                         manner=card[0].strip() if card else "",
                         speech=card[1].strip()[:briefs.SPEECH_CHARS] if card else "")
    return briefs.compose(state, who, given), [m.slot for m in found.memories]


def _story_time(campaign, state, who, people):
    """Return what story time and world rules hand ``who``'s brief, each through its viewer's filter: the time,
    its own day (plans, not orders), the variables it may see, the announced triggers meant for it and its cues."""
    tz = campaign.time_zone
    current = rulebook.clock_of(state)
    at = current.at if current is not None else None
    given = {}
    if at is not None:
        cal = rulebook.calendar_of(state)
        given["now"] = calendar.describe_instant(at, tz, cal)
        day = agenda.agenda_at(who, calendar.moment(at, tz), routine=rulebook.routines_of(state).get(who),
                               engagements=rulebook.engagements_of(state), intents=rulebook.intents_of(state),
                               cal=cal)
        given["agenda"] = tuple(day.lines(at, tz, state.name_of))
    place = state.location_of(who)
    seen = variables.view(defs=rulebook.definitions_of(state), values=rulebook.values_of(state),
                          kind_of=lambda key: world.kind_of(state, key) or None, viewer=who,
                          scene=[key for key in (variables.WORLD, place) if key], present=sorted(people),
                          temperaments=rulebook.temperaments_of(state), name_of=state.name_of)
    given["variables"] = tuple(seen.lines)
    sees = rulebook.StateWorld(state)
    given["announced"] = tuple(triggers.announcements_for(who, rulebook.triggers_of(state), world=sees,
                                                          now_ms=at or 0, tz=tz, limit=briefs.MAX_ANNOUNCED + 1))
    given["cues"] = tuple(note.text for note in triggers.cues_for(who, rulebook.notes_of(state), world=sees))
    return given


def _believed(state, minds, who, text):
    """Return where ``who`` believes things are, as lines: what the round names and what is about it first."""
    named = selection.mentioned(state, text)
    place = state.location_of(who)

    believed = minds.believes(who)

    def nearest(item):
        # By where it believes the thing is, never by the truth: the order must tell it nothing.
        holder = believed[item]
        return item not in named, place not in (holder, state.location_of(holder or "")), normalize(state.name_of(item))

    return tuple(f"the {state.name_of(item)}: {whereabouts.where(state, believed[item])}"
                 for item in sorted(believed, key=nearest))


def _gm_tail(state, number, most, news):
    """Return the game master's step request: short, since it is the part of the prompt no cache holds."""
    name = state.name_of
    place = state.place()
    # In the order of their keys: the state's own order of who is at a place is the database's order of its rows,
    # which PostgreSQL does not keep (an updated row moves), and the line must read the same on both.
    here = sorted(key for key in state.at(place) if key != PROTAGONIST and world.kind_of(state, key) == "character")
    lines = [step_request(number, most, name(place) if place else "", [name(k) for k in here])]
    if news:
        lines += ["Since your last step:", *(f"- {line}" for line in news)]
    return "\n".join(lines)


def step_request(number, most, place, names):
    """Return the line that asks for a game master's step: terse, since it is new in every step's prompt (no
    cache holds it); ``GM_RULES`` say what it means and what a step answers."""
    return (f"Round {number} of {most}" + (f" at {place}" if place else "") + ", with: "
            + ("; ".join(names) or "no one") + ".")


def headroom(max_output_tokens):
    """Return the tokens a game master's turn keeps free in its prompt beyond the narration's reserve
    (``max_output_tokens``): the game master's rules, a round's tail and a step's longer answer.

    The story's builder takes them from the room its high watermark leaves
    free first (``context.build(headroom=)``), so while they fit there a game
    master's story is as long as a narrator's, and its prompts as long.
    """
    return max(max_output_tokens, GM_TOKENS) - max_output_tokens + tokens.count(GM_RULES) + TAIL_TOKENS


def with_rules(messages):
    """Return the narrator's ``messages``, the game master's rules added to their system message (the stable
    prefix every step and narration share with the previous turn's)."""
    system, *story = messages
    return [{"role": "system", "content": f"{system['content']}\n\n{GM_RULES}"}, *story]


def step_messages(messages, request):
    """Return a game master's step's prompt: the narrator's ``messages`` with the rules, ``request`` (the step's
    request and news, ``_gm_tail``) at the end of their last message."""
    *head, last = with_rules(messages)
    return [*head, {"role": "user", "content": f"{last['content']}\n\n{request}"}]


def narration_messages(messages, rounds):
    """Return the narration's prompt: the narrator's ``messages`` with the rules, then the game master's notes on
    ``rounds`` (as stored) and the request to narrate, as history will render the turn (``context.messages_for``)."""
    return [*with_rules(messages), *context.notes_messages(rounds)]


def _action_line(ctx):
    action = ctx.report.get("action") or {}
    return action.get("text") or ctx.messages[-1]["content"].rsplit("\n", 1)[-1][:300]


async def narration_step(narrator, messages, narration):
    """Return what the narration did (``NARRATION``: the announced beats it took up, whether a new stage begins).

    The recorder waits for a stage boundary (docs/voices.md, step 6); a
    failure here is recorded and costs the turn nothing.
    """
    asked = [*messages, {"role": "assistant", "content": narration},
             {"role": "user", "content": "Which announced beats did that narration take up (their names), and does a "
                                         "new stage of the story begin with it (a new scene, place or day)?"}]
    options = llm.ChatOptions(num_predict=NARRATION_TOKENS, temperature=0.0)
    try:
        with usage.asking("narration step"):
            answer = await narrator.complete_json(asked, schemas.NARRATION, options)
    except llm.NarratorError as error:
        return {"text": narration, "addressed": [], "new_stage": False, "error": str(error)}
    return {"text": narration, "addressed": list(answer.get("addressed") or []),
            "new_stage": bool(answer.get("new_stage")), "error": ""}


def transcript(played, narration):
    """Return the reply node's text: each character's lines, then the narration (what history carries on)."""
    lines = [f"{o['name']}: “{o['text']}”" + (f" ({o['action']})" if o["action"] else "")
             for this in played.rounds for o in this.outputs if o["text"] or o["action"]]
    return "\n\n".join([*lines, narration]) if lines else narration


def stored(played, narration):
    """Return the rounds of ``played`` as they are stored: the last one's outputs end with the narration."""
    rows = [this.row() for this in played.rounds]
    rows[-1] = {**rows[-1], "outputs": [*rows[-1]["outputs"],
                                        {"speaker": rounds.GM, "name": "", "text": narration, "action": ""}]}
    return rows


def reply_tokens(played, narration):
    """Return the reply node's token count: the turn as history renders it (notes, request, narration)."""
    return context.node_tokens("narrator", "", transcript(played, narration), stored(played, narration))


def commit(node, played, narration):
    """Write the rounds of ``played`` under reply ``node``, with their events, in the caller's transaction.

    Each round's applied events go in order, in one batch, with the game
    master's rights (source ``world``), then the world author's created
    proposals; the last round's outputs end with the narration.
    """
    Round.objects.bulk_create([Round(node=node, **row) for row in stored(played, narration)])
    events = [event for this in played.rounds for event in this.events] + [_roll(roll) for roll in played.rolls]
    if events:
        # In round order, as they were resolved, then the dice the game master called for (seeded by the
        # player's node, decision D8: a retry of this reply rolls the same); a turn names a few things, so only
        # those are read first.
        apply_events(node, events, source=SOURCE, whole=False)
    if played.elapsed is not None:
        # The turn's story time is its rounds': the engine timed it by round_seconds a moment ago (storytime).
        apply_events(node, [{"type": "elapse", "data": {"seconds": played.elapsed}}], source=StateEvent.Source.ENGINE)
    for proposal in played.proposals:
        author.commit(node, proposal)
    for this in played.rounds:
        for who, slots in this.recalled.items():
            if slots:
                recall_index.record_use(node.campaign_id, (node.branch_id, node.depth), who, slots)
