"""Who may reach a campaign, and as whom: the table's seats, invitations and whispers (issue 30).

``access(user, campaign)`` is the one check every page and socket that takes a
campaign makes: the campaign's owner has everything; a person seated at the
table (status ``seated``) reaches the play page, its socket and the
player-safe panels and exports as their seat's viewer; everyone else —
another user, a paused or removed seat's person, anyone signed out — gets
``None``, and the page answers 404 (what they may not know exists).

``viewer_for(campaign, user)`` is the ``viewpoint.Viewer`` that person's pages
are built as: the owner's is today's ``viewing.viewer_of`` (the campaign's
author switch), a seated player's is their seat's character, a spectator's is
nobody's: the public story only.

An invitation is a random token handed out once, in a link; only its SHA-256
is stored. Taking it seats the person and spends it; it expires after
``INVITATION_HOURS``. Removing or pausing a seat tells the seat's channel
group to close every socket its person has open (``seat_group``).
"""

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta
from functools import wraps
from inspect import iscoroutinefunction

from asgiref.sync import async_to_sync, sync_to_async
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from .models import Campaign, Invitation, Seat, SeatsCampaign, Whisper
from .state import PROTAGONIST
from .viewpoint import Viewer

OWNER, PLAYER, SPECTATOR = "owner", "player", "spectator"
INVITATION_HOURS = 72
# A spectator is nobody in the story: no place, no knowledge, no beliefs — the public story and the clock only.
SPECTATOR_VIEWER = Viewer(who="", author=False)
# The message a seat's group gets when its person must leave the table now (the play consumer closes on it).
CLOSE = "seat.close"


@dataclass(frozen=True)
class Access:
    """What ``user`` may do with ``campaign``: its ``role`` (owner | player | spectator) and seat (None: owner)."""

    campaign: Campaign
    role: str
    seat: Seat | None = None

    @property
    def owner(self):
        return self.role == OWNER

    @property
    def player(self):
        return self.role == PLAYER

    @property
    def spectator(self):
        return self.role == SPECTATOR

    @property
    def character(self):
        """The cast key the person plays: the protagonist for the owner, the seat's for a player, "" for a spectator."""
        if self.owner:
            return PROTAGONIST
        return self.seat.character if self.player else ""

    @property
    def viewer(self):
        """The ``Viewer`` this person's pages, frames and exports are built as."""
        if self.owner:
            return Viewer(PROTAGONIST, author=bool(self.campaign.author_view))
        return self.campaign.seat_viewer


class InvitationRefused(Exception):
    """An invitation link that cannot be taken; the message says why, in words."""


def _campaign(campaign):
    if isinstance(campaign, Campaign):
        return campaign
    try:
        return Campaign.objects.select_related("head_branch").get(pk=int(campaign))
    except (Campaign.DoesNotExist, TypeError, ValueError):
        return None


def access(user, campaign):
    """Return the ``Access`` of ``user`` to ``campaign`` (a Campaign or its id), or None: no access at all."""
    if user is None or not user.is_authenticated:
        return None
    campaign = _campaign(campaign)
    if campaign is None:
        return None
    if campaign.owner_id == user.pk:
        return Access(campaign, OWNER)
    seat = Seat.objects.filter(campaign=campaign, user=user, status=Seat.Status.SEATED).first()
    if seat is None:
        return None
    role = PLAYER if seat.kind == Seat.Kind.PLAYER else SPECTATOR
    viewer = Viewer(seat.character or PROTAGONIST) if role == PLAYER else SPECTATOR_VIEWER
    return Access(_as_seat(campaign, viewer), role, seat)


aaccess = sync_to_async(access, thread_sensitive=True)


def viewer_for(campaign, user):
    """Return the ``viewpoint.Viewer`` ``user``'s pages of ``campaign`` are built as (raise Http404: no access)."""
    reached = access(user, campaign)
    if reached is None:
        raise Http404("No such campaign.")
    return reached.viewer


def reach(user, pk, *, owner=False):
    """Return ``user``'s ``Access`` to campaign ``pk``, or raise Http404 (``owner``: the owner's pages only)."""
    reached = access(user, pk)
    if reached is None or (owner and not reached.owner):
        raise Http404("No such campaign.")
    return reached


areach = sync_to_async(reach, thread_sensitive=True)


def owned(request, pk):
    """Return campaign ``pk`` if ``request.user`` owns it, else raise Http404: the owner-only pages' lookup."""
    return reach(request.user, pk, owner=True).campaign


def tables_of(user):
    """Return the campaigns ``user`` sits at (not their own), each with the seat, newest first."""
    if not user.is_authenticated:
        return []
    return list(Seat.objects.filter(user=user, status=Seat.Status.SEATED).exclude(campaign__owner=user)
                .select_related("campaign", "campaign__owner").order_by("-campaign__updated_at"))


def table_of(campaign):
    """Return what the owner's play page shows of the table: ``seats`` (open or taken), ``seated`` (people at it
    now), and ``whispers`` (every seat's, oldest first) with the owner's ``access``."""
    seats = list(Seat.objects.filter(campaign=campaign).exclude(status=Seat.Status.REMOVED).values_list("status",
                                                                                                      flat=True))
    owner = Access(campaign, OWNER)
    return {"seats": len(seats), "seated": seats.count(Seat.Status.SEATED), "access": owner,
            "whispers": whispers_seen(owner) if seats else []}


# --- guests ------------------------------------------------------------------------------------------------------

GUESTS = "table guests"  # the accounts made by taking an invitation (a Django auth group)


def make_guest(user):
    """Mark ``user`` as a table guest: an account made at the table, for the tables it is seated at alone."""
    from django.contrib.auth.models import Group

    user.groups.add(Group.objects.get_or_create(name=GUESTS)[0])
    user._table_guest = True


def is_guest(user):
    """Whether ``user`` is a table guest: no campaigns of its own, no model server's controls, no personas."""
    if not user.is_authenticated:
        return False
    if not hasattr(user, "_table_guest"):
        user._table_guest = user.groups.filter(name=GUESTS).exists()
    return user._table_guest


def hosts_only(view):
    """Refuse ``view`` to a table guest with a 404 (put it under ``login_required``): starting campaigns, the
    model server's settings and the built-in narrator's controls are the machine's people's, not a guest's."""
    if iscoroutinefunction(view):
        async def wrapped(request, *args, **kwargs):
            if await sync_to_async(is_guest)(await request.auser()):
                raise Http404("No such page.")
            return await view(request, *args, **kwargs)
    else:
        def wrapped(request, *args, **kwargs):
            if is_guest(request.user):
                raise Http404("No such page.")
            return view(request, *args, **kwargs)
    return wraps(view)(wrapped)


# --- seats -------------------------------------------------------------------------------------------------------

def seat_group(seat_id):
    """The channel group every socket a seat's person has open joins: a removal closes them all."""
    return f"seat-{seat_id}"


def _close_sockets(seat):
    """Close every socket the seat's person has open, once the change that shuts them out has committed."""
    from channels.layers import get_channel_layer
    layer = get_channel_layer()
    if layer is not None:
        group = seat_group(seat.pk)
        transaction.on_commit(lambda: async_to_sync(layer.group_send)(group, {"type": CLOSE}))


def open_seat(campaign, character="", kind=Seat.Kind.PLAYER):
    """Open a seat at ``campaign``'s table for ``character`` (a cast key), or a spectator's seat."""
    if kind == Seat.Kind.SPECTATOR:
        character = ""
    elif not character:
        raise ValueError("A player's seat plays a character of the cast: choose one.")
    return Seat.objects.create(campaign=campaign, character=character, kind=kind)


def move(seat, character):
    """Seat ``seat``'s person as ``character`` from now on (their pages show that character's story)."""
    if seat.kind != Seat.Kind.PLAYER:
        raise ValueError("A spectator's seat plays no character.")
    seat.character = character
    seat.save(update_fields=["character", "updated_at"])
    _close_sockets(seat)  # open pages were built as the old character: they reconnect as the new one


def pause(seat):
    """Keep the seat, shut its person out until ``resume``; their sockets close now."""
    if seat.status == Seat.Status.SEATED:
        seat.status = Seat.Status.PAUSED
        seat.save(update_fields=["status", "updated_at"])
    _close_sockets(seat)


def resume(seat):
    """Let a paused seat's person back to the table."""
    if seat.status == Seat.Status.PAUSED:
        seat.status = Seat.Status.SEATED if seat.user_id else Seat.Status.OPEN
        seat.save(update_fields=["status", "updated_at"])


def remove(seat):
    """Take the seat away for good: its person loses access at once, its unspent invitations stop working."""
    seat.status = Seat.Status.REMOVED
    seat.save(update_fields=["status", "updated_at"])
    seat.invitations.filter(used_at__isnull=True).update(expires_at=timezone.now())
    _close_sockets(seat)


# --- invitations -------------------------------------------------------------------------------------------------

def _hash(token):
    return hashlib.sha256(token.encode()).hexdigest()


def invite(seat, hours=INVITATION_HOURS):
    """Return (Invitation, token): a new one-time link's token for ``seat`` (shown once; only its hash is kept)."""
    if seat.status == Seat.Status.REMOVED:
        raise ValueError("This seat was removed; open a new one.")
    token = secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(seat=seat, token_hash=_hash(token),
                                           expires_at=timezone.now() + timedelta(hours=hours))
    return invitation, token


def invitation_of(token):
    """Return the live Invitation ``token`` opens, or raise InvitationRefused saying why."""
    invitation = (Invitation.objects.select_related("seat", "seat__campaign")
                  .filter(token_hash=_hash(token or "")).first())
    if invitation is None:
        raise InvitationRefused("This invitation link is not one this table made. Ask the game's owner for a new one.")
    if invitation.used_at is not None:
        raise InvitationRefused("This invitation link has been used already; each works once. "
                                "Ask the game's owner for a new one.")
    if invitation.seat.status == Seat.Status.REMOVED:
        raise InvitationRefused("The seat this link was for has been removed. Ask the game's owner for a new one.")
    if invitation.expires_at <= timezone.now():
        raise InvitationRefused("This invitation link has expired. Ask the game's owner for a new one.")
    return invitation


def take(token, user):
    """Seat ``user`` with the invitation ``token``; spend it. Return the Seat, or raise InvitationRefused."""
    with transaction.atomic():
        invitation = invitation_of(token)
        seat = invitation.seat
        if seat.campaign.owner_id == user.pk:
            raise InvitationRefused("This is your own game: you already have every seat's view from its page.")
        if Seat.objects.filter(campaign=seat.campaign, user=user).exclude(pk=seat.pk).exclude(
                status=Seat.Status.REMOVED).exists():
            raise InvitationRefused("You already have a seat at this table; the owner can move it.")
        spent = Invitation.objects.filter(pk=invitation.pk, used_at__isnull=True).update(
            used_at=timezone.now(), used_by=user)
        if not spent:  # taken by another request between the read and now
            raise InvitationRefused("This invitation link has been used already; each works once.")
        if seat.user_id and seat.user_id != user.pk:
            _close_sockets(seat)  # the seat changes hands: the one who sat there leaves
        seat.user = user
        if seat.status != Seat.Status.PAUSED:
            seat.status = Seat.Status.SEATED
        seat.save(update_fields=["user", "status", "updated_at"])
    return seat


# --- whispers ----------------------------------------------------------------------------------------------------

def _anchor(path):
    """Return (branch id, depth): where on the story tree the head of ``path`` is (the branch owning that node)."""
    for segment in path.segments:
        if segment.contains(path.head_depth):
            return segment.branch_id, path.head_depth
    return path.head_branch_id, path.head_depth


def whisper(seat, text, path):
    """Keep a whisper from ``seat`` to the game master, sent while the line's head is at ``path``'s."""
    from .models import WHISPER_CHARS
    text = (text or "").strip()
    if not text:
        raise ValueError("A whisper needs a few words.")
    if len(text) > WHISPER_CHARS:
        raise ValueError(f"A whisper is at most {WHISPER_CHARS} characters; this one is {len(text)}.")
    if seat.kind != Seat.Kind.PLAYER or not seat.live:
        raise ValueError("Only a seated player can whisper to the game master.")
    branch_id, depth = _anchor(path)
    return Whisper.objects.create(campaign_id=seat.campaign_id, seat=seat, text=text, branch_id=branch_id,
                                  depth=depth)


def whispers_for_round(campaign, path):
    """Return [(character key, text)]: the whispers the game master reads, privately, in the round played from
    ``path``'s head (sent while the head was there), oldest first. For the narrator's hidden input only."""
    branch_id, depth = _anchor(path)
    rows = (Whisper.objects.filter(campaign=campaign, branch_id=branch_id, depth=depth)
            .exclude(seat__status=Seat.Status.REMOVED).select_related("seat").order_by("created_at", "id"))
    return [(row.seat.character or PROTAGONIST, row.text) for row in rows]


def whispers_seen(reached):
    """Return the whispers ``reached`` (an Access) may read: every one for the owner, a player's own, a
    spectator's none. Oldest first."""
    rows = Whisper.objects.filter(campaign=reached.campaign).select_related("seat").order_by("created_at", "id")
    if reached.owner:
        return list(rows)
    if reached.player:
        return list(rows.filter(seat=reached.seat))
    return []


def _as_seat(campaign, viewer):
    """Return ``campaign`` as a ``SeatsCampaign`` whose pages are built as ``viewer`` (no database read)."""
    seated = SeatsCampaign.__new__(SeatsCampaign)
    seated.__dict__.update(campaign.__dict__)
    seated.seat_viewer = viewer
    return seated
