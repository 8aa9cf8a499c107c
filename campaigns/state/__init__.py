"""Authoritative story state: what is true now on this line of the story, and the one way it changes.

``state_at(path, campaign)`` reads the state after a node; ``apply_events``
(and ``correct`` for a person's corrections) is the only write path; the
recorder's outcome per reply is ``RecorderRun`` (no row: still pending).
"""

from .world import authoring, offscene  # noqa: F401 — register the world author's and off stage's event types beside the others
from .events import CORRECTION_TYPES, RECORDER_TYPES, apply_events, correct, record_failure, validate, validate_batch
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
from .registry import recorder_schema, schema

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
