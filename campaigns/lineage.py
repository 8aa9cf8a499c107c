"""The active lineage: the one chokepoint for every read of the story.

``Path`` is the line from the opening to the head, capped at the head's depth
and, on every ancestor branch, at the depth its child forked from. Anything
derived from the story (nodes, snapshots, and later memories, summaries and
state) is read through ``Path.clause`` so that undo, redo, save points and
divergence all change what is eligible without a rule of their own, and an
abandoned line can never leak into a prompt.
"""

from dataclasses import dataclass

from django.db import connection
from django.db.models import Max, Q

from .models import Branch, Node


@dataclass(frozen=True)
class Segment:
    """The depths ``(low, high]`` of ``branch_id`` that lie on the path."""

    branch_id: int
    low: int
    high: int

    def contains(self, depth):
        return self.low < depth <= self.high


@dataclass(frozen=True)
class Path:
    campaign_id: int
    head_branch_id: int
    head_depth: int
    segments: tuple[Segment, ...]

    def clause(self, prefix=""):
        """Return a Q that admits exactly the rows anchored on this path.

        ``prefix`` names the relation holding ``branch`` and ``depth`` (for
        example ``"node__"``); rows must carry both fields.
        """
        condition = Q(pk__in=[])
        for segment in self.segments:
            condition |= Q(
                **{
                    f"{prefix}branch_id": segment.branch_id,
                    f"{prefix}depth__gt": segment.low,
                    f"{prefix}depth__lte": segment.high,
                }
            )
        return condition

    def sql(self):
        """Return (SQL, parameters): ``clause`` written out, for reads the ORM takes longer to build than to run."""
        if not self.segments:
            return "1 = 0", []  # false on both backends (PostgreSQL has no integer truth)
        sql = " OR ".join(["(branch_id = %s AND depth > %s AND depth <= %s)"] * len(self.segments))
        return sql, [value for s in self.segments for value in (s.branch_id, s.low, s.high)]

    def contains(self, branch_id, depth):
        return any(s.branch_id == branch_id and s.contains(depth) for s in self.segments)

    def nodes(self):
        """Return the path's nodes, opening first."""
        return Node.objects.filter(self.clause(), campaign_id=self.campaign_id).order_by("depth")

    def capped(self, depth):
        """Return the same line cut off at ``depth`` (which must not exceed the head)."""
        segments = tuple(
            Segment(s.branch_id, s.low, min(s.high, depth)) for s in self.segments if s.low < depth
        )
        return Path(self.campaign_id, segments[0].branch_id if segments else self.head_branch_id, depth, segments)


def path_of(campaign):
    """Return the active, head-capped lineage of ``campaign``."""
    return path_at(campaign.pk, campaign.head_branch_id, campaign.head_depth)


def path_at(campaign_id, branch_id, depth):
    """Return the lineage that ends at ``(branch_id, depth)``."""
    branches = _branch_table(campaign_id)
    segments = []
    cap = depth
    current = branch_id
    while current in branches:
        parent, fork = branches[current]
        if cap > fork:
            segments.append(Segment(current, fork, cap))
            cap = fork
        current = parent
    return Path(campaign_id, branch_id, depth, tuple(segments))


def _branch_table(campaign_id):
    """Return ``{branch id: (parent id, fork depth)}`` for every branch of the campaign."""
    # Written out: every turn and every state read starts here, and the ORM spent 0.6-0.9 ms building this
    # one-table read under load, SQLite answers in under 0.1 (bench "state").
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, parent_id, fork_depth FROM {Branch._meta.db_table} WHERE campaign_id = %s",
                       [campaign_id])
        return {pk: (parent, fork) for pk, parent, fork in cursor.fetchall()}


@dataclass(frozen=True)
class Versions:
    """Where a reply or an action stands among the versions of it (Retry, Continue and Edit write siblings)."""

    position: int  # 1 for the first version written
    count: int
    previous: int | None  # node ids; None at either end
    next: int | None


def versions(campaign_id, nodes):
    """Return ``{node id: Versions}`` for the replies and actions among ``nodes`` that have more than one version."""
    depths = {node.depth for node in nodes if node.role != Node.Role.OPENING}
    if not depths:
        return {}
    replies = (Node.objects.filter(campaign_id=campaign_id, depth__in=depths).exclude(role=Node.Role.OPENING)
               .order_by("pk").values_list("pk", "branch_id", "depth"))
    return group_versions(_branch_table(campaign_id), replies, {node.pk for node in nodes})


def version_groups(campaign_id, nodes):
    """Return {node id: [every version's id, oldest first]} for the nodes among ``nodes`` that have versions
    (an export's swipes: all of them, not only where the one on the line stands)."""
    depths = {node.depth for node in nodes if node.role != Node.Role.OPENING}
    if not depths:
        return {}
    branches = _branch_table(campaign_id)
    groups = {}
    for pk, branch_id, depth in (Node.objects.filter(campaign_id=campaign_id, depth__in=depths)
                                 .exclude(role=Node.Role.OPENING).order_by("pk").values_list("pk", "branch_id",
                                                                                               "depth")):
        groups.setdefault((depth, owner(branches, branch_id, depth - 1)), []).append(pk)
    wanted = {node.pk for node in nodes}
    return {pk: members for members in groups.values() if len(members) > 1 for pk in members if pk in wanted}


def group_versions(branches, replies, wanted):
    """Group ``replies`` ((id, branch, depth), oldest first) by the node they follow; return the wanted.

    Two nodes at depth ``d`` are versions of each other when the same
    branch owns depth ``d - 1`` on both their lines: that branch holds
    exactly one node there, the player action two replies answer (or the
    reply two edited actions follow).
    """
    groups = {}
    for pk, branch_id, depth in replies:
        groups.setdefault((depth, owner(branches, branch_id, depth - 1)), []).append(pk)
    found = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        for index, pk in enumerate(members):
            if pk in wanted:
                found[pk] = Versions(
                    position=index + 1,
                    count=len(members),
                    previous=members[index - 1] if index else None,
                    next=members[index + 1] if index + 1 < len(members) else None,
                )
    return found


def owner(branches, branch_id, depth):
    """Return the branch whose own node sits at ``depth`` on the line through ``branch_id``."""
    while branch_id in branches:
        parent, fork = branches[branch_id]
        if depth > fork:
            return branch_id
        branch_id = parent
    return None


def tip_depth(branch):
    """Return the deepest depth reachable by following ``branch`` forward (what redo may reach)."""
    deepest = tip_depth_of(branch.pk)
    return deepest if deepest is not None else branch.fork_depth


def tip_depth_of(branch_id):
    """Return the deepest node depth on ``branch_id`` itself, or None when it has none."""
    return Node.objects.filter(branch_id=branch_id).aggregate(deepest=Max("depth"))["deepest"]


def can_redo(campaign):
    return campaign.head_branch is not None and tip_depth(campaign.head_branch) >= campaign.head_depth + 2
