"""The story as a viewer may know it: the one view every panel, fragment, frame and export of a player page reads.

ARCHITECTURE "Who sees what". A viewer is a character (the player's, or one
seat at a table) or the author. For a character the view holds what it may
know: its knowledge records (places, exits, items, people met or heard of,
lore), its own perceptions and beliefs, its own conditions, relationships,
plans and private variables, what it sees where it is, the public story and
the clock. It never holds narrator-only facts, other characters' inner
states, routines, briefs, plans or beliefs, hidden items, features and exits,
secret triggers, or where someone is whom it cannot see. The author's view is
everything, as the panels showed before there was a player's view.

Pure: a ``State``, the line's minds (``minds``: a callable, read only when a
part of the view needs beliefs) and plain values in, plain values out. The
only way to the whole State is ``View.everything``, which a player's view
refuses: a player's panel that reaches for it is a defect a test finds.
"""

from dataclasses import dataclass, field, replace

from . import worldmap
from .state import selection
from .state.reading import PROTAGONIST, normalize
from .state.time import rulebook, triggers, variables
from .state.world import world

# How a character learned of an exit decides whether it knows the exit's state: what it saw (or the world file
# says it has known since the start) it knows as it is; what it was told of, it has not seen open or shut.
SEEN = ("observed", "world")


@dataclass(frozen=True)
class Viewer:
    """Who the story is shown as: a character's key, or the author (``author``: everything)."""

    who: str = PROTAGONIST
    author: bool = False


class NotTheAuthor(Exception):
    """A player's view was asked for what only the author's view holds; the message says which part."""


@dataclass(frozen=True)
class Person:
    key: str
    name: str
    condition: str = ""  # what anyone can see: hurt, soaked, asleep
    activity: str = ""
    mood: str = ""
    inner: str = ""  # the author's view only
    known: dict = field(default_factory=dict, hash=False, compare=False)  # the author's view: what they know of


@dataclass(frozen=True)
class Way:
    """One exit from where the viewer is, as the viewer sees it, and what the viewer can do with it."""

    exit: world.Exit
    to: str  # the destination's name
    state: str  # open | locked | blocked
    key: str = ""  # the key (an item the viewer holds) that unlocks it, when it is locked
    key_name: str = ""
    hidden: bool = False  # the author's view: a hidden exit, shown marked

    @property
    def slot(self):
        return self.exit.slot


@dataclass(frozen=True)
class Thing:
    """One item the viewer sees (or, for the author, one that is there unseen), and what the viewer can do with it."""

    item: world.Item
    chain: tuple = ()  # names from the item up through its holders
    carried: bool = False  # the viewer holds it (in hand, worn, or in something it carries)
    in_hand: bool = False  # the viewer holds it directly (Drop, Put in…, Give to…)
    reachable: bool = False  # lying where the viewer can take it
    unseen: str = ""  # the author's view: why the characters cannot see it
    owner: str = ""
    into: tuple = ()  # [(key, name)]: the open containers it can be put in (Put in…)

    @property
    def key(self):
        return self.item.key


@dataclass
class Here:
    """Where the viewer is, and everything the viewer sees and can do there."""

    place: str
    name: str
    description: str
    features: list  # feature Records (hidden ones for the author only, marked)
    ways: list  # [Way]
    people: list  # [Person], the viewer left out
    things: list  # [Thing] here, not the viewer's
    carried: list  # [Thing] the viewer has
    containers: list = field(default_factory=list)  # [(key, name)]: open containers the viewer can put things in
    unseen: list = field(default_factory=list)  # [Thing]: the author's view only


@dataclass(frozen=True)
class Known:
    """An item the viewer knows of, and where it believes the item is."""

    key: str
    name: str
    where: str  # in words: "you carry it", "at The quay", "in the satchel", "you do not know where"
    place: str = ""  # the place it is believed to be at (for grouping), "" when unknown or carried
    carried: bool = False


class View:
    """The story as ``viewer`` may know it at one line of the story (``view`` makes one)."""

    def __init__(self, state, viewer, minds=None, *, time_zone="UTC", depth=None):
        self._state = state
        self.viewer = viewer
        self._minds = minds
        self.time_zone = time_zone
        self.depth = depth  # the depth of the line's head, when the view is of one
        self._known_keys = self._here_keys = self._seen_keys = None  # read once, when first asked

    @property
    def author(self):
        return self.viewer.author

    @property
    def who(self):
        return self.viewer.who

    @property
    def everything(self):
        """Return the whole State: the author's view only."""
        if not self.author:
            raise NotTheAuthor("the whole story state is the author's view; a player's page reads the View")
        return self._state

    def minds(self):
        """Return the line's minds (who believes what is where), read once."""
        if callable(self._minds):
            self._minds = self._minds()
        return self._minds

    # ------------------------------------------------------------ names and knowledge

    def name_of(self, key):
        """Return the name of ``key`` when the viewer may know it exists; "someone"/"something" otherwise."""
        state = self._state
        if self.author or key == self.who or self.knows(key):
            return state.name_of(key)
        return {"character": "someone", "place": "somewhere"}.get(world.kind_of(state, key), "something")

    def knows(self, key):
        """Whether the viewer knows ``key`` exists: it has a knowledge record of it, met it, or sees it now."""
        if self.author or key == self.who:
            return True
        return key in self._known_to_exist()

    def _known_to_exist(self):
        """Return the keys the viewer knows exist, read once (a panel asks of hundreds)."""
        if self._known_keys is None:
            known = {target for kind, targets in world.knowledge(self._state, self.who).items() if kind != "exit"
                     for target in targets}
            self._known_keys = known | set(world.relationships_of(self._state, self.who)) | self._present() \
                | self._seen_items()
        return self._known_keys

    def _place(self):
        return self._state.location_of(self.who)

    def _present(self):
        if self._here_keys is None:
            place = self._place()
            self._here_keys = {key for key in self._state.at(place)
                               if world.kind_of(self._state, key) == "character"} if place else set()
        return self._here_keys

    def _seen_items(self):
        if self._seen_keys is None:
            place = self._place()
            self._seen_keys = {item.key for item in world.visible_items(self._state, self.who, place)} \
                if place else set()
        return self._seen_keys

    # ------------------------------------------------------------ here

    def here(self):
        """Return ``Here`` for where the viewer is, or None when it is nowhere known.

        The viewer's own things are listed apart with what it can do with
        them; what lies about with Take; exits with Go (and, locked, the key
        it holds that opens them). The author also sees hidden features,
        exits and items, marked, and everyone's inner state.
        """
        state, who = self._state, self.who
        place = self._place() or (state.place() if self.author else "")
        if not place:
            return None
        view = world.place_view(state, place, who, everything=self.author, cap=False)
        carried, things = [], []
        for item in view.items:
            holder = world.holding_character(state, item.key)
            thing = self._thing(item, carried=holder == who, in_hand=item.holder == who,
                                reachable=holder == "" and not item.gone)
            (carried if holder == who else things).append(thing)
        containers = [t for t in [*carried, *things] if t.item.container == "open" and (t.carried or t.reachable)]
        carried = [replace(t, into=tuple((c.key, c.item.name) for c in containers
                                         if t.key not in world.holding_chain(state, c.key)))
                   if t.in_hand else t for t in carried]
        return Here(
            place, view.name, view.description, view.features,
            [self._way(exit) for exit in view.exits],
            [self.person(key) for key in view.people if key != who],
            things, carried,
            containers=[(c.key, c.item.name) for c in containers],
            unseen=[self._thing(item, unseen=world.obstacle(state, item.key, who)) for item in view.unseen],
        )

    def _thing(self, item, **marks):
        chain = tuple(self._state.name_of(key) for key in world.holding_chain(self._state, item.key))
        owner = self._state.name_of(item.owner) if item.owner and self.knows(item.owner) else ""
        return Thing(item, chain, owner=owner, **marks)

    def _way(self, exit):
        state = self._state
        key = ""
        if exit.state == "locked" and exit.opener and world.holding_character(state, exit.opener) == self.who:
            key = exit.opener
        return Way(exit, state.name_of(exit.to), exit.state, key, state.name_of(key) if key else "",
                   hidden=exit.hidden)

    def person(self, key):
        """Return ``Person`` ``key`` as the viewer sees them: their public condition; inside, for the author."""
        record = self._state.get(f"condition:{key}")
        data = record.data if record else {}
        if not self.author:
            return Person(key, self._state.name_of(key), record.value if record else "", data.get("activity", ""),
                          data.get("mood", ""))
        return Person(key, self._state.name_of(key), record.value if record else "", data.get("activity", ""),
                      data.get("mood", ""), data.get("inner", ""), world.known_entities(self._state, key))

    def people_known(self):
        """Return [(key, name, names)] of the characters the viewer knows (met, heard of, or sees), by name."""
        state = self._state
        found = []
        for key in world.characters(state):
            entity = state.entity(key)
            if key == self.who or entity is None or not self.knows(key):
                continue
            names = [name for name in (entity.value, *entity.data.get("aliases", ())) if name]
            found.append((key, state.name_of(key), names))
        return found

    # ------------------------------------------------------------ the map and the items

    def map(self):
        """Return the worldmap.Map: the places and exits the viewer knows (the author: every one)."""
        return worldmap.draw(self._state, self.who, everything=self.author, seen=SEEN)

    def known_items(self):
        """Return [Known]: the items the viewer knows of, each where it believes it is (the author: the truth)."""
        state, who = self._state, self.who
        if self.author:
            keys = [r.subject for r in state.entities() if r.data.get("kind") == "item"]
            where = {key: state.holder_of(key) or None for key in keys}
        else:
            believed = self.minds().believes(who) if self._minds is not None else {}
            known = set(world.knowledge(state, who).get("item", {})) | set(believed) | self._seen_items()
            keys = [key for key in known if world.kind_of(state, key) == "item"]
            where = {key: believed.get(key) for key in keys}
            for key in self._seen_items():  # what it sees now, it sees where it is
                where[key] = state.holder_of(key) or None
        found = []
        for key in keys:
            item = world.item_of(state, key)
            if item is None or item.gone:
                continue
            found.append(self._known(item, where.get(key)))
        return sorted(found, key=lambda known: (normalize(known.name), known.key))

    def _known(self, item, holder):
        state, who = self._state, self.who
        chain = [item.key]
        while holder and len(chain) < world.MAX_CHAIN and holder not in chain:
            chain.append(holder)
            if world.kind_of(state, holder) != "item":
                break
            holder = state.holder_of(holder) if (self.author or self.knows(holder)) else ""
        carried = who in chain[1:]
        top = chain[-1] if len(chain) > 1 else ""
        kind = world.kind_of(state, top)
        place = top if kind == "place" else (state.location_of(top) if kind == "character" and
                                             (self.author or top in self._present() or top == who) else "")
        if len(chain) == 1:
            words = "you do not know where" if not self.author else "nowhere"
        elif carried:
            words = "you have it" if chain[1] == who else f"in the {state.name_of(chain[1])}, which you have"
        else:
            first = chain[1]
            kind = world.kind_of(state, first)
            words = (f"with {self.name_of(first)}" if kind == "character" else f"at {self.name_of(first)}"
                     if kind == "place" else f"in the {self.name_of(first)}")
        return Known(item.key, item.name, words, place if not carried else "", carried)

    # ------------------------------------------------------------ what the viewer knows, as records

    def entities(self):
        """Return the entity Records (people, places, things, factions) the viewer knows of, by name."""
        state = self._state
        records = state.entities()
        if not self.author:
            records = [r for r in records if self.knows(r.subject) or
                       (r.data.get("kind") == "faction" and not r.narrator_only)]
        return sorted(records, key=lambda r: normalize(r.value))

    def records(self, kind):
        """Return the Records of ``kind`` the viewer may know: for a character, the public facts and threads, its
        own relationships, the conditions of those it sees, what it and they visibly hold, and where they are."""
        state, who = self._state, self.who
        found = state.of_kind(kind)
        if self.author:
            return found
        if kind in ("fact", "thread"):
            return [r for r in found if not r.narrator_only and (not r.subject or self.knows(r.subject))]
        if kind == "relationship":
            return [r for r in found if r.subject == who and not r.narrator_only
                    and self.knows(r.data.get("object", ""))]
        present = self._present() | {who}
        if kind in ("condition", "location"):
            return [r for r in found if r.subject in present and not r.narrator_only]
        if kind == "holder":
            seen = self._seen_items()
            return [r for r in found if r.subject in seen and r.value in present]
        return []

    def describe(self, record):
        """Return one of the viewer's Records (``records``, ``entities``) as the panel's line."""
        return selection.describe(self._state, record)

    def scene(self):
        """Return the scene's text the viewer may read ("" when it is the narrator's alone)."""
        scene = self._state.scene()
        if scene is None or (scene.narrator_only and not self.author):
            return ""
        return scene.value

    def protagonist(self):
        return self._state.entity(PROTAGONIST)

    # ------------------------------------------------------------ beliefs

    def beliefs(self, who=None):
        """Return [(item key, item name, where in words)] of where ``who`` (the viewer) believes things are.

        A player's view holds its own beliefs only: asking for someone
        else's is the author's view.
        """
        who = who or self.who
        if who != self.who and not self.author:
            raise NotTheAuthor(f"what {who} believes is the author's view")
        state = self._state
        rows = [(item, state.name_of(item), self._where(holder))
                for item, holder in self.minds().believes(who).items() if world.kind_of(state, item) == "item"]
        return sorted(rows, key=lambda row: (normalize(row[1]), row[0]))

    def _where(self, holder):
        """Return where ``holder`` is, in words the viewer may read."""
        if holder is None:
            return "somewhere unknown"
        kind = world.kind_of(self._state, holder)
        name = self.name_of(holder)
        if holder == self.who:
            return "with you"
        return f"with {name}" if kind == "character" else f"at {name}" if kind == "place" else f"in the {name}"

    def belief_records(self):
        """Return the viewer's own belief Records (what it thinks, in its words)."""
        return sorted((r for r in self._state.of_kind("belief") if r.subject == self.who),
                      key=lambda r: (-(r.depth or 0), r.slot))

    # ------------------------------------------------------------ story time and world rules

    def clock(self):
        return rulebook.clock_of(self._state)

    def calendar(self):
        """Return the story's calendar (its seasons, festivals and markers are anyone's to know)."""
        return rulebook.calendar_of(self._state)

    def clock_notice(self):
        """Return what the clock says about the turn at the head (time caught up while the person was away)."""
        record = self._state.get("clock")
        return record.data.get("notice", "") if record and self.depth is not None and record.depth == self.depth \
            else ""

    def clock_provenance(self):
        record = self._state.get("clock")
        return record.provenance if record and self.author else ""

    def whereabouts(self):
        """Return the keys of the characters whose whereabouts the viewer may know: itself and those it sees now
        (the author: everyone), the viewer first."""
        keys = world.characters(self._state) if self.author else sorted(self._present() | {self.who})
        return sorted(keys, key=lambda key: (key != self.who, normalize(self._state.name_of(key))))

    def where_is(self, key):
        """Return the place of ``key`` if the viewer may know it, else ""."""
        if self.author or key in self._present() or key == self.who:
            return self._state.location_of(key)
        return ""

    def routines(self):
        """Return {who: agenda.Routine}: the author's view alone (a routine is its character's own)."""
        return rulebook.routines_of(self._state) if self.author else {}

    def intents(self):
        """Return the goals the viewer may know: its own (the author: everyone's)."""
        return [i for i in rulebook.intents_of(self._state) if self.author or i.who == self.who]

    def engagements(self):
        """Return the engagements the viewer is part of (the author: every one)."""
        return [e for e in rulebook.engagements_of(self._state) if self.author or self.who in e.who]

    def announcements(self):
        """Return the announced, still-coming triggers the viewer is in the audience of, in words (nearest first)."""
        now = self.clock()
        return triggers.announcements_for(self.who, rulebook.triggers_of(self._state),
                                          world=rulebook.StateWorld(self._state), now_ms=now.at if now else None,
                                          tz=self.time_zone, limit=triggers.NEAREST)

    def triggers(self):
        """Return [(Trigger, Status)] of every trigger: the author's view only (a trigger not announced is secret
        until it fires, and what it does after is told by the story)."""
        if not self.author:
            raise NotTheAuthor("the world's triggers are the author's view")
        return rulebook.triggers_of(self._state)

    def variables(self):
        """Return [(object, name, value, Definition or None)] of the stored values the viewer may see: public ones,
        and its own private ones (the author: every one)."""
        defs = rulebook.definitions_of(self._state)
        found = []
        for (obj, name), value in rulebook.values_of(self._state).items():
            definition = defs.get(name)
            if self.author or (definition is not None and variables.sees(definition, obj, self.who)
                               and (obj == "world" or self.knows(obj))):
                found.append((obj, name, value, definition))
        return found

    def definitions(self):
        """Return the variable Definitions the viewer may know of: the public ones (the author: all)."""
        return [d for d in rulebook.definitions_of(self._state).values()
                if self.author or d.visibility == "public"]

    def rolls(self):
        """Return the roll Records the viewer may see, oldest first: its own and those the player made (the author:
        every one; the game master's other rolls are its own)."""
        return [r for r in rulebook.rolls_of(self._state) if self.author or r.data.get("who") == self.who
                or r.data.get("initiator") == "player"]

    def checks(self):
        return rulebook.checks_of(self._state)


def view(state, viewer, minds=None, *, time_zone="UTC", depth=None):
    """Return the story at ``state`` as ``viewer`` may know it; ``minds()`` reads the line's beliefs when needed."""
    return View(state, viewer, minds, time_zone=time_zone, depth=depth)
