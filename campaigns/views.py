"""The state panel, the world panel, its map and its items, and a reply's state events: see what is true now,
and correct it.

Every change made here is a typed correction event (``state.correct``): it
keeps who changed what from what, and it is validated like anything the
recorder proposes. Each panel is one fragment, served alone to htmx and
inside a page otherwise, and re-rendered after every change.
"""

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET, require_POST

from . import lineage, state, worldforms, worldmap
from .forms import CorrectionForm
from .models import Campaign, Node, RecorderRun, StateEvent
from .state.registry import OP_NAMES
from .state.selection import describe
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
    """Return the signed-in person's campaign ``pk``; anyone else's is a 404."""
    return get_object_or_404(Campaign, pk=pk, owner=request.user)


def state_panel_context(campaign, *, message="", error=""):
    """Return what ``campaigns/_state_panel.html`` renders: the head's state and its recording status."""
    path = lineage.path_of(campaign)
    head = path.nodes().filter(depth=campaign.head_depth).first()
    # The run before the state: a run that reads "applied" committed its
    # records in the same transaction, so a state read after it holds them.
    # Read the other way round, a recording landing between the two reads
    # showed "recorded" over the state from before it.
    run = RecorderRun.objects.filter(node=head).first() if head and head.role == Node.Role.NARRATOR else None
    now = state.state_at(path, campaign)
    groups = []
    for title, kind in PANEL_GROUPS:
        rows = [_row(now, record) for record in now.of_kind(kind)]
        groups.append({"title": title, "kind": kind, "rows": sorted(rows, key=lambda row: row["text"].lower())})
    entities = sorted((_row(now, record) for record in now.entities()), key=lambda row: row["record"].value.lower())
    scene = now.scene()
    return {
        "campaign": campaign,
        "head": head,
        "recording": _recording(head, run),
        "run": run,
        "protagonist": now.entity(state.PROTAGONIST),
        "location": now.name_of(scene.data.get("location")) if scene and scene.data.get("location") else "",
        "scene": scene,
        "entities": entities,
        "groups": groups,
        "superseded": [_row(now, record) for record in now.of_kind("superseded_canon")],
        "kinds": state.ENTITY_KINDS,
        "state_message": message,
        "state_error": error,
    }


def _row(now, record):
    subject = now.name_of(record.subject) if record.kind == "fact" and record.subject else ""
    return {"record": record, "text": describe(now, record), "subject": subject}


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
    return render_state_panel(request, campaign_for_user(request, pk))


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
    context = {
        "campaign": campaign,
        "node": node,
        "run": RecorderRun.objects.filter(node=node).first(),
        "events": StateEvent.objects.filter(node=node).select_related("author"),
    }
    template = "campaigns/_state_events.html" if request.htmx else "campaigns/state_events.html"
    return render(request, template, context)


def _head_state(campaign):
    campaign.refresh_from_db()
    path = lineage.path_of(campaign)
    return path, state.state_at(path, campaign)


def world_panel_context(campaign, *, message="", error="", reload_panels=False, adding=None):
    """Return what ``campaigns/_world_panel.html`` renders: where the story is, and everything there.

    ``adding`` is a character's or place's form as the person left it (refused): shown open, filled.
    """
    path, now = _head_state(campaign)
    place = now.place()
    view = world.place_view(now, place, state.PROTAGONIST, everything=True, cap=False) if place else None
    head = path.nodes().filter(depth=campaign.head_depth).first()
    refused = StateEvent.objects.filter(node=head, status=StateEvent.Status.REJECTED) if head else []
    people = [{"key": key, "name": now.name_of(key), "condition": now.get(f"condition:{key}"),
               "known": world.known_entities(now, key)} for key in (view.people if view else [])]
    return {
        "campaign": campaign,
        "now": now,
        "view": view,
        "exits": [{"exit": exit, "text": describe(now, now.slots[exit.slot])} for exit in (view.exits if view else [])],
        "items": _item_rows(now, [*view.items, *view.unseen] if view else []),
        "people": people,
        "refused": refused,
        "findings": lint.lint(now),
        "queue": [{"name": now.name_of(q.key), "reason": q.reason, "turn": q.turn} for q in authoring.queue(now)],
        "places": [now.name_of(key) for key in world.places(now)],
        "characters": [now.name_of(key) for key in world.characters(now)],
        "item_names": sorted({now.name_of(r.subject) for r in now.entities() if r.data.get("kind") == "item"}),
        "slots": world.slots(now),
        "ops": OP_NAMES,
        "how": world.HOW,
        "world_message": message,
        "adding": {kind: adding if adding is not None and adding.kind == kind else form(prefix=kind)
                   for kind, form in worldforms.FORMS.items()},
        "adding_open": adding.kind if adding is not None else "",
        "world_error": error,
        "reload_panels": reload_panels,
        # Story time and world rules follow a correction of the world too (who is where, what they hold).
        "rule_panels": [("time", "time_panel"), ("variables", "variables_panel"), ("rolls", "rolls_panel"),
                        ("triggers", "triggers_panel")],
    }


def _item_rows(now, items):
    return [{"item": item, "chain": [now.name_of(key) for key in world.holding_chain(now, item.key)],
             "unseen": world.obstacle(now, item.key, state.PROTAGONIST), "owner": now.name_of(item.owner)
             if item.owner else ""} for item in items]


def render_world_panel(request, campaign, **extra):
    template = "campaigns/_world_panel.html" if request.htmx else "campaigns/world.html"
    return render(request, template, world_panel_context(campaign, **extra))


@login_required
@require_GET
def world_panel(request, pk):
    return render_world_panel(request, campaign_for_user(request, pk))


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
@require_POST
def world_add(request, pk, kind):
    """Add a character or a place from its form: every part of it checked as one batch, all or nothing."""
    campaign = campaign_for_user(request, pk)
    if kind not in worldforms.FORMS:
        raise Http404("no such kind of thing")
    form = worldforms.FORMS[kind](request.POST, prefix=kind)
    if not form.is_valid():
        problems = "; ".join(f"{form[field].label if field in form.fields else field}: {' '.join(errors)}"
                             for field, errors in form.errors.items())
        return render_world_panel(request, campaign, error=f"Nothing was added ({problems}).", adding=form)
    refused = state.correct_together(campaign, request.user, form.events())
    if refused:
        reasons = "; ".join(reason for _, reason in refused)
        return render_world_panel(request, campaign, error=f"Nothing was added: {reasons}. Change that and add it "
                                                           "again; the form keeps what you typed.", adding=form)
    return render_world_panel(request, campaign, message=form.done(), reload_panels=True)


@login_required
@require_GET
def world_map(request, pk):
    """The map of the places the protagonist knows: SVG drawn here, exits coloured by state."""
    campaign = campaign_for_user(request, pk)
    _, now = _head_state(campaign)
    context = {"campaign": campaign, "map": worldmap.draw(now), "here": now.name_of(now.location_of(state.PROTAGONIST))
               if now.location_of(state.PROTAGONIST) else ""}
    return render(request, "campaigns/_map.html" if request.htmx else "campaigns/world_map.html", context)


@login_required
@require_GET
def items_panel(request, pk):
    """Every item in the world, by the place it is in, with its holding chain."""
    campaign = campaign_for_user(request, pk)
    _, now = _head_state(campaign)
    items = [world.item_of(now, r.subject) for r in now.entities() if r.data.get("kind") == "item"]
    items = [item for item in items if not item.gone]
    groups = {}
    for row in _item_rows(now, sorted(items, key=lambda item: (item.name.lower(), item.key))):
        place = world.place_of(now, row["item"].key)
        groups.setdefault(now.name_of(place) if place else "", []).append(row)
    context = {"campaign": campaign, "groups": sorted(groups.items(), key=lambda g: (g[0] == "", g[0].lower()))}
    return render(request, "campaigns/_items_panel.html" if request.htmx else "campaigns/items.html", context)
