"""The map of the places a character knows, laid out for an SVG drawn on the server.

Pure: a State in, boxes and lines with coordinates out. The places are
those the character knows (seed 002 「实体知识」) and where it is now (the
author's view: every place); the lines are the exits it knows between them,
coloured by their state as it has seen them, a way there and back as one
line; each place says how long the way there takes.
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

BOX_WIDTH, BOX_HEIGHT = 132, 40
COLUMN, ROW, MARGIN = 176, 64, 16


@dataclass(frozen=True)
class Box:
    key: str
    name: str
    x: int
    y: int
    current: bool
    seconds: int | None = None  # how long the way there takes along open exits; None: no such way

    @property
    def cx(self):
        return self.x + BOX_WIDTH // 2

    @property
    def cy(self):
        return self.y + BOX_HEIGHT // 2

    @property
    def reachable(self):
        return self.seconds is not None and not self.current


@dataclass(frozen=True)
class Arrow:
    """One passage between two boxes: an exit, or both exits of a way there and back (one line, no arrowhead)."""

    slot: str
    x1: int
    y1: int
    x2: int
    y2: int
    state: str  # open | locked | blocked | unseen (known of, never seen)
    title: str
    slots: tuple = ()  # every exit the line draws
    both_ways: bool = False


@dataclass(frozen=True)
class Map:
    width: int
    height: int
    boxes: list
    arrows: list
    left_out: int
    box_width: int = BOX_WIDTH
    box_height: int = BOX_HEIGHT


def draw(state, who=PROTAGONIST, *, everything=False, seen=None):
    """Return the Map of the places ``who`` knows (``everything``: every place), ``who``'s place marked.

    A way there and back is one line; a one-way exit an arrow. Each place
    says how long the way there takes along open exits ``who`` knows (for
    ``everything`` too: travel is the character's). With ``seen`` (ways of
    learning), an exit ``who`` learned of otherwise (told, read) is drawn
    without its state, and is no way to travel: knowing of a door is not
    knowing whether it is locked. ``everything`` draws every exit as it is.
    """
    known = world.knowledge(state, who)
    here = state.location_of(who)
    if everything:
        places = set(world.places(state))
        exits = [e for origin in world.graph(state)[0].values() for e in origin]
    else:
        places = set(known.get("place", {})) | ({here} if here else set())
        places = {p for p in places if world.kind_of(state, p) == "place"}
        exits = [e for e in _known_exits(state, known) if e.origin in places and e.to in places]
    order = _order(state, places, exits, _root(state, who, places, here))
    left_out = max(0, len(order) - MAX_PLACES)
    order = order[:MAX_PLACES]
    ways = exit_states(known, exits, None if everything else seen)
    # Travel is the character's: along the open ways it knows, in the author's view too (a click there plays it).
    theirs = exit_states(known, _known_exits(state, known), seen) if everything else ways
    reach = _reach(here, [e for e in exits if theirs.get(e.slot) == "open" and e.to in known.get("place", {})]) \
        if here else {}
    boxes = {key: Box(key, state.name_of(key), MARGIN + column * COLUMN, MARGIN + row * ROW, key == here,
                      reach.get(key)) for key, (column, row) in order}
    arrows, drawn = [], set()
    for exit in exits:
        start, end = boxes.get(exit.origin), boxes.get(exit.to)
        if start is None or end is None or start is end or exit.slot in drawn:
            continue
        back = next((e for e in exits if e.origin == exit.to and e.to == exit.origin and e.slot not in drawn
                     and e.label == exit.label), None)
        drawn.update({exit.slot, *([back.slot] if back else [])})
        arrows.append(_arrow(state, exit, back, start, end, ways))
    width = max((b.x for b in boxes.values()), default=0) + BOX_WIDTH + MARGIN
    height = max((b.y for b in boxes.values()), default=0) + BOX_HEIGHT + MARGIN
    return Map(width, height, sorted(boxes.values(), key=lambda b: (b.x, b.y)), arrows, left_out)


def exit_states(known, exits, seen):
    """Return {exit slot: its state as drawn}: as it is, or "unseen" for one known only by hearsay (``seen``)."""
    if seen is None:
        return {exit.slot: exit.state for exit in exits}
    how = known.get("exit", {})
    return {exit.slot: exit.state if how.get(f"{exit.origin}:{exit.key}") in seen else "unseen" for exit in exits}


def _reach(here, exits):
    """Return {place: seconds} of every place reached from ``here`` along ``exits`` (fewest exits first, as a
    move's route is found)."""
    out = {}
    for exit in exits:
        out.setdefault(exit.origin, []).append(exit)
    reach, queue = {here: 0}, deque([here])
    while queue:
        place = queue.popleft()
        for exit in sorted(out.get(place, ()), key=lambda e: (e.to, e.key)):
            if exit.to not in reach:
                reach[exit.to] = reach[place] + exit.travel_seconds
                queue.append(exit.to)
    return reach


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


def _arrow(state, exit, back, start, end, ways):
    """A line from box edge to box edge: an arrow for one way, a plain line for a way there and back."""
    x1, y1, x2, y2 = start.cx, start.cy, end.cx, end.cy
    dx, dy = x2 - x1, y2 - y1
    # Leave each box where the line crosses its edge (boxes are wider than tall).
    scale = min(BOX_WIDTH / 2 / abs(dx) if dx else 10**9, BOX_HEIGHT / 2 / abs(dy) if dy else 10**9)
    ox, oy = dx * scale, dy * scale
    drawn = ways[exit.slot]
    if back is not None and ways[back.slot] != drawn:
        drawn = ways[back.slot] if drawn == "unseen" else drawn  # one side seen says more than hearsay
    way = world.describe_exit(state, exit).replace(" → ", " ↔ " if back is not None else " → ")
    minutes = f", {duration(exit.travel_seconds)}" if exit.travel_seconds else ""
    title = f"{way}: {drawn if drawn != 'unseen' else 'not seen yet'}{minutes}"
    slots = (exit.slot, back.slot) if back is not None else (exit.slot,)
    return Arrow(exit.slot, round(x1 + ox), round(y1 + oy), round(x2 - ox), round(y2 - oy), drawn, title, slots,
                 back is not None)


def duration(seconds):
    """Return a way's length in words: "30 s", "1 min 30 s", "5 min"."""
    minutes, rest = divmod(int(seconds), 60)
    if not minutes:
        return f"{rest} s"
    return f"{minutes} min" + (f" {rest} s" if rest else "")
