"""A character's brief (seed 002 角色简报): everything it is told before it acts, and nothing else, pure.

From the world the brief takes what the character itself sees and knows:
its place (description, at most 12 features, 12 exits and 12 items, notable
first, never hidden ones or what is shut away), who is there with their
public state, its own relationships toward them only, and the names of
what it knows of (knowing a place says nothing of what is in it). Story
time and minds hand in what they have already filtered for this viewer
(``Given``): the time, its agenda as plans rather than orders, the variables
it may see, the announced triggers meant for it (nearest 3) and its cues,
its lore titles (never bodies) and at most 12 recalled memories (plus 2
associated), in its own wording. Nothing about another character's inner
life, nothing hidden, nothing of other places, no accuracy label: the
composer has no way to name them.
"""

from dataclasses import dataclass, field

from campaigns.state.world import world

# Seed 002: 「最多 12 条」 recalled, 「最多再关联 2 条」, the triggers 「最近三项」, the agenda's 「前三个目标」.
MAX_MEMORIES = 12
MAX_ASSOCIATED = 2
MAX_ANNOUNCED = 3
# Where it believes things are: the items named this round and those about it first, like a view's items.
MAX_WHEREABOUTS = 12
# ▶ What one kind of known thing lists before "and N more": names only, but a map of a city is still long.
MAX_KNOWN = 40


@dataclass(frozen=True)
class Given:
    """What story time, minds and lore hand the brief, already chosen for this character (plain lines)."""

    now: str = ""  # "Friday 14 March 2031, 08:00 in the morning"
    agenda: tuple = ()  # agenda.Agenda.lines(): now, next, due, "Plans (not orders): …"
    variables: tuple = ()  # variables.view(viewer=who, present=…).lines: its own, and the public ones of those there
    announced: tuple = ()  # triggers.announcements_for(who, …): at most 3, with date and time left
    cues: tuple = ()  # triggers.cues_for(who, …): each once
    lore: tuple = ()  # lore.titles(…): titles, never bodies
    memories: tuple = ()  # the recalled wording, story order, at most 12
    associated: tuple = ()  # evoked by association, at most 2
    whereabouts: tuple = ()  # where it believes things are (whereabouts.minds_at(...).believes(who)), at most 12
    manner: str = ""  # its character card's personality (campaigns.CharacterCard), whole
    speech: str = ""  # how its card shows it speaking (the card's example messages), cut to SPEECH_CHARS


LORE = "Lore you know (titles; ask for an entry to read it)"
# A card's example messages in a character's brief: enough to catch its voice in every round it speaks.
SPEECH_CHARS = 1_500


@dataclass(frozen=True)
class Brief:
    who: str
    sections: tuple  # (title, lines)
    left_out: dict = field(default_factory=dict)  # what the caps left out, by what

    @property
    def text(self):
        return "\n\n".join("\n".join([title, *lines]) for title, lines in self.sections if lines)

    @property
    def has_lore(self):
        """Return whether the brief lists lore the character may read (the background question is then asked)."""
        return any(title == LORE and lines for title, lines in self.sections)

    def data(self):
        """Return the brief as it is stored for the inspector (``Round.briefs[who]``)."""
        return {"text": self.text, "sections": [[title, list(lines)] for title, lines in self.sections],
                "left_out": dict(self.left_out)}


def compose(state, who, given=Given()):
    """Return the Brief of character ``who`` on ``state`` (a whole State), with what ``given`` hands in."""
    name = state.name_of
    view = world.character_view(state, who)
    place = view["place"]
    left_out = {}
    me = state.entity(who)
    condition = state.get(f"condition:{who}")
    yourself = [f"You are {name(who)}" + (f", {me.data.get('description')}" if me and me.data.get("description")
                                          else "") + "."]
    if me and me.data.get("personality"):
        yourself.append(f"Your nature: {me.data['personality']}")
    if condition is not None:
        data = condition.data
        yourself += [f"{label}: {value}" for label, value in (("You are", condition.value),
                                                              ("Doing", data.get("activity", "")),
                                                              ("Mood", data.get("mood", "")),
                                                              ("Inside", data.get("inner", ""))) if value]
    if given.manner:
        yourself.append(f"Your manner: {given.manner}")
    sections = [("Who you are", yourself)]
    if given.speech:
        sections.append(("How you speak (examples of your manner, not things that happened)", [given.speech]))
    if given.now:
        sections.append(("Time", [f"Now: {given.now}"]))
    here = []
    if place is not None:
        here.append(f"You are at {place.name}" + (f": {place.description}" if place.description else "."))
        here += [f"Feature: {r.data.get('name', '')}" + (f" — {r.value}" if r.value != r.data.get("name") else "")
                 for r in place.features]
        here += [f"Exit: {world.describe_exit(state, e)}" + (f" ({e.state})" if e.state != "open" else "")
                 for e in place.exits]
        here += [f"You see: {', '.join(_item(i) for i in place.items)}"] if place.items else []
        left_out.update({k: v for k, v in place.left_out.items() if v and k != "unseen"})
        others = [key for key in place.people if key != who]
        here += [f"With you: {_person(state, key)}" for key in others]
    else:
        here.append("You are nowhere the story knows.")
    sections.append(("Where you are", here))
    toward = [f"{name(key)}: {_relation(record)}" for key, record in view["relationships"].items()]
    sections.append(("How you see those here", toward))
    known = []
    for kind, names in sorted(view["known"].items()):
        if kind == "lore":
            continue  # lore is listed by title below, never by key
        shown = names[:MAX_KNOWN]
        if len(names) > MAX_KNOWN:
            left_out[f"known {kind}"] = len(names) - MAX_KNOWN
        if shown:
            known.append(f"{kind.capitalize()}s you know of: {', '.join(shown)}"
                         + (f" (and {len(names) - MAX_KNOWN} more)" if len(names) > MAX_KNOWN else ""))
    sections.append(("What you know of (names only: not where anything is now)", known))
    sections.append((LORE, [f"- {t}" for t in given.lore]))
    sections.append(("Your day (plans, not orders)", list(given.agenda)))
    sections.append(("What you can tell of yourself and those here", list(given.variables)))
    announced = list(given.announced)[:MAX_ANNOUNCED]
    if len(given.announced) > MAX_ANNOUNCED:
        left_out["announced"] = len(given.announced) - MAX_ANNOUNCED
    sections.append(("Announced", announced + list(given.cues)))
    memories = list(given.memories)[:MAX_MEMORIES] + list(given.associated)[:MAX_ASSOCIATED]
    if len(given.memories) > MAX_MEMORIES:
        left_out["memories"] = len(given.memories) - MAX_MEMORIES
    sections.append(("What you remember (your own version)", [f"- {m}" for m in memories]))
    believed = list(given.whereabouts)[:MAX_WHEREABOUTS]
    if len(given.whereabouts) > MAX_WHEREABOUTS:
        left_out["whereabouts"] = len(given.whereabouts) - MAX_WHEREABOUTS
    sections.append(("Where you last saw things (what you believe, not what is)", [f"- {w}" for w in believed]))
    return Brief(who, tuple((title, tuple(lines)) for title, lines in sections), left_out)


def _item(item):
    return f"{item.quantity} {item.name}" if item.quantity != 1 else item.name


def _person(state, key):
    record = state.get(f"condition:{key}")
    public = record.value if record is not None else ""
    doing = record.data.get("activity", "") if record is not None else ""
    # Another's inner state and mood are theirs: only what shows (their public state, what they are doing).
    shown = "; ".join(part for part in (public, doing) if part)
    return f"{state.name_of(key)}" + (f" ({shown})" if shown else "")


def _relation(record):
    data = record.data
    felt = ", ".join(f"{axis} {data[axis]:g}" for axis in world.AXES if data.get(axis))
    label = data.get("label", "")
    parts = [part for part in (label, felt, record.value) if part]
    return "; ".join(parts) if parts else "met, nothing more"

