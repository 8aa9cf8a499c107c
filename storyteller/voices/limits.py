"""A campaign's limits on voices, as plain values: what the rules in this package are given instead of a Campaign.

The fields live on ``Campaign`` (decision D9: a form refuses bad values
with what to change; no settings file). ``limits_of`` reads them once, so
the pure rules are tested without a database.
"""

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Limits:
    """Seed 002's defaults: 3 rounds a turn, 4 characters a round, 2 off-stage characters a turn (each once),
    the away note on, the world author on, 2 creations a turn, consolidation after 5 queued items."""

    max_rounds: int = 3
    max_characters: int = 4
    offstage_per_turn: int = 2
    offstage_per_character: int = 1
    offstage_summary: bool = True
    authoring_enabled: bool = True
    authoring_per_turn: int = 2
    authoring_consolidate_after: int = 5


def limits_of(campaign):
    """Return the Limits ``campaign`` sets (any object with the fields of the same names)."""
    return Limits(**{field.name: getattr(campaign, field.name) for field in fields(Limits)})
