"""A table's rounds in the database (issue 30): the actions waiting, the round as committed, the parts by stage.

- ``send(seat, text)`` keeps a seated player's action for the round at the
  head, exactly as sent (a second send before the round plays replaces it:
  that is the edit); ``withdraw(seat)`` takes it back.
- ``open_round(campaign_id, present)`` reads what the round will play: the
  actions waiting at the head, the seated characters and their places, the
  stages, the input. ``commit_round`` (called inside the turn's one
  transaction) marks exactly those actions played — each one, once — moves
  any sent while the round was being told on to the next round, and stores
  the round's stages and its narration's parts by stage.
- ``parts_for(node, character)``: what of a table round's node a character
  was present for — of the reply, the parts told at its stage; of the
  round's input, the actions of its stage. None for a node that is not a
  table round's (the caller shows it as it shows any node).
- Proposals: a seated player proposes undo, retry or another line; the
  owner accepts or declines (``propose``, ``proposals_waiting``, ``decide``).

Pure rules (when a round plays, its input, the split): ``storyteller`` has
them in ``voices/table.py``; this module takes them as plain values, so it
imports nothing of the pipeline.
"""

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from . import lineage, locks, story
from .models import Campaign, Node, Seat
from .round_models import (
    ACTION_CHARS,
    NarrationPart,
    RoundProposal,
    TableAction,
    TableRound,
)
from .state import PROTAGONIST, state_at


class Refused(Exception):
    """An action, edit, withdrawal or proposal that cannot be taken; the message says why and what to do."""


EMPTY = "Write what your character does before sending it."
TOO_LONG = "An action is at most {limit:,} characters; this one is {length:,}. Shorten it and send it again."
NOT_A_PLAYER = "Only a seated player sends actions for the round."
NOTHING_TO_WITHDRAW = "You have no action waiting in this round."


def players(campaign_id):
    """Return the seated players' seats of a campaign (with a character), in seat order."""
    return list(Seat.objects.filter(campaign_id=campaign_id, kind=Seat.Kind.PLAYER, status=Seat.Status.SEATED)
                .exclude(character="").select_related("user").order_by("id"))


def is_table(campaign_id):
    """Return whether the campaign is played as a table: at least one seated player."""
    return Seat.objects.filter(campaign_id=campaign_id, kind=Seat.Kind.PLAYER, status=Seat.Status.SEATED).exists()


def _head(campaign_id):
    campaign = Campaign.objects.get(pk=campaign_id)
    return campaign, campaign.head_branch_id, campaign.head_depth


def send(seat, text):
    """Keep ``seat``'s action for the round at the head, exactly as sent; replace the one waiting (an edit)."""
    if seat.kind != Seat.Kind.PLAYER or seat.status != Seat.Status.SEATED or not seat.character:
        raise Refused(NOT_A_PLAYER)
    if not text.strip():
        raise Refused(EMPTY)
    if len(text) > ACTION_CHARS:
        raise Refused(TOO_LONG.format(limit=ACTION_CHARS, length=len(text)))
    with transaction.atomic():
        locks.story(seat.campaign_id)
        _, branch_id, depth = _head(seat.campaign_id)
        waiting = TableAction.objects.filter(seat=seat, branch_id=branch_id, depth=depth,
                                             status=TableAction.Status.WAITING).first()
        if waiting is not None:
            waiting.text, waiting.edited_at, waiting.character = text, timezone.now(), seat.character
            waiting.save(update_fields=["text", "edited_at", "character"])
            return waiting
        return TableAction.objects.create(campaign_id=seat.campaign_id, seat=seat, character=seat.character,
                                          branch_id=branch_id, depth=depth, text=text)


def withdraw(seat):
    """Take back ``seat``'s action waiting at the head; raise Refused when there is none."""
    with transaction.atomic():
        locks.story(seat.campaign_id)
        _, branch_id, depth = _head(seat.campaign_id)
        done = TableAction.objects.filter(seat=seat, branch_id=branch_id, depth=depth,
                                          status=TableAction.Status.WAITING).update(status=TableAction.Status.WITHDRAWN)
    if not done:
        raise Refused(NOTHING_TO_WITHDRAW)


def waiting(campaign_id):
    """Return the actions waiting in the round at the head: {character: TableAction}."""
    _, branch_id, depth = _head(campaign_id)
    rows = TableAction.objects.filter(campaign_id=campaign_id, branch_id=branch_id, depth=depth,
                                      status=TableAction.Status.WAITING).order_by("sent_at", "id")
    return {row.character: row for row in rows}


@dataclass(frozen=True)
class Seating:
    """One seated player at the head: seat id, character, names, and where the character is."""

    seat: int
    character: str
    name: str
    person: str
    place: str
    place_name: str


def seating(campaign_id, *, state=None):
    """Return a Seating per seated player at the head, with where the story has their character now."""
    campaign = Campaign.objects.get(pk=campaign_id)
    seats = players(campaign_id)
    if not seats:
        return []
    state = state if state is not None else state_at(lineage.path_of(campaign), campaign)
    rows = []
    for seat in seats:
        place = state.location_of(seat.character) or ""
        rows.append(Seating(seat.pk, seat.character, state.name_of(seat.character), seat.user.get_username()
                            if seat.user else "", place, state.name_of(place) if place else ""))
    return rows


@dataclass(frozen=True)
class Opened:
    """What a round will play: read at its start, committed by ``commit_round`` with the turn."""

    campaign_id: int
    head: tuple  # (branch id, depth)
    actions: tuple  # ((pk, character, text), ...) in seat order
    seating: tuple  # Seating
    protagonist_place: str


def open_round(campaign_id):
    """Return the Opened round at the head: its waiting actions in seat order and the seated characters."""
    campaign = Campaign.objects.get(pk=campaign_id)
    state = state_at(lineage.path_of(campaign), campaign)
    seated = seating(campaign_id, state=state)
    order = {row.seat: index for index, row in enumerate(seated)}
    rows = sorted(waiting(campaign_id).values(), key=lambda row: (order.get(row.seat_id, len(order)), row.pk))
    return Opened(campaign_id, (campaign.head_branch_id, campaign.head_depth),
                  tuple((row.pk, row.character, row.text) for row in rows), tuple(seated),
                  state.location_of(PROTAGONIST) or "")


class RoundChanged(Exception):
    """An action of the round changed after the round began: nothing of the round is saved; it plays again."""


CHANGED = ("An action changed while the round was being told, so the round was not saved; it is told again with the "
           "actions as they are now.")


def commit_round(opened, reply, stages, parts, why):
    """Inside the turn's transaction: mark the round's actions played at its player node — each exactly once —,
    carry actions sent meanwhile on to the next round, keep the round's stages and the reply's ``parts``.

    ``stages`` are ``[{place, name, present}]``, ``parts`` ``[{place, name,
    present, text}]``. Raise RoundChanged (rolling the turn back) when an
    action is no longer waiting as it was read.
    """
    # Few statements, each cheap: the turn's transaction holds SQLite's one write lock while it runs.
    player = Node.objects.values_list("pk", flat=True).get(branch_id=reply.branch_id, depth=reply.depth - 1)
    branch_id, depth = opened.head
    place_of = {key: stage["place"] for stage in stages for key in stage["present"]}
    wanted = {pk: text for pk, _, text in opened.actions}
    # Under the transaction's write lock, nothing changes them between this read and the updates below.
    found = dict(TableAction.objects.filter(pk__in=wanted, status=TableAction.Status.WAITING)
                 .values_list("pk", "text"))
    if found != wanted:
        raise RoundChanged(CHANGED)
    by_place = {}
    for pk, character, _ in opened.actions:
        by_place.setdefault(place_of.get(character, ""), []).append(pk)
    for place, pks in by_place.items():
        TableAction.objects.filter(pk__in=pks).update(status=TableAction.Status.PLAYED, node_id=player, place=place)
    # Sent while the round was told: they belong to the next round (the head the round leaves).
    TableAction.objects.filter(campaign_id=opened.campaign_id, branch_id=branch_id, depth=depth,
                               status=TableAction.Status.WAITING).update(branch_id=reply.branch_id,
                                                                          depth=reply.depth)
    TableRound.objects.create(node_id=player, stages=stages, why=why)  # a new round's player node: never one yet
    store_parts(reply, parts, new=True)
    return player


def store_parts(reply, parts, *, new=False):
    """Keep ``reply``'s narration parts by stage (a retried reply gets its own; a ``new`` reply has none yet)."""
    if not new:
        NarrationPart.objects.filter(node=reply).delete()
    NarrationPart.objects.bulk_create([
        NarrationPart(node=reply, number=index + 1, place=part["place"], place_name=part["name"],
                      present=list(part["present"]), text=part["text"]) for index, part in enumerate(parts)])


def stages_of(player_node_id):
    """Return the stages a round was played with (its player node's TableRound), or None."""
    row = TableRound.objects.filter(node_id=player_node_id).first()
    return row.stages if row is not None else None


def parts_for(node, character):
    """Return the texts of table round ``node`` that ``character`` was present for, in order; None when ``node``
    is not a table round's (then it is shown as any node is).

    A reply: its parts told at the character's stage. The round's input (the
    player node): the actions sent at its stage, each as "Name: text".
    """
    if node.role == Node.Role.PLAYER:
        row = TableRound.objects.filter(node=node).first()
        if row is None:
            return None
        place = next((stage["place"] for stage in row.stages if character in stage["present"]), None)
        names = {key: stage for stage in row.stages for key in stage["present"]}
        actions = TableAction.objects.filter(node=node, status=TableAction.Status.PLAYED).order_by("id")
        return [f"{_name(names, action.character)}: {action.text}" for action in actions
                if place is not None and action.place == place]
    parts = list(NarrationPart.objects.filter(node=node).order_by("number"))
    if not parts:
        return None
    return [part.text for part in parts if character in part.present]


def _name(names, key):
    return (names.get(key) or {}).get("names", {}).get(key, key)


def propose(seat, kind, note="", target=None):
    """Keep ``seat``'s proposal (undo, retry or another line) for the owner; raise Refused in words."""
    if seat.kind != Seat.Kind.PLAYER or seat.status != Seat.Status.SEATED:
        raise Refused(NOT_A_PLAYER)
    if kind not in RoundProposal.Kind.values:
        raise Refused("A proposal is to undo the last round, tell it again, or go to another line.")
    _, branch_id, depth = _head(seat.campaign_id)
    if kind in (RoundProposal.Kind.UNDO, RoundProposal.Kind.RETRY) and depth < 2:
        raise Refused("There is no round to undo or tell again yet.")
    if kind == RoundProposal.Kind.BRANCH and (target is None or target.campaign_id != seat.campaign_id):
        raise Refused("Say which line of the story to go to.")
    return RoundProposal.objects.create(campaign_id=seat.campaign_id, seat=seat, kind=kind, note=note[:300],
                                        branch_id=branch_id, depth=depth, target=target)


def proposals_waiting(campaign_id):
    """Return the proposals waiting for the owner's answer, made at the current head (older ones lapse)."""
    _, branch_id, depth = _head(campaign_id)
    return list(RoundProposal.objects.filter(campaign_id=campaign_id, status=RoundProposal.Status.WAITING,
                                             branch_id=branch_id, depth=depth, seat__isnull=False)
                .select_related("seat", "seat__user"))


def decide(campaign_id, proposal_id, accept):
    """Accept or decline a waiting proposal of the campaign at its head; return it. An accepted undo or line
    switch moves the head here; an accepted retry is played by the caller (it is a turn). Raise Refused."""
    with transaction.atomic():
        locks.story(campaign_id)
        campaign, branch_id, depth = _head(campaign_id)
        proposal = RoundProposal.objects.filter(pk=proposal_id, campaign_id=campaign_id,
                                                status=RoundProposal.Status.WAITING).first()
        if proposal is None:
            raise Refused("That proposal is no longer waiting (it was answered, or the story moved on).")
        if (proposal.branch_id, proposal.depth) != (branch_id, depth):
            proposal.status, proposal.decided_at = RoundProposal.Status.DECLINED, timezone.now()
            proposal.save(update_fields=["status", "decided_at"])
            raise Refused("The story moved on since that proposal was made, so it was set aside.")
        proposal.status = RoundProposal.Status.ACCEPTED if accept else RoundProposal.Status.DECLINED
        proposal.decided_at = timezone.now()
        proposal.save(update_fields=["status", "decided_at"])
        if accept and proposal.kind == RoundProposal.Kind.UNDO:
            story.undo(campaign)
        elif accept and proposal.kind == RoundProposal.Kind.BRANCH and proposal.target is not None:
            story.switch_branch(campaign, proposal.target)
    return proposal
