"""The map of the places a character knows, laid out for an SVG drawn on the server (no JavaScript).

Pure: a State in, boxes and arrows with coordinates out. The places are
those the character knows (seed 002 「实体知识」) and where it is now; the arrows
are the exits it knows between them, coloured by their state in the story.
The layout is layered: the place the character has known longest is the
first column, each further column one exit farther, so the map keeps its
shape as the character walks about and grows only where it learns more.
"""

from collections import deque
from dataclasses import dataclass

from .state.reading import PROTAGONIST, normalize
from .state.world import world

# Past this many places a map is a list, not a picture; the rest are counted as left out.
MAX_PLACES = 60

BOX_WIDTH, BOX_HEIGHT = 132, 34
COLUMN, ROW, MARGIN = 176, 64, 16
# Two exits joining the same places both ways are drawn this far apart, so each arrow shows.
OFFSET = 5


@dataclass(frozen=True)
class Box:
    key: str
    name: str
    x: int
    y: int
    current: bool

    @property
    def cx(self):
        return self.x + BOX_WIDTH // 2

    @property
    def cy(self):
        return self.y + BOX_HEIGHT // 2


@dataclass(frozen=True)
class Arrow:
    slot: str
    x1: int
    y1: int
    x2: int
    y2: int
    state: str
    title: str


@dataclass(frozen=True)
class Map:
    width: int
    height: int
    boxes: list
    arrows: list
    left_out: int
    box_width: int = BOX_WIDTH
    box_height: int = BOX_HEIGHT


def draw(state, who=PROTAGONIST):
    """Return the Map of the places ``who`` knows, ``who``'s place marked."""
    known = world.knowledge(state, who)
    here = state.location_of(who)
    places = set(known.get("place", {})) | ({here} if here else set())
    places = {p for p in places if world.kind_of(state, p) == "place"}
    exits = [e for e in _known_exits(state, known) if e.origin in places and e.to in places]
    order = _order(state, places, exits, _root(state, who, places, here))
    left_out = max(0, len(order) - MAX_PLACES)
    order = order[:MAX_PLACES]
    boxes = {key: Box(key, state.name_of(key), MARGIN + column * COLUMN, MARGIN + row * ROW, key == here)
             for key, (column, row) in order}
    arrows = []
    for exit in exits:
        start, end = boxes.get(exit.origin), boxes.get(exit.to)
        if start is None or end is None or start is end:
            continue
        arrows.append(_arrow(state, exit, start, end,
                             both_ways=any(e.origin == exit.to and e.to == exit.origin for e in exits)))
    width = max((b.x for b in boxes.values()), default=0) + BOX_WIDTH + MARGIN
    height = max((b.y for b in boxes.values()), default=0) + BOX_HEIGHT + MARGIN
    return Map(width, height, sorted(boxes.values(), key=lambda b: (b.x, b.y)), arrows, left_out)


def _known_exits(state, known):
    targets = set(known.get("exit", {}))
    return [exit for origin_exits in world.graph(state)[0].values() for exit in origin_exits
            if f"{exit.origin}:{exit.key}" in targets]


def _root(state, who, places, here):
    """The place ``who`` has known longest (the shallowest knowledge record), else where it is."""
    best = None
    for place in places:
        record = state.get(world.knows_slot(who, "place", place))
        rank = (record.depth if record else 10**9, place != here, place)
        if best is None or rank < best[0]:
            best = (rank, place)
    return best[1] if best else here


def _order(state, places, exits, root):
    """Return [(place, (column, row))]: columns by exits from ``root`` (either way), rows in order of discovery."""
    neighbours = {place: set() for place in places}
    for exit in exits:
        neighbours[exit.origin].add(exit.to)
        neighbours[exit.to].add(exit.origin)
    column_of, rows = {}, {}
    placed = []
    starts = [root] + sorted(places - {root}, key=lambda p: normalize(state.name_of(p)))
    offset = 0
    for start in starts:
        if start in column_of or start not in places:
            continue
        base = offset
        queue = deque([(start, base)])
        column_of[start] = base
        while queue:
            place, column = queue.popleft()
            row = rows.get(column, 0)
            rows[column] = row + 1
            placed.append((place, (column, row)))
            for other in sorted(neighbours[place], key=lambda p: normalize(state.name_of(p))):
                if other not in column_of:
                    column_of[other] = column + 1
                    queue.append((other, column + 1))
        offset = max(column_of.values()) + 1
    return placed


def _arrow(state, exit, start, end, *, both_ways):
    """An arrow from box edge to box edge; the two directions of a passage side by side."""
    x1, y1, x2, y2 = start.cx, start.cy, end.cx, end.cy
    dx, dy = x2 - x1, y2 - y1
    length = max(1.0, (dx * dx + dy * dy) ** 0.5)
    # Leave each box where the line crosses its edge (boxes are wider than tall).
    scale = min(BOX_WIDTH / 2 / abs(dx) if dx else 10**9, BOX_HEIGHT / 2 / abs(dy) if dy else 10**9)
    ox, oy = dx * scale, dy * scale
    shift_x, shift_y = (-dy / length * OFFSET, dx / length * OFFSET) if both_ways else (0, 0)
    title = f"{world.describe_exit(state, exit)}: {exit.state}" + (" (hidden)" if exit.hidden else "")
    return Arrow(exit.slot, round(x1 + ox + shift_x), round(y1 + oy + shift_y), round(x2 - ox + shift_x),
                 round(y2 - oy + shift_y), exit.state, title)
