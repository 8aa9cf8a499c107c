"""Story memory: specific details written from blocks of the story, derived and forgettable.

A memory is anchored like a node: ``(branch, depth)`` is the last node of the
block it was written from, so ``Path.clause`` admits it exactly on the lines
that contain that node (seed 000 §19, §57). Rows are never deleted by the
application: eviction and the person's "forget" set ``forgotten``, and an
abandoned line's memories stay stored and come back when the line does.
"""

from django.core.validators import MaxLengthValidator
from django.db import models

from campaigns.models import REASON_CHARS, Branch, Campaign, StepRun, step_statuses

# A memory is a few sentences (the summariser is asked for at most 50 words);
# a person's may run longer, never to the size that crowds out the story.
MEMORY_CHARS = 2_000
# A summary is capped at 1,200 tokens by the checkpoint rules; this bounds the
# characters before anything counts them.
SUMMARY_CHARS = 20_000


class Memory(models.Model):
    class Authority(models.TextChoices):
        ACCEPTED = "accepted_story", "Accepted story"
        HEURISTIC = "heuristic", "Heuristic (inferred)"

    class Origin(models.TextChoices):
        SUMMARISER = "summariser", "Written from a block of the story"
        PERSON = "person", "Added by the person"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="memories")
    # RESTRICT like Node.branch: a branch never goes under its memories, a whole campaign still can.
    branch = models.ForeignKey(Branch, on_delete=models.RESTRICT, related_name="+")
    depth = models.PositiveIntegerField(help_text="The depth of the last node the memory covers (its anchor).")
    source_start = models.PositiveIntegerField(null=True, blank=True, help_text="First depth of the block.")
    source_end = models.PositiveIntegerField(null=True, blank=True, help_text="Last depth of the block.")

    text = models.TextField(validators=[MaxLengthValidator(MEMORY_CHARS)])
    original_text = models.TextField(blank=True, help_text="What was written first, kept when the text is edited.",
                                     validators=[MaxLengthValidator(MEMORY_CHARS)])
    revision = models.PositiveIntegerField(default=0, help_text="Counts corrections of the text.")
    authority = models.CharField(max_length=16, choices=Authority.choices)
    origin = models.CharField(max_length=12, choices=Origin.choices, default=Origin.SUMMARISER)
    model = models.CharField(max_length=200, blank=True, help_text="The model that wrote it, if one did.")

    pinned = models.BooleanField(default=False, help_text="Always retrieved, never evicted.")
    forgotten = models.BooleanField(default=False, help_text="Kept, but never retrieved (evicted or forgotten).")
    enabled = models.BooleanField(default=True)
    use_count = models.PositiveIntegerField(default=0)
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["campaign", "id"]
        verbose_name_plural = "memories"
        indexes = [
            # Covers retrieval's eligibility read: 10,000 memories are answered from the index alone, and
            # their words come from a cache keyed by (id, revision) (bench "memory").
            models.Index(fields=["campaign", "branch", "depth", "forgotten", "enabled", "revision", "authority",
                                 "pinned"], name="memory_eligibility"),
            models.Index(fields=["campaign", "forgotten"]),
        ]

    def __str__(self):
        return self.text[:60]


class MemoryVector(models.Model):
    """A memory's embedding: a rebuildable cache, float32 bytes and what made them.

    Its own table, so reading 10,000 memories' words never reads 3 KiB of
    vector with each (bench "memory": 90 ms of a 140 ms retrieval when the
    vector sat on the memory row), and a vector from another model is never
    compared.
    """

    memory = models.OneToOneField(Memory, on_delete=models.CASCADE, primary_key=True, related_name="vector")
    # Denormalised so the retrieval cache's stamp is one indexed aggregate per campaign.
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="+")
    model = models.CharField(max_length=200)
    dims = models.PositiveIntegerField()
    vector = models.BinaryField()
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["campaign", "model", "created_at"], name="memory_vector_stamp")]

    def __str__(self):
        return f"vector of memory {self.memory_id} ({self.model}, {self.dims}-d)"


class BankStamp(models.Model):
    """How many times a campaign's memories (or their vectors) changed in a way retrieval sees.

    Kept by database triggers (migration 0006), so every writer counts — the
    bank, a bulk update, the admin, another process — and never by hand. The
    turn's in-process index of the bank compares it once per turn and reads
    the rows again only when it moved (bench "overhead"). ``record_use``'s
    counts do not move it. A plain integer, not a foreign key: deleting a
    campaign deletes its memories, whose triggers must not trip over it.
    """

    campaign_id = models.BigIntegerField(primary_key=True)
    generation = models.BigIntegerField(default=0)

    def __str__(self):
        return f"campaign {self.campaign_id}'s memories, generation {self.generation}"


class MemoryRun(StepRun):
    """What the memory step of the post-turn worker did after one reply, failures included."""

    Status = step_statuses(written="Memories written", nothing_due="No block due", failed="Failed")

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="+")
    written = models.PositiveIntegerField(default=0)
    evicted = models.PositiveIntegerField(default=0)
    embedded = models.PositiveIntegerField(default=0)
    embedding_note = models.TextField(blank=True, help_text="Why vectors were not made, in words.",
                                      validators=[MaxLengthValidator(REASON_CHARS)])
    attempts = models.PositiveIntegerField(default=1)


class Checkpoint(models.Model):
    """A self-contained summary of the story from the opening through ``source_end``: a disposable cache.

    It is anchored like a memory, ``(branch, depth)``, and eligible exactly on
    the lines that contain that node (``Path.clause``). A summary the
    summariser wrote sits on the node it covers through; one the person typed
    sits where they typed it (the head) and covers what the summary they
    replaced covered. ``source_hash`` is the application's fingerprint of the
    covered path and the stable prefix, never the model's: a mismatch makes
    the row unusable and the next turn rebuilds it (seed 001). Rows are never
    deleted by the application; deleting them all changes no node, state or page.
    """

    class Origin(models.TextChoices):
        SUMMARISER = "summariser", "Written by the summariser"
        PERSON = "person", "Typed by the person"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="checkpoints")
    branch = models.ForeignKey(Branch, on_delete=models.RESTRICT, related_name="+")
    depth = models.PositiveIntegerField(help_text="The depth of the node it sits on (its anchor).")
    source_start = models.PositiveIntegerField(default=0, help_text="First depth covered: always the opening.")
    source_end = models.PositiveIntegerField(help_text="Last depth covered; later nodes stay verbatim.")

    text = models.TextField(validators=[MaxLengthValidator(SUMMARY_CHARS)])
    tokens = models.PositiveIntegerField(default=0)
    source_hash = models.CharField(max_length=64)
    stable_prefix_hash = models.CharField(max_length=64)
    schema_version = models.PositiveIntegerField()
    prompt_version = models.PositiveIntegerField()
    origin = models.CharField(max_length=12, choices=Origin.choices, default=Origin.SUMMARISER)
    model = models.CharField(max_length=200, blank=True, help_text="The model that wrote it, if one did.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["campaign", "id"]
        indexes = [models.Index(fields=["campaign", "branch", "depth"], name="checkpoint_anchor")]

    def __str__(self):
        return f"summary of depths {self.source_start}–{self.source_end} at ({self.branch_id}, {self.depth})"

    @property
    def typed_by_person(self):
        return self.origin == self.Origin.PERSON


class CheckpointRun(StepRun):
    """What the checkpoint step of the post-turn worker did after one reply, failures included."""

    Status = step_statuses(written="Summary written", not_needed="No compaction needed yet", failed="Failed")

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="+")
    attempts = models.PositiveIntegerField(default=1)


class RecallItem(models.Model):
    """One event, perception or belief as per-character recall searches it (seed 002 搜索索引与向量).

    Derived from the record the typed event pipeline wrote (one row per
    record: a correction at a later depth is a new row, and the deepest row of
    a slot on the line wins, as in the state fold), so the whole table can be
    deleted and rebuilt from the records. Anchored ``(branch, depth)`` like the
    record and read only through ``Path.clause``. ``owner`` is the character
    whose perception or belief it is, "" for an event (the game master's).
    Accuracy labels are never stored here: nothing a character recalls can
    carry one. ``memory_recallitem_fts`` indexes text, gist, keywords, the CJK
    pairs and ``scope`` (one token naming campaign and owner, so a search
    never leaves one character's memories).
    """

    class Kind(models.TextChoices):
        EVENT = "event", "Event"
        PERCEPTION = "perception", "Perception"
        BELIEF = "belief", "Belief"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="+")
    branch = models.ForeignKey(Branch, on_delete=models.RESTRICT, related_name="+")
    depth = models.PositiveIntegerField(help_text="The depth of the record it was made from (its anchor).")
    slot = models.CharField(max_length=200, help_text="The record's slot: event:<id>, perception:<event>:<who>, "
                                                      "belief:<who>:<id>.")
    owner = models.CharField(max_length=200, blank=True, help_text="The character's key; empty for an event.")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    text = models.TextField(blank=True)
    gist = models.TextField(blank=True, help_text="What is left once the wording has faded.")
    importance = models.PositiveSmallIntegerField(default=1)
    people = models.JSONField(default=list, blank=True)
    tags = models.JSONField(default=list, blank=True)
    location = models.CharField(max_length=200, blank=True)
    items = models.JSONField(default=list, blank=True)
    supports = models.JSONField(default=list, blank=True, help_text="A belief's supporting perceptions (slots).")
    contradicts = models.JSONField(default=list, blank=True, help_text="A belief's contradicting perceptions.")
    keywords = models.TextField(blank=True, help_text="Searchable names: tags, the place, items, people.")
    bigrams = models.TextField(blank=True, help_text="The two-character pairs of its CJK text, for FTS5.")
    scope = models.CharField(max_length=120, help_text="One search token naming campaign and owner.")
    at_ms = models.BigIntegerField(null=True, blank=True, help_text="Story time in UTC ms; none before the clock.")
    retracted = models.BooleanField(default=False, help_text="The record ended its slot: nothing to recall.")
    revision = models.PositiveIntegerField(default=0, help_text="Counts rewrites of this row.")

    class Meta:
        ordering = ["campaign", "id"]
        constraints = [models.UniqueConstraint(fields=["campaign", "slot", "branch", "depth"],
                                               name="recall_item_one_per_record")]
        indexes = [
            # One owner's rows on a line, answered from the index alone (bench "minds").
            models.Index(fields=["campaign", "owner", "branch", "depth", "slot", "revision", "retracted"],
                         name="recall_eligibility"),
        ]

    def __str__(self):
        return f"{self.slot}: {self.text[:60]}"


class RecallVector(models.Model):
    """A recall item's embedding: float32 bytes, its owner (the partition) and the model that made it."""

    item = models.OneToOneField(RecallItem, on_delete=models.CASCADE, primary_key=True, related_name="vector")
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="+")
    owner = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200)
    dims = models.PositiveIntegerField()
    vector = models.BinaryField()
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["campaign", "owner", "model", "created_at"], name="recall_vector_stamp")]

    def __str__(self):
        return f"vector of recall item {self.item_id} ({self.model}, {self.dims}-d)"


class RecallPin(models.Model):
    """The embedding model and dimensions the campaign's first batch of recall vectors fixed, until a reset."""

    campaign = models.OneToOneField(Campaign, on_delete=models.CASCADE, primary_key=True, related_name="+")
    model = models.CharField(max_length=200)
    dims = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"recall vectors pinned to {self.model} ({self.dims}-d)"


class RecallUse(models.Model):
    """One recall of one item by its owner at a node: repeated recall lengthens its half-life on that line.

    Keyed by slot, not by row, so rebuilding the index keeps what was recalled.
    """

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="+")
    branch = models.ForeignKey(Branch, on_delete=models.RESTRICT, related_name="+")
    depth = models.PositiveIntegerField()
    owner = models.CharField(max_length=200, blank=True)
    slot = models.CharField(max_length=200)

    class Meta:
        indexes = [models.Index(fields=["campaign", "owner", "branch", "depth", "slot"], name="recall_use_by_owner")]

    def __str__(self):
        return f"{self.owner or 'game master'} recalled {self.slot} at ({self.branch_id}, {self.depth})"


class RecallSync(models.Model):
    """The newest state record the recall index has read: what is newer is indexed next (``recall_index.sync``)."""

    campaign_id = models.BigIntegerField(primary_key=True)
    record_id = models.BigIntegerField(default=0)

    def __str__(self):
        return f"campaign {self.campaign_id}'s recall index read through record {self.record_id}"


class MindsRun(StepRun):
    """What the minds step of the post-turn worker did after one reply: the recorder's second call, the index."""

    Status = step_statuses(recorded="Recorded", nothing="Nothing to record",
                           waiting="Waiting for the state's recording", failed="Failed")

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="+")
    applied = models.PositiveIntegerField(default=0)
    rejected = models.PositiveIntegerField(default=0)
    asked_again = models.BooleanField(default=False, help_text="The first answer had refusals and was asked again.")
    note = models.TextField(blank=True, help_text="Why nothing was asked, in words.",
                            validators=[MaxLengthValidator(REASON_CHARS)])
    indexed = models.PositiveIntegerField(default=0)
    embedded = models.PositiveIntegerField(default=0)
    embedding_note = models.TextField(blank=True, validators=[MaxLengthValidator(REASON_CHARS)])
    attempts = models.PositiveIntegerField(default=1)
    model = models.CharField(max_length=200, blank=True)
