"""One turn: build the context, stream the reply, commit it in one short transaction.

Nothing of the story is written before or during generation, and no
transaction is open while the model writes: a stopped, failed or killed turn
leaves no node behind, and other writers are never locked out for the length
of a reply. The one write a turn may make first is the checkpoint it needs
(``compaction``): a cache, harmless if the reply then fails.
"""

import asyncio
import contextlib
import difflib
import time
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.core.cache import cache
from django.db import transaction

from campaigns import acting, lineage, playing, story, storytime
from campaigns import state as story_state
from campaigns.models import Campaign, Node, Replay, StateEvent
from campaigns.state.registry import clean
from memory import bank, recall_index

from . import context, llm, tokens, warming
from .steps import compaction, postturn, requests
from .voices import gm
from .llm import priority, thinking, usage
from .context import Action
from .context.budget import MESSAGE_OVERHEAD, REPLY_MARGIN


class TurnFailed(Exception):
    """The turn could not be played; the message tells the person what happened and what to do."""


class ActionRefused(TurnFailed):
    """What a click on the page would do cannot be done now: nothing was played; the message says why."""


def check_action(campaign_id, action):
    """Validate the events of a click's ``action`` against the head, before anything plays; raise ActionRefused.

    The same check runs again as the turn reads the story, and the commit
    applies the events (``_commit``): a story moved on in between refuses the
    turn rather than the click's event.
    """
    campaign = Campaign.objects.get(pk=campaign_id)
    _checked(campaign, lineage.path_of(campaign), action)


def click_action(campaign_id, op, **names):
    """Return the Action a click on the page plays (``campaigns.acting``), checked against the head; raise
    ``acting.Refused`` or ActionRefused, in a player's words, when it cannot be done."""
    campaign = Campaign.objects.get(pk=campaign_id)
    path = lineage.path_of(campaign)
    state = story_state.state_at(path, campaign)
    done = acting.act(state, op, **names)
    action = Action(mode="do", text=done.text, events=done.events)
    _checked(campaign, path, action)
    return action


def _checked(campaign, path, action):
    """Return how long the action's own journey takes (seconds, 0 without one); raise ActionRefused in words."""
    if not action.events:
        return 0
    events = [clean(event) for event in action.events]
    state = story_state.state_for_events(path, campaign, events)
    outcomes = story_state.validate_batch(state, events, StateEvent.Source.PLAYER)
    for outcome in outcomes[:len(events)]:
        if outcome.status == StateEvent.Status.REJECTED:
            raise ActionRefused(_sentence(outcome.reason))
    return max((w.get("data", {}).get("travel_seconds", 0) for o in outcomes for w in o.writes
                if w["kind"] == "location"), default=0)


def _sentence(reason):
    """Return an event's refusal as a sentence for the player, with what nothing happening means."""
    reason = reason.strip().rstrip(".")
    return f"{reason[:1].upper()}{reason[1:]}. Nothing happened."


@dataclass(frozen=True)
class TurnResult:
    node_id: int
    text: str
    notice: str = ""
    post_turn: object = None  # the campaign's post-turn worker (an asyncio.Task), for whoever must await it
    commit_ms: float | None = None  # how long the turn's one transaction took (a table's round bench reads it)


@dataclass(frozen=True)
class _Prepared:
    campaign: Campaign
    expected_head: tuple
    action: Action
    ctx: context.Context
    narrator: object
    path: object = None  # the line the turn is played after (a retry's: capped before the replaced reply)
    started_ms: int = 0  # the wall clock when the turn started (a real story clock catches up with it, D7)
    after: int | None = None  # an edited action's turn: the depth it is played after (None: the head)
    travel_seconds: int = 0  # how long the journey of the action's own move takes (the turn lasts at least that)


@dataclass(frozen=True)
class Sampling:
    """A turn's sampling settings in place of the campaign's (a replay's other settings); None keeps the campaign's."""

    temperature: float | None = None
    max_output_tokens: int | None = None

    def of(self, campaign):
        """Return (temperature, max_output_tokens) for ``campaign``'s turn."""
        return (campaign.temperature if self.temperature is None else self.temperature,
                campaign.max_output_tokens if self.max_output_tokens is None else self.max_output_tokens)


# What the person reads when they act while a replay (``replays``) plays the campaign's turns.
REPLAY_PLAYING = ("A replay is playing in this story (see Branches); stop it or let it finish, then send your action "
                  "again. Nothing was sent or saved.")
# What the person reads while the turn waits for a summary instead of the first words of the reply.
SUMMARISING = ("The story has outgrown the prompt: summarising its older passages first, so the reply will take "
               "longer to start.")


async def play_turn(campaign_id, action, relay, *, retry=False, notify=None, on_voice=None, think=None,
                    edit_of=None, narrator=None, sampling=Sampling(), prompt=None, people=frozenset(),
                    on_commit=None):
    """Play ``action`` (or retry the head's reply) and return the committed reply.

    ``edit_of``, the id of a player action on the line, plays ``action`` as
    a new version of it: the turn is played from before it, on a branch of
    its own, and the old action and everything after it stay where they are.

    ``relay(text)`` is awaited for every chunk as it arrives, and ``think(text,
    taken_back)``, if given, for a reasoning model's thinking (``taken_back``:
    the text relayed so far was thinking too); ``notify(message)``,
    if given, is awaited when the turn must wait for something first (a
    summary, background work letting go of the model). Post-turn work gives
    way while the turn plays (``llm.priority``). Cancelling the task that runs
    this stops the model and saves nothing.

    A campaign with ``game_master`` on plays its turn as rounds of voices
    first (``voices.gm``); ``on_voice(kind, data)``, if given, is awaited as
    each round begins and each character speaks. The narration streams as
    ever, and the rounds commit with the turn.

    A replay (``replays``) plays with its own ``narrator`` (an ``llm``
    client) and ``sampling``, and with ``prompt``, if given, sent as it is
    in place of the one built (the context is built and reported all the
    same; a game master's rounds are not played again).

    A table's round (``storyteller.table_rounds``) names the characters its
    ``people`` play (the game master never speaks for them) and passes
    ``on_commit(reply, played)``, called just before the turn's one
    transaction (its pure work stays outside it), which returns a function of
    the reply node called inside it after everything else: what that raises
    rolls the turn back.
    """
    async with _playing(campaign_id, notify):
        game_master = await database_sync_to_async(
            lambda: Campaign.objects.values_list("game_master", flat=True).get(pk=campaign_id))()
        return await _play(campaign_id, action, relay, retry, notify, think,
                           on_voice=on_voice if game_master else None, voices=bool(game_master) and prompt is None,
                           edit_of=edit_of, narrator=narrator, sampling=sampling, prompt=prompt, people=people,
                           on_commit=on_commit)


@contextlib.asynccontextmanager
async def _playing(campaign_id, notify):
    """Hold what every turn holds while it plays: the model before background work (``llm.priority``), and the
    campaign's lorebooks unchanged from the turn's first read to its commit (every voice reads the same lore; the
    page knows a turn is playing: the last reply's "Meanwhile" card stays cleared until it ends)."""
    async with priority.turn(notify):
        try:
            async with playing.turn(campaign_id):
                yield
        except playing.TurnInProgress as error:
            raise TurnFailed(str(error)) from error


# A continuation needs at least this many tokens of room to be worth asking for.
MIN_CONTINUATION = 16
# The text a continuation may follow without a space of its own: it ends a sentence (a model that starts its
# answer afresh instead of going on from the unfinished message begins with a capital and no space).
SENTENCE_END = tuple(".!?…\"”’')")


class TurnStopped(Exception):
    """A continuation was stopped before the narrator wrote anything: nothing changed; the message says so."""


async def continue_reply(campaign_id, relay, *, stopped=None, notify=None, think=None):
    """Lengthen the head's reply in place; return the new version (the old text and what the narrator added).

    The narrator gets the reply's own prompt (as a retry builds it) with the
    reply itself as its unfinished last message, so the request shares all
    of the reply's prompt and goes on from its last word. The result is a new
    version of the reply, a sibling as a retry's is; the old one stays one
    flip away. Setting ``stopped`` (an ``asyncio.Event``) ends the stream and
    keeps what it wrote; cancelling the task keeps nothing, as for a turn.
    """
    async with _playing(campaign_id, notify):
        shown, head = await database_sync_to_async(_continuable)(campaign_id)
        prepared = await _prepare_compacting(campaign_id, None, True, notify)
        if prepared.expected_head != head:
            raise TurnFailed(str(story.StoryMovedOn()))
        return await _continue(prepared, shown, relay, stopped, think)


async def _continue(prepared, shown, relay, stopped, think):
    campaign = prepared.campaign
    limit = _continuation_limit(campaign, prepared.ctx, shown)
    messages = [*prepared.ctx.messages, {"role": "assistant", "content": shown.text}]
    options = llm.ChatOptions(num_predict=limit, num_ctx=campaign.context_token_budget,
                              temperature=campaign.temperature)
    written, began = thinking.Reply(), []

    async def onto_the_reply(text):
        if not began:  # the first words go on from the reply's last, a space between them where needed
            began.append(_separator(shown.text, text, fresh=bool(written.thinking)))
            text = began[0] + text
        await relay(text)

    started = time.perf_counter()
    final, was_stopped = await _until_stopped(
        _stream(prepared.narrator, messages, options, written, onto_the_reply, think), stopped)
    if was_stopped and not written.text.strip():
        raise TurnStopped("Stopped before the narrator wrote more; the reply is as it was.")
    if not was_stopped:
        _reply_text(written, prepared.narrator, final, limit)  # refuses a continuation that is empty or only thinking
    text = shown.text + began[0] + written.text.rstrip()
    report = prepared.ctx.report
    report["usage"] = _usage(final, written)
    report["continued"] = {"from": shown.pk, "reply_tokens": shown.tokens, "num_predict": limit,
                           "stopped": was_stopped}
    reply = story.Reply(
        text=text, tokens=context.node_tokens(Node.Role.NARRATOR, "", text), report=report,
        model=prepared.narrator.model, api=prepared.narrator.api,
        prompt_eval_count=final.prompt_eval_count, eval_count=final.eval_count,
        done_reason="stopped" if was_stopped else final.done_reason or "",
        duration_ms=int((time.perf_counter() - started) * 1000),
        thinking="\n\n".join(part for part in (shown.thinking, written.thinking.strip()) if part),
    )
    node = await database_sync_to_async(_commit)(prepared, reply, True)
    post_turn = postturn.schedule(campaign.pk, node.pk)
    notice = ("Stopped: what the narrator had written is kept, as a new version of the reply (‹ flips back)."
              if was_stopped else "")
    if final.done_reason == "length" and not was_stopped:
        notice = (f"The continuation reached its {limit}-token limit; it was saved as it is. Continue again to "
                  "carry on.")
    return TurnResult(node_id=node.pk, text=text, notice=notice, post_turn=post_turn)


def _continuable(campaign_id):
    """Return the head's reply and the head, or refuse in words when there is no reply to continue in place."""
    campaign = Campaign.objects.get(pk=campaign_id)
    reply = lineage.path_of(campaign).nodes().filter(depth=campaign.head_depth, role=Node.Role.NARRATOR).first()
    if reply is None:
        raise TurnFailed("There is no reply to continue yet: send an action first.")
    if reply.rounds.filter(kind="gm").exists():
        raise TurnFailed("A game master's reply cannot be lengthened in place (its rounds and what they changed "
                         "belong to it): send Continue as your action for a new passage, or Retry it.")
    return reply, (campaign.head_branch_id, campaign.head_depth)


def _continuation_limit(campaign, ctx, shown):
    """Return how many tokens the continuation may take: the reply's limit, within what the window has left."""
    room = (campaign.context_token_budget - ctx.prompt_tokens - shown.tokens - MESSAGE_OVERHEAD - REPLY_MARGIN)
    if room < MIN_CONTINUATION:
        raise TurnFailed(
            f"The reply is already {shown.tokens:,} tokens long: with the story before it, that leaves {max(room, 0)} "
            "tokens of the window to continue in. Raise context_token_budget in the campaign settings, or send "
            "Continue as your action for a new passage. Nothing was changed.")
    return min(campaign.max_output_tokens, room)


def _separator(before, after, *, fresh=False):
    """Return what goes between a reply and its continuation's first words: a space where they begin a new
    sentence without one, or follow the model's thinking (which ended with the whitespace they had)."""
    if not before or not after or after[0].isspace() or before[-1].isspace() or after[0] in ".,;:!?":
        return ""
    return " " if fresh or before.endswith(SENTENCE_END) else ""


async def _until_stopped(streaming, stopped):
    """Await ``streaming`` (``_stream``) until it ends or ``stopped`` is set; return (its final chunk, stopped).

    Stopping cancels the stream (the server stops generating); what it had
    written stays in its ``thinking.Reply``.
    """
    task = asyncio.ensure_future(streaming)
    if stopped is None:
        return await task, False
    waiter = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        return llm.Chunk(done=True, done_reason="stopped"), True
    return task.result(), False


# Impersonate (issue 26): the narrator drafts the player character's next move; nothing is sent or saved. The
# request is kept in Django's cache until the campaign's next turn, whose inspector shows it: this process's memory
# by default, Redis when processes share the work (issue 31: the next turn may be played through another process).
DRAFT_TOKENS = 120  # a line or two of the player's, with room for a reasoning model's preamble to be cut
DRAFT_REQUEST = (
    "For this one answer, write for the player instead of narrating: draft {name}'s next action or words, as the "
    "player would type them into the story — one or two sentences, in {name}'s own voice and manner, following on "
    "from the story's last passage. Write only the draft: no narration of what happens next, no quotation marks "
    "around it, no notes.")
KEPT_DRAFTS = 5  # per campaign, the newest: a person who drafts again and again needs the last few, not all
DRAFTS_KEPT_FOR = 7 * 24 * 3600  # seconds: a draft not followed by a turn for a week is not that turn's


async def draft_action(campaign_id, relay, *, stopped=None, notify=None):
    """Stream a draft of the player character's next action or line to ``relay``, and return it; save nothing.

    The request is the narration's own prompt up to its tail (the stable
    prefix, the summary, the story), then the tail's sections with the
    drafting request in place of the player's input: a server reuses the
    narration's cache for all of it. ``stopped`` ends it keeping what was
    drafted.
    """
    async with priority.turn(notify):
        prepared = await _prepare_compacting(campaign_id, Action(mode="continue"), False, notify)
        name = await database_sync_to_async(context.player_name)(prepared.campaign)
        messages = _draft_messages(prepared.ctx, name)
        written = thinking.Reply()
        options = llm.ChatOptions(num_predict=DRAFT_TOKENS, num_ctx=prepared.campaign.context_token_budget,
                                  temperature=prepared.campaign.temperature)
        final, was_stopped = await _until_stopped(
            _stream(prepared.narrator, messages, options, written, relay), stopped)
    text, request = written.text.strip(), messages[prepared.ctx.input_at]["content"]
    if not text and not was_stopped:
        _reply_text(written, prepared.narrator, final, DRAFT_TOKENS)  # says why: empty, or only thinking
    _keep_draft(campaign_id, {
        "draft": text, "model": prepared.narrator.model, "api": prepared.narrator.api, "stopped": was_stopped,
        "shared_messages": prepared.ctx.input_at, "request": request,
        "request_tokens": tokens.count(request),
        "prompt_tokens": prepared.ctx.prompt_tokens - tokens.count(prepared.ctx.messages[prepared.ctx.input_at]
                                                                   ["content"]) + tokens.count(request),
        "prompt_eval_count": final.prompt_eval_count, "eval_count": final.eval_count,
        "thinking_tokens": tokens.count(written.thinking) if written.thinking.strip() else 0})
    return text


def _draft_messages(ctx, name):
    """Return the drafting request: the narration's messages with its tail's sections and the request in place of
    the message that holds the player's input (an author's note stays where it is)."""
    tail = [section.text for section in ctx.sections if section.zone == context.DYNAMIC_TAIL
            and section.key not in ("player_input", "author_note")]
    request = {"role": "user", "content": "\n\n".join([*tail, DRAFT_REQUEST.format(name=name)])}
    return [*ctx.messages[:ctx.input_at], request, *ctx.messages[ctx.input_at + 1:]]


def _drafts_key(campaign_id):
    return f"drafts:{campaign_id}"


def _kept_drafts(campaign_id):
    """Return the campaign's drafts not yet shown with a turn, oldest first."""
    return cache.get(_drafts_key(campaign_id)) or []


def _keep_draft(campaign_id, record):
    kept = [*_kept_drafts(campaign_id), record]
    cache.set(_drafts_key(campaign_id), kept[-KEPT_DRAFTS:], DRAFTS_KEPT_FOR)


def _forget_drafts(campaign_id, count):
    """Forget the first ``count`` drafts of the campaign: a committed turn's report holds them now."""
    kept = _kept_drafts(campaign_id)[count:]
    if kept:
        cache.set(_drafts_key(campaign_id), kept, DRAFTS_KEPT_FOR)
    else:
        cache.delete(_drafts_key(campaign_id))


async def _play(campaign_id, action, relay, retry, notify, think, *, on_voice=None, voices=False, edit_of=None,
                narrator=None, sampling=Sampling(), prompt=None, people=frozenset(), on_commit=None):
    prepared = await _prepare_compacting(campaign_id, action, retry, notify, edit_of, narrator=narrator)
    campaign = prepared.campaign
    played, messages, used = None, prepared.ctx.messages if prompt is None else prompt, []
    temperature, limit = sampling.of(campaign)
    if voices:
        try:
            with usage.collecting() as used:
                played = await gm.play(campaign, prepared.path, prepared.ctx, prepared.narrator, on_voice=on_voice,
                                       action=prepared.action, people=people)
        except gm.StepFailed as error:
            raise TurnFailed(f"{error} Nothing was saved.") from error
        messages = played.narration_messages
        # The steps after the turn continue the narration's prompt, the game master's rules and notes included.
        prepared.ctx.report["prompt"]["digest"] = context.digest(messages)
    options = llm.ChatOptions(num_predict=limit, num_ctx=campaign.context_token_budget, temperature=temperature)
    started = time.perf_counter()
    written, began = thinking.Reply(), []

    async def timed(text):
        if not began:
            began.append(time.perf_counter())
        await relay(text)

    final = await _stream(prepared.narrator, messages, options, written, timed, think)
    text = _reply_text(written, prepared.narrator, final, limit)
    report = prepared.ctx.report
    report["settings"] |= {"num_predict": limit, "temperature": temperature}
    report["usage"] = _usage(final, written) | {
        "first_word_ms": int((began[0] - started) * 1000) if began else None}
    if prompt is not None:
        # Sent the original reply's prompt, not the one this report's sections make: no prompt to read back, so
        # the steps after it use their own (``steps.prompts``).
        report["same_prompt"] = True
        report.pop("prompt", None)
    drafts = _kept_drafts(campaign_id)
    if drafts:
        report["drafts"] = [{**draft, "sent": _sent_as(draft["draft"], prepared.action)} for draft in drafts]
    if played is None:
        counted = context.node_tokens(Node.Role.NARRATOR, "", text)
    else:
        with usage.collecting() as after:
            report["voices"] = {**played.report, "narration": await gm.narration_step(prepared.narrator, messages,
                                                                                    text)}
        used += after
        counted = gm.reply_tokens(played, text)  # as history renders the turn: notes, request, narration
        text = gm.transcript(played, text)
    reply = story.Reply(
        text=text,
        tokens=counted,
        report=report,
        model=prepared.narrator.model,
        api=prepared.narrator.api,
        prompt_eval_count=final.prompt_eval_count,
        eval_count=final.eval_count,
        done_reason=final.done_reason or "",
        duration_ms=int((time.perf_counter() - started) * 1000),
        thinking=written.thinking.strip(),
    )
    # The game master's steps, its characters and its narration step are kept with the turn, in its one commit.
    node = await database_sync_to_async(_commit)(prepared, reply, retry, played, requested=used, on_commit=on_commit)
    commit_ms = getattr(node, "commit_ms", None)
    if drafts:
        _forget_drafts(campaign_id, len(drafts))
    # The commit has returned, so the turn is durable: only now may the recorder read it.
    post_turn = postturn.schedule(campaign.pk, node.pk)
    notice = ""
    if final.done_reason == "length":
        notice = (
            f"The reply reached the {limit}-token limit and was cut off; it was saved as it is. "
            "Use Continue to carry on, or raise max_output_tokens in the campaign settings."
        )
    return TurnResult(node_id=node.pk, text=text, notice=notice, post_turn=post_turn, commit_ms=commit_ms)


async def _stream(narrator, messages, options, written, relay, think=None):
    """Stream the narrator's answer to ``messages`` into ``written`` (a ``thinking.Reply``); return the final chunk.

    The text goes to ``relay`` as it arrives and the thinking to ``think``;
    however the stream ends — finished, failed or cancelled — ``written``
    holds what had arrived.
    """
    try:
        async with contextlib.aclosing(narrator.stream_chat(messages, options)) as stream:
            async for chunk in stream:
                if chunk.done:
                    return chunk
                written.add(chunk)
                if chunk.thinking and think is not None:
                    await think(chunk.thinking, chunk.taken_back)
                if chunk.text:
                    await relay(chunk.text)
    except llm.NarratorError as error:
        raise TurnFailed(f"{error} Nothing was saved.") from error
    return llm.Chunk(done=True)


# A sent action this much like a draft (difflib's ratio) was the draft, edited.
EDITED_DRAFT = 0.5


def _sent_as(draft, action):
    """Return how the turn's action used a draft, in words: as drafted, edited, or not at all."""
    drafted, sent = " ".join(draft.split()), " ".join(action.text.split())
    if drafted and drafted == sent:
        return "sent as drafted"
    if drafted and sent and difflib.SequenceMatcher(None, drafted, sent).ratio() >= EDITED_DRAFT:
        return "edited before it was sent"
    return "not used"


def _reply_text(written, narrator, final, limit):
    """Return the reply's text, or fail the turn in words: an empty reply, or one that was only thinking."""
    text = written.text.strip()
    if text:
        return text
    if written.thinking.strip():
        cut = f" until the {limit}-token limit cut it off" if final.done_reason == "length" else ""
        raise TurnFailed(
            f"The narrator ({narrator.model}) only thought{cut} and wrote no reply, so nothing was saved. A "
            "reasoning model's thinking uses the reply's tokens: try again, raise max_output_tokens in the campaign "
            "settings, or choose a model that does not think on the model settings page."
        )
    raise TurnFailed(
        f"The narrator ({narrator.model}) returned an empty reply, so nothing was saved. "
        "Try again, or choose another model on the model settings page."
    )


def _usage(final, written):
    """Return what the server counted for a reply, and the thinking it did first (counted apart, estimated)."""
    return {"prompt_eval_count": final.prompt_eval_count, "eval_count": final.eval_count,
            "count_source": final.count_source, "cached_tokens": final.cached_tokens,
            "thinking_tokens": tokens.count(written.thinking) if written.thinking.strip() else 0}


async def _prepare_compacting(campaign_id, action, retry, notify, edit_of=None, *, narrator=None):
    """Prepare the turn, summarising the story's older passages first when the prompt needs it (seed 001).

    The summariser runs with no transaction open; if it fails, the turn fails
    with what to do, and nothing — no node, no checkpoint — is written.
    """
    try:
        return await _prepare(campaign_id, action, retry, edit_of, narrator)
    except context.NeedsCompaction as need:
        if notify is not None:
            await notify(SUMMARISING)
        try:
            await compaction.compact(need.plan)
        except compaction.CompactionFailed as failure:
            raise TurnFailed(
                f"{need} {failure} Check that the model server is running and the narrator model can write JSON "
                "(or raise context_token_budget), then send your action again. Nothing was sent or saved."
            ) from failure
    try:
        return await _prepare(campaign_id, action, retry, edit_of, narrator)
    except context.NeedsCompaction as need:
        raise TurnFailed(
            f"{need} A summary was just written but the story still does not fit; raise context_token_budget or "
            "lower max_output_tokens. Nothing was sent or saved."
        ) from need


async def _prepare(campaign_id, action, retry, edit_of=None, narrator=None):
    """Read what the turn needs, embed its queries, build the prompt: three steps, the middle one off the database.

    Every database call of every websocket shares one thread
    (``database_sync_to_async``), so the model server is asked nothing from
    it: a stalled embedding would freeze every other person's turn, page and
    Stop with it (issue 10).
    """
    await asyncio.to_thread(warming.indexes, campaign_id)  # a changed bank or library is read off the shared thread
    reading = await database_sync_to_async(_read)(campaign_id, action, retry, edit_of, narrator is not None)
    narrator, queries = await asyncio.gather(_narrator(narrator, reading.campaign),
                                             queries_embedded(reading.queries))
    ctx = await database_sync_to_async(_build)(reading, narrator, queries)
    return _Prepared(reading.campaign, reading.expected_head, reading.action, ctx, narrator, reading.path,
                     reading.started_ms, reading.after, reading.travel_seconds)


async def _narrator(chosen, campaign):
    """Return ``chosen`` (a replay's narrator), or the campaign's."""
    return chosen if chosen is not None else await llm.anarrator_for(campaign.narrator_model or None)


@dataclass(frozen=True)
class _Reading:
    campaign: Campaign
    path: object
    expected_head: tuple
    action: Action
    queries: object  # context.Queries, not yet embedded
    started_ms: int = 0
    after: int | None = None
    travel_seconds: int = 0


def _read(campaign_id, action, retry, edit_of=None, replaying=False):
    campaign = Campaign.objects.get(pk=campaign_id)
    if not replaying and Replay.objects.filter(campaign_id=campaign_id, status=Replay.Status.RUNNING).exists():
        raise TurnFailed(REPLAY_PLAYING)
    path = lineage.path_of(campaign)
    after = None
    if edit_of is not None:
        edited = path.nodes().filter(pk=edit_of, role=Node.Role.PLAYER).first()
        if edited is None:
            raise TurnFailed("That action is no longer on this line of the story (another tab moved it); the page "
                             "now shows the story as it stands. Nothing was sent or saved.")
        after = edited.depth - 1
        path = path.capped(after)
    if retry:
        if campaign.head_depth < 2:
            raise TurnFailed("There is no reply to retry yet.")
        player = path.nodes().get(depth=campaign.head_depth - 1)
        action = Action(mode=player.mode, text=player.text, direction=player.direction)
        # The replaced reply is not part of its own retry's prompt.
        path = path.capped(campaign.head_depth - 2)
    travel = _checked(campaign, path, action) if action is not None else 0
    return _Reading(campaign, path, (campaign.head_branch_id, campaign.head_depth), action,
                    context.queries_for(campaign, path, action), int(time.time() * 1000), after, travel)


def _build(reading, narrator, queries):
    campaign = reading.campaign
    # The game master's steps add its rules and the round to this prompt and answer at length: the story leaves
    # them room, as it leaves the reply its own (the inspector says how much).
    headroom = gm.headroom(campaign.max_output_tokens) if campaign.game_master else 0
    try:
        return context.build(campaign, reading.path, reading.action, model=narrator.model, api=narrator.api,
                             query=queries.knowledge, memory_query=queries.memory, events_query=queries.events,
                             headroom=headroom)
    except context.NeedsCompaction:
        raise
    except context.ContextOverflow as error:
        raise TurnFailed(f"{error} Nothing was sent or saved.") from error


async def queries_embedded(queries):
    """Return ``queries`` (context.Queries) with their vectors: every text the turn needs in ONE request.

    The knowledge query and the memory query's two texts go to the campaign's
    embedding model together; each keeps, in words, why it has no vector when
    it has none.
    """
    texts = queries.texts()
    if not texts:
        return queries
    embedder = await asyncio.to_thread(llm.embedder_for, queries.model)
    try:
        vectors = await embedder.embed(texts)
    except llm.NarratorError as error:
        return queries.failed(error, embedder.model)
    return queries.embedded(vectors)


def _commit(prepared, reply, retry, played=None, requested=(), on_commit=None):
    """Commit the turn, time it in the story, and count the memories it used, in one transaction (seed 004 §O:
    one commit; the clock, the routines' catch-up and the trigger check are code, with no model call).

    A game master's turn commits its rounds in the same transaction
    (``gm.commit``: the Round rows, their events, the clock's round lengths,
    the author's edits, the rolls, the briefs' recall uses): nothing ever sees
    the reply without its rounds.
    """
    used = [entry["id"] for entry in reply.report.get("memories", {}).get("used", [])]
    evoked = [entry["slot"] for entry in (reply.report.get("events") or {}).get("used", [])]
    inside = on_commit(reply, played) if on_commit is not None else None
    committing = time.perf_counter()
    try:
        with transaction.atomic():
            node = _commit_story(prepared, reply, retry)
            if not retry and prepared.action.events:
                _apply_action(node, prepared.action)
            storytime.advance(node, started_ms=prepared.started_ms, travel_seconds=prepared.travel_seconds)
            if played is not None:
                gm.commit(node, played, reply.report["voices"]["narration"]["text"])
            requests.record_in_turn(node.pk, requested)
            bank.record_use(used)
            # Each earlier event the narrator was given is recalled once more on this line (its half-life grows).
            recall_index.record_use(prepared.campaign.pk, (node.branch_id, node.depth), "", evoked)
            if inside is not None:
                inside(node)
        node.commit_ms = (time.perf_counter() - committing) * 1000  # the one transaction, for the table's bench
        return node
    except story.StoryMovedOn as error:
        raise TurnFailed(str(error)) from error


def _apply_action(reply, action):
    """Apply what the click did at the player's node of ``reply`` (so a retry of the reply keeps it); a refusal now
    (the story changed since the check) refuses the whole turn."""
    player = Node.objects.get(branch_id=reply.branch_id, depth=reply.depth - 1)
    stored = story_state.apply_events(player, list(action.events), source=StateEvent.Source.PLAYER, mark=False)
    refused = [event for event in stored[:len(action.events)] if event.status == StateEvent.Status.REJECTED]
    if refused:
        raise ActionRefused(_sentence(refused[0].reason))


def _commit_story(prepared, reply, retry):
    if retry:
        return story.commit_retry(prepared.campaign.pk, prepared.expected_head, reply)
    action = prepared.action
    player = story.PlayerAction(
        mode=action.mode,
        text=action.text,
        direction=action.direction,
        tokens=context.node_tokens(Node.Role.PLAYER, action.mode, action.text),
    )
    return story.commit_turn(prepared.campaign.pk, prepared.expected_head, player, reply, after=prepared.after)
