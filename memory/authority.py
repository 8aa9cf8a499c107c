"""A memory's authority, decided by the application from its own wording (seed 000 §14).

The summariser is never asked how sure it is: a memory that hedges is a guess
however confidently the model writes the rest, so hedged wording makes it
``heuristic`` and the prompt marks it ``[inferred]``. Nothing here ever
promotes a memory; the person may only downgrade one.
"""

import re

from .models import Memory

# Words that mark interpretation rather than a recorded event. "might" and
# "may" only count before a verb-like word ("may have", "might be"), so "the
# might of the empire" stays a fact.
HEDGES = re.compile(
    r"\b(seem(s|ed|ingly)?|appear(s|ed)? to|apparently|probabl[ey]|perhaps|maybe|possibl[ey]|likely|"
    r"presumably|suppos(edly|ed to)|as if|as though|might (be|have|not)|may (be|have|not)|could (be|have)|"
    r"must have|suggest(s|ed|ing)?|hint(s|ed)? (at|that)|rumou?r(s|ed)?|suspect(s|ed)?|believe[sd]? that)\b",
    re.IGNORECASE,
)


def classify(text):
    """Return the authority ``text`` earns: heuristic when it hedges, accepted story otherwise."""
    return Memory.Authority.HEURISTIC if HEDGES.search(text) else Memory.Authority.ACCEPTED
