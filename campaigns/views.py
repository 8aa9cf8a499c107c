"""The state panel, the world panel, its map and its items, and a reply's state events: see what is true now,
and correct it.

Every change made here is a typed correction event (``state.correct``): it
keeps who changed what from what, and it is validated like anything the
recorder proposes. Each panel is one fragment, served alone to htmx and
inside a page otherwise, and re-rendered after every change.
"""

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.http import HttpResponseClientRedirect
from django.views.decorators.http import require_GET, require_POST

from . import lineage, muting, seating, state, viewing
from .forms import CorrectionForm
from .models import Node, RecorderRun, StateEvent
from .state.registry import OP_NAMES
from .state.world import authoring, lint, world

# The panel's sections, in reading order, with the record kinds they show.
PANEL_GROUPS = [
    ("Where everyone is", "location"),
    ("Possessions", "holder"),
    ("Relationships", "relationship"),
    ("Conditions", "condition"),
    ("Facts", "fact"),
    ("Threads", "thread"),
]


def campaign_for_user(request, pk):
    """Return the signed-in person's own campaign ``pk`` (``seating.access``: the owner's pages); anyone else's,
    a seated player's included, is a 404."""
    return seating.owned(request, pk)


def campaign_for_viewer(request, pk):
    """Return campaign ``pk`` as the signed-in person's pages show it: the owner's, or (a seated person) a
    ``SeatsCampaign`` built as their seat's viewer; a spectator and anyone else get a 404. The player-safe
    panels' lookup."""
    reached = seating.reach(request.user, pk)
    if reached.spectator:  # a spectator reads the story alone: no character's knowledge, no panels
        raise Http404("No such page.")
    return reached.campaign


def author_only(request, campaign, what):
    """Return the page saying that ``what`` is the author's view, with the switch that shows it (403: not in this
    view)."""
    return render(request, "storyteller/author_only.html", {"campaign": campaign, "what": what}, status=403)


def state_panel_context(campaign, *, message="", error=""):
    """Return what ``campaigns/_state_panel.html`` renders: the head's state as the page's viewer may know it, and
    (the author's view) its recording status and every record with its provenance."""
    path = lineage.path_of(campaign)
    head = path.nodes().filter(depth=campaign.head_depth).first()
    # The run before the state: a run that reads "applied" committed its
    # records in the same transaction, so a state read after it holds them.
    # Read the other way round, a recording landing between the two reads
    # showed "recorded" over the state from before it.
    run = RecorderRun.objects.filter(node=head).first() if head and head.role == Node.Role.NARRATOR else None
    view = viewing.view_of(campaign, path=path)
    now = view.everything if view.author else None
    here = view.here()
    groups = []
    for title, kind in PANEL_GROUPS:
        rows = [_row(view, record) for record in view.records(kind)]
        groups.append({"title": title, "kind": kind, "rows": sorted(rows, key=lambda row: row["text"].lower())})
    return {
        "campaign": campaign,
        "view": view,
        "head": head,
        "recording": _recording(head, run),
        "run": run,
        "protagonist": view.protagonist(),
        "location": here.name if here else "",
        "scene": view.scene(),
        "entities": [_row(view, record) for record in view.entities()],
        "groups": groups,
        "superseded": [_row(view, record) for record in now.of_kind("superseded_canon")] if now else [],
        "kinds": state.ENTITY_KINDS,
        "state_message": message,
        "state_error": error,
    }


def _row(view, record):
    """Return one record as the panel lists it, in the words the viewer may read."""
    subject = view.name_of(record.subject) if record.kind == "fact" and record.subject else ""
    return {"record": record, "text": view.describe(record), "subject": subject}


def _recording(head, run):
    if head is None or head.role != Node.Role.NARRATOR:
        return "none"
    return run.status if run else "pending"


def render_state_panel(request, campaign, **extra):
    """Return the panel fragment for htmx, or the state page around it."""
    campaign.refresh_from_db()
    context = state_panel_context(campaign, **extra)
    template = "campaigns/_state_panel.html" if request.htmx else "campaigns/state.html"
    return render(request, template, context)


@login_required
@require_GET
def state_panel(request, pk):
    return render_state_panel(request, campaign_for_viewer(request, pk))


@login_required
@require_POST
def state_correct(request, pk):
    campaign = campaign_for_user(request, pk)
    form = CorrectionForm(request.POST)
    if not form.is_valid():
        problems = "; ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())
        return render_state_panel(request, campaign, error=f"Nothing was changed ({problems}).")
    event = state.correct(campaign, request.user, form.payload(request.POST))
    if event.status == StateEvent.Status.REJECTED:
        return render_state_panel(request, campaign, error=f"Nothing was changed: {event.reason}.")
    return render_state_panel(request, campaign, message="Corrected. The narrator sees it from the next turn.")


@login_required
@require_GET
def state_events(request, pk, node_pk):
    campaign = campaign_for_user(request, pk)
    node = get_object_or_404(Node, pk=node_pk, campaign=campaign)
    if not campaign.author_view:
        return author_only(request, campaign, "What the recorder made of a reply")
    context = {
        "campaign": campaign,
        "node": node,
        "run": RecorderRun.objects.filter(node=node).first(),
        "events": StateEvent.objects.filter(node=node).select_related("author"),
    }
    template = "campaigns/_state_events.html" if request.htmx else "campaigns/state_events.html"
    return render(request, template, context)


def world_panel_context(campaign, *, message="", error="", reload_panels=False):
    """Return what ``campaigns/_world_panel.html`` renders: where the viewer is, what it sees and can do there;
    the author's view adds what is hidden, what was refused, world_lint, the author's queue and the corrections."""
    campaign.refresh_from_db()
    path = lineage.path_of(campaign)
    view = viewing.view_of(campaign, path=path)
    here = view.here()
    context = {
        "campaign": campaign,
        "view": view,
        "here": here,
        "muted": muting.muted_at(campaign, here.place if here else ""),
        "world_message": message,
        "world_error": error,
        "reload_panels": reload_panels,
        # Story time and world rules follow a correction of the world too (who is where, what they hold).
        "rule_panels": [("time", "time_panel"), ("variables", "variables_panel"), ("rolls", "rolls_panel"),
                        ("triggers", "triggers_panel")],
    }
    if view.author:
        context.update(_author_world(view.everything, path))
    return context


def _author_world(now, path):
    """Return what the author's view of the world panel adds: the refused events, findings, queue and forms."""
    head = path.nodes().filter(depth=path.head_depth).first()
    return {
        "refused": StateEvent.objects.filter(node=head, status=StateEvent.Status.REJECTED) if head else [],
        "findings": lint.lint(now),
        "queue": [{"name": now.name_of(q.key), "reason": q.reason, "turn": q.turn} for q in authoring.queue(now)],
        "places": [now.name_of(key) for key in world.places(now)],
        "characters": [now.name_of(key) for key in world.characters(now)],
        "item_names": sorted({now.name_of(r.subject) for r in now.entities() if r.data.get("kind") == "item"}),
        "slots": world.slots(now),
        "ops": OP_NAMES,
        "how": world.HOW,
    }


def _item_rows(now, items):
    return [{"item": item, "chain": [now.name_of(key) for key in world.holding_chain(now, item.key)],
             "unseen": world.obstacle(now, item.key, state.PROTAGONIST), "owner": now.name_of(item.owner)
             if item.owner else ""} for item in items]


def render_world_panel(request, campaign, **extra):
    """Return Here for htmx (the play page's panel, whose buttons play over its socket), or its page around it."""
    template = "campaigns/_world_panel.html" if request.htmx else "campaigns/world.html"
    # A seat's Here has no buttons: what a seated player does goes into the table's round, not a click here.
    seated = campaign.seat_viewer is not None if hasattr(campaign, "seat_viewer") else False
    return render(request, template, {**world_panel_context(campaign, **extra),
                                      "standalone": not request.htmx or seated})


@login_required
@require_GET
def world_panel(request, pk):
    return render_world_panel(request, campaign_for_viewer(request, pk))


@login_required
@require_POST
def world_correct(request, pk):
    """Apply one correction from the world panel; return the panel, and reload the others (they show it too)."""
    campaign = campaign_for_user(request, pk)
    form = CorrectionForm(request.POST)
    if not form.is_valid():
        problems = "; ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())
        return render_world_panel(request, campaign, error=f"Nothing was changed ({problems}).")
    event = state.correct(campaign, request.user, form.payload(request.POST))
    if event.status == StateEvent.Status.REJECTED:
        return render_world_panel(request, campaign, error=f"Nothing was changed: {event.reason}.")
    return render_world_panel(request, campaign, message="Corrected. The narrator sees it from the next turn.",
                              reload_panels=True)


@login_required
@require_GET
def world_map(request, pk):
    """The map of the places the viewer knows, drawn here as SVG: a place it can reach is a way there."""
    campaign = campaign_for_viewer(request, pk)
    view = viewing.view_of(campaign)
    here = view.here()
    context = {"campaign": campaign, "view": view, "map": view.map(), "here": here.name if here else "",
               "page": not request.htmx}
    return render(request, "campaigns/_map.html" if request.htmx else "campaigns/world_map.html", context)


@login_required
@require_GET
def items_panel(request, pk):
    """Every item the viewer knows of, by the place it is believed to be in (the author's view: the truth, with
    each item's holding chain)."""
    campaign = campaign_for_viewer(request, pk)
    view = viewing.view_of(campaign)
    groups = {}
    if view.author:
        now = view.everything
        items = [world.item_of(now, r.subject) for r in now.entities() if r.data.get("kind") == "item"]
        items = [item for item in items if not item.gone]
        for row in _item_rows(now, sorted(items, key=lambda item: (item.name.lower(), item.key))):
            place = world.place_of(now, row["item"].key)
            groups.setdefault(now.name_of(place) if place else "", []).append(row)
    else:
        for known in view.known_items():
            where = "You have" if known.carried else view.name_of(known.place) if known.place else ""
            groups.setdefault(where, []).append({"known": known})
    context = {"campaign": campaign, "view": view,
               "groups": sorted(groups.items(), key=lambda g: (g[0] != "You have", g[0] == "", g[0].lower()))}
    return render(request, "campaigns/_items_panel.html" if request.htmx else "campaigns/items.html", context)


@login_required
@require_POST
def author_view(request, pk):
    """Turn the campaign's author's view on (everything, spoilers included) or off (what the player's character
    knows); the play page is read again in that view."""
    campaign = campaign_for_user(request, pk)
    viewing.switch(campaign, request.POST.get("on") == "1")
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}) or not back.startswith("/"):
        back = campaign.get_absolute_url()
    if request.htmx:
        return HttpResponseClientRedirect(back)
    return redirect(back)


@login_required
@require_POST
def mute(request, pk):
    """Mute a character for the scene (the game master does not have them answer), or unmute them; return Here."""
    campaign = campaign_for_user(request, pk)
    here = viewing.view_of(campaign).here()
    who = request.POST.get("who", "")
    if here is None or who not in {person.key for person in here.people}:
        return render_world_panel(request, campaign, error="Only someone here can be muted for the scene.")
    muted = muting.toggle(campaign, who, here.place)
    name = next(person.name for person in here.people if person.key == who)
    return render_world_panel(request, campaign, message=f"{name} is muted until you leave this place."
                              if muted else f"{name} may answer again.")
