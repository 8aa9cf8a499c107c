"""The table (issue 30): the owner's seats page, the invitation a friend opens, a seat's play page, whispers.

Thin views over ``campaigns.seating``. The seats page and its forms are the
owner's; the join page is anyone's who holds a live invitation; a seat's play
page is built as that seat's viewer (``viewing.seen`` for the story,
``viewing.view_of`` for every panel), with no control its person cannot use.
"""

from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth import get_user_model, login
from django.contrib.auth.decorators import login_required
from django.db import IntegrityError, transaction
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from campaigns import lineage, rule_views, seating, viewing
from campaigns.models import WHISPER_CHARS, Seat
from campaigns.state import PROTAGONIST, state_at
from campaigns.state.world import world

from . import signin, views
from .views import STORY_WINDOW, mark_rounds

NAME_CHARS = 40
SEAT_ACTIONS = ("invite", "move", "pause", "resume", "remove", "signin")


def guest(request):
    """Context processor: ``table_guest``, whether the signed-in person is a table guest (their header offers their
    tables alone: no campaigns of their own, no model settings)."""
    return {"table_guest": seating.is_guest(request.user) if hasattr(request, "user") else False}


def owner_group(campaign_id):
    """The channel group of the owner's open play pages: a whisper tells them to read their whispers again."""
    return f"campaign-{campaign_id}-owner"


# --- the owner's seats page --------------------------------------------------------------------------------------

def _cast(campaign):
    """Return [(key, name)]: the characters of the cast a seat can play, the protagonist first."""
    state = state_at(lineage.path_of(campaign), campaign)
    keys = [key for key in world.characters(state) if key != PROTAGONIST]
    others = [(key, state.name_of(key)) for key in keys]
    return [(PROTAGONIST, state.name_of(PROTAGONIST) or "The protagonist"), *others]


def _table_context(campaign, **extra):
    cast = _cast(campaign)
    names = dict(cast)
    seats = list(Seat.objects.filter(campaign=campaign).exclude(status=Seat.Status.REMOVED)
                 .select_related("user").order_by("id"))
    for seat in seats:
        seat.character_name = names.get(seat.character, seat.character) if seat.character else ""
    owner = seating.Access(campaign, seating.OWNER)
    return {"campaign": campaign, "seats": seats, "cast": cast, "whispers": _whisper_rows(owner, names),
            "kinds": Seat.Kind.choices, **extra}


def _whisper_rows(reached, names):
    rows = seating.whispers_seen(reached)
    for row in rows:
        row.character_name = names.get(row.seat.character, row.seat.character) if row.seat.character else ""
    return rows


@login_required
@require_GET
def table(request, pk):
    """Who sits where at the campaign's table; open, invite, move, pause and remove seats."""
    return render(request, "table/table.html", _table_context(seating.owned(request, pk)))


@login_required
@require_POST
def open_seat(request, pk):
    campaign = seating.owned(request, pk)
    kind = request.POST.get("kind", Seat.Kind.PLAYER)
    character = request.POST.get("character", "")
    if kind not in Seat.Kind.values or (kind == Seat.Kind.PLAYER and character not in dict(_cast(campaign))):
        return _table_answer(request, campaign, error="Choose a character of the cast for the seat, or a "
                                                      "spectator's seat.", status=400)
    seating.open_seat(campaign, character, kind)
    return _table_answer(request, campaign, notice=f"{_seat_name(campaign, kind, character)} is open: make an "
                                                   "invitation for it below.")


@login_required
@require_POST
def seat_action(request, pk, seat_pk, what):
    """Invite someone to a seat, move it to another character, pause, resume or remove it, or make its person a
    new sign-in link."""
    campaign = seating.owned(request, pk)
    seat = get_object_or_404(Seat.objects.exclude(status=Seat.Status.REMOVED), pk=seat_pk, campaign=campaign)
    if what not in SEAT_ACTIONS:
        raise Http404("No such seat action.")
    name = _seat_name(campaign, seat.kind, seat.character)
    if what == "invite":
        _, token = seating.invite(seat)
        extra = {"link": _absolute(request, reverse("join", args=[token])), "link_seat": seat.pk, "link_name": name,
                 "notice": f"Send this link to the person who takes {name}. It works once, for "
                           f"{seating.INVITATION_HOURS} hours."}
    elif what == "move":
        character = request.POST.get("character", "")
        if seat.kind != Seat.Kind.PLAYER or character not in dict(_cast(campaign)):
            return _table_answer(request, campaign, error="Choose a character of the cast to move the seat to.",
                                 status=400)
        seating.move(seat, character)
        extra = {"notice": f"That seat now plays {dict(_cast(campaign))[character]}; its player's page has "
                           "closed, and shows the new character when they reload it."}
    elif what == "pause":
        seating.pause(seat)
        extra = {"notice": f"{name} is paused: its player cannot reach the table until you resume it."}
    elif what == "resume":
        seating.resume(seat)
        extra = {"notice": f"{name} is back at the table."}
    elif what == "remove":
        seating.remove(seat)
        extra = {"notice": f"{name} is removed; its player has lost access."}
    elif seat.user_id is None:
        return _table_answer(request, campaign, error="Nobody sits in that seat yet: make an invitation.",
                             status=400)
    else:
        extra = {"link": _absolute(request, signin.login_link(seat.user, base_url="")), "link_name": name,
                 "notice": f"A sign-in link for {seat.user.username}: it works once, within "
                           f"{settings.PASSWORD_RESET_TIMEOUT // 3600} hours, on any device."}
    return _table_answer(request, campaign, **extra)


def _seat_name(campaign, kind, character):
    """Name a seat as the owner knows it: "Old Tam's seat", or "the spectator's seat"."""
    if kind == Seat.Kind.SPECTATOR:
        return "The spectator's seat"
    return f"{dict(_cast(campaign)).get(character, character)}'s seat"


def _table_answer(request, campaign, status=200, **extra):
    template = "table/_seats.html" if request.htmx else "table/table.html"
    return render(request, template, _table_context(campaign, **extra), status=status)


def _absolute(request, path):
    """Return ``path`` on the origin the table is served at (``STORYTELLER_ORIGIN`` behind a proxy)."""
    if settings.STORYTELLER_ORIGIN:
        return settings.STORYTELLER_ORIGIN + path
    return request.build_absolute_uri(path)


# --- taking an invitation ----------------------------------------------------------------------------------------

@require_http_methods(["GET", "POST"])
@never_cache
def join(request, token):
    """The page an invitation link opens: who invites you to play whom; take the seat, making an account if you
    have none (a name; no password: a new sign-in link comes from the table's owner)."""
    try:
        invitation = seating.invitation_of(token)
    except seating.InvitationRefused as refusal:
        return render(request, "table/join.html", {"refused": str(refusal)}, status=410)
    seat = invitation.seat
    context = {"invitation": invitation, "seat": seat, "campaign": seat.campaign,
               "character": dict(_cast(seat.campaign)).get(seat.character, "") if seat.character else "",
               "name_limit": NAME_CHARS}
    if request.method == "GET":
        return render(request, "table/join.html", context)
    user = request.user if request.user.is_authenticated else None
    if user is None:
        name = " ".join(request.POST.get("name", "").split())[:NAME_CHARS]
        if not name:
            return render(request, "table/join.html", {**context, "error": "Give yourself a name to sit at the "
                                                                          "table."}, status=400)
        try:
            with transaction.atomic():
                user = get_user_model().objects.create(username=name)
                user.set_unusable_password()
                user.save(update_fields=["password"])
                seating.make_guest(user)
        except IntegrityError:
            return render(request, "table/join.html", {**context, "name": name, "error": (
                f"Someone here is already called “{name}”. Choose another name, or, if that is you, ask the "
                "table's owner for a sign-in link.")}, status=400)
    try:
        seat = seating.take(token, user)
    except seating.InvitationRefused as refusal:
        return render(request, "table/join.html", {**context, "refused": str(refusal)}, status=410)
    if not request.user.is_authenticated:
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    return redirect("play", seat.campaign_id)


# --- a seat's play page ------------------------------------------------------------------------------------------

@login_required
@require_GET
@never_cache  # Back must not show a stale story
async def play(request, pk):
    """The play page: the owner's (``views.play``), or a seated person's (``seat_play``); 404 for anyone else."""
    reached = await seating.areach(await request.auser(), pk)
    if reached.owner:
        return await views.play(request, pk)
    return await sync_to_async(seat_play)(request, reached)


def seat_play(request, reached):
    """The play page of a seated person: the story as their seat's character was there for it, their panels,
    and (a player) the whisper form. The htmx request another tab's move sends reads the story part alone."""
    context = _seat_context(reached)
    if request.htmx:
        return render(request, "table/_seat_body.html", context)
    return render(request, "table/play.html", context)


def _seat_context(reached):
    campaign = reached.campaign
    path = lineage.path_of(campaign)
    nodes = mark_rounds(list(path.nodes().order_by("-depth")[:STORY_WINDOW])[::-1])
    view = viewing.view_of(campaign, path=path)
    cast = dict(_cast(campaign))
    return {
        "campaign": campaign, "access": reached, "view": view, "author_view": False,
        "passages": viewing.seen(campaign, path, nodes, reached.viewer),
        "elsewhere": viewing.ELSEWHERE,
        "earlier_count": campaign.head_depth + 1 - len(nodes),
        "character": cast.get(reached.character, "") if reached.player else "",
        "clock": (rule_views.time_context(campaign, view)["clock"] or {}).get("text", ""),
        "whispers": _whisper_rows(reached, cast) if reached.player else [],
        "whisper_limit": WHISPER_CHARS,
    }


# --- whispers ----------------------------------------------------------------------------------------------------

@login_required
@require_http_methods(["GET", "POST"])
def whispers(request, pk):
    """A seated player's whispers to the game master (POST: send one); the owner's: every seat's. Nobody else's."""
    reached = seating.reach(request.user, pk)
    if reached.spectator:
        raise Http404("No such page.")
    campaign = reached.campaign
    error = notice = ""
    if request.method == "POST":
        if not reached.player:
            raise Http404("No such page.")
        try:
            seating.whisper(reached.seat, request.POST.get("text", ""), lineage.path_of(campaign))
        except ValueError as refusal:
            error = f"Not sent: {refusal}"
        else:
            notice = "Whispered. Only the game master (the table's owner) reads it."
            _tell_owner(campaign.pk)
    cast = dict(_cast(campaign))
    context = {"campaign": campaign, "access": reached, "whispers": _whisper_rows(reached, cast),
               "whisper_error": error, "whisper_notice": notice, "whisper_limit": WHISPER_CHARS}
    template = "table/_whispers.html" if request.htmx else "table/whispers.html"
    return render(request, template, context, status=400 if error else 200)


def _tell_owner(campaign_id):
    """Have the owner's open play pages read their whispers again (after the whisper has committed)."""
    layer = get_channel_layer()
    transaction.on_commit(lambda: async_to_sync(layer.group_send)(owner_group(campaign_id),
                                                                 {"type": "whisper.sent"}))
