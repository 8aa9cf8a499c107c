"""The story and its truth: campaigns, the story tree, save points and canon.

The story is a tree of nodes addressed by ``(branch, depth)``. The opening is
depth 0; turn n's player action is depth 2n-1 and its reply 2n. A branch owns
the nodes deeper than its ``fork_depth``; shallower ones belong to its parent's
lineage. Nothing here is ever deleted: undo, retry and divergence move the head
and open branches (see ``lineage``), so every word ever accepted stays reachable.
"""

from django.conf import settings
from django.core.validators import MaxLengthValidator, MaxValueValidator, MinValueValidator
from django.db import models
from django.urls import reverse

# Every free-text field has a limit, enforced by the forms, the admin, the
# bundle importer and the write functions alike (issue 10: a 2 MB memory or
# opening made every turn fail). Each sits far above what play writes there.
OPENING_CHARS = 20_000  # about 5,000 tokens: more than half of the default 8,192-token window
NOTES_CHARS = 4_000  # style notes and narrator rules, which sit in every prompt
CANON_CHARS = 2_000  # one canon rule is a sentence or a short paragraph
ACTION_CHARS = 4_000  # what a player may send in one turn (the action form's limit)
DIRECTION_CHARS = 1_000  # a one-turn direction (the action form's limit)
NODE_CHARS = 100_000  # a reply: 4,000 tokens of prose is about 16,000 characters
REASON_CHARS = 2_000  # why an event was rejected or a step failed
# The window no local model exceeds, and the range Ollama and OpenAI servers accept.
MAX_CONTEXT_TOKENS = 1_048_576
MAX_TEMPERATURE = 2.0
# Voices (seed 002 回合结构, 离场行动, 扩展世界): how far each limit may go. Every round is a game-master call and
# one call per character it activates, every off-stage character one call after the turn: past these a turn
# takes minutes on a local model. Rounds stay far below 100, where off-stage rounds are numbered from.
MAX_ROUNDS = 6
MAX_CHARACTERS = 8
MAX_OFFSTAGE = 4
MAX_AUTHORING = 5
MAX_CONSOLIDATE_AFTER = 50
# The author's note (issue 26): a short direction, as SillyTavern's; deeper than this it is no longer near the end.
NOTE_CHARS = 1_000
MAX_NOTE_DEPTH = 50
MAX_NOTE_INTERVAL = 100


def _limit(what, low, high, why):
    """Return the validators of a limit on voices, refusing with what it is for and the values it may take."""
    message = f"{what} may be {low} to {high}; choose a number in that range ({why})."
    return [MinValueValidator(low, message), MaxValueValidator(high, message)]


PERSONA_CHARS = 2_000  # a persona's description sits in the stable prefix of every prompt, as style notes do
PORTRAIT_BYTES = 512 * 1024  # a portrait is a small picture beside a name, kept in the database
PORTRAIT_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")


class Persona(models.Model):
    """Who a person plays as: a name, a description and, if they like, a portrait (SillyTavern's persona).

    A campaign plays as one of its owner's personas. The name is what
    ``{{user}}`` means in any text the narrator reads and what it calls the
    player's character; the description sits in the prompt's stable prefix.
    """

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="personas")
    name = models.CharField(max_length=100, help_text="What the story calls your character.")
    description = models.TextField(blank=True, validators=[MaxLengthValidator(PERSONA_CHARS)],
                                   help_text="Who they are: looks, manner, what they carry. The narrator reads it "
                                             "in every turn of a campaign played as them.")
    portrait = models.BinaryField(blank=True, default=b"", editable=False)
    portrait_type = models.CharField(max_length=20, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self):
        return self.name


class WholeCampaigns(models.Manager):
    """Every campaign but those an import is still writing: what pages, sockets and commands see."""

    def get_queryset(self):
        return super().get_queryset().filter(staged=False)


class Campaign(models.Model):
    class PointOfView(models.TextChoices):
        SECOND = "second", "Second person (you)"
        FIRST = "first", "First person (I)"
        THIRD = "third", "Third person"

    class Level(models.TextChoices):
        LOW = "low", "Low"
        MEDIUM = "medium", "Medium"
        HIGH = "high", "High"

    class ProseLength(models.TextChoices):
        SHORT = "short", "Short (one paragraph)"
        MEDIUM = "medium", "Medium (two or three paragraphs)"
        LONG = "long", "Long (several paragraphs)"

    class ClockMode(models.TextChoices):
        SIMULATED = "simulated", "Simulated (moves with the story)"
        REAL = "real", "Real (follows the wall clock)"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="campaigns")
    title = models.CharField(max_length=200)
    genre = models.CharField(max_length=100, blank=True)
    protagonist = models.CharField(max_length=200, help_text="Who the player is, in a line or two.")
    persona = models.ForeignKey(Persona, null=True, blank=True, on_delete=models.SET_NULL, related_name="campaigns",
                                help_text="Who you play as: its name is what {{user}} means and what the narrator "
                                          "calls your character.")
    opening = models.TextField(help_text="The scene the story starts from.",
                               validators=[MaxLengthValidator(OPENING_CHARS)])

    # Durable style preferences (seed 000 §47): configuration, never inferred.
    point_of_view = models.CharField(max_length=10, choices=PointOfView.choices, default=PointOfView.SECOND)
    prose_length = models.CharField(max_length=10, choices=ProseLength.choices, default=ProseLength.MEDIUM)
    dialogue_density = models.CharField(max_length=10, choices=Level.choices, default=Level.MEDIUM)
    descriptive_richness = models.CharField(max_length=10, choices=Level.choices, default=Level.MEDIUM)
    violence_level = models.CharField(max_length=10, choices=Level.choices, default=Level.LOW)
    pacing = models.CharField(max_length=100, blank=True, help_text="For example: slow and atmospheric.")
    style_notes = models.TextField(blank=True, help_text="Anything else about how the story should read.",
                                   validators=[MaxLengthValidator(NOTES_CHARS)])

    narrator_rules = models.TextField(blank=True, help_text="Extra standing instructions for the narrator.",
                                      validators=[MaxLengthValidator(NOTES_CHARS)])
    # From a character card (issue 28), and anyone's to write: how the characters speak (a card's mes_example),
    # at the Inspiration level in the stable prefix; and a direction given with every turn just before the
    # player's action (a card's post_history_instructions).
    style_examples = models.TextField(blank=True, validators=[MaxLengthValidator(OPENING_CHARS)],
                                      help_text="Example dialogue showing how the characters speak: tone and "
                                                "manner for the narrator, never facts of the story.")
    reply_direction = models.TextField(blank=True, validators=[MaxLengthValidator(NOTES_CHARS)],
                                       help_text="A direction given with every turn, just before your action "
                                                 "(a card's post-history instructions).")

    context_token_budget = models.PositiveIntegerField(
        default=8192, help_text="The whole prompt window in tokens, reply included.",
        validators=[MaxValueValidator(MAX_CONTEXT_TOKENS)],
    )
    max_output_tokens = models.PositiveIntegerField(default=400, help_text="The longest reply the narrator may write.",
                                                    validators=[MinValueValidator(1)])
    temperature = models.FloatField(default=0.8, validators=[MinValueValidator(0.0),
                                                             MaxValueValidator(MAX_TEMPERATURE)])
    narrator_model = models.CharField(
        max_length=200, blank=True, help_text="Leave blank for the server default (STORYTELLER_NARRATOR_MODEL)."
    )
    embed_model = models.CharField(
        max_length=200, blank=True, help_text="Leave blank for the server default (STORYTELLER_EMBED_MODEL)."
    )

    # Story time and world rules (seed 002 时间, 世界触发器; docs/rules.md). Checked together by the campaign
    # form (``campaigns.state.time.clock.Settings.check``): invalid settings are refused naming what to change.
    clock_mode = models.CharField(max_length=10, choices=ClockMode.choices, default=ClockMode.SIMULATED,
                                  help_text="Simulated time moves only with the story; real time follows the wall "
                                            "clock, never goes back and cannot be skipped.")
    time_zone = models.CharField(max_length=64, default="UTC",
                                 help_text="The story's time zone (IANA, e.g. Europe/Lisbon): how dates and times "
                                           "read, and when routines and festivals begin.")
    round_seconds = models.PositiveIntegerField(default=30, help_text="How long a turn takes in story time when "
                                                                      "the recorder does not say (seconds).")
    max_skip_days = models.PositiveIntegerField(default=30, help_text="The longest one Skip time may be (days).")
    trigger_cap = models.PositiveIntegerField(default=3, validators=[MinValueValidator(1), MaxValueValidator(50)],
                                              help_text="How many world triggers may fire at one check; the rest "
                                                        "fire at the next.")
    beat_turns = models.PositiveIntegerField(default=3, validators=[MinValueValidator(1), MaxValueValidator(100)],
                                             help_text="Turns a fired trigger's beat waits for the narrator before "
                                                       "it lapses.")
    cue_turns = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1), MaxValueValidator(100)],
                                            help_text="Turns a fired trigger's cue is given before it lapses.")
    # When the person last played (a committed turn): a real clock tells the narrator of an absence from here.
    last_played_at = models.DateTimeField(null=True, blank=True, editable=False)

    # Voices (decision D9: campaign fields a form checks, not a settings file). Seed 002's defaults.
    game_master = models.BooleanField(
        default=False, help_text="A game master resolves each action and narrates, and the characters with the "
                                 "player speak for themselves, each from what it knows.")
    max_rounds = models.PositiveSmallIntegerField(
        default=3, validators=_limit("Rounds after a player message", 1, MAX_ROUNDS,
                                     "each round is a game-master call and one call per character it activates"),
        help_text="Rounds after each player message (the player's move alone counts as one).")
    max_characters = models.PositiveSmallIntegerField(
        default=4, validators=_limit("Characters in one round", 1, MAX_CHARACTERS,
                                     "each one is a model call of its own in every round"),
        help_text="Characters who may act in one round.")
    offstage_per_turn = models.PositiveSmallIntegerField(
        default=2, validators=_limit("Off-stage characters after a turn", 0, MAX_OFFSTAGE,
                                     "0 turns off-stage actions off; each one is a model call after the turn"),
        help_text="Characters away from the player who act after each turn on what is due (0: none).")
    offstage_per_character = models.PositiveSmallIntegerField(
        default=1, validators=_limit("Off-stage actions of one character after a turn", 1, MAX_OFFSTAGE,
                                     "to keep characters from acting off stage, set the characters per turn to 0"),
        help_text="How often one character may act off stage after one turn.")
    round_timer_seconds = models.PositiveIntegerField(
        default=0, validators=_limit("The table's round timer", 0, 3600,
                                     "0 turns it off: a round then waits for everyone here, or for your go"),
        help_text="At a table: seconds after a round's first action before it plays with what was sent (0: off).")
    offstage_summary = models.BooleanField(
        default=True, help_text="Show what happened off stage as a “Meanwhile” card after the turn.")
    authoring_enabled = models.BooleanField(
        default=True, help_text="Let the world author add people, places and passages when the story needs them.")
    authoring_per_turn = models.PositiveSmallIntegerField(
        default=2, validators=_limit("Creations by the world author in one turn", 0, MAX_AUTHORING,
                                     "0 lets the author complete the world but never add to it"),
        help_text="The most people, places and things the world author may create in one turn.")
    authoring_consolidate_after = models.PositiveSmallIntegerField(
        default=5, validators=_limit("New things waiting before consolidation", 1, MAX_CONSOLIDATE_AFTER,
                                     "consolidation also runs after four turns"),
        help_text="New things waiting before the world author completes their passages and relationships "
                  "(it also does after four turns).")
    # Characters' recall (seed 002 memory.*, decision D9: settings a form checks), and the optional reranker.
    memory_flaky = models.BooleanField(
        default=True, help_text="Memories fade with story time (once the story clock runs); off: recalled exactly.")
    memory_recall = models.PositiveSmallIntegerField(
        default=12, validators=[MinValueValidator(1), MaxValueValidator(60)],
        help_text="How many memories a character recalls at once.")
    memory_over_retrieve = models.PositiveSmallIntegerField(
        default=4, validators=[MinValueValidator(1), MaxValueValidator(10)],
        help_text="Candidates looked at per memory recalled (at most 60 in all).")
    memory_diversity = models.FloatField(
        default=0.3, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="How much near-duplicate memories are held back, 0 (not at all) to 1.")
    memory_associate = models.PositiveSmallIntegerField(
        default=2, validators=[MaxValueValidator(10)],
        help_text="Important memories brought along by what was recalled (0: none).")
    memory_verify = models.BooleanField(
        default=True, help_text="When the recorder's events, perceptions or beliefs are refused, ask it once more "
                                "with the reasons before keeping any.")
    reranker_url = models.URLField(
        max_length=300, blank=True,
        help_text="An optional reranking server (POST /rerank, as llama.cpp and TEI answer); empty: none.")

    # Who the play page shows the story as (issue 24): the player's character by default; the author's view
    # (everything, spoilers included) is one deliberate switch, remembered here. Not exported: an imported
    # campaign opens as its player sees it.
    author_view = models.BooleanField(
        default=False, editable=False,
        help_text="Show everything on the play page, spoilers included, instead of what the player's character "
                  "knows.")
    # The characters the player muted for the scene (the game master does not have them answer), and the
    # protagonist's place when they did: a new place is a new scene, and the list is void there.
    muted = models.JSONField(default=dict, blank=True, editable=False)

    # The head: where the story currently stands. Every read of the story
    # starts from here through ``lineage.path_of``.
    head_branch = models.ForeignKey("Branch", null=True, blank=True, on_delete=models.RESTRICT, related_name="+")
    head_depth = models.PositiveIntegerField(default=0)

    # Tidied away from the list (``storyteller.tidying.archive``): kept whole, and back with one click.
    archived_at = models.DateTimeField(null=True, blank=True, editable=False)

    # An import writes a large campaign in short transactions (``campaigns.staging``); until the last one it is
    # staged, and no page, socket, list or command sees it.
    staged = models.BooleanField(default=False, editable=False)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = WholeCampaigns()
    # Every row, staged ones included: the importer's own, and the sweep of imports that died halfway.
    every = models.Manager()

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self):
        return self.title

    def get_absolute_url(self):
        return reverse("play", args=[self.pk])

    @property
    def turn_count(self):
        return self.head_depth // 2


BRANCH_NAME_CHARS = 120


class Branch(models.Model):
    """A line of the story that leaves its parent's lineage after ``fork_depth``.

    ``number`` counts the campaign's branches from 1 in the order they were
    made (what a person calls them: "line 3"); ``name`` is the person's own,
    empty for the default (the action where the line split, ``branching``).
    """

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="branches")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.RESTRICT, related_name="children")
    fork_depth = models.IntegerField(default=-1, help_text="Depths up to this come from the parent's lineage.")
    number = models.PositiveIntegerField(default=0, editable=False)
    name = models.CharField(max_length=BRANCH_NAME_CHARS, blank=True,
                            help_text="What you call this line; empty: the action where it split.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["campaign", "id"]
        verbose_name_plural = "branches"
        constraints = [models.UniqueConstraint(fields=["campaign", "number"], name="one_branch_per_number")]

    def __str__(self):
        return f"line {self.number} of campaign {self.campaign_id}"

    def save(self, *args, **kwargs):
        if not self.number:
            self.number = Branch.next_number(self.campaign_id)
        super().save(*args, **kwargs)

    @staticmethod
    def next_number(campaign_id):
        """Return the campaign's next branch number (a bulk create numbers its rows on from it itself).

        Branches are made inside a write transaction, one writer at a time, so no two takers see the same number.
        """
        last = Branch.objects.filter(campaign_id=campaign_id).aggregate(last=models.Max("number"))["last"]
        return (last or 0) + 1


class AuthorNote(models.Model):
    """The author's note: a short direction put into the prompt ``depth`` messages from its end every ``interval``
    turns, in the voice the person chose (SillyTavern's note_prompt, note_depth, note_interval and note_role).

    A campaign has one (``branch`` empty), and a branch may have its own,
    which holds on that branch and every branch grown from it
    (``campaigns.notes``). An empty text is no note: on a branch, the
    campaign's note is off there.
    """

    class Role(models.TextChoices):
        SYSTEM = "system", "As an instruction to the narrator"
        USER = "user", "In your own voice (as the player)"
        ASSISTANT = "assistant", "As the narrator's own note"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="author_notes")
    branch = models.ForeignKey(Branch, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    text = models.TextField(blank=True, validators=[MaxLengthValidator(NOTE_CHARS)])
    depth = models.PositiveSmallIntegerField(
        default=1, validators=_limit("The note's depth", 0, MAX_NOTE_DEPTH, "how many messages from the end"),
        help_text="How far from the end of the prompt: 0 after your action, 1 just before it, 2 before the "
                  "narrator's last reply, and so on.")
    interval = models.PositiveSmallIntegerField(
        default=1, validators=_limit("How often the note is given", 0, MAX_NOTE_INTERVAL, "0 turns it off"),
        help_text="Every how many turns: 1 every turn, 3 every third turn, 0 never.")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.SYSTEM)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["campaign", "branch"], name="one_note_per_branch"),
            models.UniqueConstraint(fields=["campaign"], condition=models.Q(branch__isnull=True),
                                    name="one_note_per_campaign"),
        ]

    def __str__(self):
        return f"author's note of {self.campaign_id}" + (f" on branch {self.branch_id}" if self.branch_id else "")


class Node(models.Model):
    class Role(models.TextChoices):
        OPENING = "opening", "Opening"
        PLAYER = "player", "Player"
        NARRATOR = "narrator", "Narrator"

    class Mode(models.TextChoices):
        DO = "do", "Do"
        SAY = "say", "Say"
        STORY = "story", "Story"
        CONTINUE = "continue", "Continue"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="nodes")
    # RESTRICT, not PROTECT: a branch never goes while its nodes stay, but a
    # whole campaign can still be deleted with everything in it.
    branch = models.ForeignKey(Branch, on_delete=models.RESTRICT, related_name="nodes")
    depth = models.PositiveIntegerField()
    role = models.CharField(max_length=10, choices=Role.choices)
    mode = models.CharField(max_length=10, choices=Mode.choices, blank=True)
    text = models.TextField(blank=True, validators=[MaxLengthValidator(NODE_CHARS)])
    direction = models.TextField(blank=True, help_text="One-turn out-of-character direction (seed 000 §48).",
                                 validators=[MaxLengthValidator(DIRECTION_CHARS)])
    # A reasoning model's thinking before this reply: kept beside it, never part of it (never in history, the
    # recorder's input, ``tokens`` or the text an export carries as the story).
    thinking = models.TextField(blank=True, validators=[MaxLengthValidator(NODE_CHARS)])
    # Narrator notes beside this node (an imported chat's system messages, issue 28): shown on the page, never in
    # the prompt, as SillyTavern keeps them out of its own.
    note = models.TextField(blank=True, validators=[MaxLengthValidator(NODE_CHARS)])
    # Counted once at commit so a context build never re-tokenises history.
    tokens = models.PositiveIntegerField(default=0)
    # The sum of ``tokens`` from the opening through this node along its own
    # line: what a context leaves out is priced from one row, not by reading it.
    tokens_through = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["depth"]
        constraints = [
            models.UniqueConstraint(fields=["branch", "depth"], name="one_node_per_branch_depth"),
        ]
        indexes = [models.Index(fields=["campaign", "branch", "depth"])]

    def __str__(self):
        return f"{self.role} at ({self.branch_id}, {self.depth})"


CARD_CHARS = 20_000  # a character's description, personality or examples (a long card's is a few thousand)


class CharacterCard(models.Model):
    """A character brought from a character card (issue 28): what the card says of it, its portrait, and the card.

    The character itself is an entity of the world state (``entity``, its
    key); this keeps what the state has no room for: the whole description
    and personality (the prompt's cast section), how it speaks (its brief's
    examples in game-master mode), the creator's notes (shown to the person,
    never sent), the portrait, and the card's own data as it came, so an
    export writes back every field and every unknown extension unchanged.
    """

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="character_cards")
    entity = models.CharField(max_length=200, help_text="The character's key in the world state.")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, validators=[MaxLengthValidator(CARD_CHARS)])
    personality = models.TextField(blank=True, validators=[MaxLengthValidator(CARD_CHARS)])
    examples = models.TextField(blank=True, validators=[MaxLengthValidator(CARD_CHARS)],
                                help_text="How the character speaks (the card's example messages).")
    creator_notes = models.TextField(blank=True, validators=[MaxLengthValidator(CARD_CHARS)],
                                     help_text="The card's creator's notes: shown to you, never sent to a model.")
    portrait = models.BinaryField(blank=True, default=b"", editable=False)
    portrait_type = models.CharField(max_length=20, blank=True, editable=False)
    spec = models.CharField(max_length=20, blank=True, help_text="The card's version: V1, V2, V3 or Pygmalion.")
    card = models.JSONField(default=dict, blank=True, editable=False,
                            help_text="The card's own data as it came, for export.")
    book_key = models.CharField(max_length=60, blank=True, help_text="The key of the character's own lorebook.")
    position = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["campaign", "position", "id"]
        constraints = [models.UniqueConstraint(fields=["campaign", "entity"], name="one_card_per_character")]

    def __str__(self):
        return self.name


class ContextSnapshot(models.Model):
    """What the narrator was told for one reply: the context report, kept for the inspector."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="snapshot")
    report = models.JSONField()
    model = models.CharField(max_length=200)
    api = models.CharField(max_length=20)
    prompt_eval_count = models.PositiveIntegerField(null=True, blank=True)
    eval_count = models.PositiveIntegerField(null=True, blank=True)
    done_reason = models.CharField(max_length=40, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)

    def __str__(self):
        return f"context of node {self.node_id}"


class Round(models.Model):
    """One round of a game-master turn, hanging under the turn's reply node (decision D6).

    Rounds 1 to ``max_rounds`` are the game master's; off-stage rounds are
    numbered from 100. Being rows under the reply node, rounds follow it
    through undo, redo, retry and branch switches with no rule of their own:
    they are read through ``Path.clause("node__")``. docs/voices.md is the
    contract for what each field holds.
    """

    class Kind(models.TextChoices):
        GM = "gm", "Game master"
        OFFSTAGE = "offstage", "Off stage"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="rounds")
    number = models.PositiveSmallIntegerField()
    kind = models.CharField(max_length=10, choices=Kind.choices)
    started_ms = models.BigIntegerField(null=True, blank=True, help_text="Story time the round began (UTC ms); "
                                                                          "empty before the story clock starts.")
    elapsed_seconds = models.PositiveIntegerField(default=0)
    resolution = models.JSONField(default=dict, blank=True, help_text="The game master's resolve_round, as used.")
    activated = models.JSONField(default=list, blank=True, help_text="[{who, why}]: who acted, and why.")
    outputs = models.JSONField(default=list, blank=True, help_text="[{speaker, text}]: what each voice said.")
    briefs = models.JSONField(default=dict, blank=True, help_text="{who: brief}: what each character was told.")

    class Meta:
        ordering = ["node", "number"]
        constraints = [
            models.UniqueConstraint(fields=["node", "number"], name="one_round_per_number"),
            models.CheckConstraint(
                condition=(models.Q(kind="gm", number__gte=1, number__lt=100)
                           | models.Q(kind="offstage", number__gte=100)),
                name="round_numbers_by_kind",
            ),
        ]

    def __str__(self):
        return f"round {self.number} ({self.kind}) of node {self.node_id}"


class SavePoint(models.Model):
    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="save_points")
    name = models.CharField(max_length=100)
    branch = models.ForeignKey(Branch, on_delete=models.RESTRICT, related_name="+")
    depth = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return self.name


class CanonRule(models.Model):
    """A Level 1 fact of the campaign (seed 000 §3): it outranks everything else.

    An *initial-state* rule describes how the world stood when the story began
    (seed 003 §44, "the north gate is open"); accepted story events may
    supersede it, and the prompt then says that the current state wins.
    """

    class Scope(models.TextChoices):
        INVARIANT = "invariant", "Always true"
        INITIAL = "initial", "True at the start (the story may change it)"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="canon_rules")
    text = models.TextField(validators=[MaxLengthValidator(CANON_CHARS)])
    scope = models.CharField(max_length=10, choices=Scope.choices, default=Scope.INVARIANT)
    enabled = models.BooleanField(default=True)
    position = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["position", "id"]

    def __str__(self):
        return self.text[:80]


class StateEvent(models.Model):
    """One proposed change to the story state, applied or rejected, with who proposed it.

    Every change to the state is one of these (seed 000 §35, issue 3): the
    recorder's proposals after a turn and a person's corrections alike. A
    rejected event keeps its reason; an applied one keeps what it replaced.
    """

    class Source(models.TextChoices):
        RECORDER = "recorder", "Recorder (after a turn)"
        CORRECTION = "correction", "Manual correction"
        SCRIPT = "script", "Script (manage.py story append)"
        WORLD = "world", "World file (at the opening)"
        ENGINE = "engine", "Story time and world rules (the application)"
        JUDGE = "judge", "Trigger judge (after a turn)"
        PLAYER = "player", "The player (an action played from the page)"

    class Status(models.TextChoices):
        APPLIED = "applied", "Applied"
        REJECTED = "rejected", "Rejected"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="state_events")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="state_events")
    source = models.CharField(max_length=12, choices=Source.choices)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+")
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices)
    reason = models.TextField(blank=True, validators=[MaxLengthValidator(REASON_CHARS)])
    # What the event replaced, slot by slot: the "from" of "who changed what from what".
    previous = models.JSONField(default=list, blank=True)
    attempt = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self):
        return f"{self.status} {self.payload.get('type')} at node {self.node_id}"


class StateRecord(models.Model):
    """One value of one slot of the story state, set at a node of the story tree.

    The state after a node is, for every slot, the deepest record on that
    node's lineage (ties broken by id); a retracted record ends its slot.
    Records are anchored like nodes, ``(branch, depth)``, and read through
    ``lineage.Path.clause``, so undo, redo, retry, branch switches and save
    points show a node's own state without copying or recomputing anything.
    """

    class Authority(models.TextChoices):
        CORRECTION = "correction", "Manual correction"
        STATE = "state", "Accepted story state"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="state_records")
    branch = models.ForeignKey(Branch, on_delete=models.RESTRICT, related_name="+")
    depth = models.PositiveIntegerField()
    slot = models.CharField(max_length=200)
    kind = models.CharField(max_length=20)
    subject = models.CharField(max_length=200, blank=True)
    value = models.TextField(blank=True, validators=[MaxLengthValidator(REASON_CHARS)])
    data = models.JSONField(default=dict, blank=True)
    narrator_only = models.BooleanField(default=False)
    authority = models.CharField(max_length=12, choices=Authority.choices)
    retracted = models.BooleanField(default=False)
    event = models.ForeignKey(StateEvent, on_delete=models.CASCADE, related_name="records")

    class Meta:
        ordering = ["depth", "id"]
        indexes = [
            models.Index(fields=["campaign", "branch", "depth"]),
            # A turn folds only the slots it needs: found by kind and subject
            # (or value: who is at a place, who holds what), then read by slot.
            models.Index(fields=["campaign", "slot", "depth"], name="state_by_slot"),
            models.Index(fields=["campaign", "kind", "subject"], name="state_by_subject"),
            models.Index(fields=["campaign", "kind", "value"], name="state_by_value"),
        ]

    def __str__(self):
        return f"{self.slot} = {self.value[:60]}"


class PlaceRecord(StateRecord):
    """The admin's list of places: entity records of kind place, on every line."""

    class Meta:
        proxy = True
        verbose_name = "place record"


class ExitRecord(StateRecord):
    """The admin's list of exits (``exit:<from>:<key>`` records), on every line."""

    class Meta:
        proxy = True
        verbose_name = "exit record"


class ItemRecord(StateRecord):
    """The admin's list of items' properties (``item:<key>`` records), on every line."""

    class Meta:
        proxy = True
        verbose_name = "item record"


class TimeRecord(StateRecord):
    """The admin's list of story time: the clock, the calendar, routines, engagements and intents, on every line."""

    class Meta:
        proxy = True
        verbose_name = "story time record"


class VariableRecord(StateRecord):
    """The admin's list of story variables: definitions and stored values, on every line."""

    class Meta:
        proxy = True
        verbose_name = "variable record"


class RollRecord(StateRecord):
    """The admin's list of dice checks and the roll log, on every line."""

    class Meta:
        proxy = True
        verbose_name = "dice record"


class TriggerRecord(StateRecord):
    """The admin's list of world triggers, their notes and judgments, on every line."""

    class Meta:
        proxy = True
        verbose_name = "trigger record"


class EventRecord(StateRecord):
    """The admin's list of recorded events (``event:<id>``: sealed once written), on every line."""

    class Meta:
        proxy = True
        verbose_name = "event record"


class PerceptionRecord(StateRecord):
    """The admin's list of perceptions (``perception:<event>:<who>``), accuracy labels included, on every line."""

    class Meta:
        proxy = True
        verbose_name = "perception record"


class BeliefRecord(StateRecord):
    """The admin's list of beliefs (``belief:<who>:<id>``), on every line."""

    class Meta:
        proxy = True
        verbose_name = "belief record"


def step_statuses(**labels):
    """Return a run table's ``Status``: what its step can end in, one ``value="Label"`` each, in order."""
    return models.TextChoices("Status", [(value.upper(), (value, label)) for value, label in labels.items()])


class _StepStatus(models.CharField):
    """A run's status, its choices its own table's ``Status``, set as the field joins each table."""

    def contribute_to_class(self, cls, name, **kwargs):
        if not cls._meta.abstract:
            # The table's own, so its members pickle and print as ``RecorderRun.Status.APPLIED``.
            cls.Status.__module__, cls.Status.__qualname__ = cls.__module__, f"{cls.__qualname__}.Status"
            self.choices = cls.Status.choices
        super().contribute_to_class(cls, name, **kwargs)

    def deconstruct(self):
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.CharField", args, kwargs  # to migrations, the CharField it is


class ModelRequest(models.Model):
    """One request a post-turn step made of the model server for a reply, and what it cost (issue 27).

    Derived, for the inspector: how long the prompt was, how much of it began
    as the narration's prompt and reply (what a server with one prompt cache
    holds after the narration), and what the server reported reading, when
    it says (Ollama's ``prompt_eval_count``). Not carried by a bundle.
    """

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="model_requests")
    number = models.PositiveSmallIntegerField(help_text="In the order the requests were made after the reply.")
    kind = models.CharField(max_length=40, help_text="The step that asked: recorder, judge, minds, memory…")
    messages = models.PositiveSmallIntegerField()
    shared_messages = models.PositiveSmallIntegerField(help_text="The leading messages that are the narration's.")
    prompt_tokens = models.PositiveIntegerField(help_text="Estimated (cl100k), as a chat template lays it out.")
    shared_tokens = models.PositiveIntegerField(help_text="Of them, what begins as the narration's prompt and reply.")
    server_prompt = models.PositiveIntegerField(null=True, blank=True, help_text="The prompt, by the server's count.")
    server_read = models.PositiveIntegerField(null=True, blank=True,
                                              help_text="What the server says it read (not found in its cache).")
    written = models.PositiveIntegerField(null=True, blank=True, help_text="The answer's tokens, by the server.")
    source = models.CharField(max_length=200, blank=True, help_text="Where the server's figures come from.")
    asked = models.TextField(blank=True, help_text="The messages after the narration's and the reply: the step's own.")

    class Meta:
        ordering = ["node", "number"]

    def __str__(self):
        return f"{self.kind} request {self.number} after node {self.node_id}"

    @property
    def new_tokens(self):
        """Return the tokens of the prompt that do not begin as the narration's: what a one-cache server reads."""
        return self.prompt_tokens - self.shared_tokens


class StepRun(models.Model):
    """What one post-turn step (storyteller/steps/) did after one reply: its status, why it failed, when.

    One row per reply and step; no row means the step has not run for that
    reply. Each table keeps its own name and ``Status`` (what its step can
    end in) and adds the figures its step reports.
    """

    node = models.OneToOneField(Node, on_delete=models.CASCADE)
    status = _StepStatus(max_length=12)
    error = models.TextField(blank=True, validators=[MaxLengthValidator(REASON_CHARS)])
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True

    def __str__(self):
        return f"{self._meta.verbose_name} for node {self.node_id}: {self.status}"


class RecorderRun(StepRun):
    """Whether the recorder has turned a reply into state events yet; no row means pending."""

    # A game-master reply waits, unrecorded, for a stage boundary (docs/voices.md); ``error`` keeps why the last
    # try at the boundary failed, and the reply still waits.
    Status = step_statuses(applied="Applied", failed="Failed", waiting="Waiting for a stage boundary")

    attempts = models.PositiveIntegerField(default=0)
    model = models.CharField(max_length=200, blank=True)


class JudgeRun(StepRun):
    """Whether the post-turn judge has decided the judged trigger conditions after a reply; no row: not yet."""

    Status = step_statuses(applied="Applied", nothing="Nothing to judge", failed="Failed")

    model = models.CharField(max_length=200, blank=True)


class OffstageRun(StepRun):
    """What the off-stage step did after one reply: the characters away from the player who acted (seed 002 离场行动)."""

    Status = step_statuses(played="Played", nothing_due="Nothing due", off="Off", failed="Failed")

    played = models.PositiveSmallIntegerField(default=0, help_text="Off-stage rounds played for this reply.")
    waiting = models.PositiveSmallIntegerField(default=0, help_text="Items left due for a later turn.")
    note = models.TextField(blank=True, validators=[MaxLengthValidator(REASON_CHARS)])
    attempts = models.PositiveIntegerField(default=1)


class ConsolidationRun(StepRun):
    """What the world author's consolidation step did after one reply (seed 002 扩展世界); its reason in words.

    A failure keeps the queue; ``error`` says why it failed.
    """

    Status = step_statuses(applied="Applied", not_due="Not due", failed="Failed")

    note = models.TextField(blank=True, validators=[MaxLengthValidator(REASON_CHARS)])
    attempts = models.PositiveIntegerField(default=1)


class Replay(models.Model):
    """A line of the story played again with another narrator, onto a branch of its own (issue 29).

    The line is ``source`` (a branch, read to ``to_depth``) from ``from_depth``,
    the first player action played again; ``branch`` is made with the row and
    forks at ``from_depth - 1``. How far the replay has come is the branch's
    own tip, never a counter: a turn is on the branch or it was not played,
    so a replay resumed after a restart never plays one twice.
    """

    class Status(models.TextChoices):
        RUNNING = "running", "Playing"
        STOPPED = "stopped", "Stopped"
        DONE = "done", "Finished"
        FAILED = "failed", "Failed"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="replays")
    source = models.ForeignKey(Branch, on_delete=models.RESTRICT, related_name="+")
    from_depth = models.PositiveIntegerField(help_text="The first player action played again (an odd depth).")
    to_depth = models.PositiveIntegerField(help_text="The last depth of the line played again.")
    branch = models.OneToOneField(Branch, on_delete=models.RESTRICT, related_name="replay")
    # The narrator: a model on a server speaking an API; blank url and api are the configured server's.
    model = models.CharField(max_length=200)
    url = models.URLField(max_length=300, blank=True)
    api = models.CharField(max_length=10, blank=True)
    temperature = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0.0),
                                                                       MaxValueValidator(MAX_TEMPERATURE)])
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    same_prompts = models.BooleanField(default=False, help_text="Send each original turn's prompt unchanged.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    error = models.TextField(blank=True, validators=[MaxLengthValidator(REASON_CHARS)])
    runner = models.PositiveIntegerField(null=True, blank=True, editable=False,
                                         help_text="The process playing it now (its pid), if any.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"replay {self.pk} of {self.campaign_id} onto branch {self.branch_id}"

    @property
    def turns(self):
        """Return how many turns the line has: its player actions from ``from_depth`` to ``to_depth``."""
        return max(0, (self.to_depth - self.from_depth) // 2 + 1)


WHISPER_CHARS = 2_000  # a whisper to the game master: a line or a short paragraph, as an action is


class Seat(models.Model):
    """One place at a campaign's table (issue 30): a character of the cast a person plays, or a spectator's.

    ``character`` is the cast key the seat plays (the protagonist's key too); a spectator seat has none and reads
    the public story only. ``user`` is empty until an invitation is taken. A paused or removed seat's person has
    no access at all (``seating.access``); a removed seat is kept, so its whispers keep their sender.
    """

    class Kind(models.TextChoices):
        PLAYER = "player", "Player"
        SPECTATOR = "spectator", "Spectator"

    class Status(models.TextChoices):
        OPEN = "open", "Waiting for someone"
        SEATED = "seated", "Seated"
        PAUSED = "paused", "Paused"
        REMOVED = "removed", "Removed"

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="seats")
    character = models.CharField(max_length=200, blank=True, help_text="The cast key this seat plays; "
                                 "empty for a spectator.")
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.PLAYER)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="seats")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["campaign", "id"]
        indexes = [models.Index(fields=["user", "campaign"])]
        constraints = [
            # One live seat per person per table: access is one role, never two.
            models.UniqueConstraint(fields=["campaign", "user"], condition=~models.Q(status="removed"),
                                    name="one_live_seat_per_user"),
        ]

    def __str__(self):
        return f"seat {self.pk} ({self.kind} {self.character or '-'}) of campaign {self.campaign_id}"

    @property
    def live(self):
        """Whether the seat's person may reach the table now."""
        return self.status == self.Status.SEATED and self.user_id is not None


class Invitation(models.Model):
    """A one-time, expiring link to take a seat; only the token's hash is kept (``seating.invite`` makes one)."""

    seat = models.ForeignKey(Seat, on_delete=models.CASCADE, related_name="invitations")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    used_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return f"invitation {self.pk} to seat {self.seat_id}"


class Whisper(models.Model):
    """A seated player's message to the game master: only its sender and the campaign's owner ever see it.

    ``branch`` and ``depth`` are the head of the line when it was sent: the round it belongs to is the one played
    from there (``seating.whispers_for_round``), and the game master reads it as a private note on that character.
    """

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="whispers")
    seat = models.ForeignKey(Seat, on_delete=models.CASCADE, related_name="whispers")
    text = models.TextField(validators=[MaxLengthValidator(WHISPER_CHARS)])
    branch = models.ForeignKey(Branch, on_delete=models.RESTRICT, related_name="+")
    depth = models.PositiveIntegerField(help_text="The head's depth when it was sent.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["campaign", "branch", "depth"])]

    def __str__(self):
        return f"whisper {self.pk} from seat {self.seat_id}"


class SeatsCampaign(Campaign):
    """A campaign as a seated person's pages read it: it carries their seat's viewer, and the owner's author
    switch is never on for them (every panel that asks ``campaign.author_view`` gets False; it is never saved)."""

    class Meta:
        proxy = True

    author_view = property(lambda self: False, lambda self, value: None)
    seat_viewer = None

    def save(self, *args, **kwargs):
        raise TypeError("A seated person's copy of a campaign is read only; save the owner's Campaign instead.")


class Playing(models.Model):
    """A turn being played in some process: what other processes' background model calls give way to (issue 31).

    Written only when processes share the work (``STORYTELLER_SHARED_PLAYING``);
    one process keeps the same in memory (``llm.priority``). A row holds
    until ``until``, which its process renews while the turn lasts, so a
    process killed mid-turn holds up nothing for longer than one lease.
    """

    campaign = models.ForeignKey(Campaign, on_delete=models.CASCADE, related_name="+")
    until = models.DateTimeField(db_index=True)

    def __str__(self):
        return f"a turn of campaign {self.campaign_id} until {self.until}"


# A table's rounds (issue 30, campaigns/round_models.py): imported here so the app's models include them.
from .round_models import NarrationPart, RoundProposal, TableAction, TablePresence, TableRound  # noqa: E402, F401
