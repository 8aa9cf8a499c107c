"""Off-stage rounds and the away note (seed 002 离场行动), pure.

After a turn is delivered, characters away from the player with a due
engagement or an overdue goal act on their own, as if unobserved: at most
``offstage_per_turn`` of them (0: off), each at most
``offstage_per_character`` times, the oldest item first, one at a time,
their rounds numbered from 100. Items beyond the limit stay due for later
turns; an item nobody could answer is not marked handled and is tried
again. Nothing here has a clock of its own: selection runs only when a turn
is delivered, so nothing runs while the player is away from the app.

Each off-stage answer also gives an ``account``: at most 300 characters,
third person, past tense, no thoughts or secrets (``check_account`` refuses
or trims it, with the reason). The accounts and the turn's schedule moves
make the away note, at most 8 lines (``away_note``), shown once as the
"Meanwhile" card and never part of the story's history.
"""

import re
from dataclasses import dataclass

from campaigns.state.reading import PROTAGONIST
from campaigns.state.time.rules import Refused

from .rounds import OFFSTAGE_FIRST

# Seed 002 离场行动: "最多 300 字符、第三人称过去时、无思想或秘密的 account", "最多八行的 away note".
MAX_ACCOUNT = 300
MAX_NOTE_LINES = 8


@dataclass(frozen=True)
class Due:
    """One item that calls a character away from the player to act: a due engagement or an overdue goal."""

    item: str  # its slot: "engagement:<id>" or "intent:<who>:<id>" (the handled marker names it)
    kind: str  # "engagement" | "intent"
    who: str  # the character who acts
    since: int  # when it fell due (UTC ms): the engagement's time, the goal's deadline
    place: str  # where it happens, when it says ("" otherwise)
    participants: tuple  # who takes part (only they perceive the round)
    text: str  # what it is, in words


@dataclass(frozen=True)
class Run:
    """One off-stage round to play: its number (from 100), who acts and for what."""

    number: int
    due: Due


@dataclass(frozen=True)
class Selection:
    runs: tuple  # Run, in the order they are played (one at a time)
    waiting: tuple  # Due items left for a later turn (beyond the limits)


def due_items(*, positions, protagonist_place, engagements, intents, now_ms, handled=frozenset(),
              excluded=frozenset()):
    """Return the Due items of characters away from the player at ``now_ms``, oldest first.

    ``positions`` maps a character to its place; ``engagements`` and
    ``intents`` are ``agenda.Engagement`` and ``agenda.Intent``. An
    engagement is due when pending at or past its time, a goal when active
    past its deadline. An item the player's character takes part in, or one
    a participant is with the player for, is on stage (the game master's),
    not off stage. ``handled`` holds the slots already answered;
    ``excluded`` the characters who never act on their own (background,
    crowds).
    """
    found = []
    for engagement in engagements:
        slot = f"engagement:{engagement.id}"
        if engagement.status != "pending" or engagement.at > now_ms or slot in handled:
            continue
        people = tuple(engagement.who)
        if PROTAGONIST in people or any(_with_player(positions, who, protagonist_place) for who in people):
            continue
        actors = [who for who in people if who not in excluded]
        if actors:
            found.append(Due(slot, "engagement", actors[0], engagement.at, engagement.place, people,
                             engagement.what))
    for intent in intents:
        slot = f"intent:{intent.who}:{intent.id}"
        if (intent.status != "active" or intent.deadline is None or intent.deadline > now_ms or slot in handled
                or intent.who == PROTAGONIST or intent.who in excluded
                or _with_player(positions, intent.who, protagonist_place)):
            continue
        found.append(Due(slot, "intent", intent.who, intent.deadline, "", (intent.who,), intent.plan))
    return sorted(found, key=lambda due: (due.since, due.item))


def _with_player(positions, who, protagonist_place):
    return bool(protagonist_place) and positions.get(who, "") == protagonist_place


def select(due, *, per_turn, per_character):
    """Return the Selection of ``due`` (oldest first) this turn plays: at most ``per_turn`` rounds, each
    character at most ``per_character`` times, numbered from 100; the rest wait."""
    runs, waiting, taken = [], [], {}
    for item in due:
        if len(runs) < per_turn and taken.get(item.who, 0) < per_character:
            runs.append(Run(OFFSTAGE_FIRST + len(runs), item))
            taken[item.who] = taken.get(item.who, 0) + 1
        else:
            waiting.append(item)
    return Selection(tuple(runs), tuple(waiting))


# --- the account and the away note ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Account:
    text: str
    note: str = ""  # what was changed to make it fit (a trim), in words


# Words that make an account speak as someone, or to someone: the account is told about them (third person).
_PERSONAL = {"i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "ourselves", "you", "your", "yours",
             "yourself", "yourselves", "i'm", "i've", "i'd", "i'll", "we're", "we've", "you're", "you've"}
# Present and future forms that place an account now or later instead of in the past (a heuristic, not a parser:
# the common auxiliaries and the verbs an off-stage action is told with).
_NOT_PAST = {"is", "are", "am", "isn't", "aren't", "has", "have", "hasn't", "haven't", "does", "do", "doesn't",
             "don't", "will", "won't", "shall", "goes", "comes", "walks", "runs", "waits", "stands", "sits",
             "looks", "leaves", "arrives", "gives", "tells", "says", "takes", "makes", "meets", "sees", "finds",
             "returns", "heads", "keeps", "brings", "buys", "sells", "works", "writes", "reads", "opens",
             "closes", "locks", "hides", "watches"}
_IRREGULAR_PAST = {"was", "were", "had", "did", "went", "came", "left", "took", "made", "saw", "said", "told",
                   "gave", "found", "met", "brought", "bought", "sold", "ran", "sat", "stood", "kept", "held",
                   "wrote", "read", "spoke", "sent", "spent", "paid", "lost", "won", "got", "put", "set", "led",
                   "fell", "rode", "drove", "ate", "drank", "slept", "woke", "hid", "shut", "caught", "taught",
                   "began", "rose", "struck", "stole", "swept", "threw", "wore", "tore", "knelt", "lit", "fed",
                   "fled", "hung", "dug", "shook", "broke", "chose", "froze", "bore", "became"}
# Thoughts and secrets: an account says what someone did, not what they thought, felt or hid.
_INNER = {"thought", "thinks", "think", "wondered", "wonders", "felt", "feels", "feared", "fears", "hoped",
          "hopes", "wished", "wishes", "wanted", "wants", "believed", "believes", "suspected", "suspects",
          "knew", "knows", "realised", "realized", "secretly", "secret", "secrets", "privately", "dreamed",
          "dreamt", "worried", "longed"}
# Double quotes only: a single quote is as often an apostrophe (Mara's, the smiths') as a quotation mark.
_QUOTED = re.compile(r"\"[^\"]*\"|“[^”]*”")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_SENTENCE_END = re.compile(r"[.!?…][\"'”’)]*(?=\s|$)")


def check_account(text):
    """Return the Account of an off-stage answer's ``text``, trimmed to 300 characters, or refuse with the reason.

    Refused: an empty account; one told as "I" or to "you" (third person
    only); one with no past-tense verb, or with a present or future one
    (past tense only); one that tells thoughts, feelings or secrets. Quoted
    speech is not judged: what was said may be in any person or tense.
    Longer than 300 characters, it is cut at the last sentence that fits
    (else at a word), and the note says so.
    """
    text = " ".join(str(text or "").split())
    if not text:
        raise Refused("the account is empty; say in one or two sentences what happened off stage")
    words = _WORD.findall(_QUOTED.sub(" ", text).lower())
    personal = sorted({w for w in words if w in _PERSONAL})
    if personal:
        raise Refused(f"an account is told in the third person (“Mara went…”), not with {', '.join(personal)}")
    inner = sorted({w for w in words if w in _INNER})
    if inner:
        raise Refused(f"an account tells what was done, never thoughts or secrets ({', '.join(inner)}); "
                      "leave out what anyone thought, felt or hid")
    present = sorted({w for w in words if w in _NOT_PAST})
    if present:
        raise Refused(f"an account is told in the past tense (“went”, “waited”), not with {', '.join(present)}")
    if not any(w in _IRREGULAR_PAST or (len(w) > 3 and w.endswith("ed")) for w in words):
        raise Refused("an account is told in the past tense (“went”, “waited”): it has no verb in the past")
    if len(text) <= MAX_ACCOUNT:
        return Account(text)
    cut = _cut(text)
    return Account(cut, f"trimmed from {len(text)} to {len(cut)} characters (an account is at most {MAX_ACCOUNT})")


def _cut(text):
    ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, MAX_ACCOUNT + 1) if m.end() <= MAX_ACCOUNT]
    if ends:
        return text[:ends[-1]]
    head = text[:MAX_ACCOUNT - 1]
    return (head.rsplit(" ", 1)[0] if " " in head else head).rstrip(",;: ") + "…"


@dataclass(frozen=True)
class AwayNote:
    """The "Meanwhile" card of one turn: what happened off stage and who moved, at most 8 lines."""

    lines: tuple
    left_out: int = 0  # lines that did not fit (their records keep what happened)

    def data(self):
        """Return the note as it is kept on the reply's ContextSnapshot (``report["away_note"]``)."""
        return {"lines": list(self.lines), "left_out": self.left_out}


def away_note(accounts, schedule=()):
    """Return the AwayNote of this turn's off-stage ``accounts`` (checked texts, played order) and ``schedule``
    moves ("Mara went to the Forge"), accounts first; past 8 lines the last says how many more there were."""
    lines = [" ".join(str(line).split())[:MAX_ACCOUNT] for line in [*accounts, *schedule] if str(line).strip()]
    if len(lines) <= MAX_NOTE_LINES:
        return AwayNote(tuple(lines))
    kept = MAX_NOTE_LINES - 1
    more = len(lines) - kept
    return AwayNote((*lines[:kept], f"…and {more} more off stage (the records keep every one)"), more)
