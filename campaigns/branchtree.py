"""The branches of one campaign as a person tells them apart: a number, a name, where each split, and a tree.

``lines`` reads the campaign's branches in a fixed handful of queries
(whatever the story's length) and names each one that has no name of its
own after the action where it split ("from: I open the chest"); ``drawing``
is pure: it lays the lines out as lanes of a small tree, the current line
marked, for the branches page to render as SVG with no script.
"""

from dataclasses import dataclass

from django.db.models import Max, Min, Q

from . import lineage
from .models import Branch, Node

NAME_CHARS = 60  # of the action a default name quotes


@dataclass(frozen=True)
class Line:
    branch: Branch
    number: int
    label: str  # the person's name, or the default
    parent_number: int | None
    fork_turn: int  # the turn after which it leaves its parent's line (0: the opening)
    tip: int  # the deepest depth it reaches
    turns: int
    active: bool  # the head's own branch
    on_path: tuple[int, int] | None  # the depths (low, high] of this branch that the current line reads


def lines(campaign):
    """Return the campaign's branches in the order they were made, each with its name and place in the tree."""
    branches = list(Branch.objects.filter(campaign=campaign))
    extent = {row["branch"]: row for row in Node.objects.filter(campaign=campaign).values("branch")
              .annotate(first=Min("depth"), last=Max("depth"))}
    firsts = _nodes_at(campaign, [(b.pk, extent[b.pk]["first"]) for b in branches if b.pk in extent])
    table = {b.pk: (b.parent_id, b.fork_depth) for b in branches}
    answered = {}  # a branch that starts with a reply answers an action on the line it leaves
    for branch in branches:
        first = firsts.get(branch.pk)
        if first is not None and first.role == Node.Role.NARRATOR and branch.parent_id is not None:
            answered[branch.pk] = (lineage.owner(table, branch.parent_id, first.depth - 1), first.depth - 1)
    actions = _nodes_at(campaign, answered.values(), by_place=True)
    path = lineage.path_of(campaign)
    numbers = {b.pk: b.number for b in branches}
    found = []
    for branch in branches:
        tip = extent[branch.pk]["last"] if branch.pk in extent else branch.fork_depth
        segment = next((s for s in path.segments if s.branch_id == branch.pk), None)
        found.append(Line(
            branch=branch, number=branch.number,
            label=branch.name or _default_name(branch, firsts.get(branch.pk), actions.get(answered.get(branch.pk))),
            parent_number=numbers.get(branch.parent_id), fork_turn=max(branch.fork_depth, 0) // 2,
            tip=tip, turns=max(tip, 0) // 2, active=branch.pk == campaign.head_branch_id,
            on_path=(segment.low, segment.high) if segment else None))
    return found


def _nodes_at(campaign, places, by_place=False):
    """Return the nodes at ``places`` ((branch id, depth) pairs) by branch id, or by the pair itself."""
    places = [place for place in places if place[0] is not None]
    if not places:
        return {}
    where = Q(pk__in=[])
    for branch_id, depth in places:
        where |= Q(branch_id=branch_id, depth=depth)
    nodes = Node.objects.filter(where, campaign=campaign).only("branch_id", "depth", "role", "text")
    return {((node.branch_id, node.depth) if by_place else node.branch_id): node for node in nodes}


def _default_name(branch, first, answered):
    """Name a line after the action where it split: its own first action, or the action its first reply answers."""
    if branch.parent_id is None:
        return "the first line, from the opening"
    if first is None:
        return "an empty line"
    if first.role == Node.Role.PLAYER:
        return f"from: {_quoted(first.text)}"
    if answered is not None:
        return f"another reply to: {_quoted(answered.text)}"
    return f"another reply after turn {branch.fork_depth // 2}"


def _quoted(text):
    text = " ".join(text.split())
    return text if len(text) <= NAME_CHARS else text[:NAME_CHARS - 1].rstrip() + "…"


# The drawing: one lane per line, one step per turn, in the SVG's own units (it scales to the page's width).
STEP, LANE, LEFT, TOP = 24, 26, 28, 14
LABEL_CHARS, CHAR_WIDTH = 40, 7  # a lane's name after its last turn, cut to fit


@dataclass(frozen=True)
class Lane:
    number: int
    label: str
    y: int
    start_x: int  # where it leaves its parent (the parent's lane)
    start_y: int
    x: int  # where its own turns begin
    end_x: int
    path_from: int | None  # the current line's stretch of this lane
    path_to: int | None
    active: bool
    head_x: int | None  # where the story stands, on the head's lane
    short: str = ""  # the name as the drawing shows it


@dataclass(frozen=True)
class Drawing:
    width: int
    height: int
    lanes: tuple[Lane, ...]


def drawing(found, head_depth):
    """Lay ``found`` out as a tree: children below their parent, each lane from its fork to its last turn."""
    children = {}
    for line in found:
        children.setdefault(line.parent_number, []).append(line)
    ordered, stack = [], list(reversed(children.get(None, [])))
    while stack:
        line = stack.pop()
        ordered.append(line)
        stack.extend(reversed(children.get(line.number, [])))
    lane_of = {line.number: index for index, line in enumerate(ordered)}

    def x(depth):
        return LEFT + max(depth, 0) * STEP // 2

    lanes = []
    for line in ordered:
        y = TOP + lane_of[line.number] * LANE
        parent_y = TOP + lane_of[line.parent_number] * LANE if line.parent_number in lane_of else y
        fork = max(line.branch.fork_depth, 0)
        low, high = line.on_path or (None, None)
        lanes.append(Lane(
            number=line.number, label=line.label, y=y, start_x=x(fork), start_y=parent_y, x=x(fork + 1),
            end_x=max(x(line.tip), x(fork + 1)), path_from=None if low is None else x(max(low, fork)),
            path_to=None if high is None else x(high), active=line.active,
            head_x=x(head_depth) if line.active else None, short=_cut(line.label)))
    width = max((lane.end_x + 10 + CHAR_WIDTH * len(lane.short) for lane in lanes), default=LEFT)
    return Drawing(width=width, height=TOP * 2 + max(len(ordered) - 1, 0) * LANE, lanes=tuple(lanes))


def _cut(label):
    return label if len(label) <= LABEL_CHARS else label[:LABEL_CHARS - 1].rstrip() + "…"
