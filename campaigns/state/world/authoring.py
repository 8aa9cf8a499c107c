"""The world author's rules (seed 002 扩展世界), pure: when the world may grow, what one edit may make, the lint gate,
and the consolidation queue.

The game master asks for more world with ``expand_world {need, what}``
only when the story truly needs it: a change of scene, an arrival, an
introduction, a thing the story has established (``NEEDS``). Atmosphere,
passers-by, crowds, what is mentioned in passing and anything an existing
entity can serve are below the threshold: ``fitting`` finds the existing
character, place or thing that already answers ``what``, and the request is
refused naming it. An edit (``edit_world``) is checked whole on a copy of
the state through the same typed events as everything else, then linted:
it may create at most ``authoring_per_turn`` things a turn, no name or
alias another thing has, and nothing world_lint calls an error (a place
joined to nothing, a character with no place) — or nothing of it is kept.

What an edit creates joins the consolidation queue (``consolidation:<key>``
records). When ``authoring_consolidate_after`` of them wait, or the oldest
has waited four turns, the author runs again in the background to complete
their passages and relationships; that run creates nothing, and on failure
the queue stays as it was.
"""

import dataclasses
from dataclasses import dataclass, field

from ..events import validate_batch
from ..reading import normalize, words
from ..registry import PEOPLE, WORLD, Field, Rejected, clean, register
from ..time.rules import Refused, write
from . import lint, world
from .lore import FUNCTION_WORDS

# Seed 002 扩展世界: "need 可为 scene_change、arrival 或 introduction", and the reasons 物品 (object), 故事变量
# (variable) and 世界触发器 (trigger) add (digest conflict 1: all six are taken).
NEEDS = ("scene_change", "arrival", "introduction", "object", "variable", "trigger")
# What each need may create, and so what an existing one that fits would serve instead.
SERVES = {"scene_change": "place", "arrival": "character", "introduction": "character", "object": "item"}
# ▶ Variables and triggers are defined by a person (or a world file) until story time's event types reach the
# author (docs/voices.md).
NOT_YET = ("variable", "trigger")
# Seed 002 扩展世界: "达到 authoring.consolidateAfter 或等待四回合后".
CONSOLIDATE_TURNS = 4
CREATED = "created"
AUTHOR_RANK = 50

# Words a request uses that say nothing of who or what is meant ("introduce a new man" fits nobody in particular).
_GENERIC = {"new", "another", "other", "someone", "somebody", "person", "people", "man", "woman", "men", "women",
            "character", "place", "room", "thing", "item", "object", "one", "some", "here", "there", "arrives",
            "arrival", "introduce", "introduction", "scene", "named", "called", "old", "young"}


class AuthorRefused(Refused):
    """The request or the edit cannot be kept; the message gives every reason."""


@dataclass(frozen=True)
class Request:
    """The game master's ``expand_world``: why the story needs more world, and what."""

    need: str
    what: str


def check_request(request, *, enabled, per_turn, created):
    """Refuse ``request`` when the author may not act on it now: off, a need below the threshold, the turn's cap."""
    if not enabled:
        raise AuthorRefused("the world author is off in this campaign (authoring_enabled): make do with the world "
                            "as it is")
    if request.need not in NEEDS:
        raise AuthorRefused(f"expand_world's need is one of {', '.join(NEEDS)}, not {request.need!r}; atmosphere, "
                            "passers-by, crowds and things mentioned in passing need no new world")
    if request.need in NOT_YET:
        raise AuthorRefused(f"a new {request.need} is defined by a person for now (a world file or a correction), "
                            "not by the world author")
    if not request.what.strip():
        raise AuthorRefused("expand_world says what is needed (what): who arrives, which place, what thing")
    if created >= per_turn:
        raise AuthorRefused(f"the world author has created {created} of at most {per_turn} things this turn "
                            "(authoring_per_turn); use what exists until the next turn")


def terms(text):
    """Return the words of ``text`` that say who or what is meant (no function words, no generic ones)."""
    found = set()
    for word in words(text):
        if len(word) > 2 and word not in FUNCTION_WORDS and word not in _GENERIC:
            found.add(word[:-1] if len(word) > 3 and word.endswith("s") else word)
    return found


def fitting(state, request):
    """Return the keys of existing entities that already serve ``request``: every word of ``what`` that says who
    or what is meant is in their name, aliases or description (seed: "已有实体能承担的用途" is below the threshold)."""
    wanted = terms(request.what)
    kind = SERVES.get(request.need)
    if not wanted or kind is None:
        return []
    found = []
    for record in state.entities():
        if record.data.get("kind") != kind:
            continue
        said = " ".join([record.value, *record.data.get("aliases", ()), record.data.get("description", "")])
        if wanted <= terms(said):
            found.append(record.subject)
    return sorted(found, key=lambda key: normalize(state.name_of(key)))


def refuse_if_fitting(state, request):
    """Refuse ``request`` naming the existing entity to reuse, when one already serves it."""
    fits = fitting(state, request)
    if fits:
        names = " or ".join(state.name_of(key) for key in fits[:3])
        first = state.entity(fits[0])
        description = first.data.get("description", "")
        raise AuthorRefused(f"{names} already serves as {request.what.strip()!r}"
                            f"{f' ({state.name_of(fits[0])}: {description})' if description else ''}; reuse "
                            f"{state.name_of(fits[0])} instead of creating someone or something new")


# --- an edit --------------------------------------------------------------------------------------------------------


@dataclass
class Checked:
    """An edit checked on a copy of the state: its events, their outcomes, what refuses it, the lint findings."""

    events: list = field(default_factory=list)
    where: list = field(default_factory=list)
    outcomes: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    findings: list = field(default_factory=list)
    created: list = field(default_factory=list)  # keys of the entities the edit makes
    state: object = None  # the copy, after the edit

    @property
    def kept(self):
        return not self.problems


def count(edit):
    """Return how many things (characters, places, items) ``edit`` would create."""
    return sum(len(edit.get(kind) or []) for kind in ("characters", "places", "items"))


def edit_events(edit, *, turn):
    """Return (events, where each came from) that make ``edit`` — the typed events any world change is.

    ``edit`` is ``{"characters": [...], "places": [...], "items": [...]}``
    as the author's schema gives them (docs/voices.md). Places come first,
    then the people and things in them, then the ways between places, who
    is where, and who thinks what of whom; each new thing then joins the
    consolidation queue.
    """
    events, where = [], []

    def add(spot, type, subject="", object="", value="", **extra):
        events.append({"type": type, "subject": subject, "object": object, "value": value, **extra})
        where.append(spot)

    places, characters, items = (edit.get(kind) or [] for kind in ("places", "characters", "items"))
    for n, place in enumerate(places, 1):
        add(f"places[{n}]", "introduce", place.get("name", ""), "place", place.get("description", ""),
            aliases=place.get("aliases") or [])
        for m, feature in enumerate(place.get("features") or [], 1):
            add(f"places[{n}].features[{m}]", "feature", place.get("name", ""), feature.get("name", ""),
                feature.get("text") or feature.get("name", ""))
    for n, person in enumerate(characters, 1):
        add(f"characters[{n}]", "introduce", person.get("name", ""), "character", person.get("description", ""),
            aliases=person.get("aliases") or [])
    for n, item in enumerate(items, 1):
        add(f"items[{n}]", "introduce", item.get("name", ""), "item", item.get("description", ""),
            aliases=item.get("aliases") or [], data={"holder": item.get("holder", "")})
    for n, place in enumerate(places, 1):
        for m, way in enumerate(place.get("exits") or [], 1):
            add(f"places[{n}].exits[{m}]", "exit_change", place.get("name", ""), way.get("to", ""),
                data={"label": way.get("label", ""), "travel_seconds": way.get("travel_seconds") or 0,
                      "both_ways": way.get("both_ways", True)})
    for n, person in enumerate(characters, 1):
        if person.get("place"):
            add(f"characters[{n}].place", "move", person.get("name", ""), person["place"],
                data={"ignore_exits": True})
        for m, relation in enumerate(person.get("relationships") or [], 1):
            add(f"characters[{n}].relationships[{m}]", "relationship", person.get("name", ""),
                relation.get("to", ""), relation.get("summary", ""), data={"label": relation.get("label", "")})
    for section, entries in (("places", places), ("characters", characters), ("items", items)):
        for n, entry in enumerate(entries, 1):
            add(f"{section}[{n}]", "consolidation", entry.get("name", ""), value=CREATED, data={"turn": turn})
    return events, where


def check_edit(state, edit, *, turn, per_turn, created_before=0):
    """Return the Checked ``edit_world`` ``edit`` on a copy of ``state`` (a whole State; it is not changed).

    Refused, with every reason, when it creates nothing or more than the
    turn has left, when a new name or alias is already someone's or
    something's, when any of its events is rejected (a move with no place,
    an exit to nowhere), or when world_lint finds an error it brought (a
    place joined to nothing, a character with no place).
    """
    checked = Checked()
    made = count(edit)
    if not made:
        checked.problems.append("the edit creates nothing; answer reuse or refuse instead")
    elif created_before + made > per_turn:
        checked.problems.append(f"the world author may create at most {per_turn} things a turn "
                                f"(authoring_per_turn); {created_before} made already, and this edit makes {made}")
    checked.problems += _taken_names(state, edit)
    if checked.problems:
        return checked
    copy = scratch(state)
    checked.events, checked.where = edit_events(edit, turn=turn)
    checked.outcomes = validate(copy, checked.events)
    for spot, outcome in zip(checked.where, checked.outcomes):
        if outcome.status != "applied":
            checked.problems.append(f"{spot}: {outcome.reason}")
    checked.created = [write["subject"] for outcome in checked.outcomes if outcome.status == "applied"
                       for write, before in zip(outcome.writes, outcome.previous)
                       if write["kind"] == "entity" and before["value"] is None]
    checked.problems += _new_errors(state, copy, checked, [k for k in checked.created
                                                              if world.kind_of(copy, k) == "character"])
    checked.state = copy
    return checked


def validate(state, events):
    """Validate ``events`` in order on ``state`` with the world's rights; return their Outcomes (observation too)."""
    return validate_batch(state, [clean(event) for event in events], WORLD)


def _taken_names(state, edit):
    problems, seen = [], {}
    for section in ("characters", "places", "items"):
        for n, entry in enumerate(edit.get(section) or [], 1):
            spot = f"{section}[{n}]"
            if not normalize(entry.get("name", "")):
                problems.append(f"{spot} has no name")
            for name in [entry.get("name", ""), *(entry.get("aliases") or [])]:
                if not normalize(name):
                    continue
                key = state.resolve(name)
                if key is not None:
                    problems.append(f"{spot}: {name!r} is already {state.name_of(key)} (a "
                                    f"{world.kind_of(state, key)}); reuse {state.name_of(key)} or choose another "
                                    "name")
                elif normalize(name) in seen:
                    problems.append(f"{spot}: {name!r} is also the name of {seen[normalize(name)]} in this edit")
                seen.setdefault(normalize(name), spot)
    return problems


def _new_errors(before, after, checked, characters):
    """Return world_lint's errors on ``after`` that ``before`` did not have, each as a reason the edit fails."""
    known = before.cached("lint_errors", LINT_KINDS, _errors)
    checked.findings = lint.lint(after, new=characters)
    return [f"world_lint: {finding.text}" for finding in checked.findings
            if finding.severity == "error" and finding.text not in known]


# What world_lint reads: the errors of a state are kept with it until one of these changes.
LINT_KINDS = ("entity", "exit", "location", "holder", "item", "relationship")


def _errors(state):
    return {finding.text for finding in lint.lint(state) if finding.severity == "error"}


def scratch(state):
    """Return a copy of ``state`` that validation may change, leaving ``state`` and its derived values as they are.

    The copy starts from the state's derived values (the exit graph, who
    holds what) marked as not its own, and its slots by kind likewise: the
    first change of a kind copies what it touches (``State._changed``), so a
    copy costs the slots dict, not a rebuild of the world's graph.
    """
    caches = {name: dataclasses.replace(entry, owned=False) for name, entry in state.caches.items()}
    return dataclasses.replace(state, slots=dict(state.slots), checked=set(state.checked), loaded=set(state.loaded),
                               caches=caches, shared=None, dirty=set(),
                               by_kind=dict(state.by_kind) if state.by_kind is not None else None, own_kinds=set())


# --- the consolidation queue ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Queued:
    key: str
    reason: str  # "created" (the author's), "no routine" (story time's catch-up)
    turn: int | None


def queue(state):
    """Return what waits for the world author on this line, oldest first."""
    found = [Queued(r.subject, r.data.get("reason", r.value), r.data.get("turn")) for r in state.of_kind("consolidation")]
    return sorted(found, key=lambda q: (q.turn if q.turn is not None else -1, q.key))


def created_in(state, turn):
    """Return how many things the author created in turn ``turn`` on this line (they are queued with the turn)."""
    return sum(1 for q in queue(state) if q.reason == CREATED and q.turn == turn)


def consolidation_due(queued, *, turn, consolidate_after):
    """Return whether the author should complete what it created: ``consolidate_after`` wait, or one waited four
    turns. Only its own creations count: what story time queued (no routine) waits for routines, not passages."""
    mine = [q for q in queued if q.reason == CREATED]
    return len(mine) >= consolidate_after or any(q.turn is not None and turn - q.turn >= CONSOLIDATE_TURNS
                                                 for q in mine)


@dataclass(frozen=True)
class Plan:
    """What consolidation works through: each queued thing, what world_lint says of it, and what is near it."""

    items: tuple  # Queued, the author's own
    gaps: dict  # key -> [finding texts that concern it]
    nearby: dict  # key -> [names of the places one exit away, or where it is]
    seen_by: dict  # key -> [names of the characters who know of it]


def plan(state, queued):
    """Return the consolidation Plan of ``queued`` on ``state``: the gaps to complete, from world_lint."""
    items = tuple(q for q in queued if q.reason == CREATED and state.entity(q.key) is not None)
    characters = [q.key for q in items if world.kind_of(state, q.key) == "character"]
    findings = lint.lint(state, new=characters)
    gaps, nearby, seen = {}, {}, {}
    for q in items:
        gaps[q.key] = [f.text for f in findings if concerns(f, q.key)]
        place = q.key if world.kind_of(state, q.key) == "place" else world.place_of(state, q.key) or \
            state.location_of(q.key)
        nearby[q.key] = sorted({state.name_of(e.to) for e in world.exits_from(state, place)} |
                               {state.name_of(e.origin) for e in world.exits_into(state, place)}) if place else []
        seen[q.key] = sorted(state.name_of(r.subject) for r in state.of_kind("knows") if r.value == q.key)
    return Plan(items, gaps, nearby, seen)


def concerns(finding, key):
    for subject in finding.subjects:
        parts = str(subject).split(":")
        if subject == key or key in parts[1:]:
            return True
    return False


def consolidation_events(proposal):
    """Return (events, where) completing the world from the author's consolidation answer: exits and
    relationships only (``{"exits": [{from, to, label, both_ways}], "relationships": [{from, to, label,
    summary}]}``)."""
    events, where = [], []
    for n, way in enumerate(proposal.get("exits") or [], 1):
        events.append({"type": "exit_change", "subject": way.get("from", ""), "object": way.get("to", ""),
                       "value": "", "data": {"label": way.get("label", ""), "both_ways": way.get("both_ways", False)}})
        where.append(f"exits[{n}]")
    for n, relation in enumerate(proposal.get("relationships") or [], 1):
        events.append({"type": "relationship", "subject": relation.get("from", ""), "object": relation.get("to", ""),
                       "value": relation.get("summary", ""), "data": {"label": relation.get("label", "")}})
        where.append(f"relationships[{n}]")
    return events, where


def check_consolidation(state, proposal, queued):
    """Return the Checked consolidation ``proposal`` over ``queued`` on a copy of ``state``.

    Refused, keeping the queue, when it names anything that does not exist
    (consolidation creates nothing), when an event is rejected, or when it
    brings a world_lint error. Kept, it ends with a retraction of every
    queued item it worked through.
    """
    checked = Checked()
    checked.events, checked.where = consolidation_events(proposal)
    for spot, event in zip(checked.where, checked.events):
        for role in ("subject", "object"):
            name = event[role]
            if name and state.resolve(name) is None:
                checked.problems.append(f"{spot}: {name!r} does not exist, and consolidation creates nothing "
                                        "(only passages and relationships between what exists)")
    if checked.problems:
        return checked
    items = plan(state, queued).items
    checked.events += [{"type": "retract", "subject": "", "object": f"consolidation:{q.key}", "value": ""}
                       for q in items]
    checked.where += [f"queue ({q.key})" for q in items]
    copy = scratch(state)
    checked.outcomes = validate(copy, checked.events)
    for spot, outcome in zip(checked.where, checked.outcomes):
        if outcome.status != "applied":
            checked.problems.append(f"{spot}: {outcome.reason}")
    checked.problems += _new_errors(state, copy, checked, [])
    checked.state = copy
    return checked


@register(AUTHOR_RANK, "consolidation", sources=PEOPLE, fields={
    "turn": Field("int", "the turn it was queued in (the author's creations)")},
    help="entity / \"\" / why (created): queue something new for the world author to complete (its passages "
         "and relationships); retract the consolidation:<key> line to take it off")
def _consolidation(check, event):
    key = check.entity(event["subject"], "thing to complete")
    reason = event["value"] or CREATED
    data = {"reason": reason}
    if "turn" in event["data"]:
        data["turn"] = event["data"]["turn"]
    if check.state.get(f"consolidation:{key}") is not None:
        raise Rejected(f"{check.state.name_of(key)} already waits for the world author")
    return [write(f"consolidation:{key}", "consolidation", subject=key, value=reason, data=data)]
