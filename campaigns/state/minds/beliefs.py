"""Who believes what is where, first and second order, from presence at each change (issue 14 point 2). Pure.

The application, not the model, decides what each character knows of where
things are, from where everyone was:

- present where an item changes holder — where it was or where it goes →
  sees it, unless the change is hidden or unseen or the item ends inside a
  closed container (then only the one who did it);
- arriving at a place → sees the visible items there (not hidden, not inside a
  closed container; what those present carry, and what lies in an open
  container one of them carries) and its own things (its hidden ones too), and
  notices ▶ that an item it expected to see there, or on one of those there,
  is gone (its whereabouts become unknown); ▶ those there see what the
  newcomer visibly carries, unless it arrives unseen; a journey passes
  through each place on its way, seen and seeing as an arrival is;
- away → keeps the old belief;
- told, or present when it is said or noticed in the scene → believes what was
  said (the truth, unless a speaker said otherwise);
- second order: those who saw something together each know what the others
  saw; one who arrives where others are knows they see what is visible there,
  and they know it of the newcomer; those told at once know each other was
  told; one who was away is believed by the others to hold the old belief, and
  believes the others hold theirs.

A world file's opening is each character arriving where it starts
(``whereabouts`` reads the opening's items first), so everyone begins
believing where what it holds, wears and can see is.

The input is a sequence of world steps as plain values (``Move``, ``Change``,
``Container``, ``Reveal``, ``Notice``, ``Tell``), as the world model's moves
and item operations produce them; ``derive`` replays them and returns
``Minds``. A holder is a place, a character (anyone who has moved) or a
container item (anything that has a holder itself). Whether a step was
allowed is the world model's business (its dry run); this only follows
who saw what.
"""

from dataclasses import dataclass
from typing import NamedTuple

# What a character believes of an item whose absence it noticed: it knows the
# item is not where it thought, and not where it is.
UNKNOWN = None

_MISSING = object()

# Deeper holding chains are a world error (lint's), not a reason to loop.
MAX_CHAIN = 32


@dataclass(frozen=True)
class Move:
    """``who`` arrives at place ``to`` (or leaves the map, ``to=""``), passing through the places ``via`` first.

    ``unseen``: nobody there notices the arrival (it still looks around).
    """

    who: str
    to: str
    via: tuple = ()
    unseen: bool = False


@dataclass(frozen=True)
class Change:
    """``item`` passes to holder ``to`` (a place, a character or a container), done by ``actor``.

    ``hidden``: done unseen, and the item stays hidden where it is until
    revealed. ``unseen``: nobody but the actor saw it (a person's correction
    says so). ``place``: where it happens, when neither the actor's place nor
    the new holder's says it.
    """

    item: str
    to: str
    actor: str = ""
    hidden: bool = False
    place: str = ""
    unseen: bool = False


@dataclass(frozen=True)
class Container:
    """Container ``item`` is opened or closed; opening shows its contents to those present."""

    item: str
    open: bool
    actor: str = ""
    unseen: bool = False


@dataclass(frozen=True)
class Reveal:
    """A hidden ``item`` is hidden no more; those present see where it is (unless ``unseen``)."""

    item: str
    actor: str = ""
    unseen: bool = False


@dataclass(frozen=True)
class Notice:
    """Those present at ``place`` (default: the speaker's) notice, or hear said, where ``item`` is.

    ``holder`` is what was said (default: what the speaker believes, or the
    truth when nobody spoke); a speaker's own belief does not change by saying it.
    """

    item: str
    place: str = ""
    by: str = ""
    holder: str | None = None


@dataclass(frozen=True)
class Tell:
    """``by`` tells ``who`` where ``item`` is (``holder``; default: what ``by`` believes, or the truth).

    ``together``: the others told at the same time, who each know the others heard it.
    """

    who: str
    item: str
    holder: str | None = None
    by: str = ""
    together: tuple = ()


class _Record(NamedTuple):
    """One moment of shared knowledge: each witness now thinks each subject believes where ``items`` are."""

    items: dict  # item -> holder (None: whereabouts unknown)
    witnesses: frozenset
    subjects: frozenset


class Minds:
    """The world's truth and every character's beliefs about where items are, after a run of steps."""

    def __init__(self):
        self.holder = {}  # item -> holder (the truth)
        self.position = {}  # character -> place ("" off the map)
        self._held = {}  # holder -> items it holds
        self._at = {}  # place -> characters there
        self._hidden = set()
        self._closed = set()
        self._views = {}  # place -> (items visible there, holders looked into), until something there changes
        self._believes = {}  # character -> {item: holder}
        self._believed_in = {}  # character -> {holder: items it believes that holder holds}
        self._witnessed = {}  # character -> [_Record] it witnessed, in order

    # What callers read

    def believes(self, who):
        """Return ``{item: believed holder}`` for every item ``who`` has a belief about (None: unknown)."""
        return dict(self._believes.get(who, {}))

    def believes_about(self, who, other):
        """Return ``{item: holder}``: where ``who`` thinks ``other`` believes each item is."""
        found = {}
        for record in reversed(self._witnessed.get(who, ())):
            if other in record.subjects:
                for item, holder in record.items.items():
                    found.setdefault(item, holder)
        return found

    def truth(self):
        return dict(self.holder)

    def characters(self):
        """Return everyone placed on the map or holding a belief (told of something while never placed)."""
        return sorted(set(self.position) | set(self._believes))

    def place_of(self, item):
        """Return the place an item is at, through its holding chain (a character's place for what it holds)."""
        holder = self.holder.get(item)
        for _ in range(MAX_CHAIN):
            if holder in self.holder:
                holder = self.holder[holder]
            elif holder in self.position:
                return self.position[holder]
            else:
                return holder
        return None

    def mistaken(self, who):
        """Return ``{item: (believed, true)}`` where ``who``'s belief differs from the truth."""
        return {item: (believed, self.holder.get(item)) for item, believed in self._believes.get(who, {}).items()
                if believed != self.holder.get(item)}

    def as_json(self, characters=None):
        """Return ``{who: {"believes": {...}, "believes_about": {other: {...}}}}`` (story state's shape)."""
        characters = self.characters() if characters is None else characters
        about = {who: {} for who in characters}
        for who in characters:
            for record in self._witnessed.get(who, ()):  # later records overwrite earlier ones
                for other in record.subjects:
                    if other != who:
                        about[who].setdefault(other, {}).update(record.items)
        return {who: {"believes": self.believes(who),
                      "believes_about": {other: dict(sorted(items.items()))
                                         for other, items in sorted(about[who].items())}}
                for who in characters}

    # Applying steps

    def apply(self, step):
        handler = _HANDLERS.get(type(step))
        if handler is None:
            raise TypeError(f"unknown world step {step!r}; expected one of "
                            f"{', '.join(cls.__name__ for cls in _HANDLERS)}")
        handler(self, step)

    def _move(self, step):
        for place in (*step.via, step.to):
            self._arrive(step.who, place, step.unseen)

    def _arrive(self, who, place, unseen):
        old = self.position.get(who)
        if old:
            self._at.get(old, set()).discard(who)
        self.position[who] = place
        if not place:
            return
        present = set(self._at.get(place, ()))
        self._at.setdefault(place, set()).add(who)
        if unseen:  # it sees them; they do not see it
            self._look({who}, {who}, [place, *present], own=who)
            return
        self._look({who}, present | {who}, [place, *present], own=who)
        if present:  # ▶ and those there see what the newcomer visibly carries
            self._look(present, present | {who}, [who])

    def _change(self, step):
        before = self.place_of(step.item)
        self._views.pop(before, None)
        old = self.holder.get(step.item)
        if old is not None:
            self._held.get(old, set()).discard(step.item)
        self.holder[step.item] = step.to
        self._held.setdefault(step.to, set()).add(step.item)
        if step.hidden:
            self._hidden.add(step.item)
        else:
            self._hidden.discard(step.item)
        self._views.pop(self.place_of(step.item), None)
        place = step.place or self.position.get(step.actor) or self.place_of(step.item)
        if step.hidden or step.unseen or self._concealed(step.item):
            seen_by = {step.actor} if step.actor else set()
        else:  # seen where it was and where it went (a person's correction may carry it from one to the other)
            seen_by = (set(self._at.get(place, ())) | set(self._at.get(before, ()))
                       | ({step.actor} if step.actor else set()))
        self._record(step.item, step.to, seen_by, seen_by, seen_by)

    def _container(self, step):
        self._views.pop(self.place_of(step.item), None)
        if step.open:
            self._closed.discard(step.item)
            place = self.place_of(step.item)
            present = ({step.actor} if step.actor else set()) if step.unseen else set(self._at.get(place, ()))
            if not self._concealed(step.item) and present:
                self._look(present, present, [step.item])
        else:
            self._closed.add(step.item)

    def _reveal(self, step):
        self._views.pop(self.place_of(step.item), None)
        self._hidden.discard(step.item)
        present = set(self._at.get(self.place_of(step.item), ()))
        if step.unseen:
            present = {step.actor} & present
        if not self._concealed(step.item):
            self._record(step.item, self.holder.get(step.item), present, present, present)

    def _notice(self, step):
        place = step.place or self.position.get(step.by, "")
        present = set(self._at.get(place, ())) | ({step.by} if step.by else set())
        holder = self._said(step.item, step.holder, step.by)
        believers = present - {step.by} if step.by else present
        self._record(step.item, holder, believers, present, present)

    def _tell(self, step):
        holder = self._said(step.item, step.holder, step.by)
        hearing = {step.who, *step.together} | ({step.by} if step.by else set())
        self._record(step.item, holder, {step.who}, hearing, hearing)

    # The rules

    def _said(self, item, holder, by):
        if holder is not None:
            return holder
        if by:
            return self._believes.get(by, {}).get(item, self.holder.get(item))
        return self.holder.get(item)

    def _concealed(self, item):
        """Return whether ``item`` cannot be seen: hidden, or inside a hidden or closed container."""
        if item in self._hidden:
            return True
        holder = self.holder.get(item)
        for _ in range(MAX_CHAIN):
            if holder not in self.holder:
                return False
            if holder in self._closed or holder in self._hidden:
                return True
            holder = self.holder[holder]
        return True

    def _visible(self, roots):
        """Return (the items visible from ``roots``, the holders looked into).

        A root is a place, a character or a container. A place's own view is kept until something there changes: arrivals far
        outnumber changes, and each would otherwise walk every item in the room.
        """
        views = []
        for root in roots:
            view = self._views.get(root)
            if view is None:
                view = self._walk(root)
                if root not in self.position and root not in self.holder:  # a place
                    self._views[root] = view
            views.append(view)
        if len(views) == 1:
            return views[0]
        seen, looked = dict(views[0][0]), set(views[0][1])
        for more_seen, more_looked in views[1:]:
            seen.update(more_seen)
            looked |= more_looked
        return seen, looked

    def _walk(self, root, keeper=""):
        """Return (the items visible from ``root``, the holders looked into); ``keeper`` sees what it holds hidden."""
        seen, looked = {}, set()
        stack = [root]
        while stack:
            holder = stack.pop()
            if holder in looked or holder in self._closed or (holder in self._hidden
                                                              and self.holder.get(holder) != keeper):
                continue  # nobody sees into a closed or hidden container (but its keeper into its own)
            looked.add(holder)
            for item in self._held.get(holder, ()):
                if item not in self._hidden or (keeper and holder == keeper):
                    seen[item] = holder
                    stack.append(item)
        return seen, looked

    def _look(self, lookers, witnesses, roots, *, own=""):
        """``lookers`` see what is visible from ``roots``; ``witnesses`` know that they do.

        A looker who believed an item held by one of the holders looked into,
        and finds it is not there, no longer knows where it is. ``own``: the
        one looker whose own things are looked at too, hidden ones included
        (nobody else sees what it hides).
        """
        seen, looked = self._visible(roots)
        mine = {}
        if own:
            mine, into = self._walk(own, keeper=own)
            looked = looked | into
        for who in lookers:
            believed_in = self._believed_in.get(who, {})
            gone = [item for holder in looked for item in believed_in.get(holder, ())
                    if item not in seen and item not in mine and self.holder.get(item) != holder]
            self._believe(who, seen)
            if who == own:
                self._believe(who, mine)
            if gone:
                self._believe(who, dict.fromkeys(gone, UNKNOWN))
                self._share(dict.fromkeys(gone, UNKNOWN), witnesses, {who})
        self._share(seen, witnesses, witnesses)

    def _record(self, item, holder, believers, witnesses, subjects):
        for who in believers:
            self._believe(who, {item: holder})
        self._share({item: holder}, witnesses, subjects)

    def _believe(self, who, items):
        """``who`` now believes each of ``items`` (item -> holder) is where it says."""
        believes = self._believes.setdefault(who, {})
        changed = {item: holder for item, holder in items.items() if believes.get(item, _MISSING) != holder}
        if not changed:
            return
        believed_in = self._believed_in.setdefault(who, {})
        for item, holder in changed.items():
            old = believes.get(item)
            if old is not None:
                believed_in[old].discard(item)
            if holder is not None:
                believed_in.setdefault(holder, set()).add(item)
        believes.update(changed)

    def _share(self, items, witnesses, subjects):
        """Each witness now thinks each subject believes ``items``; nothing to keep when one alone saw it."""
        if not items or not subjects or (len(witnesses) == 1 and witnesses == subjects):
            return
        record = _Record(items, frozenset(witnesses), frozenset(subjects))
        for who in record.witnesses:
            self._witnessed.setdefault(who, []).append(record)


_HANDLERS = {
    Move: Minds._move,
    Change: Minds._change,
    Container: Minds._container,
    Reveal: Minds._reveal,
    Notice: Minds._notice,
    Tell: Minds._tell,
}


def derive(steps, minds=None):
    """Return the Minds after ``steps`` (continuing ``minds`` when given: steps are applied in order)."""
    minds = minds if minds is not None else Minds()
    for step in steps:
        minds.apply(step)
    return minds


def perceivers(place, positions, exits):
    """Return ``{who: "present" | "nearby"}``: who can perceive an event at ``place``.

    Present: at ``place``. Nearby (▶ D13): at a place joined to it by an open
    exit in either direction (a door open to the next room carries sound both
    ways). ``positions`` maps a character to its place; ``exits`` holds
    ``(from, to, state)`` triples, state ``open`` | ``locked`` | ``blocked``.
    """
    neighbours = set()
    for start, end, state in exits:
        if state != "open":
            continue
        if start == place:
            neighbours.add(end)
        elif end == place:
            neighbours.add(start)
    neighbours.discard(place)
    found = {}
    for who, where in positions.items():
        if not where:
            continue
        if where == place:
            found[who] = "present"
        elif where in neighbours:
            found[who] = "nearby"
    return found


def perception_refusal(who, place, positions, exits, *, name=lambda key: key):
    """Return why ``who`` cannot have perceived an event at ``place`` as it happened, or "" when they can.

    A perception learned later (told, or inferred) is not bound by presence;
    this checks witnessing and hearing only.
    """
    if who in perceivers(place, positions, exits):
        return ""
    where = positions.get(who)
    at = f"in {name(where)}" if where else "nowhere on the map"
    return (f"{name(who)} was not present or nearby ({at}; {name(place)} is not one open exit away); "
            "record how they learned it later as told or inferred, or correct where they were")
