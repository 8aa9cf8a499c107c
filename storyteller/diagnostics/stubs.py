"""The deterministic stubs the memory diagnostic plays against (seed 004 §C.4).

Each models the best a real model could do, so that a failure under them is
the application's:

- ``ScriptNarrator``: narration that names only filler places and never a
  planted fact, so no later narration restates one;
- ``BestCaseSummariser``: a memory keeps every sentence of its excerpt that
  carries a planted fact, plus one sentence naming the block's own place so
  memories differ; every other structured answer (the recorder, a checkpoint
  summary) carries no planted fact, so state and summaries never hold one;
- ``ConceptEmbedder``: a 96-dimension deterministic embedding in which the
  words of a small concept table share a dimension and other words are
  hashed, so a paraphrase lands near the original. It says nothing about
  nomic-embed-text.

``DiagnosticStubs`` bundles the three for ``FakeModelServer(stubs=...)``,
which serves them over real HTTP on 127.0.0.1. Pure: no Django, no database.
"""

import hashlib
import math
import re
from dataclasses import dataclass, field

DIMENSIONS = 96

# Words that mean the same thing to the diagnostic share one dimension.
CONCEPTS = {
    "timepiece": ("sundial", "dial", "hour", "hours", "clock", "timepiece", "brass"),
    "vessel": ("teapot", "pot", "kettle", "jar", "cup"),
    "conceal": ("hid", "hide", "hidden", "hides", "slip", "slipped", "tuck", "tucked", "stash", "stashed"),
    "storage": ("shelf", "cupboard", "cabinet", "drawer"),
    "oath": ("promise", "promised", "swear", "swore", "vow", "vowed"),
    "light": ("lantern", "lamp", "candle", "torch"),
    "shaft": ("well", "shaft", "pit"),
}
_CONCEPT_OF = {word: index for index, words in enumerate(CONCEPTS.values()) for word in words}
_STOPWORDS = frozenset("""a an and as at be but by for from had has have he her his i in into is it its me my of on or
she so that the their them then there they this to was we were where which while who with you your""".split())
_PREFIX = re.compile(r"^\s*search_(query|document):\s*")
_WORD = re.compile(r"[a-z]+")

# Filler the narrator names; none is a word of a planted fact or of the concept table.
PLACES = (
    "ferry landing", "mill race", "salt market", "chapel steps", "weaver's yard", "north road", "stone bridge",
    "fishers' quay", "rope walk", "orchard gate", "tannery lane", "granary loft", "river ford", "bell tower",
    "drovers' inn", "reed marsh", "quarry path", "cider press", "wool exchange", "watch house", "boat sheds",
    "herb garden", "smithy", "toll booth", "chalk downs", "willow bank",
)
_FILLER = (
    "Rain drifts across the {place}, and Aldric pulls his collar up against it.",
    "Voices rise and fall around the {place} as traders argue over the day's prices.",
    "A gull wheels overhead, crying, before settling on a post by the {place}.",
    "Aldric counts the coins in his purse twice and finds the sum unchanged.",
    "Somewhere beyond the {place} a dog barks, and a door bangs shut in the wind.",
    "The light thins toward evening, grey over the {place}, and the road waits.",
    "An old carter nods a greeting and goes on mending the wheel of his cart.",
    "Aldric writes a few careful lines in his journal about the {place}.",
)
MEMORY_PLACE = "The travellers spent time at the {place}."
NEUTRAL = "The travellers kept moving from place to place along the river."


@dataclass(frozen=True)
class Fact:
    """A planted fact: the sentence a player writes, and the words whose presence means it is carried.

    ``carries`` needs every word (whole words, any case); ``leaks`` any one of
    them, the stricter test the isolation checks use.
    """

    text: str
    words: tuple

    def carries(self, text):
        found = set(_words(text))
        return all(word.lower() in found for word in self.words)

    def leaks(self, text):
        found = set(_words(text))
        return any(word.lower() in found for word in self.words)


class ConceptEmbedder:
    def embed(self, text):
        """Return the unit vector of ``text`` (a search prefix is dropped, as nomic-embed-text's are learned)."""
        vector = [0.0] * DIMENSIONS
        for word in _words(_PREFIX.sub("", text)):
            if word in _STOPWORDS:
                continue
            vector[_dimension(word)] += 1.0
        norm = math.sqrt(sum(value * value for value in vector))
        return [value / norm for value in vector] if norm else [1.0 / math.sqrt(DIMENSIONS)] * DIMENSIONS


@dataclass
class ScriptNarrator:
    words: int = 60  # about how long each reply is
    turn: int = 0

    def narrate(self):
        """Return the next reply: filler about one place, never a planted fact."""
        place = PLACES[self.turn % len(PLACES)]
        self.turn += 1
        sentences = [MEMORY_PLACE.format(place=place)]
        i = self.turn
        while sum(len(s.split()) for s in sentences) < self.words:
            sentences.append(_FILLER[i % len(_FILLER)].format(place=place))
            i += 1
        return " ".join(sentences)


class BestCaseSummariser:
    def __init__(self, facts):
        self.facts = list(facts)

    def memory(self, excerpt):
        """Return the ideal memory of ``excerpt``: every sentence carrying a fact, then the block's place."""
        kept = [_without_speaker(s) for s in _sentences(excerpt) if any(f.carries(s) for f in self.facts)]
        lowered = excerpt.lower()
        place = next((p for p in PLACES if p in lowered), "road")
        return " ".join([*kept, MEMORY_PLACE.format(place=place)])


@dataclass
class DiagnosticStubs:
    """What ``FakeModelServer(stubs=...)`` answers with when nothing is scripted."""

    facts: list = field(default_factory=list)
    words: int = 60

    def __post_init__(self):
        filler = " ".join([*_FILLER, *PLACES, MEMORY_PLACE, NEUTRAL]).lower()
        for fact in self.facts:
            if fact.leaks(filler):
                raise ValueError(f"The planted fact {fact.text!r} shares a word with the stub narrator's filler; "
                                 "choose fact words the filler does not use.")
        self.narrator = ScriptNarrator(self.words)
        self.summariser = BestCaseSummariser(self.facts)
        self.embedder = ConceptEmbedder()

    def reply(self, messages, schema):
        """Return the answer to a chat request: a dict for a structured one, else narration."""
        if schema is None:
            return self.narrator.narrate()
        properties = schema.get("properties", {})
        if "events" in properties:
            return {"events": []}  # the recorder: nothing changes, so state never records a fact
        if "memory" in properties:
            return {"memory": self.summariser.memory(_excerpt_of(messages))}
        return _neutral(schema)

    def embed(self, text):
        return self.embedder.embed(text)


def _words(text):
    return _WORD.findall(text.lower())


def _dimension(word):
    concept = _CONCEPT_OF.get(word)
    if concept is not None:
        return concept
    digest = hashlib.sha256(word.encode()).digest()
    return len(CONCEPTS) + int.from_bytes(digest[:4], "big") % (DIMENSIONS - len(CONCEPTS))


def _sentences(text):
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]


def _without_speaker(sentence):
    """Drop the "The player adds to the story:" framing a player action carries in the excerpt."""
    return re.sub(r"^The player[^:]*:\s*", "", sentence)


def _excerpt_of(messages):
    text = str(messages[-1].get("content") or "") if messages else ""
    _, _, rest = text.partition("Story excerpt:")
    return rest.rsplit("Memory:", 1)[0] if rest else text


def _neutral(schema):
    """Return a value matching ``schema`` whose every string is the neutral sentence (no planted fact)."""
    kind = schema.get("type", "object")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object":
        return {name: _neutral(sub) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [_neutral(schema.get("items", {})) for _ in range(schema.get("minItems", 0))]
    return {"string": NEUTRAL, "integer": 0, "number": 0, "boolean": False}.get(kind)
