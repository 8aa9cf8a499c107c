"""A failed model call in words for the page: what went wrong and what to do, never a parser's message.

A JSON decoder's message ("Unterminated string starting at: line 1 column
2516") and a slice of the model's raw answer help whoever reads the log, not
the person on the play page, where post-turn failures are shown and stored.
"""

import json
import logging

from .base import NarratorError

logger = logging.getLogger(__name__)


def in_words(error: NarratorError, model: str) -> str:
    """Return the message a person reads for ``error`` from ``model``; the decoder's own text goes to the log."""
    if isinstance(error.__cause__, json.JSONDecodeError):
        logger.warning("%s answered with unusable JSON: %s", model, error)
        return (f"The model {model} answered with text that is not JSON (it broke off or went astray), "
                "so it could not be used. Try again, or choose a larger narrator model.")
    return str(error)
