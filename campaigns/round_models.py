"""A table's rounds (issue 30): the actions waiting in a round, the round as played, its narration by stage.

Imported at the end of ``campaigns.models`` (the app's models). The logic is
``campaigns.tablerounds``; the round's pure rules ``storyteller.voices.table``.
"""

from django.core.validators import MaxLengthValidator
from django.db import models
from django.utils import timezone

# The models they point at are named as "campaigns.X": ``campaigns.models`` imports this module, never the reverse.

ACTION_CHARS = 4000
PROPOSAL_NOTE_CHARS = 300


class TableAction(models.Model):
    """One seated player's action for a round: kept exactly as sent, until the round plays (or it is withdrawn).

    The round it belongs to is the head it was sent at (``branch``, ``depth``);
    played, it points at the round's player node and keeps the place its
    character was at (its stage).
    """

    class Status(models.TextChoices):
        WAITING = "waiting", "Waiting for the round"
        PLAYED = "played", "Played"
        WITHDRAWN = "withdrawn", "Withdrawn"

    campaign = models.ForeignKey("campaigns.Campaign", on_delete=models.CASCADE, related_name="table_actions")
    # Null once the seat is gone (deleted, or a campaign brought in from a bundle: seats are people, they stay home);
    # a played action is the story's history all the same.
    seat = models.ForeignKey("campaigns.Seat", null=True, blank=True, on_delete=models.SET_NULL, related_name="actions")
    character = models.CharField(max_length=200, help_text="The cast key the seat played when it was sent.")
    branch = models.ForeignKey("campaigns.Branch", on_delete=models.RESTRICT, related_name="+")
    depth = models.PositiveIntegerField(help_text="The head's depth when it was sent: the round it belongs to.")
    text = models.TextField(validators=[MaxLengthValidator(ACTION_CHARS)])
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.WAITING)
    sent_at = models.DateTimeField(default=timezone.now)
    edited_at = models.DateTimeField(null=True, blank=True)
    node = models.ForeignKey("campaigns.Node", null=True, blank=True, on_delete=models.CASCADE,
                             related_name="table_actions", help_text="The player node of the round it was played in.")
    place = models.CharField(max_length=200, blank=True, help_text="Where its character was when it played.")

    class Meta:
        ordering = ["sent_at", "id"]
        indexes = [models.Index(fields=["campaign", "branch", "depth", "status"])]
        constraints = [models.UniqueConstraint(fields=["seat", "branch", "depth"],
                                               condition=models.Q(status="waiting"),
                                               name="one_waiting_action_per_seat")]

    def __str__(self):
        return f"table action {self.pk} ({self.status}) of seat {self.seat_id}"


class TableRound(models.Model):
    """A round as played at a table, on its player node: its stages (who of the seated was where) and why."""

    node = models.OneToOneField("campaigns.Node", on_delete=models.CASCADE, related_name="table_round")
    stages = models.JSONField(default=list, help_text="[{place, name, present: [character keys]}]")
    why = models.CharField(max_length=200, blank=True)
    played_at = models.DateTimeField(default=timezone.now)

    def __str__(self):
        return f"table round at node {self.node_id}"


class NarrationPart(models.Model):
    """One part of a table round's reply, told at one stage, and the seated characters present for it."""

    node = models.ForeignKey("campaigns.Node", on_delete=models.CASCADE, related_name="narration_parts")
    number = models.PositiveSmallIntegerField()
    place = models.CharField(max_length=200, blank=True, help_text="Empty: told at no seat's stage (the owner's).")
    place_name = models.CharField(max_length=200, blank=True)
    present = models.JSONField(default=list, help_text="The seated characters present: [character keys].")
    text = models.TextField()

    class Meta:
        ordering = ["node", "number"]
        constraints = [models.UniqueConstraint(fields=["node", "number"], name="one_part_per_number")]

    def __str__(self):
        return f"part {self.number} of node {self.node_id}"


class RoundProposal(models.Model):
    """A seated player's proposal to undo, retry or switch line: the owner accepts or declines it."""

    class Kind(models.TextChoices):
        UNDO = "undo", "Undo the last round"
        RETRY = "retry", "Tell the last round again"
        BRANCH = "branch", "Go back to another line"

    class Status(models.TextChoices):
        WAITING = "waiting", "Waiting for the owner"
        ACCEPTED = "accepted", "Accepted"
        DECLINED = "declined", "Declined"

    campaign = models.ForeignKey("campaigns.Campaign", on_delete=models.CASCADE, related_name="round_proposals")
    seat = models.ForeignKey("campaigns.Seat", null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="proposals")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    note = models.CharField(max_length=PROPOSAL_NOTE_CHARS, blank=True)
    branch = models.ForeignKey("campaigns.Branch", on_delete=models.RESTRICT, related_name="+")
    depth = models.PositiveIntegerField(help_text="The head when it was proposed.")
    target = models.ForeignKey("campaigns.Branch", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                               help_text="The line a branch proposal goes to.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.WAITING)
    created_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self):
        return f"{self.kind} proposal {self.pk} ({self.status})"


class TablePresence(models.Model):
    """One socket at a table, in some process: who is here and who is typing, for every process (issue 31).

    Written only when processes share the work (``STORYTELLER_SHARED_PLAYING``);
    one process keeps the same in memory (``storyteller.table_rounds``). A
    row holds until ``until``, which its process renews while the socket is
    open, so the sockets of a process killed with them stop counting as
    present (a round would otherwise wait for them) after one lease.
    """

    campaign = models.ForeignKey("campaigns.Campaign", on_delete=models.CASCADE, related_name="+")
    channel = models.CharField(max_length=200, unique=True, help_text="The socket's channel name.")
    seat = models.ForeignKey("campaigns.Seat", null=True, blank=True, on_delete=models.CASCADE, related_name="+",
                             help_text="Empty for the owner.")
    character = models.CharField(max_length=200, blank=True)
    typed_at = models.DateTimeField(null=True, blank=True, help_text="When this socket's person last typed.")
    until = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["campaign", "until"], name="presence_campaign_until")]

    def __str__(self):
        return f"{self.character or 'the owner'} at campaign {self.campaign_id}"
