"""Dice: notation, named checks whose bands cover every possible roll, and seeded rolls (seed 002 骰子).

Notation (▶ the seed names none): ``NdM`` (1-100 dice of 2-1,000 sides),
then ``khK`` or ``klK`` to keep the K highest or lowest, then any ``+m`` /
``-m`` modifiers, then ``>=T`` to read the number of kept dice showing T or
more (successes) instead of their total. A check reads the roll, adds the
roller's variable when it names one, compares it with a target
(``absolute``: the value itself; ``over``: how far above the target;
``under``: how far below it) and finds the one band holding the result.
A check is refused when some possible roll lands in no band or in two —
found exactly from the possible values, which are one run of whole numbers,
and the bands' edges, so its cost grows with the bands and not with the
dice — or when a band could never be rolled; a check whose result depends
on a variable or a target given at the time is checked when it is rolled.
Every number a check carries is bounded (``MAX_BANDS`` bands, targets and
band edges within ``MAX_VALUE``), so defining one costs microseconds. A roll is seeded by the
campaign, the node it belongs to and its index there, so a retry of the
same reply rolls the same dice.
"""

import random
import re
from dataclasses import dataclass

from .rules import Refused, shown, write

MAX_DICE = 100
MAX_SIDES = 1000
MAX_MODIFIER = 10_000
# A check's outcomes: real ones have three to six bands (fail, partial, success…); 2,500 bands over
# 100d1000 once held SQLite's write lock for 37 s (issue 22).
MAX_BANDS = 50
# Targets and band edges: far beyond any roll (100 dice of 1,000 sides read at most 100,000).
MAX_VALUE = 1_000_000_000
# The longest notation read: "100d1000kh99+10000-10000>=1000" is 30 characters.
MAX_NOTATION = 60
COMPARES = ("absolute", "over", "under")
INITIATORS = ("player", "agent")
MAX_TEXT = 500
# Digits are bounded in the pattern: int() of thousands of digits costs quadratic time, then refuses.
_NOTATION = re.compile(r"(\d{1,6})d(\d{1,6})(?:(kh|kl)(\d{1,6}))?((?:[+-]\d{1,6}){0,8})(?:>=(\d{1,6}))?")
_MODIFIER = re.compile(r"[+-]\d{1,6}")
_FORMS = "write NdM with optional khK/klK, +m/-m and >=T, e.g. 2d6, 4d6kh3, 1d20+5, 10d10>=7"


@dataclass(frozen=True)
class Dice:
    count: int
    sides: int
    keep: str = ""  # "kh" | "kl" | ""
    kept: int = 0  # how many dice are kept (all of them without keep)
    modifier: int = 0
    success_at: int | None = None

    @property
    def text(self):
        keep = f"{self.keep}{self.kept}" if self.keep else ""
        modifier = f"{self.modifier:+d}" if self.modifier else ""
        successes = f">={self.success_at}" if self.success_at is not None else ""
        return f"{self.count}d{self.sides}{keep}{modifier}{successes}"

    def span(self):
        """Return (lowest, highest) read value, modifier included; every whole value between is possible.

        A sum of k dice of m sides reaches every total from k to k·m (raise
        one die at a time), and keeping the highest or lowest k of n reaches
        the same totals (let the dice not kept show 1 or m). Successes reach
        every count between none and all kept, unless the threshold is
        beyond the dice (none) or at most 1 (all).
        """
        if self.success_at is None:
            low, high = self.kept, self.kept * self.sides
        else:
            low = self.kept if self.success_at <= 1 else 0
            high = self.kept if self.success_at <= self.sides else 0
        return low + self.modifier, high + self.modifier

    def possible(self):
        """Return every value this roll can read, in order (one run: see ``span``)."""
        low, high = self.span()
        return range(low, high + 1)


def parse_dice(text):
    """Return the Dice that notation ``text`` names, or refuse with what notation looks like."""
    clean = "".join(str(text or "").lower().split())
    if len(clean) > MAX_NOTATION:
        raise Refused(f"dice notation is at most {MAX_NOTATION} characters, not {len(clean):,}: {_FORMS}")
    found = _NOTATION.fullmatch(clean)
    if not found:
        raise Refused(f"invalid dice notation {str(text)!r}: {_FORMS}")
    count, sides = int(found.group(1)), int(found.group(2))
    if not 1 <= count <= MAX_DICE or not 2 <= sides <= MAX_SIDES:
        raise Refused(f"{text!r}: roll 1 to {MAX_DICE} dice of 2 to {MAX_SIDES:,} sides")
    keep, kept = found.group(3) or "", int(found.group(4) or count)
    if keep and not 1 <= kept <= count:
        raise Refused(f"{text!r} keeps {kept} of {count} dice; keep 1 to {count}")
    modifier = sum(int(m) for m in _MODIFIER.findall(found.group(5)))
    if abs(modifier) > MAX_MODIFIER:
        raise Refused(f"{text!r}: the modifier is at most {MAX_MODIFIER:,} either way")
    success_at = int(found.group(6)) if found.group(6) else None
    return Dice(count, sides, keep, kept, modifier, success_at)


@dataclass(frozen=True)
class Band:
    label: str
    outcome: str
    low: int | None = None
    high: int | None = None

    def holds(self, value):
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    @property
    def span(self):
        low = "" if self.low is None else str(self.low)
        high = "" if self.high is None else str(self.high)
        return f"{low or 'any'}–{high or 'any'}" if low != high else low


@dataclass(frozen=True)
class Check:
    key: str
    name: str
    dice: Dice
    bands: tuple
    use_text: str = ""
    compare: str = "absolute"
    target: int | None = None
    variable: str = ""

    @property
    def checked_when_rolled(self):
        """Whether coverage depends on the roll: a variable to add, or a target only known then."""
        return bool(self.variable) or (self.compare != "absolute" and self.target is None)

    def data(self):
        """Return the ``dice_check:<key>`` record data: ``{name, use_text, definition}``."""
        definition = {"dice": self.dice.text, "compare": self.compare,
                      "bands": [{"label": b.label, "outcome": b.outcome, "min": b.low, "max": b.high}
                                for b in self.bands]}
        if self.target is not None:
            definition["target"] = self.target
        if self.variable:
            definition["variable"] = self.variable
        return {"name": self.name, "use_text": self.use_text, "definition": definition}

    def write(self):
        return write(f"dice_check:{self.key}", "dice_check", subject=self.key, value=self.name, data=self.data())


def parse_check(key, data, *, variables=None):
    """Return the Check of ``data`` (``{name, use_text, definition: {dice, read?, compare?, target?, variable?,
    bands}}``), or refuse with every reason at once.

    ``variables``, when given, holds the names of number variables a check may add.
    """
    reasons = []
    key = str(key or "").strip().lower()
    if not key or ":" in key:
        reasons.append("a check needs a key without ':'")
    definition = data.get("definition", data) if isinstance(data, dict) else None
    if not isinstance(definition, dict):
        raise Refused(f"check {key or '?'!r} is refused: its definition must be an object {{dice, compare, target, "
                      "variable, bands}")
    try:
        dice = parse_dice(definition.get("dice"))
    except Refused as error:
        reasons.append(str(error))
        dice = None
    read = definition.get("read")
    if read not in (None, "total", "successes"):
        reasons.append(f"read {read!r} is not total or successes")
    elif dice is not None and read and (read == "successes") != (dice.success_at is not None):
        reasons.append(f"read is {read} but the notation {dice.text!r} "
                       + ("gives no >=T threshold" if read == "successes" else "reads successes"))
    compare = definition.get("compare") or "absolute"
    if compare not in COMPARES:
        reasons.append(f"compare {compare!r} is not one of {', '.join(COMPARES)}")
    target = definition.get("target")
    if target is not None and not _whole(target):
        reasons.append(f"target {shown(target)} is not a whole number from {-MAX_VALUE:,} to {MAX_VALUE:,}")
        target = None
    variable = str(definition.get("variable") or "").strip().lower()[:MAX_TEXT]
    if variable and variables is not None and variable not in variables:
        reasons.append(f"the check adds the variable {variable!r}, which is not a number variable of characters")
    bands = _bands(definition.get("bands"), reasons)
    if reasons:
        raise Refused(f"check {key or '?'!r} is refused: " + "; ".join(reasons))
    check = Check(key, str(data.get("name") or key)[:MAX_TEXT], dice, tuple(bands),
                  str(data.get("use_text") or "")[:MAX_TEXT], compare, target, variable)
    if not check.checked_when_rolled:
        problems = coverage(check, shift=0, target=target)
        problems += [f"band {band.label!r} ({band.span}) can never be rolled with {dice.text}"
                     for band in unreachable(check, target=target)]
        if problems:
            raise Refused(f"check {key!r} is refused: " + "; ".join(problems))
    return check


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_VALUE <= value <= MAX_VALUE


def _bands(items, reasons):
    if not items:
        reasons.append("a check needs bands")
        return []
    if not isinstance(items, list):
        reasons.append("bands must be a list of {label, outcome, min, max}")
        return []
    if len(items) > MAX_BANDS:
        reasons.append(f"a check has at most {MAX_BANDS} bands, not {len(items):,}")
        return []
    bands = []
    for index, item in enumerate(items):
        item = item if isinstance(item, dict) else {}
        label, outcome = str(item.get("label") or "").strip(), str(item.get("outcome") or "").strip()
        if not label:
            reasons.append(f"band {index + 1} has no label")
        if not outcome:
            reasons.append(f"band {label or index + 1!r} has no outcome (what happens when it is rolled)")
        low, high = item.get("min"), item.get("max")
        if any(v is not None and not _whole(v) for v in (low, high)):
            reasons.append(f"band {label or index + 1!r}: min and max are whole numbers from {-MAX_VALUE:,} to "
                           f"{MAX_VALUE:,}")
            continue
        if low is not None and high is not None and low > high:
            reasons.append(f"band {label!r} ends ({high}) before it starts ({low})")
        bands.append(Band(label[:MAX_TEXT], outcome[:MAX_TEXT], low, high))
    return bands


def _compared(check, read, target):
    if check.compare == "over":
        return read - target
    if check.compare == "under":
        return target - read
    return read


def _reach(check, shift, target):
    """Return (lowest, highest) compared value of ``check``'s rolls moved by ``shift``: every whole value between
    is possible, since the reads are one run and comparing with a target moves or mirrors them."""
    low, high = check.dice.span()
    ends = (_compared(check, low + shift, target), _compared(check, high + shift, target))
    return min(ends), max(ends)


def _segments(check, first, last):
    """Yield (start, end, the labels of the bands holding it) for the runs of [first, last] the bands' edges cut.

    Within a run every value lies in the same bands, so the checks look at
    one value per run: at most twice as many runs as bands, whatever the dice.
    """
    cuts = {first, last + 1}
    for band in check.bands:
        cuts.update(edge for edge in (band.low, None if band.high is None else band.high + 1)
                    if edge is not None and first < edge <= last)
    points = sorted(cuts)
    for start, after in zip(points, points[1:]):
        yield start, after - 1, [band.label for band in check.bands if band.holds(start)]


def coverage(check, *, shift=0, target=None):
    """Return the reasons some possible roll of ``check`` (its reads moved by ``shift``) lands in no band or in
    two; empty when each lands in exactly one."""
    if check.compare != "absolute" and target is None:
        return [f"check {check.key!r} compares {check.compare} a target, and none was given"]
    missing, doubled = [], []
    for start, end, holding in _segments(check, *_reach(check, shift, target)):
        if not holding:
            missing.append([start, end])
        elif len(holding) > 1:
            doubled += [(value, holding) for value in range(start, min(end, start + 2) + 1)][:3 - len(doubled)]
    reasons = []
    if missing:
        single = len(missing) == 1 and missing[0][0] == missing[0][1]
        reasons.append(f"{_values(missing)} {'falls' if single else 'fall'} in no band")
    for value, labels in doubled[:3]:
        reasons.append(f"{value} falls in {len(labels)} bands ({', '.join(labels)}); bands may not overlap")
    return reasons


def unreachable(check, *, shift=0, target=None):
    """Return the bands no possible roll lands in."""
    low, high = _reach(check, shift, target)
    return [band for band in check.bands
            if (band.low is not None and band.low > high) or (band.high is not None and band.high < low)
            or (band.low is not None and band.high is not None and band.low > band.high)]


def _values(runs):
    """Return runs of values ([low, high] each, in order) as "7" or "7–9", joining touching runs; at most five."""
    joined = []
    for low, high in runs:
        if joined and low == joined[-1][1] + 1:
            joined[-1][1] = high
        else:
            joined.append([low, high])
    text = [str(low) if low == high else f"{low}–{high}" for low, high in joined]
    return ", ".join(text[:5]) + (" and more" if len(text) > 5 else "")


# --- rolling ------------------------------------------------------------------------------------------------------


def rng(campaign, node, index):
    """Return the random generator of roll ``index`` on ``node`` of ``campaign``: the same numbers every time.

    Decision D8: the node is the player's action (depth 2n−1), which a retry
    of the reply shares, so a retry rolls exactly the dice the first reply did.
    """
    return random.Random(f"dice:{campaign}:{node}:{index}")


@dataclass(frozen=True)
class Roll:
    """One roll as the log keeps it: every die, the kept ones, the modifier, the total, what was read, the band."""

    expression: str
    dice: tuple
    kept: tuple
    modifier: int
    total: int
    read: int
    check: str = ""
    target: int | None = None
    value: int | None = None  # what the bands were compared with (read, or its margin over or under the target)
    band: str = ""
    outcome: str = ""
    reason: str = ""
    who: str = ""
    initiator: str = "player"

    def data(self, *, turn=None, anchor=None, index=None):
        return {"check": self.check, "expression": self.expression, "dice": list(self.dice), "kept": list(self.kept),
                "modifier": self.modifier, "target": self.target, "total": self.total, "read": self.read,
                "value": self.value, "band": self.band, "outcome": self.outcome, "reason": self.reason,
                "who": self.who, "initiator": self.initiator, "turn": turn, "anchor": anchor, "index": index}

    def write(self, number, **where):
        """Return the ``roll:<number>`` record write (``number``: the roll's place in the line's log)."""
        return write(f"roll:{number}", "roll", subject=self.who, value=self.describe(), data=self.data(**where))

    def describe(self):
        """Return the roll in words: "lockpick 2d6: 4, 5 = 9 — partial (the lock gives, slowly)"."""
        shown = ", ".join(str(d) for d in self.dice)
        if self.kept != self.dice:
            shown += f" (kept {', '.join(str(d) for d in self.kept)})"
        modifier = f" {self.modifier:+d}" if self.modifier else ""
        head = f"{self.check + ' ' if self.check else ''}{self.expression}: {shown}{modifier} = {self.read}"
        return head + (f" — {self.band} ({self.outcome})" if self.band else "")


def roll(subject, *, seed, bonus=0, target=None, reason="", who="", initiator="player"):
    """Roll ``subject`` (a Check, Dice or notation) with the generator of ``seed`` = (campaign, node, index).

    ``bonus`` is the value of the check's variable for ``who`` (0 when it
    names none), ``target`` the difficulty when the check compares with one
    given at the time. A check whose every roll cannot land in exactly one
    band with that bonus and target is refused before anything is rolled.
    """
    check = subject if isinstance(subject, Check) else None
    dice = check.dice if check else (subject if isinstance(subject, Dice) else parse_dice(subject))
    if initiator not in INITIATORS:
        raise Refused(f"a roll is made by the player or an agent, not {initiator!r}")
    if isinstance(bonus, bool) or not isinstance(bonus, (int, float)) or int(bonus) != bonus:
        raise Refused(f"the check's variable gives {bonus!r}; only whole numbers can be added to a roll")
    bonus = int(bonus)
    if check is not None:
        target = check.target if target is None else target
        problems = coverage(check, shift=bonus, target=target)
        if problems:
            added = f" with {bonus:+d} from {check.variable}" if check.variable and bonus else ""
            raise Refused(f"check {check.key!r} cannot be rolled{added}: " + "; ".join(problems))
    generator = rng(*seed)
    faces = tuple(generator.randint(1, dice.sides) for _ in range(dice.count))
    kept = faces
    if dice.keep:
        ordered = sorted(faces, reverse=dice.keep == "kh")[:dice.kept]
        kept = tuple(_in_order(faces, ordered))
    modifier = dice.modifier + bonus
    total = sum(kept) + modifier
    read = total if dice.success_at is None else sum(1 for face in kept if face >= dice.success_at) + modifier
    band = outcome = ""
    value = None
    if check is not None:
        value = _compared(check, read, target)
        chosen = next(b for b in check.bands if b.holds(value))
        band, outcome = chosen.label, chosen.outcome
    return Roll(dice.text, faces, kept, modifier, total, read, check.key if check else "", target, value, band, outcome,
                " ".join(str(reason or "").split())[:MAX_TEXT], who, initiator)


def _in_order(faces, chosen):
    """Return the ``chosen`` faces in the order they were rolled."""
    left = list(chosen)
    picked = []
    for face in faces:
        if face in left:
            left.remove(face)
            picked.append(face)
    return picked
