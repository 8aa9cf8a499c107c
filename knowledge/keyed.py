"""Keyed lorebook entries: which fire this turn and why, SillyTavern's logic with our guarantees (issue 28), pure.

An entry fires when one of its keys appears in the messages it scans (its
scan depth, in messages, newest first: the player's input is the first),
with SillyTavern's rules for secondary keys (and any, not all, not any,
and all), regular-expression keys (``/…/flags``), case, whole words,
probability, inclusion groups and recursion (fired entries' text scanned
again, ``excludeRecursion``, ``preventRecursion``, ``delayUntilRecursion``).

Ours, which theirs lack:

- ``sticky``, ``cooldown`` and ``delay`` count **turns of the line being
  played**: the timers are what the previous reply's context snapshot says
  (``timers``: the turn each timed entry last fired), so undo, retry and a
  switch of branch see exactly the line they are on, and nothing resets or
  leaks across branches.
- Probability is rolled from a seed: the campaign and the node the turn
  follows, so a retry (and any other action played from the same place)
  sees the same roll; so is an inclusion group's weighted choice.
- A regular expression from a file runs with a time limit (``REGEX_SECONDS``),
  so no key can freeze a turn; one that runs out is said, not hidden.
- Every entry gets its reason: which key, in which message of which turn;
  or why not (no key, secondary keys, cooldown until turn N, probability,
  its group, waiting for recursion). ``fit`` prices constant entries first
  and reports every drop with its cost.
"""

import random
import re
from dataclasses import dataclass, field

import regex

from . import worldinfo

DEFAULT_SCAN_DEPTH = 2  # SillyTavern's default: the player's input and the reply before it
MAX_RECURSION = 10  # passes over fired entries' text after the first
REGEX_SECONDS = 0.02  # a key's regular expression may take this long on one turn's text
_JS_REGEX = re.compile(r"^/([\s\S]+?)/([gimsuyd]*)$")
_WORD = re.compile(r"\w+")
_ALL_WORD = re.compile(r"^\w+$")


@dataclass(frozen=True)
class Keyed:
    """One entry of an enabled keyed lorebook: its key (``<book>:<uid>``), its book and the book's level."""

    key: str
    book: str  # the book's title
    level: str  # canon, reference or inspiration
    entry: worldinfo.Entry
    book_id: int = 0


@dataclass(frozen=True)
class Message:
    """A message a scan reads: the turn it belongs to, who wrote it ("you", "the narrator"), its text."""

    turn: int
    who: str
    text: str


class _Key:
    __slots__ = ("shown", "text", "pattern", "word", "problem")

    def __init__(self, text, case_sensitive, whole_words):
        self.shown, self.text, self.pattern, self.word, self.problem = text, text, None, False, ""
        found = _JS_REGEX.match(text)
        if found:
            flags = (regex.IGNORECASE if "i" in found.group(2) else 0) | (
                regex.MULTILINE if "m" in found.group(2) else 0) | (regex.DOTALL if "s" in found.group(2) else 0)
            try:
                self.pattern = regex.compile(found.group(1), flags | regex.V0)
            except (regex.error, ValueError, OverflowError) as error:
                self.problem = f"the key {text[:60]!r} is not a regular expression this reads ({error})"
            return
        needle = text if case_sensitive else text.lower()
        self.text = needle
        if whole_words and len(needle.split()) == 1:
            if _ALL_WORD.match(needle):
                self.word = True
            else:
                self.pattern = regex.compile(r"(?:^|\W)(" + regex.escape(needle) + r")(?:$|\W)")

    def found(self, hay):
        """Return whether the key is in ``hay`` (a _Hay), or None when its expression ran out of time."""
        if self.problem:
            return False
        if self.pattern is not None:
            try:
                return self.pattern.search(hay.text, timeout=REGEX_SECONDS) is not None
            except TimeoutError:
                return None
        if self.word:
            return self.text in hay.words()
        if len(self.text) >= 3:
            grams = hay.grams()
            if self.text[:3] not in grams or self.text[-3:] not in grams:
                return False
        return self.text in hay.text


class _Hay:
    """The text one scan reads, with its words and its three-letter pieces, each made only when first asked."""

    __slots__ = ("text", "_words", "_grams")

    def __init__(self, text):
        self.text, self._words, self._grams = text, None, None

    def words(self):
        if self._words is None:
            self._words = set(_WORD.findall(self.text))
        return self._words

    def grams(self):
        """Return every three characters of the text: a key whose first or last three are not among them is not in
        it, which two set lookups say sooner than a search of the text (bench "tavern": 1,000 entries)."""
        if self._grams is None:
            text = self.text
            self._grams = {text[i:i + 3] for i in range(len(text) - 2)}
        return self._grams


class _Compiled:
    __slots__ = ("item", "primary", "secondary", "depth", "case_sensitive", "problems", "timed", "position")

    def __init__(self, item, default_depth):
        entry = item.entry
        self.item = item
        self.timed = entry.timed and entry.enabled
        self.case_sensitive = bool(entry.case_sensitive)
        whole = bool(entry.whole_words)
        self.primary = [_Key(key, self.case_sensitive, whole) for key in entry.keys]
        self.secondary = [_Key(key, self.case_sensitive, whole) for key in entry.secondary]
        self.depth = entry.scan_depth if entry.scan_depth is not None else default_depth
        self.problems = [key.problem for key in self.primary + self.secondary if key.problem]


def _grams(text):
    return {text[i:i + 3] for i in range(len(text) - 2)}


class _Lookup:
    __slots__ = ("grams", "words", "always")

    def __init__(self):
        self.grams, self.words, self.always = {}, {}, set()


class Index:
    """The entries of a campaign's keyed lorebooks with their keys compiled: built once per change of a book."""

    def __init__(self, items, default_depth=DEFAULT_SCAN_DEPTH):
        self.items = list(items)
        self.compiled = [_Compiled(item, default_depth) for item in self.items]
        self.by_key = {item.key: item for item in self.items}
        self.depth = max((c.depth for c in self.compiled if c.item.entry.enabled), default=0)
        self.timed = {item.key: item.entry for item in self.items if item.entry.timed}
        self._lookups = self._lookup()
        # What every scan starts from, worked out once: who can never fire, who needs timers, who waits.
        for position, compiled in enumerate(self.compiled):
            compiled.position = position
        enabled = [c for c in self.compiled if c.item.entry.enabled]
        self.eligible = {c.item.key: c for c in enabled}
        self.timed_entries = [c for c in enabled if c.timed]
        self.constants = {c.item.key for c in enabled if c.item.entry.constant}
        self.waiting = {}
        for compiled in enabled:
            if compiled.item.entry.delay_until_recursion:
                self.waiting.setdefault(compiled.item.entry.delay_until_recursion, set()).add(compiled.item.key)
        self.waits_for_recursion = {key for keys in self.waiting.values() for key in keys}
        keyless = {c.item.key for c in enabled if not c.primary and not c.item.entry.constant}
        self.always_held = ([(c.item.key, "disabled in its book") for c in self.compiled if not c.item.entry.enabled]
                            + [(key, "it has no keys and is not constant") for key in sorted(keyless)])
        self.keyed_keys = set(self.eligible) - keyless - self.waits_for_recursion
        self.problems = [f"{c.item.book}, {c.item.entry.title}: {problem}" for c in self.compiled
                         for problem in c.problems]

    def candidates(self, texts, part):
        """Return the keys of the entries one of whose primary keys may be in ``part`` of ``texts`` (a superset:
        each is then searched): by the first three characters of each plain key, by each whole-word key's word,
        and every entry with a regular expression or a key shorter than three characters."""
        found = set()
        for (depth, case), lookup in self._lookups.items():
            hay = texts.hay_for(depth, case, part)
            found |= lookup.always
            for gram in hay.grams() & lookup.grams.keys():
                found.update(lookup.grams[gram])
            for word in hay.words() & lookup.words.keys():
                found.update(lookup.words[word])
        return found

    def _lookup(self):
        """Return {(depth, case): _Lookup}: each plain key filed under the three characters of it that fewest of
        the book's keys share (a key is in a text only if all its pieces are, so one rare piece missing rules it
        out: "the arar house" is filed under "rar", not under "the" with a thousand others)."""
        plain = [primary for compiled in self.compiled for primary in compiled.primary
                 if not primary.problem and primary.pattern is None and not primary.word and len(primary.text) >= 3]
        spread = {}
        for primary in plain:
            for gram in _grams(primary.text):
                spread[gram] = spread.get(gram, 0) + 1
        lookups = {}
        for compiled in self.compiled:
            lookup = lookups.setdefault((compiled.depth, compiled.case_sensitive), _Lookup())
            key = compiled.item.key
            for primary in compiled.primary:
                if primary.problem:
                    continue
                if primary.pattern is not None or len(primary.text) < 3:
                    lookup.always.add(key)
                elif primary.word:
                    lookup.words.setdefault(primary.text, set()).add(key)
                else:
                    rare = min(_grams(primary.text), key=lambda gram: (spread[gram], gram))
                    lookup.grams.setdefault(rare, set()).add(key)
        return lookups

    def __len__(self):
        return len(self.items)


@dataclass
class Scan:
    """What one turn's scan found: the entries that fire (with why), the reasons others did not, the timers."""

    turn: int
    fired: list = field(default_factory=list)  # {key, how, key_text, turn, who, roll…}
    held: list = field(default_factory=list)  # {key, why}: every entry that did not fire for a reason of its own
    quiet: list = field(default_factory=list)  # keys of entries none of whose keys was in the scanned messages
    timers: dict = field(default_factory=dict)  # key -> the turn it last fired, for the next turn's scan
    problems: list = field(default_factory=list)  # keys that could not be read, regexes that ran out of time


def scan(index, messages, turn, timers, seed):
    """Return the Scan of ``index`` over ``messages`` (newest first) for turn ``turn`` of a line.

    ``timers`` ({key: the turn it last fired}) are the previous reply's on
    this line; ``seed`` names where the turn is played from (a retry's is
    the same), so every roll is the same for it.
    """
    result = Scan(turn)
    texts = _Texts(messages)
    result.problems = list(index.problems)
    result.held = [{"key": key, "why": why} for key, why in index.always_held]
    fired, failed, timed_out = {}, set(), set()
    for compiled in index.timed_entries:  # only entries with timers need the line's timers
        key = compiled.item.key
        held = _held_by_timers(compiled.item.entry, key, timers, turn)
        if held and held[0] == "sticky":
            fired[key] = {"key": key, "how": "sticky", "since": held[1], "until": held[2]}
        elif held:
            timed_out.add(key)
            result.held.append({"key": key, "why": held[1]})
    # What sticks fires without its keys, and its text is read for other entries' keys from the first recursion.
    new = "\n".join(index.by_key[key].entry.content for key in fired if not index.by_key[key].entry.prevent_recursion)
    for level in range(MAX_RECURSION + 1):
        found = []
        maybe = index.candidates(texts, "messages" if level == 0 else "added") | index.constants
        if level:
            maybe |= index.waiting.get(level, set())
        for compiled in sorted((index.eligible[key] for key in maybe if key in index.eligible),
                               key=lambda compiled: compiled.position):
            key = compiled.item.key
            if key in fired or key in failed or key in timed_out:
                continue
            entry = compiled.item.entry
            waits = entry.delay_until_recursion
            if (level == 0 and waits) or (level and (entry.exclude_recursion or (waits and level < waits))):
                continue
            # A key missed in the messages at an earlier level can only be in what that level added; an entry
            # waiting for this level reads everything.
            probe = texts.hay(compiled, "messages" if level == 0 else "whole" if waits == level else "added")
            why = _activation(compiled, probe, texts, level, result)
            if why is None:
                continue
            if why["how"] == "blocked":
                failed.add(key)
                result.held.append({"key": key, "why": why["why"]})
                continue
            found.append((compiled, {**why, "key": key, **({"recursion": level} if level else {})}))
        found = _groups(found, fired, index, seed, result)
        added = []
        for compiled, why in found:
            entry = compiled.item.entry
            if entry.use_probability and entry.probability < 100:
                roll = round(random.Random(f"{seed}:{compiled.item.key}").random() * 100, 1)
                why["roll"] = roll
                if roll >= entry.probability:
                    failed.add(compiled.item.key)
                    result.held.append({"key": compiled.item.key, "why": f"its {entry.probability}% chance failed "
                                                                          f"(rolled {roll:g})", **_said(why)})
                    continue
            fired[compiled.item.key] = why
            added.append(compiled)
        new = "\n".join(part for part in [new, *(c.item.entry.content for c in added
                                                 if not c.item.entry.prevent_recursion)] if part.strip())
        if not new:
            break
        texts.recurse(new)
        new = ""
    if not texts.recursion:
        result.held += [{"key": key, "why": "it waits for another entry's text to name it (recursion), and none "
                                            "fired"} for key in sorted(index.waits_for_recursion - fired.keys() - failed)]
    held = {item["key"] for item in result.held}
    result.quiet = sorted(index.keyed_keys - fired.keys() - failed - held)
    result.fired = sorted(fired.values(), key=lambda why: (index.by_key[why["key"]].entry.order, why["key"]))
    result.timers = _next_timers(index, timers, fired, turn)
    return result


class _Texts:
    """The texts one scan reads: the messages to each depth and what recursion added, each made once."""

    def __init__(self, messages):
        self.messages, self.recursion, self.added = messages, "", ""
        self._hays = {}

    def recurse(self, text):
        self.added = text
        self.recursion = f"{self.recursion}\n{text}" if self.recursion else text
        self._hays = {wanted: hay for wanted, hay in self._hays.items() if wanted[0] == "messages"}

    def hay(self, compiled, part):
        return self.hay_for(compiled.depth, compiled.case_sensitive, part)

    def hay_for(self, depth, case_sensitive, part):
        """Return the _Hay of ``part``: "messages" (to ``depth``), "added" (this level's recursion) or "whole"
        (both: the messages and all recursion so far)."""
        if part == "whole" and not self.recursion:
            part = "messages"
        wanted = (part, depth if part != "added" else 0, case_sensitive)
        hay = self._hays.get(wanted)
        if hay is None:
            if part == "added":
                text = self.added
            else:
                text = "\n".join(message.text for message in self.messages[:depth])
                if part == "whole":
                    text = f"{text}\n{self.recursion}"
            hay = self._hays[wanted] = _Hay(text if case_sensitive else text.lower())
        return hay


def _said(why):
    return {name: why[name] for name in ("key_text", "turn", "who") if name in why}


def _held_by_timers(entry, key, timers, turn):
    """Return ("sticky", since, until) while the entry sticks, ("held", why) while it cools down or is
    delayed, or None."""
    if entry.delay and turn - 1 < entry.delay:
        return ("held", f"its delay: it may fire once {entry.delay} turn{'s' if entry.delay != 1 else ''} have "
                        f"been played (from turn {entry.delay + 1})")
    started = timers.get(key)
    if started is None or started >= turn:
        return None
    if entry.sticky and turn <= started + entry.sticky:
        return ("sticky", started, started + entry.sticky)
    if entry.cooldown and turn <= started + entry.sticky + entry.cooldown:
        return ("held", f"cooling down: it fired in turn {started} and may fire again from turn "
                        f"{started + entry.sticky + entry.cooldown + 1}")
    return None


def _activation(compiled, probe, texts, level, result):
    """Return why the entry fires ({how, key_text, turn, who}), {"how": "blocked", why} when its secondary keys
    forbid it, or None when no key of it is in ``probe`` (constant entries always fire)."""
    entry = compiled.item.entry
    if entry.constant:
        return {"how": "constant"}
    matched = None
    for key in compiled.primary:
        found = key.found(probe)
        if found is None:
            result.problems.append(f"{compiled.item.book}, {entry.title}: the key {key.shown[:60]!r} took longer than "
                                   f"{REGEX_SECONDS * 1000:.0f} ms and was skipped this turn")
        elif found:
            matched = key
            break
    if matched is None:
        return None
    why = {"how": "recursion" if level else "key", "key_text": matched.shown,
           **_where(matched, texts.messages, compiled)}
    if entry.selective and compiled.secondary:
        whole = texts.hay(compiled, "whole")
        hits = [key.found(whole) is True for key in compiled.secondary]
        allowed = {worldinfo.AND_ANY: any(hits), worldinfo.NOT_ALL: not all(hits),
                   worldinfo.NOT_ANY: not any(hits), worldinfo.AND_ALL: all(hits)}[entry.logic]
        shown = ", ".join(f"“{key.shown}”" for key in compiled.secondary[:4])
        if not allowed:
            return {"how": "blocked", "why": f"its key “{matched.shown}” was found, but its secondary keys ({shown}) "
                                             f"must be “{worldinfo.LOGIC[entry.logic]}” and are not", **_said(why)}
        why["secondary"] = f"{worldinfo.LOGIC[entry.logic]} of {shown}"
        why["score"] = 1 + sum(hits)
    else:
        why["score"] = 1
    return why


def _where(key, messages, compiled):
    """Return {turn, who} of the newest scanned message holding ``key`` (none: it came from recursion)."""
    for message in messages[:compiled.depth]:
        if key.found(_Hay(message.text if compiled.case_sensitive else message.text.lower())) is True:
            return {"turn": message.turn, "who": message.who}
    return {}


def _groups(found, fired, index, seed, result):
    """Return ``found`` with each inclusion group down to one entry (SillyTavern's rules), naming the losers."""
    by_group = {}
    for pair in found:
        for group in pair[0].item.entry.groups:
            by_group.setdefault(group, []).append(pair)
    losers = {}
    for group, members in sorted(by_group.items()):
        members = [pair for pair in members if pair[0].item.key not in losers]
        already = [key for key in fired if group in index.by_key[key].entry.groups]
        if already:
            for compiled, _ in members:
                losers[compiled.item.key] = f"its group “{group}” already has {index.by_key[already[0]].entry.title}"
            continue
        if len(members) < 2:
            continue
        winner = _winner(group, members, seed)
        for compiled, _ in members:
            if compiled is not winner[0]:
                losers[compiled.item.key] = f"its group “{group}” chose {winner[0].item.entry.title}"
    for key, why in losers.items():
        result.held.append({"key": key, "why": why})
    return [pair for pair in found if pair[0].item.key not in losers]


def _winner(group, members, seed):
    overriding = [pair for pair in members if pair[0].item.entry.group_override]
    if overriding:
        return max(overriding, key=lambda pair: pair[0].item.entry.order)
    if any(pair[0].item.entry.group_scoring for pair in members):
        best = max(pair[1].get("score", 1) for pair in members)
        members = [pair for pair in members if pair[1].get("score", 1) == best]
    weights = [max(pair[0].item.entry.group_weight, 0) for pair in members]
    if not any(weights):
        return members[0]
    return random.Random(f"{seed}:group:{group}").choices(members, weights=weights)[0]


def _next_timers(index, timers, fired, turn):
    """Return the timers after this turn: each timed entry's last firing, while it still sticks or cools down."""
    kept = {}
    for key, started in timers.items():
        entry = index.timed.get(key)
        if entry is not None and started < turn and turn < started + entry.sticky + entry.cooldown:
            kept[key] = started
    for key, why in fired.items():
        entry = index.by_key[key].entry
        if why["how"] != "sticky" and (entry.sticky or entry.cooldown):
            kept[key] = turn
    return kept


@dataclass(frozen=True)
class Priced:
    key: str
    cost: int  # tokens, as the entry sits in the prompt
    protected: bool  # constant (or SillyTavern's ignoreBudget): priced first


def fit(priced, budget):
    """Return (kept keys, dropped [{key, tokens, reason}]) of ``priced`` (most important first) within ``budget``.

    Constant entries are priced before any keyed one, so a keyed entry is
    always dropped before a constant; a constant that does not fit is
    dropped too, but reported with its cost like every drop.
    """
    kept, dropped, spent = [], [], 0
    for item in sorted(priced, key=lambda item: not item.protected):
        if spent + item.cost <= budget:
            kept.append(item.key)
            spent += item.cost
        else:
            what = "a constant entry" if item.protected else "a keyed entry"
            dropped.append({"key": item.key, "tokens": item.cost,
                            "reason": f"{what}: no room left in the lorebook budget ({budget:,} tokens, "
                                      f"{spent:,} already used)"})
    return kept, dropped
