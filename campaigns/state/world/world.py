"""The world the application keeps true: places and exits, items and who holds them, who knows whom and what.

Seed 002 「地点」, 「关系」, 「实体知识」 and 「物品」. Pure: a ``State`` and plain
values in, plain values out; no database and no model. The state kinds:

- ``exit:<from>:<key>`` — a directed exit; value = the destination place;
  data ``{label, state: open|locked|blocked, opener, travel_seconds, hidden,
  door}``. A passage both ways is two exits; when both name the same
  ``door`` they are its two sides and share its state, opener and
  hiddenness (``other_side``): every write to one side writes the other.
- ``feature:<place>:<key>`` — value = its text; data ``{name, notable, hidden}``.
- ``item:<key>`` — data ``{quantity, unique, condition, notable, hidden,
  wear_slot, container: null|open|closed|locked, opener, owner, stack}``
  beside the item's ``entity:`` record (its name).
- ``holder:<item>`` — value = the one holder (a place, a character or a
  container item); data ``{mode: at|carried|worn|in, slot}``.
- ``slot:<name>`` — a wear slot; data ``{capacity}`` (``DEFAULT_SLOTS`` when
  the story has none of that name).
- ``relationship:<from>:<to>`` — value = summary; data ``{object, label,
  familiarity, trust, closeness, tension}``, one per direction.
- ``knows:<who>:<kind>:<target>`` — data ``{how}``: a closed-world graph;
  no edge means unknown, and an edge reveals nothing of the thing's state.
- ``condition:<who>`` — value = public state; data ``{inner, activity, mood}``.

Moves follow open exits (``route``), a character's own plans only what it
knows (``known_route``), and one ``item_changes`` event is dry-run in order
and applies whole or not at all, with every reason (``dry_run``).
"""

import re
from collections import deque
from dataclasses import dataclass, replace

from ..reading import PROTAGONIST, key_for, normalize
from ..registry import EVERYONE, PEOPLE, WORLD, WORLD_RANK, Field, Rejected, hook, register

EXIT_STATES = ("open", "locked", "blocked")
CONTAINER_STATES = ("open", "closed", "locked")
MODES = ("at", "carried", "worn", "in")
HOW = ("world", "observed", "told", "read", "inferred")
KNOWN_KINDS = ("place", "item", "exit", "lore", "character")
AXES = ("familiarity", "trust", "closeness", "tension")

# A relationship made by meeting in person, and one made by being told of someone (seed: 「认知图」).
ACQUAINTANCE = "acquaintance"
HEARD_OF = "heard of"

# Wear slots every story has unless it says otherwise (seed: DEFAULT_SLOTS, contents unstated), one item each.
DEFAULT_SLOTS = {"head": 1, "neck": 1, "body": 1, "hands": 1, "feet": 1, "finger": 1, "back": 1, "belt": 1}

# What one view lists (seed: 「最多 12 个特征和 12 个出口」, 「每次最多列出 12 件，显著物品优先」).
VIEW_FEATURES = 12
VIEW_EXITS = 12
VIEW_ITEMS = 12

# A holding chain longer than this is a loop in the data, not a ring in a box in a chest.
MAX_CHAIN = 32

# A change nobody saw happen (a person's correction says so): what the application observes after the batch,
# and who believes what is where, leave it out; only whoever did it (the one who moved, the actor) knows.
UNSEEN = Field("bool", "nobody saw it happen: only whoever did it (the one who moves, the actor) knows",
               recorder=False)


@dataclass(frozen=True)
class Exit:
    slot: str
    origin: str
    key: str
    to: str
    label: str
    state: str
    opener: str
    travel_seconds: int
    hidden: bool
    door: str = ""


# What the two sides of a door share: unlocking it from one side unlocks it from the other.
DOOR_SHARED = ("state", "opener", "hidden")


@dataclass(frozen=True)
class Item:
    key: str
    name: str
    quantity: int = 1
    unique: bool = False
    condition: str = ""
    notable: bool = False
    hidden: bool = False
    wear_slot: str = ""
    container: str | None = None
    opener: str = ""
    owner: str = ""
    stack: str = ""
    holder: str = ""
    mode: str = ""
    slot: str = ""
    description: str = ""

    @property
    def gone(self):
        """A stack merged away or used up: kept for its history, invisible everywhere."""
        return self.quantity <= 0


ITEM_DATA = ("quantity", "unique", "condition", "notable", "hidden", "wear_slot", "container", "opener", "owner",
             "stack")


@dataclass(frozen=True)
class Route:
    exits: tuple
    travel_seconds: int

    @property
    def places(self):
        return tuple(e.to for e in self.exits)


# ---------------------------------------------------------------- reading the world


def kind_of(state, key):
    record = state.entity(key) if key else None
    return record.data.get("kind", "") if record else ""


def places(state):
    """Return the keys of every place, by name."""
    return sorted((r.subject for r in state.entities() if r.data.get("kind") == "place"), key=state.name_of)


def characters(state):
    return sorted((r.subject for r in state.entities() if r.data.get("kind") == "character"), key=state.name_of)


def graph(state):
    """Return ``(out, into)``: the exits leaving and entering each place, made once and kept up to date."""
    return state.cached("exits", ("exit",), _build_graph, _follow_exits, _copy_pair)


def _exit_order(exit):
    return exit.origin, exit.to, exit.key


def _build_graph(state):
    out, into = {}, {}
    for record in state.of_kind("exit"):
        exit = exit_of(record)
        out.setdefault(exit.origin, []).append(exit)
        into.setdefault(exit.to, []).append(exit)
    return ({place: tuple(sorted(exits, key=_exit_order)) for place, exits in out.items()},
            {place: tuple(sorted(exits, key=_exit_order)) for place, exits in into.items()})


def _follow_exits(value, old, new):
    out, into = value
    if old is not None and old.kind == "exit":
        gone = exit_of(old)
        out[gone.origin] = tuple(e for e in out.get(gone.origin, ()) if e.slot != gone.slot)
        into[gone.to] = tuple(e for e in into.get(gone.to, ()) if e.slot != gone.slot)
    if new is not None and new.kind == "exit":
        made = exit_of(new)
        out[made.origin] = tuple(sorted((*out.get(made.origin, ()), made), key=_exit_order))
        into[made.to] = tuple(sorted((*into.get(made.to, ()), made), key=_exit_order))


def _copy_pair(value):
    return dict(value[0]), dict(value[1])


def exit_of(record):
    data = record.data
    return Exit(record.slot, record.subject, record.slot.split(":", 2)[2], record.value, data.get("label", ""),
                data.get("state", "open"), data.get("opener", ""), int(data.get("travel_seconds") or 0),
                bool(data.get("hidden")), data.get("door", ""))


def other_side(state, exit):
    """Return the exit back through ``exit``'s door (the door's other side), or None when it has none."""
    if not exit.door:
        return None
    return next((back for back in exits_from(state, exit.to)
                 if back.to == exit.origin and back.door == exit.door and back.slot != exit.slot), None)


def door_key(name, origin, to):
    """Return the key of the door called ``name`` between two places (a nameless passage: the places' keys)."""
    return key_for(name) if name else "-".join(sorted((origin, to)))


def exits_from(state, place):
    return graph(state)[0].get(place, [])


def exits_into(state, place):
    return graph(state)[1].get(place, [])


def mapped(state, place):
    """Whether ``place`` is joined to the exit graph: moves to and from it are checked against routes."""
    out, into = graph(state)
    return bool(out.get(place) or into.get(place))


def find_exit(state, origin, name):
    """Return the exit from ``origin`` called ``name`` (its key or label) or leading to the place ``name``."""
    key = key_for(name)
    exits = exits_from(state, origin)
    for exit in exits:
        if exit.key == key or (exit.label and key_for(exit.label) == key):
            return exit
    to = state.resolve(name)
    leading = [exit for exit in exits if exit.to == to]
    if len(leading) > 1:
        raise Rejected(f"several exits lead from {state.name_of(origin)} to {state.name_of(to)}: name one by its "
                       f"label ({', '.join(e.label or e.key for e in leading)})")
    return leading[0] if leading else None


def describe_exit(state, exit):
    way = f"{state.name_of(exit.origin)} → {state.name_of(exit.to)}"
    return f"{way} through the {exit.label}" if exit.label else way


def route(state, origin, destination):
    """Return the shortest Route over open exits from ``origin`` to ``destination``, or None (BFS)."""
    return _search(graph(state)[0], origin, destination, lambda exit: exit.state == "open")


def known_route(state, who, origin, destination):
    """Return a Route ``who`` could plan from what it knows: open exits it knows, to places it knows (planKnownMove).

    Knowing an exit does not reveal its state, but a plan through a locked
    door fails, so only the open ones are used; the authoritative ``route``
    is still what a move is checked against.
    """
    known = knowledge(state, who)
    exits, places = known.get("exit", {}), known.get("place", {})
    if destination not in places:
        return None
    return _search(graph(state)[0], origin, destination,
                   lambda exit: exit.state == "open" and f"{exit.origin}:{exit.key}" in exits and exit.to in places)


def _search(out, origin, destination, usable):
    if origin == destination:
        return Route((), 0)
    came = {origin: None}
    queue = deque([origin])
    while queue:
        place = queue.popleft()
        for exit in out.get(place, ()):
            if exit.to in came or not usable(exit):
                continue
            came[exit.to] = exit
            if exit.to == destination:
                path = []
                while exit is not None:
                    path.append(exit)
                    exit = came[exit.origin]
                path.reverse()
                return Route(tuple(path), sum(e.travel_seconds for e in path))
            queue.append(exit.to)
    return None


def why_no_route(state, origin, destination):
    """Return why no route of open exits joins two places: the closed exits on the shortest way, or none at all."""
    name = state.name_of
    way = _search(graph(state)[0], origin, destination, lambda exit: True)
    if way is None:
        return f"no exits lead from {name(origin)} to {name(destination)}"
    closed = [f"{describe_exit(state, e)} is {e.state}" for e in way.exits if e.state != "open"]
    return f"no route of open exits from {name(origin)} to {name(destination)} ({'; '.join(closed)})"


def slot_capacity(state, name):
    record = state.get(f"slot:{key_for(name)}")
    if record is not None:
        return int(record.data.get("capacity", 1))
    return DEFAULT_SLOTS.get(key_for(name))


def slots(state):
    """Return {slot name: capacity}: the defaults, then what the world and the story added or changed."""
    known = dict(DEFAULT_SLOTS)
    for record in state.of_kind("slot"):
        known[record.value or record.slot.split(":", 1)[1]] = int(record.data.get("capacity", 1))
    return known


def item_of(state, key):
    """Return the Item ``key`` as the state holds it (defaults for an item recorded before items had properties)."""
    made = state.cached("item_of", ("entity", "item", "holder"), lambda s: {}, _forget_item, dict)
    if key not in made:
        made[key] = _read_item(state, key)
    return made[key]


def _forget_item(made, old, new):
    for record in (old, new):
        if record is not None:
            made.pop(record.slot.split(":", 1)[1], None)


def _read_item(state, key):
    entity = state.entity(key)
    if entity is None or entity.data.get("kind") != "item":
        return None
    record = state.get(f"item:{key}")
    holding = state.get(f"holder:{key}")
    data = record.data if record else {}
    return Item(key, entity.value, **{name: data[name] for name in ITEM_DATA if name in data},
                holder=holding.value if holding else "", mode=(holding.data.get("mode", "") if holding else ""),
                slot=holding.data.get("slot", "") if holding else "", description=entity.data.get("description", ""))


def holders(state):
    """Return {holder key: (item keys)}: who or what directly holds each item, made once and kept up to date."""
    return state.cached("holders", ("holder",), _build_holders, _follow_holders, dict)


def _build_holders(state):
    held = {}
    for record in state.of_kind("holder"):
        if record.value:
            held.setdefault(record.value, []).append(record.subject)
    return {holder: tuple(sorted(keys)) for holder, keys in held.items()}


def _follow_holders(held, old, new):
    if old is not None and old.value:
        held[old.value] = tuple(k for k in held.get(old.value, ()) if k != old.subject)
    if new is not None and new.value:
        held[new.value] = tuple(sorted((*held.get(new.value, ()), new.subject)))


def items_named(state, name):
    """Return the keys of every item called ``name`` (by name or alias): same-named stacks share a name."""
    index = state.cached("items", ("entity",), _build_item_names, _follow_item_names, dict)
    return index.get(normalize(name), ())


def _item_names(record):
    if record is None or record.data.get("kind") != "item":
        return set()
    return {normalize(n) for n in (record.value, *record.data.get("aliases", ()), record.subject)}


def _build_item_names(state):
    index = {}
    for record in state.entities():
        for name in _item_names(record):
            index.setdefault(name, []).append(record.subject)
    return {name: tuple(sorted(keys)) for name, keys in index.items()}


def _follow_item_names(index, old, new):
    for name in _item_names(old):
        index[name] = tuple(k for k in index.get(name, ()) if k != old.subject)
    for name in _item_names(new):
        index[name] = tuple(sorted({*index.get(name, ()), new.subject}))


class _World:
    """The items of a state with this batch's changes over them: what ``dry_run`` reads and changes."""

    def __init__(self, state):
        self.state = state
        self.changed = {}  # key -> Item
        self.created = []  # keys of stacks split off in this event
        self.created_from = {}  # a split-off stack's key -> the item it was split from (its name and looks)
        self.exits = {}  # slot -> Exit

    def item(self, key):
        return self.changed.get(key) or item_of(self.state, key)

    def set(self, item, **changes):
        self.changed[item.key] = replace(item, **changes)
        return self.changed[item.key]

    def holder_of(self, key):
        item = self.item(key)
        return item.holder if item else ""

    def held_by(self, holder):
        base = [k for k in holders(self.state).get(holder, ()) if k not in self.changed]
        return sorted(base + [k for k, item in self.changed.items() if item.holder == holder])

    def exit(self, exit):
        return self.exits.get(exit.slot, exit)

    def set_exit(self, exit, **changes):
        """Change ``exit`` and the other side of its door, which shares its state."""
        for side in (exit, other_side(self.state, exit)):
            if side is not None:
                self.exits[side.slot] = replace(self.exit(side), **changes)


def holding_chain(state, key, world=None):
    """Return the keys from item ``key`` up through its holders to a place: ring, box, chest, Hall.

    A character on the chain is followed by where that character is.
    """
    holder_of = world.holder_of if world else (lambda k: state.holder_of(k))
    chain = [key]
    current = key
    while len(chain) < MAX_CHAIN:
        kind = kind_of(state, current)
        if kind == "place":
            break
        following = state.location_of(current) if kind == "character" else holder_of(current)
        if not following or following in chain:
            break
        chain.append(following)
        current = following
    return chain


def place_of(state, key, world=None):
    """Return the place an item (or character) is in through its holding chain, or ""."""
    top = holding_chain(state, key, world)[-1]
    return top if kind_of(state, top) == "place" else ""


def obstacle(state, key, viewer, world=None):
    """Return why ``viewer`` cannot see item ``key`` where it is (hidden, inside something closed), or ""."""
    item_at = world.item if world else (lambda k: item_of(state, k))
    chain = holding_chain(state, key, world)
    item = item_at(key)
    if item.hidden and chain[1:2] != [viewer]:
        return f"the {item.name} is hidden"
    for holder in chain[1:]:
        if kind_of(state, holder) != "item":
            break
        container = item_at(holder)
        if container.container in ("closed", "locked"):
            return f"the {item.name} is inside the {container.container} {container.name}"
        if container.hidden and container.holder != viewer:
            return f"the {item.name} is inside the hidden {container.name}"
    return ""


def holding_character(state, key, world=None):
    """Return the character on ``key``'s holding chain (who carries it, or the bag it is in), or ""."""
    for holder in holding_chain(state, key, world)[1:]:
        if kind_of(state, holder) == "character":
            return holder
    return ""


def walk(state, place, viewer=None):
    """Return [(Item, why unseen)] for every item whose holding chain ends at ``place``, outermost first.

    ``why`` is "" for what ``viewer`` sees, else what ``obstacle`` would say:
    hidden (unless the viewer holds it), or inside a closed, locked or hidden
    container (the nearest). One walk down from the place, so a view costs
    the items there, not a chain per item.
    """
    held = holders(state)
    queue = deque((key, "") for who in (place, *sorted(state.at(place))) for key in held.get(who, ()))
    seen, found = set(), []
    while queue:
        key, cause = queue.popleft()
        if key in seen:
            continue
        seen.add(key)
        item = item_of(state, key)
        if item is None or item.gone:
            continue
        hidden = item.hidden and item.holder != viewer
        why = f"the {item.name} is hidden" if hidden else f"the {item.name} is inside the {cause}" if cause else ""
        found.append((item, why))
        if item.container in ("closed", "locked"):
            inner = f"{item.container} {item.name}"
        else:
            inner = f"hidden {item.name}" if hidden else cause
        queue.extend((child, inner) for child in held.get(key, ()))
    return found


def _by_notability(item):
    return not item.notable, normalize(item.name), item.key


def items_at(state, place):
    """Return every item whose holding chain ends at ``place`` (the game master's view: hidden ones too)."""
    return [item for item, _ in walk(state, place)]


def visible_items(state, viewer, place=None):
    """Return the items at the viewer's place the viewer can see, notable first, then by name.

    Hidden items and what is inside closed or locked containers are
    invisible; worn items, what others carry and open containers' contents
    are seen. The viewer's own things are always seen.
    """
    place = place or state.location_of(viewer)
    if not place:
        return []
    return sorted((item for item, why in walk(state, place, viewer) if not why), key=_by_notability)


def features_at(state, place):
    return state.cached("features", ("feature",), _build_features, _follow_features, dict).get(place, ())


def _feature_order(record):
    return not record.data.get("notable"), normalize(record.data.get("name", record.slot)), record.slot


def _build_features(state):
    by_place = {}
    for record in state.of_kind("feature"):
        by_place.setdefault(record.subject, []).append(record)
    return {place: tuple(sorted(records, key=_feature_order)) for place, records in by_place.items()}


def _follow_features(by_place, old, new):
    if old is not None:
        by_place[old.subject] = tuple(r for r in by_place.get(old.subject, ()) if r.slot != old.slot)
    if new is not None:
        by_place[new.subject] = tuple(sorted((*by_place.get(new.subject, ()), new), key=_feature_order))


def knowledge(state, who):
    """Return {kind: {target: how}}: every place, item, exit and lore ``who`` knows of (seed 「实体知识」)."""
    state.load("knows", [who])
    prefix = f"knows:{who}:"

    def follow(known, old, new):
        if old is not None and old.slot.startswith(prefix):
            kind, target = old.slot[len(prefix):].split(":", 1)
            known.get(kind, {}).pop(target, None)
        if new is not None and new.slot.startswith(prefix):
            kind, target = new.slot[len(prefix):].split(":", 1)
            known.setdefault(kind, {})[target] = new.data.get("how", "")

    return state.cached(prefix, ("knows",), lambda s: _build_knowledge(s, prefix), follow,
                        lambda known: {kind: dict(targets) for kind, targets in known.items()})


def _build_knowledge(state, prefix):
    known = {}
    for record in state.of_kind("knows"):
        if record.slot.startswith(prefix):
            kind, target = record.slot[len(prefix):].split(":", 1)
            known.setdefault(kind, {})[target] = record.data.get("how", "")
    return known


# Lore is known by its key, ``<book>:<entry>`` (``lore`` says who may recall which): a ``know`` event names it so.
WORLD_BOOK = "world"
MAX_ID = 120


def entry_id(text):
    """Return an entry's id as keys are written: lower case, words joined by "-", heading levels by "/"."""
    parts = [re.sub(r"[^a-z0-9]+", "-", normalize(part)).strip("-") for part in str(text).split("/")]
    return "/".join(part for part in parts if part)[:MAX_ID] or "untitled"


def book_key(title):
    """Return a lorebook's key from its title (the importer makes it unique within a campaign)."""
    return re.sub(r"[^a-z0-9]+", "-", normalize(title)).strip("-")[:60] or "lore"


def lore_key(name):
    """Return the key of the lore entry ``name``: ``"book:entry"``, or a bare entry id of the world file's lore."""
    book, _, entry = str(name).partition(":")
    if not entry:
        return f"{WORLD_BOOK}:{entry_id(book)}"
    return f"{book_key(book)}:{entry_id(entry)}"


def knows_slot(who, kind, target):
    return f"knows:{who}:{kind}:{target}"


def relationships_of(state, who):
    """Return ``who``'s relationships toward others, by the other's key."""
    state.load("relationship", [who])
    prefix = f"relationship:{who}:"
    return {r.data.get("object") or r.slot[len(prefix):]: r for r in state.of_kind("relationship")
            if r.slot.startswith(prefix)}


# ---------------------------------------------------------------- views


@dataclass
class PlaceView:
    place: str
    name: str
    description: str
    features: list  # Records
    exits: list  # Exits
    people: list  # keys
    items: list  # Items
    left_out: dict  # what the caps left out: {"features": n, "exits": n, "items": n}
    unseen: list  # Items the game master sees and the characters do not (hidden, inside closed containers)


def place_view(state, place, viewer=None, *, everything=False, cap=True):
    """Return what can be seen at ``place``: by ``viewer`` (a character), or everything (the game master).

    A character's view lists at most 12 features, 12 exits and 12 items,
    notable first, and never hidden ones or the contents of closed containers.
    """
    entity = state.entity(place)
    features = [r for r in features_at(state, place) if everything or not r.data.get("hidden")]
    exits = [e for e in exits_from(state, place) if everything or not e.hidden]
    exits.sort(key=lambda e: (e.hidden, normalize(state.name_of(e.to)), e.key))
    present = [key for key in state.at(place) if kind_of(state, key) == "character"]
    present.sort(key=lambda key: (key != PROTAGONIST, normalize(state.name_of(key))))
    walked = sorted(walk(state, place, viewer or PROTAGONIST), key=lambda pair: _by_notability(pair[0]))
    items = [item for item, why in walked if not why]
    unseen = [item for item, why in walked if why] if everything else []
    left_out = {}
    if cap:
        left_out = {"features": max(0, len(features) - VIEW_FEATURES), "exits": max(0, len(exits) - VIEW_EXITS),
                    "items": max(0, len(items) - VIEW_ITEMS), "unseen": max(0, len(unseen) - VIEW_ITEMS)}
        features, exits, items, unseen = (features[:VIEW_FEATURES], exits[:VIEW_EXITS], items[:VIEW_ITEMS],
                                          unseen[:VIEW_ITEMS])
    return PlaceView(place, state.name_of(place) if entity else place,
                     entity.data.get("description", "") if entity else "", features, exits, present, items,
                     left_out, unseen)


def character_view(state, who, minds=None):
    """Return what ``who`` sees and knows now: its place, those there, its relationships to them, what it knows of.

    The known entities are names only: knowing a place reveals neither who
    nor what is in it (seed 「实体知识」). With ``minds`` (``whereabouts.minds_at``),
    also where ``who`` believes things are, and where it thinks those present believe them.
    """
    place = state.location_of(who)
    view = place_view(state, place, who) if place else None
    present = [key for key in (view.people if view else []) if key != who]
    toward = relationships_of(state, who)
    return {
        "who": who,
        "place": view,
        "relationships": {key: toward[key] for key in present if key in toward},
        "known": known_entities(state, who),
        "believes": minds.believes(who) if minds is not None else {},
        "believes_about": {key: minds.believes_about(who, key) for key in present} if minds is not None else {},
    }


def known_entities(state, who):
    """Return {kind: [names]}: what ``who`` knows exists, and nothing about where or in what state it is."""
    known = knowledge(state, who)
    listing = {}
    for kind, targets in known.items():
        if kind == "exit":
            names = []
            for target in targets:
                origin, key = target.split(":", 1)
                exit = next((e for e in exits_from(state, origin) if e.key == key), None)
                names.append(describe_exit(state, exit) if exit else target)
        elif kind == "lore":
            names = list(targets)
        else:
            names = [state.name_of(target) for target in targets]
        listing[kind] = sorted(names, key=normalize)
    people = relationships_of(state, who)
    listing["character"] = sorted((state.name_of(key) for key in people), key=normalize)
    return listing


def gm_view(state):
    """Return the game master's view: the scene's place with everything in it, and where every character is."""
    place = state.place()
    return {
        "place": place_view(state, place, everything=True, cap=False) if place else None,
        "positions": {key: state.location_of(key) for key in characters(state)},
    }


# ---------------------------------------------------------------- moves


def relocate(check, who, where, *, ignore_exits=False, why=""):
    """Return the location write moving ``who`` to ``where`` ("" for nowhere known), checked against the exits.

    A move is checked when both ends are joined to the exit graph: a story
    with no exits (or a place nobody has connected yet) moves freely, and
    world_lint reports the unconnected place. A move from nowhere starts at
    the place the character last left. A failed intent does not move.
    """
    state = check.state
    if ignore_exits:
        check.person_only("moving someone while ignoring exits")
    current = state.get(f"location:{who}")
    origin = current.value if current else ""
    if not origin and current is not None:
        origin = current.data.get("left", "")
    data = {}
    if where and origin and origin != where and not ignore_exits and mapped(state, origin) and mapped(state, where):
        way = route(state, origin, where)
        if way is None:
            raise Rejected(f"{state.name_of(who)} cannot get there: {why_no_route(state, origin, where)}")
        data = {"via": [e.to for e in way.exits], "travel_seconds": way.travel_seconds}
    if not where and origin:
        data = {"left": origin}
    if ignore_exits:
        data["ignore_exits"] = True
    return {"slot": f"location:{who}", "kind": "location", "subject": who, "value": where, "data": data}


def _place(check, name, role="place"):
    return check.entity(name, role, kinds=("place",))


@register(WORLD_RANK, "move", sources=EVERYONE, fields={
    "ignore_exits": Field("bool", "move along no route (story transport, a correction)", recorder=False),
    "unseen": UNSEEN},
    help="who / place / \"\": someone goes somewhere along open exits")
def _move(check, event):
    who = check.entity(event["subject"])
    where = _place(check, event["object"])
    if check.state.location_of(who) == where:
        raise Rejected(f"{check.state.name_of(who)} is already at {check.state.name_of(where)}")
    return [relocate(check, who, where, ignore_exits=event["data"].get("ignore_exits", False))]


# ---------------------------------------------------------------- places, features, exits


@register(WORLD_RANK, "place_edit", sources=EVERYONE, aliases=True,
          help="place / \"\" / its new description: a place changed")
def _place_edit(check, event):
    place = _place(check, event["subject"])
    current = check.state.entity(place)
    if not event["value"] and not event["aliases"]:
        raise Rejected("the event gives no new description or aliases")
    data = dict(current.data)
    if event["value"]:
        data["description"] = event["value"]
    if event["aliases"]:
        data["aliases"] = list(event["aliases"])
    return [{"slot": current.slot, "kind": "entity", "subject": place, "value": current.value, "data": data,
             "narrator_only": current.narrator_only}]


@register(WORLD_RANK, "feature", sources=EVERYONE, fields={
    "notable": Field("bool", "listed before the others"),
    "hidden": Field("bool", "unseen by the characters until revealed")},
    help="place / feature name / what it is: a feature of a place (a hearth, a well)")
def _feature(check, event):
    place = _place(check, event["subject"])
    if not event["object"]:
        raise Rejected("the event names no feature")
    slot = f"feature:{place}:{key_for(event['object'])}"
    current = check.state.get(slot)
    data = {"name": event["object"], "notable": False, "hidden": False, **(current.data if current else {})}
    data.update({name: event["data"][name] for name in ("notable", "hidden") if name in event["data"]})
    text = event["value"] or (current.value if current else "")
    if not text:
        raise Rejected(f"the event does not say what the {event['object']} is")
    return [{"slot": slot, "kind": "feature", "subject": place, "value": text, "data": data}]


EXIT_FIELDS = {
    "label": Field("name", "a name for the exit (the north door); needed when two exits join the same places"),
    "state": Field("choice", "open, locked or blocked", choices=EXIT_STATES),
    "opener": Field("name", "the item (key) that locks and unlocks it"),
    "travel_seconds": Field("int", "how long the way takes", maximum=86_400),
    "hidden": Field("bool", "unseen by the characters until revealed"),
    "both_ways": Field("bool", "change (or make) the exit back the same way: the two are one door"),
    "door": Field("name", "the door it goes through: the way back through the same door shares its state, opener "
                          "and hiddenness (empty: no door)", recorder=False),
    "unseen": UNSEEN,
}


@register(WORLD_RANK, "exit_change", sources=EVERYONE, fields=EXIT_FIELDS,
          help="place / destination place (or the exit's label) / \"\": an exit is made or changes "
               "(locks change through item_changes)")
def _exit_change(check, event):
    origin = _place(check, event["subject"], "place the exit leaves")
    if not event["object"]:
        raise Rejected("the event names no destination or exit")
    data = event["data"]
    forward = _exit_write(check, origin, event["object"], data)
    if not data.get("both_ways"):
        return [forward, *_door_writes(check.state, forward)]
    # Made (or changed) both ways, the two are one passage: its sides share a door.
    to, door = forward["value"], forward["data"]["door"] or door_key(forward["data"]["label"], origin,
                                                                        forward["value"])
    forward["data"]["door"] = door
    back = _exit_write(check, to, _way_back(check.state, to, origin, forward["data"]["label"]), data, door=door)
    back["data"].update({name: forward["data"][name] for name in DOOR_SHARED})
    return [forward, back]


def _way_back(state, origin, to, label):
    """Return the name of the exit from ``origin`` back to ``to``: its own, when one has the label, else the place."""
    found = find_exit(state, origin, label) if label else None
    return found.key if found is not None and found.to == to else to


def _exit_write(check, origin, name, data, *, door=None):
    """Return the write making or changing the exit from ``origin`` called ``name`` (``door``: the door it joins)."""
    state = check.state
    current = _exit_to_write(state, origin, name, data.get("label", ""))
    if current is None:
        to = state.resolve(name)
        if to is None or kind_of(state, to) != "place":
            raise Rejected(f"no exit {name!r} leaves {state.name_of(origin)}, and {name!r} is not a known place "
                           "to make one to")
        label = data["label"] if "label" in data else data.get("door", "")  # a door names its sides
        key = key_for(label) if label else to
        if any(e.key == key for e in exits_from(state, origin)):
            raise Rejected(f"{state.name_of(origin)} already has an exit called {key!r}; give this one a label")
        current = Exit(f"exit:{origin}:{key}", origin, key, to, label, "open", "", 0, False)
    state_now = data.get("state", current.state)
    if check.by_recorder and state_now != current.state and "locked" in (state_now, current.state):
        raise Rejected(f"{describe_exit(state, current)} is {current.state}: locks change through item_changes "
                       "(lock or unlock with the key), not exit_change")
    opener = current.opener
    if "opener" in data:
        opener = _opener(check, data["opener"]) if data["opener"] else ""
    if door is None:
        door = key_for(data["door"]) if data.get("door") else ("" if "door" in data else current.door)
    taken = [e for e in exits_from(state, origin) if door and e.door == door and e.to == current.to
             and e.slot != current.slot]
    if taken:
        raise Rejected(f"{describe_exit(state, taken[0])} already goes through that door ({door}); a door has one "
                       "side in each place")
    fields = {"label": data.get("label", current.label), "state": state_now, "opener": opener,
              "travel_seconds": data.get("travel_seconds", current.travel_seconds),
              "hidden": data.get("hidden", current.hidden), "door": door}
    return {"slot": current.slot, "kind": "exit", "subject": origin, "value": current.to, "data": fields}


def _exit_to_write(state, origin, name, label):
    """Return the exit an exit_change from ``origin`` means: the one with its label, else the one ``name`` names.

    With a label, a destination that has exits from ``origin`` but none
    unlabelled means a new exit beside them (a second door between the same
    two places); without one, the exit ``find_exit`` finds, if any.
    """
    if label:
        named = find_exit(state, origin, label) if state.resolve(label) is None else None
        if named is not None:
            return named
        to = state.resolve(name)
        leading = [e for e in exits_from(state, origin) if e.to == to]
        if leading and not any(not e.label for e in leading):
            return None
    return find_exit(state, origin, name)


def _door_writes(state, write):
    """Return the write giving the other side of ``write``'s door the door's state (none when it has it already)."""
    door = write["data"].get("door")
    if not door:
        return []
    written = Exit(write["slot"], write["subject"], write["slot"].split(":", 2)[2], write["value"], "", "", "", 0,
                   False, door)
    back = other_side(state, written)
    shared = {name: write["data"][name] for name in DOOR_SHARED}
    if back is None or all(getattr(back, name) == value for name, value in shared.items()):
        return []
    return [_side_write(replace(back, **shared))]


def _side_write(exit):
    return {"slot": exit.slot, "kind": "exit", "subject": exit.origin, "value": exit.to,
            "data": {"label": exit.label, "state": exit.state, "opener": exit.opener,
                     "travel_seconds": exit.travel_seconds, "hidden": exit.hidden, "door": exit.door}}


def _opener(check, name):
    return check.entity(name, "opener", kinds=("item",))


# ---------------------------------------------------------------- items: creation, properties, holders


ITEM_FIELDS = {
    "id": Field("name", "the entity's own key (a world file or a person; two items may share a name)",
                recorder=False),
    "holder": Field("name", "who or what holds it: a place, a character or a container (empty: the scene's place)"),
    "mode": Field("choice", "how it is held (worked out from the holder when empty)", choices=MODES,
                  recorder=False),
    "slot": Field("name", "worn: on which wear slot", recorder=False),
    "quantity": Field("int", "how many (a stack)", minimum=1),
    "unique": Field("bool", "one of a kind: never split or merged", recorder=False),
    "condition": Field("text", "its state (dented, brand new)"),
    "notable": Field("bool", "listed before the others"),
    "hidden": Field("bool", "unseen by the characters until revealed"),
    "wear_slot": Field("name", "the wear slot it goes on (finger, head)"),
    "container": Field("choice", "a container: open, closed or locked", choices=CONTAINER_STATES),
    "opener": Field("name", "the item (key) that locks and unlocks it"),
    "owner": Field("name", "who owns it (not always who holds it)", recorder=False),
    "stack": Field("name", "its kind, for merging stacks (defaults to its name when there are several)",
                   recorder=False),
    "unseen": UNSEEN,
}


def introduce_item(check, key, name, data):
    """Return the item: and holder: writes of a new item (the entity: write is the caller's)."""
    state = check.state
    quantity = data.get("quantity", 1)
    unique = data.get("unique", False)
    if unique and quantity > 1:
        raise Rejected(f"a unique item is one of a kind; {name!r} cannot be {quantity}")
    fields = {
        "quantity": quantity, "unique": unique, "condition": data.get("condition", ""),
        "notable": data.get("notable", False), "hidden": data.get("hidden", False),
        "wear_slot": key_for(data["wear_slot"]) if data.get("wear_slot") else "",
        "container": data.get("container"),
        "opener": _opener(check, data["opener"]) if data.get("opener") else "",
        "owner": check.entity(data["owner"], "owner", kinds=("character", "faction")) if data.get("owner") else "",
        "stack": key_for(data["stack"]) if data.get("stack") else (key_for(name) if quantity > 1 else ""),
    }
    if fields["wear_slot"] and slot_capacity(state, fields["wear_slot"]) is None:
        raise Rejected(f"no wear slot {data['wear_slot']!r}; known slots: {', '.join(slots(state))}")
    holder = data.get("holder", "")
    if holder:
        holder = check.entity(holder, "holder", kinds=("place", "character", "item"))
    else:
        holder = state.place()
    writes = [{"slot": f"item:{key}", "kind": "item", "subject": key, "value": "", "data": fields}]
    if holder:
        writes.append(_holding_write(check, key, holder, data.get("mode", ""), data.get("slot", ""), fields))
    return writes


def _holding_write(check, item, holder, mode, slot, fields=None):
    state = check.state
    kind = kind_of(state, holder)
    allowed = {"place": ("at",), "character": ("carried", "worn"), "item": ("in",)}[kind]
    mode = mode or allowed[0]
    if mode not in allowed:
        raise Rejected(f"an item held by a {kind} is {' or '.join(allowed)}, not {mode}")
    if holder == item or (kind == "item" and item in holding_chain(state, holder)):
        raise Rejected(f"{state.name_of(item)} cannot be inside itself")
    if kind == "item":
        container = item_of(state, holder)
        if container.container is None:
            raise Rejected(f"{container.name} is not a container")
    data = {"mode": mode}
    if mode == "worn":
        own = fields["wear_slot"] if fields is not None else item_of(state, item).wear_slot
        wear = key_for(slot) if slot else own
        if not wear or slot_capacity(state, wear) is None:
            raise Rejected(f"say which known wear slot {state.name_of(item)} is worn on")
        data["slot"] = wear
    return {"slot": f"holder:{item}", "kind": "holder", "subject": item, "value": holder, "data": data}


@register(WORLD_RANK, "set_holder", sources=PEOPLE, fields={
    "mode": Field("choice", "how it is held (worked out from the holder when empty)", choices=MODES),
    "slot": Field("name", "worn: on which wear slot"),
    "unseen": UNSEEN},
    help="holder (empty: nobody) / item / \"\": put an item anywhere, outright")
def _set_holder(check, event):
    item = check.entity(event["object"], "item", kinds=("item",))
    if not event["subject"]:
        return [{"slot": f"holder:{item}", "kind": "holder", "subject": item, "value": "", "data": {}}]
    holder = check.entity(event["subject"], "holder", kinds=("place", "character", "item"))
    return [_holding_write(check, item, holder, event["data"].get("mode", ""), event["data"].get("slot", ""))]


@register(WORLD_RANK, "item_edit", sources=EVERYONE, fields={name: spec for name, spec in ITEM_FIELDS.items()
                                                  if name not in ("id", "holder", "mode", "slot")} | {
    "quantity": Field("int", "how many (0: used up)", recorder=False),
    "hidden": Field("bool", "unseen by the characters until revealed", recorder=False),
    "container": Field("choice", "a container: open, closed or locked", choices=CONTAINER_STATES, recorder=False),
    "opener": Field("name", "the item (key) that locks and unlocks it", recorder=False),
    "wear_slot": Field("name", "the wear slot it goes on", recorder=False)},
    help="item / \"\" / \"\": an item's condition or notability changed (data says how)")
def _item_edit(check, event):
    key = check.entity(event["subject"], "item", kinds=("item",))
    item = item_of(check.state, key)
    data = {name: value for name, value in event["data"].items() if name != "unseen"}
    if not data:
        raise Rejected("the event changes nothing (data is empty)")
    fields = {name: getattr(item, name) for name in ITEM_DATA}
    for name, value in data.items():
        if name in ("opener", "owner"):
            kinds = ("item",) if name == "opener" else ("character", "faction")
            value = check.entity(value, name, kinds=kinds) if value else ""
        elif name in ("wear_slot", "stack"):
            value = key_for(value) if value else ""
        fields[name] = value
    if fields["unique"] and fields["quantity"] > 1:
        raise Rejected(f"a unique item is one of a kind; {item.name} cannot be {fields['quantity']}")
    if "container" in data and data["container"] is None:
        fields["container"] = None
    return [{"slot": f"item:{key}", "kind": "item", "subject": key, "value": "", "data": fields}]


# ---------------------------------------------------------------- item_changes: the dry run


@register(WORLD_RANK, "item_changes", sources=EVERYONE, fields={"ops": Field("ops", "the operations, in order"),
                                                              "unseen": UNSEEN},
          help="who / \"\" / \"\": what someone did with items, as ordered operations in data.ops")
def _item_changes(check, event):
    actor = check.entity(event["subject"], "actor", kinds=("character",))
    ops = event["data"].get("ops") or []
    if not ops:
        raise Rejected("the event lists no operations (data.ops)")
    writes, reasons = dry_run(check, actor, ops)
    if reasons:
        raise Rejected("; ".join(reasons))
    return writes


def dry_run(check, actor, ops):
    """Run ``ops`` by ``actor`` in order, each seeing the ones before; return (writes, every reason it fails).

    A failed operation changes nothing and the next ones run on; the event
    applies only when none failed (seed 「连续试运行…一次返回全部失败原因」).
    """
    state = check.state
    world = _World(state)
    reasons = []
    for number, op in enumerate(ops, 1):
        try:
            _OPS[op["op"]](check, world, actor, op)
        except Rejected as error:
            reasons.append(f"{number} {op['op']}: {error}" if len(ops) > 1 else str(error))
    if reasons:
        return [], reasons
    return _item_writes(state, world), []


def _item_writes(state, world):
    writes = []
    for key in world.created:
        item = world.changed[key]
        source = state.entity(world.created_from[key])
        writes.append({"slot": f"entity:{key}", "kind": "entity", "subject": key, "value": item.name,
                       "data": {"kind": "item", "aliases": list(source.data.get("aliases", [])),
                                "description": source.data.get("description", "")},
                       "narrator_only": source.narrator_only})
    for key, item in world.changed.items():
        old = None if key in world.created else item_of(state, key)
        fields = {name: getattr(item, name) for name in ITEM_DATA}
        if old is None or fields != {name: getattr(old, name) for name in ITEM_DATA}:
            writes.append({"slot": f"item:{key}", "kind": "item", "subject": key, "value": "", "data": fields})
        if old is None or (item.holder, item.mode, item.slot) != (old.holder, old.mode, old.slot):
            data = {"mode": item.mode, **({"slot": item.slot} if item.slot else {})}
            writes.append({"slot": f"holder:{key}", "kind": "holder", "subject": key, "value": item.holder,
                           "data": data})
    writes += [_side_write(exit) for exit in world.exits.values()]
    return writes


def _where(check, actor):
    place = check.state.location_of(actor)
    if not place:
        raise Rejected(f"{check.state.name_of(actor)} is nowhere known; place them first")
    return place


def _candidates(check, world, name, role="item"):
    if not name:
        raise Rejected(f"the operation names no {role}")
    keys = [k for k in items_named(check.state, name) if not world.item(k).gone]
    keys += [k for k in world.created if normalize(world.item(k).name) == normalize(name) and k not in keys]
    if not keys:
        raise Rejected(f"no item called {name!r}")
    return keys


def _held(check, world, actor, name, quantity, *, worn_ok=False):
    """Return the item ``name`` that ``actor`` holds directly, checking the quantity wanted."""
    state = check.state
    mine = [k for k in _candidates(check, world, name) if world.item(k).holder == actor]
    if not mine:
        if quantity:
            raise Rejected(f"{state.name_of(actor)} carries 0 {name}, {quantity} needed")
        # Say why it is out of reach when it is here (hidden, shut away, someone else's), else where to start.
        item = _reachable(check, world, actor, name)
        raise Rejected(f"{state.name_of(actor)} does not carry the {item.name}; take it first")
    item = world.item(mine[0])
    if item.mode == "worn" and not worn_ok:
        raise Rejected(f"{state.name_of(actor)} wears the {item.name}; remove it first")
    if quantity > item.quantity:
        raise Rejected(f"{state.name_of(actor)} carries {item.quantity} {item.name}, {quantity} needed")
    return item


def _reachable(check, world, actor, name, role="item", *, not_mine=False):
    """Return the item ``name`` that ``actor`` can lay hands on where they are, or raise why not.

    Of several items of that name, the one in reach is meant (not the one
    ``actor`` already holds, with ``not_mine``), so a reason names the right one.
    """
    state = check.state
    place = _where(check, actor)
    keys = _candidates(check, world, name, role)
    if len(keys) > 1:
        keys = sorted(keys, key=lambda k: (place_of(state, k, world) != place, bool(obstacle(state, k, actor, world)),
                                           holding_character(state, k, world) not in ("", actor),
                                           not_mine and world.item(k).holder == actor, k))
    item = world.item(keys[0])
    if place_of(state, item.key, world) != place:
        raise Rejected(f"the {item.name} is not at {state.name_of(place)}, where {state.name_of(actor)} is")
    why = obstacle(state, item.key, actor, world)
    if why:
        raise Rejected(why)
    other = holding_character(state, item.key, world)
    if other and other != actor:
        raise Rejected(f"the {item.name} is held by {state.name_of(other)}")
    return item


def _merge_into(world, item, holder, mode, slot=""):
    """Return the stack of the same kind held the same way by ``holder`` that ``item`` merges into, or None."""
    if item.unique or not item.stack:
        return None
    for key in world.held_by(holder):
        other = world.item(key)
        if (key != item.key and other.stack == item.stack and not other.unique and other.mode == mode
                and other.slot == slot):
            return other
    return None


def _transfer(check, world, item, quantity, holder, mode, slot=""):
    """Move ``quantity`` of ``item`` (0: all) to ``holder``: split off a partial stack, merged where one is."""
    quantity = quantity or item.quantity
    target = _merge_into(world, item, holder, mode, slot)
    if quantity >= item.quantity:
        if target is not None:
            world.set(target, quantity=target.quantity + item.quantity)
            world.set(item, quantity=0)
        else:
            world.set(item, holder=holder, mode=mode, slot=slot)
        return
    world.set(item, quantity=item.quantity - quantity)
    if target is not None:
        world.set(target, quantity=target.quantity + quantity)
        return
    key = _free_key(check.state, world, item.stack or item.key)
    world.changed[key] = replace(item, key=key, quantity=quantity, holder=holder, mode=mode, slot=slot)
    world.created.append(key)
    world.created_from[key] = world.created_from.get(item.key, item.key)


def _free_key(state, world, base):
    number = 2
    while state.entity(f"{base}-{number}") is not None or f"{base}-{number}" in world.changed:
        number += 1
    return f"{base}-{number}"


def _take(check, world, actor, op):
    state = check.state
    item = _reachable(check, world, actor, op.get("item", ""), not_mine=True)
    if item.holder == actor:
        raise Rejected(f"{state.name_of(actor)} already carries the {item.name}")
    quantity = op.get("quantity", 0)
    if quantity > item.quantity:
        raise Rejected(f"only {item.quantity} {item.name} here, {quantity} needed")
    _transfer(check, world, item, quantity, actor, "carried")


def _drop(check, world, actor, op):
    place = _where(check, actor)
    item = _held(check, world, actor, op.get("item", ""), op.get("quantity", 0))
    _transfer(check, world, item, op.get("quantity", 0), place, "at")


def _give(check, world, actor, op):
    state = check.state
    place = _where(check, actor)
    if not op.get("to"):
        raise Rejected("give names no receiver (to)")
    receiver = check.entity(op["to"], "receiver", kinds=("character",))
    if receiver == actor:
        raise Rejected("a give needs a receiver other than the giver")
    item = _held(check, world, actor, op.get("item", ""), op.get("quantity", 0))
    if state.location_of(receiver) != place:
        raise Rejected(f"{state.name_of(receiver)} is not at {state.name_of(place)}, where "
                       f"{state.name_of(actor)} is")
    _transfer(check, world, item, op.get("quantity", 0), receiver, "carried")


def _put(check, world, actor, op):
    state = check.state
    if not op.get("to"):
        raise Rejected("put names no container (to)")
    item = _held(check, world, actor, op.get("item", ""), op.get("quantity", 0))
    container = _reachable(check, world, actor, op["to"], "container")
    if container.container is None:
        raise Rejected(f"the {container.name} is not a container")
    if container.container != "open":
        raise Rejected(f"the {container.name} is {container.container}")
    if container.key == item.key or item.key in holding_chain(state, container.key, world):
        raise Rejected(f"the {item.name} cannot go inside itself")
    _transfer(check, world, item, op.get("quantity", 0), container.key, "in")


def _wear(check, world, actor, op):
    state = check.state
    item = _held(check, world, actor, op.get("item", ""), 0, worn_ok=True)
    if item.mode == "worn":
        raise Rejected(f"{state.name_of(actor)} already wears the {item.name}")
    slot = key_for(op["slot"]) if op.get("slot") else item.wear_slot
    if not slot:
        raise Rejected(f"the {item.name} is not something worn (it has no wear slot)")
    if item.wear_slot and slot != item.wear_slot:
        raise Rejected(f"the {item.name} is worn on the {item.wear_slot}, not the {slot}")
    capacity = slot_capacity(state, slot)
    if capacity is None:
        raise Rejected(f"no wear slot {slot!r}; known slots: {', '.join(slots(state))}")
    worn = [world.item(k) for k in world.held_by(actor)]
    worn = [other for other in worn if other.mode == "worn" and other.slot == slot]
    if len(worn) >= capacity:
        raise Rejected(f"slot full: {state.name_of(actor)}'s {slot} already has "
                       f"{', '.join(other.name for other in worn)}")
    world.set(item, mode="worn", slot=slot)


def _remove(check, world, actor, op):
    state = check.state
    item = _held(check, world, actor, op.get("item", ""), 0, worn_ok=True)
    if item.mode != "worn":
        raise Rejected(f"{state.name_of(actor)} does not wear the {item.name}")
    world.set(item, mode="carried", slot="")


def _container(check, world, actor, op):
    item = _reachable(check, world, actor, op.get("item", ""), "container")
    if item.container is None:
        raise Rejected(f"the {item.name} is not a container")
    return item


def _exit_for(check, world, actor, op):
    state = check.state
    place = _where(check, actor)
    origin = _place(check, op["from"], "exit's place") if op.get("from") else place
    if origin != place:
        raise Rejected(f"{state.name_of(actor)} is not at {state.name_of(origin)}, where that exit is")
    exit = find_exit(state, origin, op["exit"])
    if exit is None:
        raise Rejected(f"no exit {op['exit']!r} leaves {state.name_of(origin)}")
    exit = world.exit(exit)
    if exit.hidden and op["op"] != "reveal":
        raise Rejected(f"the exit {describe_exit(state, exit)} is hidden")
    return exit


def _open(check, world, actor, op):
    if op.get("exit"):
        exit = _exit_for(check, world, actor, op)
        raise Rejected(f"an exit is open, locked or blocked, never closed: {describe_exit(check.state, exit)} is "
                       f"{exit.state}; lock or unlock it instead")
    item = _container(check, world, actor, op)
    if item.container != "closed":
        raise Rejected(f"the {item.name} is {item.container}" + (" already" if item.container == "open" else ""))
    world.set(item, container="open")


def _close(check, world, actor, op):
    if op.get("exit"):
        return _open(check, world, actor, op)
    item = _container(check, world, actor, op)
    if item.container != "open":
        raise Rejected(f"the {item.name} is {item.container} already")
    world.set(item, container="closed")


def _key(check, world, actor, op, opener, what):
    """Check that ``actor`` holds the key to ``what`` (or forces it); raise the seed's reasons otherwise."""
    state = check.state
    if op.get("forced"):
        check.person_only("forcing a lock")
        return
    if not opener:
        raise Rejected(f"{what} has no lock that a key opens")
    if op.get("key"):
        keys = _candidates(check, world, op["key"], "key")
        if opener not in keys:
            named = world.item(keys[0]).name
            raise Rejected(f"wrong key: the {named} does not open {what}")
        if world.item(opener).holder != actor:
            raise Rejected(f"key not in hand: {state.name_of(actor)} does not hold the {world.item(opener).name}")
    elif world.item(opener) is None or world.item(opener).holder != actor:
        raise Rejected(f"key not in hand: {state.name_of(actor)} holds nothing that opens {what}")


def _lock(check, world, actor, op):
    state = check.state
    if op.get("exit"):
        exit = _exit_for(check, world, actor, op)
        what = f"the exit {describe_exit(state, exit)}"
        if exit.state != "open":
            raise Rejected(f"{what} is {exit.state}" + (" already" if exit.state == "locked" else ""))
        _key(check, world, actor, op, exit.opener, what)
        world.set_exit(exit, state="locked")
        return
    item = _container(check, world, actor, op)
    if item.container == "locked":
        raise Rejected(f"the {item.name} is locked already")
    if item.container == "open":
        raise Rejected(f"the {item.name} is open; close it before locking it")
    _key(check, world, actor, op, item.opener, f"the {item.name}")
    world.set(item, container="locked")


def _unlock(check, world, actor, op):
    state = check.state
    if op.get("exit"):
        exit = _exit_for(check, world, actor, op)
        what = f"the exit {describe_exit(state, exit)}"
        if exit.state != "locked":
            raise Rejected(f"{what} is not locked (it is {exit.state})")
        _key(check, world, actor, op, exit.opener, what)
        world.set_exit(exit, state="open")
        return
    item = _container(check, world, actor, op)
    if item.container != "locked":
        raise Rejected(f"the {item.name} is not locked")
    _key(check, world, actor, op, item.opener, f"the {item.name}")
    world.set(item, container="closed")


def _reveal(check, world, actor, op):
    state = check.state
    if op.get("exit"):
        exit = _exit_for(check, world, actor, op)
        if not exit.hidden:
            raise Rejected(f"the exit {describe_exit(state, exit)} is not hidden")
        world.set_exit(exit, hidden=False)
        return
    place = _where(check, actor)
    keys = _candidates(check, world, op.get("item", ""))
    here = [k for k in keys if place_of(state, k, world) == place]
    if not here:
        raise Rejected(f"the {op.get('item')} is not at {state.name_of(place)}, where {state.name_of(actor)} is")
    item = world.item(next((k for k in here if world.item(k).hidden), here[0]))
    if not item.hidden:
        raise Rejected(f"the {item.name} is not hidden")
    world.set(item, hidden=False)
    why = obstacle(state, item.key, actor, world)
    if why:
        world.set(item, hidden=True)
        raise Rejected(why)


_OPS = {"take": _take, "drop": _drop, "give": _give, "put": _put, "wear": _wear, "remove": _remove, "open": _open,
        "close": _close, "lock": _lock, "unlock": _unlock, "reveal": _reveal}


# ---------------------------------------------------------------- relationships, knowledge, character state


AXIS_FIELDS = {name: Field("axis", f"{name}, from -1 to 1") for name in AXES}


@register(WORLD_RANK, "relationship", sources=EVERYONE,
          fields={"label": Field("name", "what they are to each other (sister, rival, acquaintance)"), **AXIS_FIELDS},
          help="one / the other / how the first now sees the other (one direction; data: label and axes -1..1)")
def _relationship(check, event):
    one = check.entity(event["subject"])
    other = check.entity(event["object"], "other party")
    if one == other:
        raise Rejected("a relationship needs two different parties")
    data = event["data"]
    if not event["value"] and not data:
        raise Rejected("the event gives no relationship")
    slot = f"relationship:{one}:{other}"
    current = check.state.get(slot)
    fields = {"object": other, "label": "", **{axis: 0.0 for axis in AXES}, **(current.data if current else {})}
    fields.update(data)
    summary = event["value"] or (current.value if current else "")
    return [{"slot": slot, "kind": "relationship", "subject": one, "value": summary, "data": fields,
             "narrator_only": event["narrator_only"]}]


KNOW_FIELDS = {
    "kind": Field("choice", "what is known: place, item, exit, lore or character (empty: the entity's kind)",
                  choices=KNOWN_KINDS),
    "how": Field("choice", "how it was learned", choices=HOW),
    "from": Field("name", "an exit: the place it leaves"),
}


def _known_target(check, event):
    """Return (kind, target key) of what a know/unknow event names."""
    state = check.state
    data = event["data"]
    name = event["object"]
    if not name:
        raise Rejected("the event names nothing known")
    kind = data.get("kind", "")
    if kind == "lore":
        return "lore", lore_key(name)
    if kind == "exit" or data.get("from"):
        if not data.get("from"):
            raise Rejected("an exit is known from a place: give data.from")
        origin = _place(check, data["from"], "exit's place")
        exit = find_exit(state, origin, name)
        if exit is None:
            raise Rejected(f"no exit {name!r} leaves {state.name_of(origin)}")
        return "exit", f"{origin}:{exit.key}"
    key = check.entity(name, "known entity")
    actual = kind_of(state, key)
    if actual not in KNOWN_KINDS:
        raise Rejected(f"{state.name_of(key)} is a {actual}; what is known is a place, item, exit, lore or character")
    if kind and kind != actual:
        raise Rejected(f"{state.name_of(key)} is a {actual}, not a {kind}")
    return actual, key


@register(WORLD_RANK, "know", sources=EVERYONE, fields=KNOW_FIELDS,
          help="who / what they now know exists / \"\": someone is told of, reads of or infers a place, item, "
               "exit, person or lore")
def _know(check, event):
    who = check.entity(event["subject"], "knower", kinds=("character",))
    kind, target = _known_target(check, event)
    how = event["data"].get("how") or ("world" if check.source == WORLD else "told")
    if check.by_recorder and how in ("world", "observed"):
        raise Rejected(f"how {how!r} is written by the application; the recorder says told, read or inferred")
    if kind == "character":
        if target == who:
            raise Rejected("everyone knows themselves")
        if check.state.get(f"relationship:{who}:{target}") is not None:
            raise Rejected(f"{check.state.name_of(who)} already knows {check.state.name_of(target)}")
        return [_relation(who, target, HEARD_OF, how)]
    slot = knows_slot(who, kind, target)
    if check.state.get(slot) is not None and check.by_recorder:
        raise Rejected(f"{check.state.name_of(who)} already knows {event['object']}")
    return [{"slot": slot, "kind": "knows", "subject": who, "value": target, "data": {"how": how}}]


@register(WORLD_RANK, "unknow", sources=PEOPLE, fields={name: KNOW_FIELDS[name] for name in ("kind", "from")},
          help="who / what they do not know after all / \"\": withdraw an erroneous knowledge record")
def _unknow(check, event):
    who = check.entity(event["subject"], "knower", kinds=("character",))
    kind, target = _known_target(check, event)
    slot = f"relationship:{who}:{target}" if kind == "character" else knows_slot(who, kind, target)
    current = check.state.get(slot)
    if current is None:
        raise Rejected(f"{check.state.name_of(who)} has no record of knowing {event['object']}")
    return [{"slot": slot, "kind": current.kind, "subject": who, "value": current.value, "retracted": True}]


def _relation(one, other, label, how=""):
    data = {"object": other, "label": label, **{axis: 0.0 for axis in AXES}}
    if how:
        data["how"] = how
    return {"slot": f"relationship:{one}:{other}", "kind": "relationship", "subject": one, "value": "",
            "data": data}


@register(WORLD_RANK, "set_condition", sources=EVERYONE, fields={
    "inner": Field("text", "what they feel or think inside (the narrator only)"),
    "activity": Field("text", "what they are doing"),
    "mood": Field("name", "their mood in a word or two")},
    help="who / \"\" / their public condition now (wounded, asleep...); data: inner, activity, mood "
         "(empty keeps the current one)")
def _set_condition(check, event):
    who = check.entity(event["subject"])
    data = event["data"]
    if not event["value"] and not any(data.values()):
        raise Rejected("the event gives no condition")
    slot = f"condition:{who}"
    current = check.state.get(slot)
    fields = {"inner": "", "activity": "", "mood": "", **(current.data if current else {})}
    fields.update({name: value for name, value in data.items() if value})
    return [{"slot": slot, "kind": "condition", "subject": who, "value": event["value"] or (current.value if current
                                                                                         else ""),
             "data": fields, "narrator_only": event["narrator_only"]}]


@register(WORLD_RANK, "slot", sources=EVERYONE, fields={"capacity": Field("int", "how many items it holds", minimum=1,
                                                             maximum=20)},
          help="slot name / \"\" / \"\": a wear slot the story adds (data.capacity)")
def _slot(check, event):
    name = event["subject"]
    if not name:
        raise Rejected("the event names no wear slot")
    capacity = event["data"].get("capacity", slot_capacity(check.state, name) or 1)
    return [{"slot": f"slot:{key_for(name)}", "kind": "slot", "subject": "", "value": key_for(name),
             "data": {"capacity": capacity}}]


# Sections of a world file that later parts of seed 002 read (story time, agendas, variables, dice,
# triggers, lore): stored as the file gives them, at the opening, until the code that reads them arrives.
@register(WORLD_RANK, "world_section", sources=(WORLD,), fields={"content": Field("json", "the section as the file "
                                                                                  "gives it")},
          help="section name / \"\" / \"\": a world file's section for later parts of the story (data.content)")
def _world_section(check, event):
    if not event["subject"]:
        raise Rejected("the event names no section")
    return [{"slot": f"world:{event['subject']}", "kind": "world_section", "subject": "",
             "value": event["subject"], "data": {"content": event["data"].get("content")}}]


# ---------------------------------------------------------------- observation


@register(WORLD_RANK, "observe", sources=(), fields={
    "who": Field("names", "the characters who arrived somewhere and look around, seen by those there"),
    "unnoticed": Field("names", "the characters who arrived unseen: they look around, nobody there notices them"),
    "witnesses": Field("names", "the characters where something changed, who see what changed"),
    "items": Field("names", "the items that changed"),
    "exits": Field("names", "the exits (their slots) that changed"),
    "left": Field("json", "the items carried off from a place, seen going by those there: {item: place}")},
    help="written by the application after a batch: what the named characters now see where they are")
def _observe(check, event):
    state, data = check.state, event["data"]
    looks = [look(state, who) for who in data.get("who", [])]
    looks += [look(state, who, noticed=False) for who in data.get("unnoticed", [])]
    looks += [witness(state, who, data.get("items", []), data.get("exits", []), data.get("left") or {})
              for who in data.get("witnesses", [])]
    # Whether anyone knows it already is asked in one go (a partial state), not each character's whole knowledge.
    made = state.existing([slot for seen in looks for slot, _ in seen])
    writes = []
    for seen in looks:
        for slot, write in seen:
            if slot not in made:
                made.add(slot)
                writes.append(write)
    return writes


def _learning(who, kind, target):
    slot = knows_slot(who, kind, target)
    return slot, {"slot": slot, "kind": "knows", "subject": who, "value": target, "data": {"how": "observed"}}


def witness(state, who, items, exits, left=None):
    """Return [(slot, write)]: what ``who`` learns by seeing ``items`` and ``exits`` change where it is.

    ``left`` ({item: place}): items carried off from a place, which those
    there see go (a person's correction may move a thing from one place to
    another outright).
    """
    place = state.location_of(who)
    if not place:
        return []
    left = left or {}
    # What an opened container holds comes into view with it.
    shown, queue = [], deque(items)
    while queue:
        key = queue.popleft()
        if key in shown or kind_of(state, key) != "item":
            continue
        shown.append(key)
        if item_of(state, key).container == "open":
            queue.extend(holders(state).get(key, ()))
    found = [_learning(who, "item", key) for key in shown
             if place in (place_of(state, key), left.get(key)) and not obstacle(state, key, who)]
    for slot in exits:
        record = state.get(slot)
        if record is not None and record.subject == place and not record.data.get("hidden"):
            exit = exit_of(record)
            found += [_learning(who, "exit", f"{place}:{exit.key}"), _learning(who, "place", exit.to)]
    return found


def look(state, who, *, noticed=True):
    """Return [(slot, write)]: what ``who`` would record by looking around, whether or not it is known already.

    Knowledge of the place, its visible exits and their destinations, the
    visible items, and an acquaintance with everyone there; and, unless it
    arrived unnoticed, theirs with it and of what it visibly carries. A
    journey looks around each place on its way as it passes (the location's
    ``via``). Knowledge is never withdrawn by looking (only an erroneous
    record is), and an existing edge or relationship is left as it is.
    """
    place = state.location_of(who)
    if not place:
        return []
    found = []
    for passed in (*_journey(state, who)[:-1], place):
        found += _look_at(state, who, passed, noticed)
    return found


def _journey(state, who):
    """Return the places ``who``'s last move passed through, ending where it is (none for a move along no route)."""
    record = state.get(f"location:{who}")
    return tuple(record.data.get("via", ())) if record is not None else ()


def _look_at(state, who, place, noticed):
    seen = [("place", place)]
    for exit in exits_from(state, place):
        if not exit.hidden:
            seen += [("exit", f"{place}:{exit.key}"), ("place", exit.to)]
    seen += [("item", item.key) for item in visible_items(state, who, place)]
    found = [_learning(who, kind, target) for kind, target in seen]
    others = [other for other in state.at(place) if other != who and kind_of(state, other) == "character"]
    carried = _visibly_carried(state, who) if noticed and others else []
    for other in others:
        found.append((f"relationship:{who}:{other}", _relation(who, other, ACQUAINTANCE)))
        if noticed:
            found.append((f"relationship:{other}:{who}", _relation(other, who, ACQUAINTANCE)))
            found += [_learning(other, "item", key) for key in carried]
    return found


def _visibly_carried(state, who):
    """Return the keys of what others see ``who`` carry and wear: not hidden, not inside anything closed."""
    held, found = holders(state), []
    queue = deque(held.get(who, ()))
    while queue:
        key = queue.popleft()
        item = item_of(state, key)
        if item is None or item.gone or item.hidden or key in found:
            continue
        found.append(key)
        if item.container not in ("closed", "locked"):
            queue.extend(held.get(key, ()))
    return found


def look_around(state, who):
    """Return the records ``who`` gains by looking around now (what ``look`` finds that is not known yet)."""
    found = look(state, who)
    known = state.existing([slot for slot, _ in found])
    return [write for slot, write in found if slot not in known]


def observation(state, outcomes):
    """Return the data of the ``observe`` event a batch calls for, or None: who moved (and looks around), and who
    was where items or exits changed (and sees what changed). What a correction says was unseen is left out, but
    for the one who moved (it still looks around, unnoticed)."""
    movers, unnoticed, items, exits, touched, left = set(), set(), set(), set(), set(), {}
    for outcome in outcomes:
        if outcome.status != "applied":
            continue
        unseen = bool(outcome.payload.get("data", {}).get("unseen"))
        for number, write in enumerate(outcome.writes):
            kind = write["kind"]
            if kind == "location" and write.get("value"):
                (unnoticed if unseen else movers).add(write["subject"])
            elif unseen:
                continue
            elif kind in ("holder", "item"):
                items.add(write["subject"])
                here = place_of(state, write["subject"])
                touched.add(here)
                was = outcome.previous[number]["value"] if kind == "holder" and outcome.previous else None
                there = place_of(state, was) if was else ""
                if there and there != here:
                    left[write["subject"]] = there
                    touched.add(there)
            elif kind == "exit":
                exits.add(write["slot"])
                touched.add(write["subject"])
    touched.discard("")
    journeys = {place for key in movers | unnoticed for place in _journey(state, key)}
    state.load_occupants(touched | journeys | {state.location_of(key) for key in movers | unnoticed} - {""})
    movers = sorted(key for key in movers if kind_of(state, key) == "character")
    unnoticed = sorted(key for key in unnoticed - set(movers) if kind_of(state, key) == "character")
    witnesses = sorted({key for place in touched for key in state.at(place)
                        if kind_of(state, key) == "character"} - set(movers) - set(unnoticed))
    if not movers and not unnoticed and not witnesses:
        return None
    seen = {"who": movers, "witnesses": witnesses, "items": sorted(items), "exits": sorted(exits)}
    if unnoticed:
        seen["unnoticed"] = unnoticed
    if left:
        seen["left"] = dict(sorted(left.items()))
    return seen


@hook("observers")
def _observed(state, outcomes):
    """Return the ``observe`` event a batch's outcomes call for, or None (``events.validate_batch`` writes it)."""
    seen = observation(state, outcomes)
    return None if seen is None else {"type": "observe", "data": seen}


# ---------------------------------------------------------------- the whole world, as plain values


def snapshot(state):
    """Return the world of ``state`` as JSON-ready values (``manage.py story state``; keys only ever added)."""
    name = state.name_of
    entities = sorted(state.entities(), key=lambda r: r.subject)
    everyone = characters(state)
    items = sorted((item_of(state, r.subject) for r in entities if r.data.get("kind") == "item"),
                   key=lambda item: item.key)
    return {
        "protagonist": PROTAGONIST,
        "scene": {"text": state.scene().value if state.scene() else "", "place": state.place()},
        "entities": [{"key": r.subject, "name": r.value, "kind": r.data.get("kind", ""),
                      "aliases": list(r.data.get("aliases", [])), "description": r.data.get("description", ""),
                      "narrator_only": r.narrator_only,
                      **{name: r.data[name] for name in ("personality", "brief") if r.data.get(name)}}
                     for r in entities],
        "places": [{"key": key, "name": name(key),
                    "features": [{"name": f.data.get("name", ""), "text": f.value,
                                  "notable": bool(f.data.get("notable")), "hidden": bool(f.data.get("hidden"))}
                                 for f in features_at(state, key)],
                    "characters": sorted(state.at(key))} for key in places(state)],
        "exits": [{"from": e.origin, "to": e.to, "key": e.key, "label": e.label, "state": e.state,
                   "opener": e.opener, "travel_seconds": e.travel_seconds, "hidden": e.hidden, "door": e.door}
                  for e in sorted((exit_of(r) for r in state.of_kind("exit")), key=lambda e: e.slot)],
        "items": [{"key": item.key, "name": item.name, "quantity": item.quantity, "unique": item.unique,
                   "condition": item.condition, "notable": item.notable, "hidden": item.hidden,
                   "wear_slot": item.wear_slot, "container": item.container, "opener": item.opener,
                   "owner": item.owner, "stack": item.stack, "holder": item.holder, "mode": item.mode,
                   "slot": item.slot, "chain": holding_chain(state, item.key), "place_of": place_of(state, item.key)}
                  for item in items],
        "characters": [{"key": key, "name": name(key), "place": state.location_of(key),
                        "condition": _condition(state, key)} for key in everyone],
        "relationships": [{"from": r.subject, "to": r.data.get("object", ""), "summary": r.value,
                           "label": r.data.get("label", ""), **{axis: r.data.get(axis, 0.0) for axis in AXES}}
                          for r in sorted(state.of_kind("relationship"), key=lambda r: r.slot)],
        "knowledge": {key: {kind: dict(sorted(targets.items())) for kind, targets in sorted(known.items())}
                      for key in everyone if (known := knowledge(state, key))},
        "slots": slots(state),
        "facts": sorted(r.value for r in state.of_kind("fact")),
        "threads": sorted(({"text": r.value, "status": r.data.get("status", "")} for r in state.of_kind("thread")),
                          key=lambda t: t["text"]),
    }


def _condition(state, who):
    record = state.get(f"condition:{who}")
    data = record.data if record else {}
    return {"public": record.value if record else "", "inner": data.get("inner", ""),
            "activity": data.get("activity", ""), "mood": data.get("mood", "")}

