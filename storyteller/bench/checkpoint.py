"""``checkpoint``: checkpoint eligibility on a 5,000-node tree, and prompt-prefix reuse over a 200-turn story.

``measure_prefix_reuse`` lays the story out with the turn's own functions,
as a narrator's or a game master's (the voices group's), and is what
tests/storyteller/voices/test_prefix_reuse.py holds to its gate.
"""

import statistics
import time

from django.db import transaction

from .measure import ACTIONS, REPLIES, figure
from .turn import generate_story


def run(sizes, repeat):
    """Checkpoint eligibility on a 5,000-node tree, and prompt-prefix reuse over a 200-turn story (issue 4)."""
    return [*_measure_checkpoint_lookup(repeat), measure_prefix_reuse(PREFIX_REUSE_TURNS),
            measure_prefix_reuse(PREFIX_REUSE_TURNS, note=True)]


CHECKPOINT_TREE_TURNS = 2_500  # 5,000 nodes on the line, with an abandoned side branch every 100 turns
PREFIX_REUSE_TURNS = 200


def _measure_checkpoint_lookup(repeat):
    from campaigns import lineage
    from campaigns.models import Branch
    from memory import checkpoints
    from storyteller import context

    campaign = generate_story(CHECKPOINT_TREE_TURNS)
    path = lineage.path_of(campaign)
    prefix = context.prefix_hash(campaign)
    # A checkpoint every 60 turns along the line, as compaction leaves them, and one on every side branch.
    for end in range(120, 2 * CHECKPOINT_TREE_TURNS - 1, 120):
        checkpoints.write(path, end, f"The story through depth {end}.", prefix)
    for side in Branch.objects.filter(campaign=campaign).exclude(pk=campaign.head_branch_id):
        side_path = lineage.path_at(campaign.pk, side.pk, side.fork_depth + 6)
        checkpoints.write(side_path, side.fork_depth + 6, "An abandoned line.", prefix)
    lookup, checked = [], []
    for index in range(repeat + 3):
        started = time.perf_counter()
        checkpoints.eligible_checkpoint(path, prefix)
        found = time.perf_counter()
        checkpoints.look_up(path, prefix, fresh=True)
        done = time.perf_counter()
        if index >= 3:
            lookup.append(found - started)
            checked.append(done - found)
    size = f"{2 * CHECKPOINT_TREE_TURNS:,} nodes"
    return [figure("checkpoint lookup", size, lookup, "median < 5 ms"),
            figure("checkpoint, fresh", size, checked, "with the source hash of ~4,900 nodes checked again")]


def measure_prefix_reuse(turns, layout="narrator", note=False):
    """Play ``turns`` turns (a summary written by hand stands in for the summariser); measure what each prompt
    shares with the previous one.

    With ``note`` the story has an author's note at depth 2 every 3 turns
    (issue 26): a prompt's tail then starts at the note when it has one, and
    the turn after it reads the reply under the note again.

    With the ``"game master"`` layout each turn is a game master's, laid out
    and committed by ``voices.gm``'s own functions (a round in which two
    characters speak): the prompt built with its headroom (``gm.headroom``),
    the step's prompt (``gm.step_messages``), the narration's
    (``gm.narration_messages``), the reply's text and tokens
    (``gm.transcript``, ``gm.reply_tokens``) and its rounds (``gm.commit``),
    which history renders again (``context.messages_for``). Both medians are
    given: over every prompt, and turn to turn (each step against the
    previous turn's narration).
    """
    from django.contrib.auth import get_user_model

    from campaigns import lineage, notes, story
    from campaigns.models import Campaign
    from memory import checkpoints
    from storyteller import context, tokens
    from storyteller.voices import gm

    user, _ = get_user_model().objects.get_or_create(username="bench")
    campaign = story.start_campaign(Campaign.objects.create(
        owner=user, title="Prefix reuse", protagonist="Edrin", opening=REPLIES[0],
        context_token_budget=4096, max_output_tokens=300))
    if note:
        notes.save_note(campaign, text="Keep the rain in every scene; Edrin is being watched.", depth=2, interval=3,
                        role="system", branch_only=False)
    previous, shares, builds, steps = None, [], [], []
    previous_tail = -1
    breaks = rotations = 0
    last_checkpoint = None
    for turn in range(turns):
        action = context.Action(mode="do", text=ACTIONS[turn % 4])
        headroom = gm.headroom(campaign.max_output_tokens) if layout == "game master" else 0  # as a turn builds
        started = time.perf_counter()
        try:
            ctx = context.build(campaign, lineage.path_of(campaign), action, headroom=headroom)
        except context.NeedsCompaction as need:
            plan = need.plan
            checkpoints.write(plan.path, plan.through, f"Edrin's story through depth {plan.through}. " * 8,
                              plan.prefix_hash)
            ctx = context.build(campaign, lineage.path_of(campaign), action, headroom=headroom)
        builds.append(time.perf_counter() - started)
        prompts = [ctx.messages]
        if layout == "game master":
            played = _gm_played(ctx)
            prompts = [gm.step_messages(ctx.messages, gm.step_request(1, 3, "the square", ["Mara", "Aldric"])),
                       played.narration_messages]
        checkpoint = (ctx.report["checkpoint"] or {}).get("id")
        for n, messages in enumerate(prompts):
            current = _rendered(messages)
            if previous is not None:
                if n == 0:
                    rotations += checkpoint != last_checkpoint
                    # A game master's step starts with the whole of the last narration's prompt (history renders
                    # the turn as it had it); a narrator's with all of the last prompt but its tail.
                    breaks += not current.startswith(_rendered(previous if layout == "game master"
                                                               else previous[:previous_tail]))
                common = len(_common_prefix(_rendered(previous), current))
                shares.append(tokens.count(current[:common]) / tokens.count(current))
                if n == 0:
                    steps.append(shares[-1])
            previous, previous_tail = messages, ctx.tail_start
        last_checkpoint = checkpoint
        text = f"{REPLIES[turn % 4]} ({turn})"
        reply = story.Reply(text=text, tokens=context.node_tokens("narrator", "", text), report={}, model="bench",
                            api="bench")
        if layout == "game master":
            reply = story.Reply(text=gm.transcript(played, text), tokens=gm.reply_tokens(played, text), report={},
                                model="bench", api="bench")
        with transaction.atomic():
            node = story.commit_turn(campaign.pk, (campaign.head_branch_id, campaign.head_depth),
                                     story.PlayerAction(mode="do", text=action.text,
                                                        tokens=context.node_tokens("player", "do", action.text)),
                                     reply)
            if layout == "game master":
                gm.commit(node, played, text)
        campaign.refresh_from_db()
    name = "prefix reuse" if layout == "narrator" else "prefix reuse, GM"
    name += ", author's note" if note else ""
    note = (f"reused share median {statistics.median(shares):.1%}, min {min(shares):.1%}; "
            f"{breaks} breaks, {rotations} rotations")
    if layout == "game master":
        note = (f"every prompt: median {statistics.median(shares):.1%}; turn to turn (step after the last "
                f"narration): median {statistics.median(steps):.1%}, min {min(steps):.1%}; {breaks} breaks, "
                f"{rotations} rotations")
    row = figure(name, f"{turns} turns", builds, note)
    row.update({"reused_share_median": statistics.median(shares), "reused_share_min": min(shares),
                "breaks": breaks, "rotations": rotations})
    if steps:
        row.update({"turn_to_turn_median": statistics.median(steps), "turn_to_turn_min": min(steps)})
    return row


def _gm_played(ctx):
    """Return a game master's turn after ``ctx`` as ``voices.gm.play`` returns it: one round in which Mara and
    Aldric speak, its narration's prompt laid out by ``gm.narration_messages``."""
    from storyteller.voices import gm

    spoken = [("mara", "Mara", "Not tonight."), ("aldric", "Aldric", "Let him look.")]
    this = gm.RoundPlayed(1, {"actors": [], "refused": []},
                          [{"who": key, "name": name, "why": "they are here"} for key, name, _ in spoken],
                          [{"speaker": key, "name": name, "text": line, "action": ""} for key, name, line in spoken],
                          {}, [])
    return gm.Played([this], gm.narration_messages(ctx.messages, [this.row()]), [], [], {})


def _rendered(messages):
    """Return messages as a chat template lays them out: what a server's prompt cache compares."""
    return "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages)


def _common_prefix(first, second):
    return first[:next((i for i, (a, b) in enumerate(zip(first, second)) if a != b), min(len(first), len(second)))]
