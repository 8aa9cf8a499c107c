"""The one table of event types: who may propose each, the fields it carries, its JSON Schema and its handler.

Every event is the same envelope — ``type``, ``subject``, ``object``,
``value``, ``narrator_only``, ``aliases`` and a ``data`` object whose fields
depend on the type. A domain module (``world.story`` for the story's own
types, ``world.world`` for places, exits and items, ``time.rulebook`` for
story time and world rules, ``minds.minds``…) registers its types here with
``register``, and what it adds to every batch with ``hook``; ``events``
dispatches on ``TYPES`` and calls ``HOOKS``, and neither this module nor
``events`` imports a domain. From the same declarations come ``clean``
(plain, bounded values whatever a model, a form or a script sent), the JSON
Schema of each type (``schema``) and the recorder's schema
(``recorder_schema``), so the documentation, the recorder and the validator
cannot drift apart.
"""

import math
from dataclasses import dataclass, field

from .reading import key_for

# Long enough for a sentence of state; anything longer is prose, not a fact.
MAX_TEXT = 500
# Names of people, places and things, and every other short field.
MAX_NAME = 120
MAX_ALIASES = 20
# One item_changes event: the benchmark's batch is twenty operations.
MAX_OPS = 20
# Characters named by an application-written observation.
MAX_WHO = 500
# A JSON field (a trigger's definition, a routine's windows, a world's lore…): its text, its lists and objects,
# its nesting. Bundles check event payloads and records by the same numbers, so whatever is stored can be
# exported and imported again.
MAX_JSON_TEXT = 2_000
MAX_JSON_ITEMS = 2_000
MAX_JSON_DEPTH = 16

# Who proposes an event. The recorder and a script follow the same rules (a
# script is a recording written by hand); a correction and a world file may
# do what only a person or the world's author may (ignore exits, force a lock).
RECORDER, SCRIPT, CORRECTION, WORLD = "recorder", "script", "correction", "world"
# The application itself (the clock's rounds, routines' catch-up, trigger effects), and the post-turn judge
# of triggers' free-text conditions. The engine follows the rules a person does: it is the world's author.
ENGINE, JUDGE = "engine", "judge"
# The player's own action played from the page (Go, Take, Unlock with…): a turn's event, with the recorder's rights
# (along open exits, never forcing a lock), validated before the narrator is asked.
PLAYER = "player"
PROPOSERS = (RECORDER, SCRIPT, PLAYER)
EVERYONE = (RECORDER, SCRIPT, CORRECTION, WORLD, ENGINE, PLAYER)
PEOPLE = (CORRECTION, WORLD)


class Rejected(Exception):
    """The event cannot apply; the message is the reason recorded beside it."""


@dataclass(frozen=True)
class Field:
    """One field of an event's ``data``: its kind, bounds and whether the recorder may send it."""

    kind: str  # "bool" | "int" | "number" | "axis" | "text" | "name" | "choice" | "ops" | "names" | "json"
    help: str = ""
    choices: tuple = ()
    minimum: int = 0
    maximum: int = 1_000_000
    recorder: bool = True


@dataclass(frozen=True)
class EventType:
    name: str
    rank: int  # where the type comes in listings (the recorder's rules, the schema, the forms): the story's first
    handler: object  # handler(check, event) -> list of writes; raises Rejected
    sources: tuple
    fields: dict  # name -> Field, the keys of ``data``
    help: str  # subject / object / value, and what the event does, in one line for the recorder and the docs
    aliases: bool = False  # whether the envelope's aliases mean anything for this type
    # Which of the recorder's calls proposes it: "" the state call, "minds" the second, small-schema call
    # (decision D11: events, perceptions and beliefs are recorded in a call of their own).
    call: str = ""
    # precheck(data) -> None, raising Rejected: what of the event can be checked without the state (parsing a
    # dice check's bands, a calendar, triggers), run before the write transaction opens (``events.apply_events``).
    precheck: object = None

    def fields_for(self, source):
        if source in PROPOSERS:
            return {name: spec for name, spec in self.fields.items() if spec.recorder}
        return self.fields


TYPES: dict[str, EventType] = {}

# The fields of one item operation (seed 002 「物品」): which of them an
# operation reads is in docs/events.md.
OP_NAMES = ("take", "drop", "give", "put", "wear", "remove", "open", "close", "lock", "unlock", "reveal")
OP_FIELDS = {
    "op": Field("choice", "what is done", choices=OP_NAMES),
    "item": Field("name", "the item (or container) acted on; empty when the operation is on an exit"),
    "quantity": Field("int", "how many of a stack (0: all of it)", minimum=0),
    "to": Field("name", "give: the receiver; put: the container"),
    "key": Field("name", "lock/unlock: the key used (empty: the one the actor holds)"),
    "slot": Field("name", "wear: the wear slot (empty: the item's own)"),
    "exit": Field("name", "open/close/lock/unlock/reveal an exit: its destination or label"),
    "from": Field("name", "the exit's place (empty: where the actor is)"),
    "forced": Field("bool", "break a lock without its key (a person or the game master only)", recorder=False),
}


# Ranks: the story's own types, then the world's; later domains (time, minds) after them.
STORY, WORLD_RANK = 10, 20
# Story time and world rules (campaigns/state/time/rulebook.py).
RULES_RANK = 30


@dataclass
class Hooks:
    """What domains add to every batch of ``events.apply_events`` beside their types, registered with ``hook``."""

    # (node, campaign, path) -> where and when the batch is (story time's ``Env``), read from the campaign row
    # with ``campaign_fields``; without one, the rules use their defaults.
    environment: object = None
    campaign_fields: tuple = ()
    # (state, events) -> the slots validating the batch will read, fetched in one read before it.
    prefetch: list = field(default_factory=list)
    # (state, outcomes) -> one more event the application writes after the batch's own (what people saw), or None.
    observers: list = field(default_factory=list)
    # (state, outcomes, source, env, *, elsewhere) -> the engine's outcomes after the batch, in its transaction.
    after_batch: list = field(default_factory=list)


HOOKS = Hooks()


def hook(kind, *, campaign_fields=()):
    """Register the decorated function as a ``kind`` hook of every batch (a field of ``Hooks``).

    ``environment`` is one function, with the ``campaign_fields`` it reads;
    the others are lists, called in the order they were registered.
    """
    if kind not in ("environment", "prefetch", "observers", "after_batch"):
        raise ValueError(f"no batch hook is called {kind!r}; use environment, prefetch, observers or after_batch")

    def decorate(function):
        if kind == "environment":
            if HOOKS.environment is not None:
                raise ValueError("a batch's environment is registered twice")
            HOOKS.environment, HOOKS.campaign_fields = function, tuple(campaign_fields)
        else:
            getattr(HOOKS, kind).append(function)
        return function
    return decorate


def register(rank, name, *, sources, fields=None, help, aliases=False, call="", precheck=None):
    """Register the decorated function as the handler of event type ``name``, listed by ``rank``."""
    def decorate(handler):
        if name in TYPES:
            raise ValueError(f"event type {name!r} is registered twice")
        TYPES[name] = EventType(name, rank, handler, tuple(sources), dict(fields or {}), help, aliases, call,
                                precheck)
        return handler
    return decorate


def precheck(event):
    """Return ``event`` (cleaned), its type's stateless check done: a failure is noted under ``problems``, which
    validation rejects it with. Run before a write transaction, so what is slow to check is not checked there."""
    kind = TYPES.get(event.get("type"))
    if kind is None or kind.precheck is None or event.get("problems") or event.get("invalid"):
        return event
    try:
        kind.precheck(event)
    except Rejected as error:
        event["problems"] = [str(error)]
    return event


def types_for(source):
    """Return the names of the event types ``source`` may propose, by rank, then in registration order."""
    return tuple(sorted((name for name, kind in TYPES.items() if source in kind.sources),
                        key=lambda name: TYPES[name].rank))


def clean(payload):
    """Return the event as plain, bounded values, whatever the model, the form or the script sent.

    Values that cannot be read as their field's kind, and fields the type
    does not have, are listed under ``problems``; validation rejects the
    event with them, naming what to change.
    """
    if not isinstance(payload, dict):
        return {"type": "", "subject": "", "object": "", "value": "", "narrator_only": False, "aliases": [],
                "data": {}, "invalid": repr(payload)[:200]}
    event = {name: _text(payload.get(name), MAX_TEXT) for name in ("type", "subject", "object", "value")}
    event["type"] = event["type"].lower()
    event["narrator_only"] = payload.get("narrator_only") is True
    aliases = payload.get("aliases") or []
    if isinstance(aliases, str):
        aliases = aliases.split(",")
    event["aliases"] = [str(a).strip()[:MAX_NAME] for a in aliases if str(a).strip()][:MAX_ALIASES]
    kind = TYPES.get(event["type"])
    data = payload.get("data")
    problems = []
    if data is None:
        data = {}
    if not isinstance(data, dict):
        problems.append(f"data must be an object, not {type(data).__name__}")
        data = {}
    event["data"] = _clean_fields(data, kind.fields if kind else {}, "data", problems) if kind else {}
    if kind is None and data:
        event["data"] = {}
    if problems:
        event["problems"] = problems
    return event


def _text(value, limit):
    return str(value if value is not None else "").strip()[:limit]


def _clean_fields(data, fields, where, problems):
    cleaned = {}
    for name, raw in data.items():
        spec = fields.get(name)
        if spec is None:
            expected = ", ".join(fields) or "none"
            problems.append(f"{where}.{name} is not a field of this event (its fields: {expected})")
            continue
        value = _coerce(raw, spec, f"{where}.{name}", problems)
        if value is not None:
            cleaned[name] = value
    return cleaned


def _coerce(raw, spec, where, problems):
    """Return ``raw`` as ``spec``'s kind, or None (with a problem noted) when it cannot be read as one."""
    if spec.kind == "bool":
        if isinstance(raw, bool):
            return raw
        if str(raw).strip().lower() in ("on", "true", "1", "yes"):
            return True
        if str(raw).strip().lower() in ("", "off", "false", "0", "no", "none"):
            return False
        problems.append(f"{where} must be true or false, not {str(raw)[:40]!r}")
        return None
    if spec.kind == "int":
        if raw in ("", None):
            return None
        try:
            number = int(raw) if not isinstance(raw, float) or raw.is_integer() else None
        except (TypeError, ValueError):
            number = None
        if number is None or isinstance(raw, bool) or not spec.minimum <= number <= spec.maximum:
            problems.append(f"{where} must be a whole number from {spec.minimum} to {spec.maximum:,}, "
                            f"not {str(raw)[:40]!r}")
            return None
        return number
    if spec.kind == "number":
        if raw in ("", None):
            return None
        try:
            number = float(raw)
        except (TypeError, ValueError):
            number = None
        if number is None or isinstance(raw, bool) or not spec.minimum <= number <= spec.maximum:
            problems.append(f"{where} must be a number from {spec.minimum:,} to {spec.maximum:,}, "
                            f"not {str(raw)[:40]!r}")
            return None
        return int(number) if number.is_integer() else number
    if spec.kind == "axis":
        if raw in ("", None):
            return None
        try:
            number = float(raw)
        except (TypeError, ValueError):
            number = None
        if number is None or isinstance(raw, bool) or not -1.0 <= number <= 1.0:
            problems.append(f"{where} must be a number from -1 to 1, not {str(raw)[:40]!r}")
            return None
        return round(number, 3)
    if spec.kind == "choice":
        if raw in ("", None):
            return None
        value = str(raw).strip().lower()
        if value not in spec.choices:
            problems.append(f"{where} must be one of {', '.join(spec.choices)}, not {str(raw)[:40]!r}")
            return None
        return value
    if spec.kind in ("text", "name"):
        return _text(raw, MAX_TEXT if spec.kind == "text" else MAX_NAME)
    if spec.kind == "json":
        problem = json_problem(raw)
        if problem:
            problems.append(f"{where}{problem}")
            return None
        return raw
    if spec.kind == "names":
        if not isinstance(raw, list):
            problems.append(f"{where} must be a list of names")
            return None
        return [_text(name, MAX_NAME) for name in raw[:MAX_WHO]]
    if spec.kind == "ops":
        if not isinstance(raw, list):
            problems.append(f"{where} must be a list of operations")
            return None
        if len(raw) > MAX_OPS:
            problems.append(f"{where} holds {len(raw)} operations; at most {MAX_OPS} fit in one event, "
                            "so split them over several item_changes events")
            return None
        ops = []
        for number, op in enumerate(raw, 1):
            if not isinstance(op, dict):
                problems.append(f"{where}[{number}] must be an object like {{\"op\": \"take\", \"item\": \"...\"}}")
                continue
            cleaned = _clean_fields(op, OP_FIELDS, f"{where}[{number}]", problems)
            if not cleaned.get("op"):
                problems.append(f"{where}[{number}] names no op (one of {', '.join(OP_NAMES)})")
                continue
            ops.append(cleaned)
        return ops
    raise ValueError(f"unknown field kind {spec.kind!r}")


def json_problem(value):
    """Return what makes ``value`` too large a JSON value to store (" holds…", after where it is), or ""; checked
    without recursion, so nesting costs nothing before it is refused."""
    stack = [(value, 0, "")]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, str):
            if len(item) > MAX_JSON_TEXT:
                return f"{where} holds text of {len(item):,} characters; at most {MAX_JSON_TEXT:,} fit there"
        elif isinstance(item, (dict, list)):
            if depth >= MAX_JSON_DEPTH:
                return f"{where} is nested more than {MAX_JSON_DEPTH} levels deep"
            if len(item) > MAX_JSON_ITEMS:
                return f"{where} holds {len(item):,} entries; at most {MAX_JSON_ITEMS:,} fit there"
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                if isinstance(key, str) and len(key) > MAX_NAME:
                    return f"{where} has a field name of {len(key):,} characters"
                stack.append((child, depth + 1, f"{where}.{key}" if isinstance(key, str) else f"{where}[{key}]"))
        elif isinstance(item, float) and not math.isfinite(item):
            return f"{where} holds a number that is not finite"
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) >= 10 ** 18:
            return f"{where} holds a number of more than 18 digits"
    return ""


def schema(name, source=CORRECTION):
    """Return the JSON Schema of one event of type ``name`` as ``source`` may send it.

    No property outside the envelope is allowed, and every field of ``data``
    may be left out (a field left out is left as it was, or takes its
    default), so a model never has to restate what did not change. For a
    person or a world file the envelope's properties are listed as required;
    a model proposing an event (the recorder) need give only its ``type``:
    ``clean`` fills in the rest as it does for people and scripts
    (docs/events.md), and a reply that left out an empty ``aliases`` or
    ``data`` is no reason to ask the model again. The same schema serves
    Ollama's ``format``, OpenAI-compatible servers and the built-in
    narrator's grammar (which writes every property in order regardless).
    """
    kind = TYPES[name]
    properties = {
        "type": {"const": name},
        "subject": {"type": "string", "maxLength": MAX_TEXT},
        "object": {"type": "string", "maxLength": MAX_TEXT},
        "value": {"type": "string", "maxLength": MAX_TEXT},
        "narrator_only": {"type": "boolean"},
    }
    if kind.aliases:
        properties["aliases"] = {"type": "array", "items": {"type": "string", "maxLength": MAX_NAME},
                                 "maxItems": MAX_ALIASES}
    fields = kind.fields_for(source)
    if fields:
        properties["data"] = _object({name: _field_schema(spec, source) for name, spec in fields.items()},
                                     required=())
    return _object(properties, required=("type",) if source in PROPOSERS else None)


def recorder_schema(source=RECORDER, call=""):
    """Return the recorder's answer schema: ``{"events": [...]}``, each event one of the types it may propose
    in its ``call`` (the state call by default)."""
    variants = [schema(name, source) for name in types_for(source) if TYPES[name].call == call]
    return _object({"events": {"type": "array", "items": {"anyOf": variants}, "maxItems": MAX_EVENTS}})


# A reply that needs more events than this is describing, not recording.
MAX_EVENTS = 40


def _object(properties, required=None):
    return {"type": "object", "properties": properties,
            "required": list(properties if required is None else required), "additionalProperties": False}


def _field_schema(spec, source):
    if spec.kind == "bool":
        return {"type": "boolean"}
    if spec.kind == "int":
        return {"type": "integer", "minimum": spec.minimum, "maximum": spec.maximum}
    if spec.kind == "number":
        return {"type": "number", "minimum": spec.minimum, "maximum": spec.maximum}
    if spec.kind == "axis":
        return {"type": "number", "minimum": -1, "maximum": 1}
    if spec.kind == "choice":
        return {"enum": list(spec.choices)}
    if spec.kind in ("text", "name"):
        return {"type": "string", "maxLength": MAX_TEXT if spec.kind == "text" else MAX_NAME}
    if spec.kind == "names":
        return {"type": "array", "items": {"type": "string", "maxLength": MAX_NAME}, "maxItems": MAX_WHO}
    if spec.kind == "json":
        return {}
    if spec.kind == "ops":
        fields = {name: op for name, op in OP_FIELDS.items() if op.recorder or source not in PROPOSERS}
        return {"type": "array", "maxItems": MAX_OPS,
                "items": _object({name: _field_schema(op, source) for name, op in fields.items()}, required=("op",))}
    raise ValueError(f"unknown field kind {spec.kind!r}")


class Check:
    """The state an event is checked against, with the lookups every handler needs."""

    def __init__(self, state, source, elsewhere, env=None):
        self.state = state
        self.source = source
        self.elsewhere = elsewhere
        self.env = env  # where and when the batch is (campaigns.state.time.rulebook.Env), for story time and rules

    @property
    def by_recorder(self):
        """Whether the event comes from the recorder or a script (which follows the recorder's rules)."""
        return self.source in PROPOSERS

    def entity(self, name, role="subject", kinds=None):
        if not name:
            raise Rejected(f"the event names no {role}")
        key = self.state.resolve(name)
        if key is None:
            if self.elsewhere(key_for(name)):
                raise Rejected(f"{name!r} exists only on another line of the story (abandoned history), "
                               "not on this turn's line")
            raise Rejected(f"unknown entity {name!r}; introduce it first")
        kind = self.state.entity(key).data.get("kind")
        if kinds and kind not in kinds:
            raise Rejected(f"{name!r} is a {kind}, not a {' or '.join(kinds)}")
        return key

    def text(self, event, what):
        if not event["value"]:
            raise Rejected(f"the event gives no {what}")
        return event["value"]

    def guard(self, slot):
        """Refuse a recorder change to a slot a person set by correction (it outranks accepted state)."""
        current = self.state.get(slot)
        if self.by_recorder and current is not None and current.authority == "correction":
            raise Rejected(f"{current.value!r} was set by a manual correction ({current.provenance}); "
                           "only another correction changes it")

    def person_only(self, what):
        """Refuse what only a person's correction (or the world file) may do."""
        if self.by_recorder:
            raise Rejected(f"{what} is for a person's correction (or, later, the game master), not the recorder")


@dataclass
class Outcome:
    payload: dict
    status: str  # "applied" | "rejected"
    reason: str = ""
    writes: list = field(default_factory=list)
    previous: list = field(default_factory=list)
    source: str = ""  # who proposed it, when not the batch's proposer (the engine's trigger check after a batch)
