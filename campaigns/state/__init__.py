"""Authoritative story state: what is true now on this line of the story, and the one way it changes.

``state_at(path, campaign)`` reads the state after a node; ``apply_events``
(and ``correct`` for a person's corrections) is the only write path; the
recorder's outcome per reply is ``RecorderRun`` (no row: still pending).
The event core is here: ``events`` (validate, apply_events: the one
writer), ``registry`` (the one table of event types, handlers and batch
hooks), ``reading`` (the fold) and ``selection`` (what the narrator is
shown, which reads the world's views). The mechanisms are packages —
``world/``, ``time/``, ``minds/`` — that register their types and hooks in
the registry as this package imports them; ``events``, ``registry`` and
``reading`` never import them. Like the rest of ``campaigns``, it imports
no other app of ours.
"""

# Each domain registers its event types and hooks in the registry as it is imported; the event core imports
# none of them. This order is the order ``registry.TYPES`` lists the types in (``manage.py story`` names them).
from .world import world as _world  # noqa: F401, I001
from .time import rulebook as _rulebook  # noqa: F401
from .world import authoring as _authoring, offscene as _offscene  # noqa: F401
from .minds import minds as _minds  # noqa: F401
from .world import story as _story  # noqa: F401
from .events import apply_events, correct, correct_together, record_failure, validate, validate_batch
from .reading import (
    ENTITY_KINDS,
    PROTAGONIST,
    Canon,
    Record,
    State,
    key_for,
    normalize,
    state_at,
    state_for_events,
    state_for_turn,
)
from .registry import TYPES, recorder_schema, schema, types_for

# What the recorder (and a script) may propose after a turn, and what a person may also do by correction.
# (The state call's; events, perceptions and beliefs have a call of their own: decision D11.)
RECORDER_TYPES = tuple(name for name in types_for("recorder") if TYPES[name].call == "")
CORRECTION_TYPES = types_for("correction")

__all__ = [
    "CORRECTION_TYPES",
    "ENTITY_KINDS",
    "PROTAGONIST",
    "RECORDER_TYPES",
    "Canon",
    "Record",
    "State",
    "apply_events",
    "correct",
    "correct_together",
    "key_for",
    "normalize",
    "record_failure",
    "recorder_schema",
    "schema",
    "state_at",
    "state_for_events",
    "state_for_turn",
    "validate",
    "validate_batch",
]
