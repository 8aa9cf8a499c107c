"""Every change to the story tree: one short transaction each, nothing ever deleted.

A turn is written by ``commit_turn`` only after the narrator has finished, in a
single IMMEDIATE transaction that refuses if the head moved while the model was
generating (another tab acted, undid or switched branch). Head moves — undo,
redo, save-point restore, branch switch — touch only the campaign's head. On
PostgreSQL each of these transactions locks the campaign's row first
(``locks.story``), which gives them the order IMMEDIATE gives them on SQLite.
"""

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from storyteller import tokens

from . import lineage, locks
from .models import BRANCH_NAME_CHARS, Branch, Campaign, ContextSnapshot, Node, SavePoint


class StoryMovedOn(Exception):
    """The head moved while a turn was being generated; the turn was not saved."""

    def __init__(self):
        super().__init__(
            "The story moved on in another tab or window while this reply was being written, "
            "so it was not saved. The page now shows the latest story; send your action again if you still want it."
        )


class NothingToRetry(Exception):
    pass


@dataclass(frozen=True)
class PlayerAction:
    mode: str
    text: str
    direction: str = ""
    tokens: int = 0


@dataclass(frozen=True)
class Reply:
    text: str
    tokens: int
    report: dict
    model: str
    api: str
    prompt_eval_count: int | None = None
    eval_count: int | None = None
    done_reason: str = ""
    duration_ms: int | None = None
    thinking: str = ""  # a reasoning model's thinking before the reply, kept beside it


def start_campaign(campaign):
    """Give a newly created campaign its root branch and opening node."""
    with transaction.atomic():
        root = Branch.objects.create(campaign=campaign, parent=None, fork_depth=-1)
        count = tokens.count(campaign.opening)
        Node.objects.create(
            campaign=campaign,
            branch=root,
            depth=0,
            role=Node.Role.OPENING,
            text=campaign.opening,
            tokens=count,
            tokens_through=count,
        )
        campaign.head_branch = root
        campaign.head_depth = 0
        campaign.save(update_fields=["head_branch", "head_depth", "updated_at"])
    return campaign


def commit_turn(campaign_id, expected_head, action, reply, *, after=None):
    """Write a player action and its reply after the head, or refuse if the head moved.

    Acting anywhere but the tip of the head branch (after an undo) opens a new
    branch at the head, so the undone future stays reachable through redo's
    old branch and the branches view. ``after``, a depth before the head's,
    plays the turn from there instead (an edited action: a new version of the
    action at ``after + 1``, on a branch of its own; the old line stays).
    """
    branch_id, depth = expected_head[0], expected_head[1] if after is None else after
    with transaction.atomic():
        locks.story(campaign_id)
        through = _tokens_through(campaign_id, branch_id, depth)
        deepest = lineage.tip_depth_of(branch_id)
        if deepest is not None and deepest > depth:
            branch_id = Branch.objects.create(campaign_id=campaign_id, parent_id=branch_id, fork_depth=depth).pk
        Node.objects.create(
            campaign_id=campaign_id,
            branch_id=branch_id,
            depth=depth + 1,
            role=Node.Role.PLAYER,
            mode=action.mode,
            text=action.text,
            direction=action.direction,
            tokens=action.tokens,
            tokens_through=through + action.tokens,
        )
        node = _write_reply(campaign_id, branch_id, depth + 2, reply, through + action.tokens)
        _advance_head(campaign_id, expected_head, branch_id, depth + 2)
    return node


def commit_retry(campaign_id, expected_head, reply):
    """Write a new sibling of the head's reply on a new branch; the old reply stays reachable."""
    head_branch_id, depth = expected_head
    if depth < 2:
        raise NothingToRetry("There is no reply to retry yet.")
    with transaction.atomic():
        locks.story(campaign_id)
        through = _tokens_through(campaign_id, head_branch_id, depth - 1)
        branch_id = Branch.objects.create(campaign_id=campaign_id, parent_id=head_branch_id, fork_depth=depth - 1).pk
        node = _write_reply(campaign_id, branch_id, depth, reply, through)
        _advance_head(campaign_id, expected_head, branch_id, depth)
    return node


def commit_edit(campaign_id, expected_head, node, text, tokens, report):
    """Write ``text`` as a new version of reply ``node`` (a sibling on a branch of its own) and show it.

    Never an overwrite: the old version stays one flip away. A reply before
    the head's is a branch from there: the head moves to the new version,
    and the turns after the old one stay on their branch. ``report`` is the
    new version's snapshot (what the narrator was told for the text it
    edits). Refuses (StoryMovedOn) if the head moved meanwhile.
    """
    head_branch_id, _ = expected_head
    with transaction.atomic():
        locks.story(campaign_id)
        if not lineage.path_at(campaign_id, *expected_head).contains(node.branch_id, node.depth):
            raise StoryMovedOn()
        through = _tokens_through(campaign_id, head_branch_id, node.depth - 1)
        branch_id = Branch.objects.create(campaign_id=campaign_id, parent_id=head_branch_id,
                                          fork_depth=node.depth - 1).pk
        snapshot = node.snapshot
        edited = _write_reply(campaign_id, branch_id, node.depth, Reply(
            text=text, tokens=tokens, report=report, model=snapshot.model, api=snapshot.api,
            prompt_eval_count=snapshot.prompt_eval_count, eval_count=snapshot.eval_count,
            done_reason=snapshot.done_reason, duration_ms=snapshot.duration_ms, thinking=node.thinking), through)
        _advance_head(campaign_id, expected_head, branch_id, node.depth)
    return edited


def _tokens_through(campaign_id, head_branch_id, depth):
    """Return the running token total, at ``depth``, of the line ending at the head."""
    path = lineage.path_at(campaign_id, head_branch_id, depth)
    return path.nodes().values_list("tokens_through", flat=True).get(depth=depth)


def _write_reply(campaign_id, branch_id, depth, reply, parent_through):
    node = Node.objects.create(
        campaign_id=campaign_id,
        branch_id=branch_id,
        depth=depth,
        role=Node.Role.NARRATOR,
        text=reply.text,
        thinking=reply.thinking,
        tokens=reply.tokens,
        tokens_through=parent_through + reply.tokens,
    )
    ContextSnapshot.objects.create(
        node=node,
        report=reply.report,
        model=reply.model,
        api=reply.api,
        prompt_eval_count=reply.prompt_eval_count,
        eval_count=reply.eval_count,
        done_reason=reply.done_reason or "",
        duration_ms=reply.duration_ms,
    )
    return node


def _advance_head(campaign_id, expected_head, branch_id, depth):
    """Move the head from ``expected_head``, or raise StoryMovedOn (rolling the turn back) if it is elsewhere.

    The check is the UPDATE's own condition; the IMMEDIATE transaction holds
    the write lock from its first statement, so nothing can move the head
    between the turn's reads and this write.
    """
    moved = Campaign.objects.filter(
        pk=campaign_id, head_branch_id=expected_head[0], head_depth=expected_head[1]
    ).update(head_branch_id=branch_id, head_depth=depth, updated_at=timezone.now())
    if not moved:
        raise StoryMovedOn()


def _move_head(campaign, branch, depth):
    campaign.head_branch = branch
    campaign.head_depth = depth
    campaign.save(update_fields=["head_branch", "head_depth", "updated_at"])


def undo(campaign):
    """Step the head back one turn; return False when already at the opening."""
    with transaction.atomic():
        locks.story(campaign.pk)
        campaign.refresh_from_db(fields=["head_branch", "head_depth"])
        if campaign.head_depth == 0:
            return False
        _move_head(campaign, campaign.head_branch, max(0, campaign.head_depth - 2))
    return True


def redo(campaign):
    """Step the head forward one turn along its branch; return False when there is nothing ahead."""
    with transaction.atomic():
        locks.story(campaign.pk)
        campaign.refresh_from_db(fields=["head_branch", "head_depth"])
        if not lineage.can_redo(campaign):
            return False
        _move_head(campaign, campaign.head_branch, campaign.head_depth + 2)
    return True


def create_save_point(campaign, name):
    return SavePoint.objects.create(
        campaign=campaign, name=name, branch_id=campaign.head_branch_id, depth=campaign.head_depth
    )


def restore_save_point(save_point):
    campaign = save_point.campaign
    with transaction.atomic():
        locks.story(campaign.pk)
        _move_head(campaign, save_point.branch, save_point.depth)
    return campaign


class NameRefused(ValueError):
    pass


def name_branch(branch, name):
    """Give ``branch`` the person's name for it; an empty name brings back the default (where it split)."""
    name = " ".join(name.split())
    if len(name) > BRANCH_NAME_CHARS:
        raise NameRefused(f"A line's name is at most {BRANCH_NAME_CHARS} characters; this one has {len(name)}. "
                          "Shorten it and save again.")
    branch.name = name
    branch.save(update_fields=["name"])
    return branch


def switch_branch(campaign, branch):
    """Move the head to the tip of ``branch``."""
    with transaction.atomic():
        locks.story(campaign.pk)
        _move_head(campaign, branch, lineage.tip_depth(branch))
    return campaign


def show_version(campaign, reply):
    """Move the head to ``reply``, another version of a reply or an action on the line; return False when it is
    already shown.

    When the head is at that depth it moves to the version itself, so the
    story reads the same up to it and Redo still reaches anything played
    after it. A version further back takes the head to the end of its own
    branch, as switching to that branch on the Branches page does.
    """
    with transaction.atomic():
        locks.story(campaign.pk)
        campaign.refresh_from_db(fields=["head_branch", "head_depth"])
        if lineage.path_of(campaign).contains(reply.branch_id, reply.depth):
            return False
        depth = reply.depth if campaign.head_depth == reply.depth else lineage.tip_depth(reply.branch)
        _move_head(campaign, reply.branch, depth)
    return True
