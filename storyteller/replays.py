"""Replays: a line of the story played again with another narrator, onto a branch of its own (issue 29).

A replay is a row (``campaigns.models.Replay``) and a branch forked where
the line starts. Each of the line's player actions is played in order
through the one turn path (``turns.play_turn``) with the replay's narrator
and sampling, so its context is built as the new branch's own story calls
for, and its recordings, memories and summaries are the new branch's own;
the post-turn work of each turn settles before the next is played, as a
person reading a reply before answering gives it time to. With the same
prompts, each original reply's stored messages are sent again unchanged.

How far a replay has come is the branch's tip: a turn is on the branch or
it was never committed (a killed turn leaves no node), so a replay resumed
after a restart plays the next action not yet there, never one twice. The
head moves to the replay's line while it plays; meanwhile the campaign's
own turns are refused in words (``turns``), and the line's original rows
are only ever read.
"""

import asyncio
import logging
import os
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.db import transaction

from campaigns import lineage
from campaigns.models import Branch, Campaign, Node, RecorderRun, Replay

from . import llm, turns
from .context import Action
from .steps import postturn, prompts

logger = logging.getLogger(__name__)

MAX_TURNS = 500  # a replay longer than this takes hours on a local model: replay it in parts
STOP_POLL = 0.25  # seconds between looks at the row for Stop while a turn plays (a Stop from another process)
API_CHOICES = ("ollama", "openai", "builtin")


class ReplayRefused(Exception):
    """A replay could not be started or resumed; the message says what to change."""


def start(campaign, *, from_depth, to_depth, model, url="", api="", temperature=None, max_output_tokens=None,
          same_prompts=False, source=None):
    """Check the line and the narrator, then create the replay and its branch (nothing is played yet).

    The line is the one through ``source`` (a branch; the head's by default)
    to ``to_depth``; its first action played again is the first at or after
    ``from_depth``. Refused in words: a line with no actions, past its end,
    longer than MAX_TURNS, an unknown API, a replay already playing, or the
    same prompts asked of turns played before prompts were kept.
    """
    if api and api not in API_CHOICES:
        raise ReplayRefused(f"The API is {api!r}; choose one of {', '.join(API_CHOICES)}.")
    if not model.strip():
        raise ReplayRefused("Name the model that narrates the replay (for example qwen2.5:7b-instruct).")
    source = source or campaign.head_branch
    first = from_depth + 1 if from_depth % 2 == 0 else from_depth
    with transaction.atomic():
        tip = lineage.tip_depth(source)
        if to_depth > tip:
            raise ReplayRefused(f"The line ends at turn {tip // 2} (depth {tip}); choose a last depth up to {tip}.")
        line = lineage.path_at(campaign.pk, source.pk, to_depth)
        actions = list(line.nodes().filter(role=Node.Role.PLAYER, depth__gte=max(first, 1)).values_list("depth",
                                                                                                       flat=True))
        if not actions:
            raise ReplayRefused(f"There is no player action from depth {from_depth} to {to_depth} to play again; "
                                "choose a range that holds at least one turn.")
        if len(actions) > MAX_TURNS:
            raise ReplayRefused(f"That line has {len(actions)} turns; replay at most {MAX_TURNS} at once.")
        if same_prompts:
            _check_prompts_kept(lineage.path_at(campaign.pk, source.pk, actions[-1] + 1), actions)
        if Replay.objects.filter(campaign=campaign, status=Replay.Status.RUNNING).exists():
            raise ReplayRefused("A replay is already playing in this story; stop it or let it finish first.")
        fork = actions[0] - 1
        parent = next(segment.branch_id for segment in line.segments if segment.contains(fork))
        branch = Branch.objects.create(campaign=campaign, parent_id=parent, fork_depth=fork)
        return Replay.objects.create(
            campaign=campaign, source=source, from_depth=actions[0], to_depth=actions[-1] + 1, branch=branch,
            model=model.strip(), url=url.strip(), api=api, temperature=temperature,
            max_output_tokens=max_output_tokens, same_prompts=same_prompts)


def _check_prompts_kept(line, actions):
    replies = {node.depth: node for node in line.nodes().filter(depth__in=[d + 1 for d in actions])}
    for depth in actions:
        if depth + 1 not in replies or prompts.sent(replies[depth + 1]) is None:
            raise ReplayRefused(
                f"Turn {(depth + 1) // 2}'s prompt cannot be read back as it was sent (it was played before prompts "
                "were kept, or by the same prompts of another replay), so it cannot be sent again; replay without "
                "“same prompts”, or from a later turn.")


def narrator_of(replay):
    """Return the replay's narrator client."""
    return llm.narrator_at(replay.api, replay.url, replay.model)


def stop(replay):
    """Ask the replay to stop: its turn in progress saves nothing, and it can be resumed later."""
    Replay.objects.filter(pk=replay.pk, status=Replay.Status.RUNNING).update(status=Replay.Status.STOPPED,
                                                                             error="")


def resume(replay):
    """Mark a stopped or failed replay to play again from where it stopped."""
    if replay.status == Replay.Status.DONE:
        raise ReplayRefused("That replay has played every turn of its line.")
    if replay.status != Replay.Status.RUNNING and replay.runner is not None and _alive(replay.runner):
        raise ReplayRefused("The replay is still stopping (its last turn is being let go); resume it in a moment.")
    if Replay.objects.filter(campaign_id=replay.campaign_id, status=Replay.Status.RUNNING).exclude(
            pk=replay.pk).exists():
        raise ReplayRefused("Another replay is playing in this story; stop it or let it finish first.")
    Replay.objects.filter(pk=replay.pk).update(status=Replay.Status.RUNNING, error="")


def progress(replay):
    """Return how many of the replay's turns are on its branch."""
    return (lineage.tip_depth(replay.branch) - replay.branch.fork_depth) // 2


_tasks: dict[int, asyncio.Task] = {}


def schedule(replay_id):
    """Play replay ``replay_id`` in this event loop unless it already plays here; return its task."""
    task = _tasks.get(replay_id)
    if task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop():
        return task
    task = _tasks[replay_id] = asyncio.get_running_loop().create_task(run(replay_id), name=f"replay-{replay_id}")
    return task


async def resume_unfinished():
    """Pick up every replay left playing by a process that has ended (a restart, a kill): the app's startup."""
    for replay_id in await database_sync_to_async(_orphans)():
        schedule(replay_id)


def _orphans():
    return [pk for pk, runner in Replay.objects.filter(status=Replay.Status.RUNNING).values_list("pk", "runner")
            if runner is None or not _alive(runner)]


def _alive(pid):
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def run(replay_id, *, say=None):
    """Play the replay's turns not yet on its branch, one at a time, until it ends, is stopped or fails.

    ``say(turn, total, node_id)``, if given, is called after each committed
    turn. Returns the replay as it stands at the end.
    """
    if not await database_sync_to_async(_claim)(replay_id):
        return await Replay.objects.aget(pk=replay_id)
    try:
        replay = await Replay.objects.select_related("branch").aget(pk=replay_id)
        narrator = await asyncio.to_thread(narrator_of, replay)
        sampling = turns.Sampling(replay.temperature, replay.max_output_tokens)
        await _record_what_was_left(replay)
        while True:
            turn = await database_sync_to_async(_next_turn)(replay_id)
            if turn is None:
                break
            played = await _play_unless_stopped(replay, turn, narrator, sampling)
            if played is None:
                break
            await postturn.settle(replay.campaign_id)
            if say is not None:
                say(turn.number, replay.turns, played.node_id)
    except turns.TurnFailed as error:
        await _fail(replay_id, f"Turn {turn.number} of the replay was not played: {error}")
    except (llm.NarratorError, ReplayRefused) as error:
        await _fail(replay_id, str(error))
    finally:
        await Replay.objects.filter(pk=replay_id, runner=os.getpid()).aupdate(runner=None)
    return await Replay.objects.aget(pk=replay_id)


def _claim(replay_id):
    """Make this process the replay's runner if it is playing and no live process plays it; return whether."""
    with transaction.atomic():
        replay = Replay.objects.filter(pk=replay_id, status=Replay.Status.RUNNING).first()
        if replay is None or (replay.runner not in (None, os.getpid()) and _alive(replay.runner)):
            return False
        Replay.objects.filter(pk=replay_id).update(runner=os.getpid())
    return True


async def _record_what_was_left(replay):
    """Run the post-turn work a killed run left undone for the replay's replies (their recording first)."""
    left = await database_sync_to_async(lambda: list(
        Node.objects.filter(branch=replay.branch, role=Node.Role.NARRATOR)
        .exclude(pk__in=RecorderRun.objects.filter(node__branch=replay.branch).values("node_id"))
        .order_by("depth").values_list("pk", flat=True)))()
    for node_id in left:
        postturn.schedule(replay.campaign_id, node_id)
    await postturn.settle(replay.campaign_id)


@dataclass(frozen=True)
class _Turn:
    number: int  # 1 for the replay's first
    action: Action
    prompt: list | None  # the original's messages, to send again unchanged (same prompts)


def _next_turn(replay_id):
    """Return the replay's next turn to play and move the head to the replay's line; None when it is over."""
    with transaction.atomic():
        replay = Replay.objects.select_related("branch").get(pk=replay_id)
        if replay.status != Replay.Status.RUNNING:
            return None
        tip = lineage.tip_depth(replay.branch)
        depth = tip + 1  # the replay's next player action sits where the original's did
        if depth > replay.to_depth:
            Replay.objects.filter(pk=replay_id).update(status=Replay.Status.DONE)
            return None
        line = lineage.path_at(replay.campaign_id, replay.source_id, replay.to_depth)
        original = line.nodes().get(depth=depth)
        prompt = None
        if replay.same_prompts:
            narration = prompts.sent(line.nodes().get(depth=depth + 1))
            if narration is None:
                raise ReplayRefused(f"Turn {(depth + 1) // 2}'s original prompt no longer reads back as it was sent, "
                                    "so the replay stopped there; resume it without “same prompts”.")
            prompt = narration.messages
        Campaign.objects.filter(pk=replay.campaign_id).update(head_branch=replay.branch, head_depth=tip)
    return _Turn((depth - replay.from_depth) // 2 + 1, Action(mode=original.mode, text=original.text,
                                                                  direction=original.direction), prompt)


async def _play_unless_stopped(replay, turn, narrator, sampling):
    """Play ``turn``, cancelling it (nothing saved) if the replay is stopped meanwhile; None when stopped."""
    async def ignore(_text):
        pass

    playing = asyncio.ensure_future(turns.play_turn(replay.campaign_id, turn.action, ignore, narrator=narrator,
                                                    sampling=sampling, prompt=turn.prompt))
    try:
        while not playing.done():
            await asyncio.wait({playing}, timeout=STOP_POLL)
            if not playing.done() and not await Replay.objects.filter(
                    pk=replay.pk, status=Replay.Status.RUNNING).aexists():
                playing.cancel()
                await asyncio.gather(playing, return_exceptions=True)
                return None
    except asyncio.CancelledError:
        playing.cancel()
        raise
    return playing.result()


async def _fail(replay_id, message):
    await Replay.objects.filter(pk=replay_id).aupdate(status=Replay.Status.FAILED, error=message[:2000])
