"""Imported knowledge: a campaign's own files (Canon, Reference, Inspiration) and their passages.

The text lives on the source row (seed 003 §76): one transaction covers the
source, its passages and their full-text index rows. Passages, their FTS5 rows
and their vectors are derived and can be rebuilt from the source text at any
time without touching the story.
"""

from django.core.validators import MaxLengthValidator
from django.db import models
from django.urls import reverse

from campaigns.models import REASON_CHARS, Campaign

NOTES_CHARS = 2_000  # a person's note about a file
TEXT_CHARS = 1024 * 1024  # a source is at most 1 MiB of UTF-8 (seed 003 §76), so at most as many characters


class Source(models.Model):
    class LoreScope(models.TextChoices):
        LISTED = "listed", "Known only to those who have learned it"
        EVERYONE = "everyone", "Known to everyone"

    class Classification(models.TextChoices):
        CANON = "canon", "Canon"
        REFERENCE = "reference", "Reference"
        INSPIRATION = "inspiration", "Inspiration"

    class IndexState(models.TextChoices):
        PENDING = "pending", "Pending"
        READY = "ready", "Ready"
        FAILED = "failed", "Failed"
        UNAVAILABLE = "unavailable", "Unavailable"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="knowledge_sources")
    title = models.CharField(max_length=200)
    filename = models.CharField(max_length=255, help_text="The name the file had when imported; never read again.")
    classification = models.CharField(max_length=12, choices=Classification.choices)
    enabled = models.BooleanField(default=True)
    hidden = models.BooleanField(default=False, help_text="Narrator only: the protagonist does not know this.")
    always_include = models.BooleanField(default=False, help_text="Canon only: supplied on every turn.")
    notes = models.TextField(blank=True, validators=[MaxLengthValidator(NOTES_CHARS)])
    # A lorebook (seed 002 实体知识, decision D10): each heading an entry characters know by its key,
    # "<lore_book>:<entry id>". The book's key is given once and never changes, so knowledge stays pointed at it.
    lorebook = models.BooleanField(default=False, help_text="Each heading is a lore entry that characters know "
                                                            "only once they have learned it.")
    lore_book = models.CharField(max_length=60, blank=True, help_text="The book's key in its entries' keys.")
    lore_scope = models.CharField(max_length=10, choices=LoreScope.choices, default=LoreScope.LISTED,
                                  help_text="Who knows an entry that does not say: only those with a knowledge "
                                            "record of it, or everyone.")
    # A keyed lorebook (SillyTavern's World Info, issue 28): its text is World Info JSON, its entries fire when
    # their keys appear in the story (knowledge.keyed), at the book's classification. It has no passages: it is
    # never retrieved by relevance, only by its keys.
    keyed = models.BooleanField(default=False, editable=False,
                                help_text="Entries are inserted when their keys appear in the story's recent turns.")

    text = models.TextField(help_text="The imported text, NFC-normalised with Unix line endings.",
                            validators=[MaxLengthValidator(TEXT_CHARS)])
    content_hash = models.CharField(max_length=64, help_text="SHA-256 of the normalised text.")
    size_bytes = models.PositiveIntegerField()
    parser_version = models.PositiveIntegerField()
    chunking_version = models.PositiveIntegerField()

    lexical_state = models.CharField(max_length=12, choices=IndexState.choices, default=IndexState.PENDING)
    semantic_state = models.CharField(max_length=12, choices=IndexState.choices, default=IndexState.PENDING)
    semantic_detail = models.TextField(blank=True, help_text="Why the vectors are not ready, in words.",
                                       validators=[MaxLengthValidator(REASON_CHARS)])

    imported_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["campaign", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(always_include=False) | models.Q(classification="canon"),
                name="always_include_is_canon_only",
            ),
            models.UniqueConstraint(fields=["campaign", "lore_book"], condition=~models.Q(lore_book=""),
                                    name="one_lore_book_key_per_campaign"),
        ]
        indexes = [models.Index(fields=["campaign", "content_hash"])]

    def __str__(self):
        return self.title

    def get_absolute_url(self):
        return reverse("knowledge_source", args=[self.campaign_id, self.pk])

    def save(self, *args, **kwargs):
        # The flag bypasses relevance, which only Canon may do (seed 000 §41):
        # a source reclassified away from Canon loses it.
        if self.classification != self.Classification.CANON:
            self.always_include = False
            if "update_fields" in kwargs and kwargs["update_fields"] is not None:
                kwargs["update_fields"] = {*kwargs["update_fields"], "always_include"}
        super().save(*args, **kwargs)


class Passage(models.Model):
    """One retrievable piece of a source, in document order; its FTS5 row follows it by trigger."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="passages")
    # Denormalised so every retrieval filters by campaign before anything else.
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="+")
    index = models.PositiveIntegerField()
    heading_path = models.TextField(blank=True, help_text="The headings above the passage, joined by ' › '.")
    text = models.TextField()
    tokens = models.PositiveIntegerField()
    content_hash = models.CharField(max_length=64)

    # The vector is a rebuildable cache (seed 003 §53-§54): float32 bytes and
    # what made them, so a vector from another model is never compared.
    embedding = models.BinaryField(null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True)
    embedding_dims = models.PositiveIntegerField(null=True, blank=True)
    embedded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["source", "index"]
        constraints = [models.UniqueConstraint(fields=["source", "index"], name="one_passage_per_source_index")]
        indexes = [models.Index(fields=["campaign", "embedding_model"])]

    def __str__(self):
        return f"{self.source_id}#{self.index}"


class LoreEntry(models.Model):
    """One entry of a lorebook: derived from the source's text (like its passages), rebuilt with the same key.

    The key comes from the text itself — an explicit ``{#id}`` on the
    heading, or the heading path — never from how passages were cut, so the
    knowledge that names it survives "Rebuild index" (decision D10).
    """

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="lore_entries")
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200, help_text="<book>:<entry id>, as knowledge records name it.")
    title = models.CharField(max_length=300)
    heading_path = models.TextField(blank=True)
    text = models.TextField(blank=True)
    scope = models.CharField(max_length=10, blank=True, choices=Source.LoreScope.choices,
                             help_text="Empty: the lorebook's scope.")
    position = models.PositiveIntegerField()

    class Meta:
        ordering = ["source", "position"]
        constraints = [models.UniqueConstraint(fields=["campaign", "key"], name="one_lore_entry_per_key")]

    def __str__(self):
        return self.key
