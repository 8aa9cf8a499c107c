"""A table's round (issue 30): when it plays, what its input says, how its narration splits by stage. Pure.

At a table several people play one story in game-master mode, each one
character (a seat). Each sends their character's action for the round; the
actions wait, each kept exactly as sent, until the round plays once:

- when every *present* seated player (a socket open on the play page) has
  sent one, or
- when the owner says go, or
- when the table's timer (``round_timer_seconds``, off by default) has run
  out since the round's first action.

Absent players' characters are not spoken for: they act as the game
master's characters do (the game master may activate them where the player
is, the off-stage step elsewhere). Present ones are never voiced by the
model (``voiced_by_people``).

Where the seated characters are in different places, each place is a stage:
the round's input lists each stage's actions under its place, and the
narrator is asked to write one part per stage, each opened by its line
``[At <place>]`` (``direction``). ``split`` cuts the narration at those
lines; a part goes to the characters of its stage only. Text the narrator
wrote outside a recognised stage's line goes to no seat (the owner still
reads the whole reply): a narrator that ignores the format never leaks one
place's scene into another's.

What a seat sees of the others (``presence_for``): everyone's name, whether
they are here, whether they have sent, whether they are typing (never what
they type); the character's name and the action's text only for characters
in the viewer's own place. The owner sees everything.
"""

import re
from dataclasses import dataclass, field

# Why a round plays (shown on the round panel and kept in the round's report).
EVERYONE = "everyone here has sent their action"
GO = "the game master said go"
TIMER = "the table's timer ran out"
# Typing shows for this long after the last keystroke message; a seat's messages closer than THROTTLE are dropped.
TYPING_SECONDS = 5.0
TYPING_THROTTLE = 2.0
# An action is a player's line: as long as a turn's action may be.
MAX_ACTION = 4000


@dataclass(frozen=True)
class Seated:
    """One seated player as the round sees them: their character, whether they are here, where the character is."""

    character: str  # the character's key
    name: str  # the character's name
    person: str = ""  # the person's name (their account)
    present: bool = False  # a play socket of theirs is open
    place: str = ""  # the character's place key at the round's head ("" unknown)
    place_name: str = ""


@dataclass(frozen=True)
class Sent:
    """One action waiting in the round: whose, and its text exactly as sent."""

    character: str
    text: str
    pk: int = 0


@dataclass(frozen=True)
class Decision:
    play: bool
    why: str = ""
    waiting: tuple = ()  # characters of present players who have not sent yet


def decide(seated, sent, *, go=False, timer_due=False):
    """Return whether the round plays now: ``seated`` (Seated), ``sent`` (the characters with an action waiting).

    The owner's go plays it whatever has been sent; the timer plays it when
    at least one action waits; otherwise it plays when every present seated
    player has sent one (and at least one has, and someone is here).
    """
    sent = set(sent)
    waiting = tuple(s.character for s in seated if s.present and s.character not in sent)
    if go:
        return Decision(True, GO, waiting)
    if timer_due and sent:
        return Decision(True, TIMER, waiting)
    if sent and not waiting and any(s.present for s in seated):  # nobody here: it waits for someone to come back
        return Decision(True, EVERYONE)
    return Decision(False, "", waiting)


def voiced_by_people(seated, sent):
    """Return the characters the model must not speak for this round: those whose player is here or has sent."""
    sent = set(sent)
    return frozenset(s.character for s in seated if s.present or s.character in sent)


@dataclass(frozen=True)
class Stage:
    """One place where seated characters are this round, and who of them is there."""

    place: str
    name: str
    present: tuple  # character keys, in seat order


def stages(seated):
    """Return the round's stages: one per place with seated characters, in the order the seats come."""
    order, members, names = [], {}, {}
    for seat in seated:
        if seat.place not in members:
            order.append(seat.place)
            members[seat.place] = []
            names[seat.place] = seat.place_name or "somewhere"
        members[seat.place].append(seat.character)
    return [Stage(place, names[place], tuple(members[place])) for place in order]


def compose(sent, seated, stages_):
    """Return the round's input: each action exactly as sent, under its character's name (and its stage's place
    when the characters are apart), in seat order; the characters of present players who sent nothing say so."""
    names = {s.character: s.name for s in seated}
    by_character = {a.character: a for a in sent}
    lines_of = {}
    for stage in stages_:
        lines = []
        for key in stage.present:
            if key in by_character:
                lines.append(f"{names.get(key, key)}: {by_character[key].text}")
        lines_of[stage.place] = lines
    if len(stages_) <= 1:
        return "\n".join(line for lines in lines_of.values() for line in lines)
    parts = []
    for stage in stages_:
        if lines_of[stage.place]:
            parts.append(f"At {stage.name}:\n" + "\n".join(lines_of[stage.place]))
    return "\n\n".join(parts)


def direction(stages_):
    """Return what the narrator is told when the characters are apart: one part per stage, each opened by its
    line; empty when they are together."""
    if len(stages_) <= 1:
        return ""
    heads = " then ".join(header(stage) for stage in stages_)
    return ("The characters are in different places: narrate each place apart, as its own scene, in this order: "
            f"{heads}. Begin each part with its line alone, exactly as written, and tell in a part only what "
            "happens there.")


def header(stage):
    return f"[At {stage.name}]"


_HEADER = re.compile(r"^[ \t]*\[At ([^\]\n]{1,200})\][ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class Part:
    """One part of a round's narration: where it is told and who of the seated characters was there."""

    place: str  # "" for text outside any stage (the owner's only)
    name: str
    present: tuple
    text: str


def split(narration, stages_, *, lines="", lines_at=""):
    """Return the Parts of ``narration`` by stage. ``lines`` (the characters' spoken lines of the round: the game
    master's characters speak where the player's character is, ``lines_at``) open that stage's part, or are a
    part of their own with no one present when no seated character is there.

    One stage: the whole narration is its part. Several: cut at each
    ``[At <place>]`` line naming a stage; text before the first line, or
    under a line naming no stage, is a part with no one present.
    """
    spoken = next((stage for stage in stages_ if stage.place == lines_at), None)
    said = [Part(spoken.place, spoken.name, spoken.present, lines) if spoken else Part("", "", (), lines)] \
        if lines else []
    if not stages_:
        return [*said, Part("", "", (), narration.strip())]
    if len(stages_) == 1:
        stage = stages_[0]
        return [*said, Part(stage.place, stage.name, stage.present, narration.strip())]
    by_name = {_norm(stage.name): stage for stage in stages_}
    parts, cuts = [], list(_HEADER.finditer(narration))
    before = narration[:cuts[0].start()] if cuts else narration
    if before.strip():
        parts.append(Part("", "", (), before.strip()))
    for index, cut in enumerate(cuts):
        end = cuts[index + 1].start() if index + 1 < len(cuts) else len(narration)
        text = narration[cut.end():end].strip()
        stage = by_name.get(_norm(cut.group(1)))
        if stage is None:
            parts.append(Part("", cut.group(1).strip(), (), text))
        elif text:
            parts.append(Part(stage.place, stage.name, stage.present, text))
    return [*said, *parts]


def _norm(name):
    return " ".join(name.lower().removeprefix("the ").split())


@dataclass(frozen=True)
class Shown:
    """One seat as a viewer sees it on the round panel."""

    person: str
    character: str  # the character's name, or "" when the viewer may not see it
    here: bool
    sent: bool
    typing: bool
    text: str = ""  # the action's text, only for the owner and for characters in the viewer's place
    own: bool = False
    mine_key: str = field(default="", compare=False)


def presence_for(viewer, seated, sent, typing=()):
    """Return what ``viewer`` (a character key, or None for the owner) sees of the table: a Shown per seat.

    ``sent`` maps characters to their waiting Sent; ``typing`` are the
    characters typing now. A player sees every seat's person, here, sent and
    typing; the character's name and the action's text only for a character
    in their own place (their own included).
    """
    place = next((s.place for s in seated if s.character == viewer), None)
    shown = []
    for seat in seated:
        own = seat.character == viewer
        near = viewer is None or own or (place is not None and seat.place == place and place != "")
        action = sent.get(seat.character)
        shown.append(Shown(seat.person, seat.name if near else "", seat.present, action is not None,
                           seat.character in typing and not own, action.text if (near and action) else "", own,
                           seat.character if near else ""))
    return shown
