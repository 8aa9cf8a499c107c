"""Reading the story state of one node: a fold of the records on its lineage.

The state after a node is, for every slot, the deepest record on the node's
lineage (the later record wins at equal depth); a retracted record ends its
slot. SQLite does the fold with one window query through ``Path.clause``, so
the state of any node — the head after an undo, a save point, another branch
— is read the same way and an abandoned line's records are never eligible.
"""

import hashlib
import re
from dataclasses import dataclass, field

from django.db.models import F, Window
from django.db.models.functions import RowNumber

from ..models import CanonRule, StateRecord

ENTITY_KINDS = ("character", "place", "item", "faction")

# The player's character exists from the first line of every story, under these
# names as well as its own, so the recorder can say "protagonist" or "you".
PROTAGONIST = "protagonist"
PROTAGONIST_ALIASES = ("protagonist", "player", "you", "i", "me")


@dataclass(frozen=True)
class Record:
    """One live slot value, with where it came from."""

    id: int | None
    slot: str
    kind: str
    subject: str
    value: str
    data: dict
    narrator_only: bool
    authority: str  # "correction" | "state" | "campaign"
    depth: int
    source: str = ""  # "recorder" | "correction" | "campaign"
    author: str = ""
    event_id: int | None = None

    @property
    def provenance(self):
        """Return who set this and where, in words for the inspector and the panel."""
        if self.source == "campaign":
            return "campaign settings"
        if self.source == "correction":
            turn = f" at turn {self.depth // 2}" if self.depth else " at the opening"
            return f"correction by {self.author or 'a person'}{turn} (event {self.event_id})"
        return f"recorded after turn {self.depth // 2} (event {self.event_id})"


@dataclass(frozen=True)
class Canon:
    id: int
    text: str
    scope: str  # "invariant" | "initial"


@dataclass
class State:
    """The live records of one lineage, by slot, plus the campaign canon they are checked against."""

    slots: dict[str, Record]
    canon: list[Canon] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # every name and alias -> entity key

    def __post_init__(self):
        self.reindex()

    def reindex(self):
        self.names = {}
        for record in self.entities():
            for name in (record.value, *record.data.get("aliases", ())):
                self.names.setdefault(normalize(name), record.subject)
            self.names.setdefault(normalize(record.subject), record.subject)

    def entities(self):
        return [r for r in self.slots.values() if r.kind == "entity"]

    def of_kind(self, kind):
        return [r for r in self.slots.values() if r.kind == kind]

    def entity(self, key):
        return self.slots.get(f"entity:{key}")

    def resolve(self, name):
        """Return the key of the entity called ``name`` (by name or alias), or None."""
        return self.names.get(normalize(name))

    def name_of(self, key):
        record = self.entity(key)
        return record.value if record else key

    def location_of(self, key):
        record = self.slots.get(f"location:{key}")
        return record.value if record else ""

    def holder_of(self, item_key):
        record = self.slots.get(f"holder:{item_key}")
        return record.value if record else ""

    def scene(self):
        return self.slots.get("scene")

    def present(self):
        """Return the keys of the characters at the scene's location."""
        scene = self.scene()
        place = scene.data.get("location", "") if scene else ""
        if not place:
            place = self.location_of(PROTAGONIST)
        if not place:
            return []
        return [r.subject for r in self.of_kind("location") if r.value == place]

    def find_fact(self, text):
        return self.slots.get(fact_slot(text))

    def find_thread(self, text):
        return self.slots.get(thread_slot(text))

    def superseded(self, canon_id):
        return self.slots.get(f"canon:{canon_id}")


def normalize(text):
    """Return ``text`` as a matching key: lower case, single spaces, no outer punctuation or quotes."""
    text = str(text or "").replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    text = re.sub(r"\s+", " ", text.strip().lower())
    return text.strip(" .!?;:\"'")


def key_for(name):
    """Return the stable key of an entity name: ``"The Silver Key"`` -> ``"silver-key"``."""
    text = re.sub(r"^(the|a|an) ", "", normalize(name))
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:120] or "unnamed"


def _digest(text):
    return hashlib.sha1(normalize(text).encode()).hexdigest()[:16]


def fact_slot(text):
    return f"fact:{_digest(text)}"


def thread_slot(text):
    return f"thread:{_digest(text)}"


def protagonist_name(campaign):
    """Return the player's character's name: the campaign's protagonist line up to its first comma."""
    return re.split(r"[,;(\n]", campaign.protagonist, maxsplit=1)[0].strip()[:120] or "The protagonist"


def state_at(path, campaign):
    """Return the State after the last node of ``path``."""
    rows = (
        StateRecord.objects.filter(path.clause(), campaign_id=path.campaign_id)
        .annotate(rank=Window(RowNumber(), partition_by=[F("slot")], order_by=[F("depth").desc(), F("id").desc()]))
        # Only the window condition may go here: a plain condition such as
        # retracted=False would be applied before ranking and revive the value
        # a retraction ended.
        .filter(rank=1)
        .values_list("id", "slot", "kind", "subject", "value", "data", "narrator_only", "authority", "depth",
                     "event__source", "event__author__username", "event_id", "retracted")
    )
    slots = {row[1]: Record(*row[:9], source=row[9], author=row[10] or "", event_id=row[11])
             for row in rows if not row[12]}
    _add_protagonist(slots, campaign)
    canon = [Canon(pk, text, scope) for pk, text, scope in
             CanonRule.objects.filter(campaign_id=path.campaign_id, enabled=True).values_list("id", "text", "scope")]
    return State(slots, canon)


def _add_protagonist(slots, campaign):
    slot = f"entity:{PROTAGONIST}"
    if slot in slots:
        return
    name = protagonist_name(campaign)
    slots[slot] = Record(
        id=None, slot=slot, kind="entity", subject=PROTAGONIST, value=name,
        data={"kind": "character", "aliases": list(PROTAGONIST_ALIASES), "description": campaign.protagonist},
        narrator_only=False, authority="campaign", depth=0, source="campaign",
    )
