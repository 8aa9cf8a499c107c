"""What the story-time and world-rule modules share: the refusal they raise, the record they write, the world they ask.

``clock``, ``calendar``, ``agenda``, ``variables``, ``dice`` and ``triggers``
are pure: plain values in, plain values out, no ORM and no model. A change
they cannot make raises ``Refused`` with the reason in words (the event
pipeline records it beside the rejected event); a change they can make comes
back as ``write()`` dicts, the shape ``events.validate`` applies and
``apply_events`` stores as ``StateRecord`` rows.
"""

from typing import Protocol


class Refused(ValueError):
    """The change breaks a rule; the message says which and what to change."""


def shown(value):
    """Return ``value`` as a refusal quotes it, whatever a file or form put there: short, and never a number
    too long to turn into text (Python refuses past 4,300 digits)."""
    if isinstance(value, (dict, list)):
        text = f"a {'list' if isinstance(value, list) else 'JSON object'}"
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 30:
        text = "a number of over 30 digits"
    else:
        text = repr(value)
    return text[:60] + ("…" if len(text) > 60 else "")


def write(slot, kind, *, subject="", value="", data=None, narrator_only=False, retracted=False):
    """Return one record write in the shape the event pipeline applies and stores."""
    record = {"slot": slot, "kind": kind, "subject": subject, "value": str(value), "data": data or {},
              "narrator_only": narrator_only}
    if retracted:
        record["retracted"] = True
    return record


class World(Protocol):
    """The questions triggers and views ask of the world; the story State answers them at integration.

    Keys are entity keys (``mara``, ``iron-key``, ``hall``); an unknown key
    answers with the empty value, never an error.
    """

    def location_of(self, who: str) -> str:
        """Return the place key where ``who`` is, or ""."""

    def holder_of(self, item: str) -> str:
        """Return the key directly holding ``item`` (a place, a character or a container), or ""."""

    def place_of(self, item: str) -> str:
        """Return the place at the end of ``item``'s holding chain, or ""."""

    def variable(self, obj: str, name: str):
        """Return the value of variable ``name`` on ``obj`` (its default when none is stored), or None."""
