"""The author's pages for the world's people, places and things: a list, and a form to add or edit each.

Each form is ``entityforms``' and each save one correction at the head
through the one write path (``entityforms.save``), kept whole or not at
all. A refusal redraws the form as the person left it, every reason by the
field it came from; a save goes to the thing's own form, saying so.
"""

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from . import entityforms, lineage
from .state import PROTAGONIST, state_at
from .state.world import world
from .views import author_only, campaign_for_user

TITLES = {"character": "a character", "place": "a place", "item": "an item"}
SECTIONS = (("character", "Characters", "Add a character", "Nobody yet."),
            ("place", "Places", "Add a place", "No places yet: the story is not mapped."),
            ("item", "Items", "Add an item", "Nothing yet."))


def _head(campaign):
    campaign.refresh_from_db()
    return state_at(lineage.path_of(campaign), campaign)


def _names(state):
    """Return what the forms' name lists offer: the world's places, characters, items and every holder."""
    places = [state.name_of(key) for key in world.places(state)]
    characters = [state.name_of(key) for key in world.characters(state)]
    items = sorted({state.name_of(r.subject) for r in state.entities() if r.data.get("kind") == "item"}, key=str.lower)
    return {"place_names": places, "character_names": characters, "item_names": items}


@login_required
@require_GET
def entities(request, pk):
    """List the world's characters, places and items, each a link to its form."""
    campaign = campaign_for_user(request, pk)
    if not campaign.author_view:  # the forms show what the player's character may not know (briefs, hidden things)
        return author_only(request, campaign, "The world's characters, places and items")
    state = _head(campaign)
    rows = {kind: [] for kind in entityforms.KINDS}
    for record in sorted(state.entities(), key=lambda r: r.value.lower()):
        kind = record.data.get("kind")
        if kind in rows and not (kind == "item" and world.item_of(state, record.subject).gone):
            rows[kind].append({"key": record.subject, "name": record.value, "protagonist": record.subject == PROTAGONIST,
                               "description": record.data.get("description", ""), "where": _where(state, record)})
    sections = [{"kind": kind, "heading": heading, "add": add, "empty": empty, "rows": rows[kind]}
                for kind, heading, add, empty in SECTIONS]
    return render(request, "campaigns/entities.html", {"campaign": campaign, "sections": sections})


def _where(state, record):
    kind = record.data.get("kind")
    if kind == "character":
        place = state.location_of(record.subject)
        return f"at {state.name_of(place)}" if place else "nowhere yet"
    if kind == "item":
        item = world.item_of(state, record.subject)
        if not item.holder:
            return "held by nobody"
        how = {"carried": "carried by", "worn": "worn by", "in": "in the"}.get(item.mode, "at")
        place = world.place_of(state, item.key)
        return f"{how} {state.name_of(item.holder)}" + (f", at {state.name_of(place)}" if place and place !=
                                                          item.holder else "")
    return ""


@login_required
@require_http_methods(["GET", "POST"])
def entity_form(request, pk, kind, key=""):
    """Show the form to add (no ``key``) or edit a character, place or item; save it as one correction."""
    campaign = campaign_for_user(request, pk)
    if not campaign.author_view:
        return author_only(request, campaign, f"The form for {TITLES.get(kind, 'a thing')}")
    if kind not in entityforms.FORMS:
        raise Http404("no such kind of thing")
    state = _head(campaign)
    if key and world.kind_of(state, key) != kind:
        raise Http404(f"no such {kind} on this line of the story")
    initial = entityforms.INITIAL[kind](state, key) if key else {}
    if request.method == "GET":
        form = entityforms.FORMS[kind](initial=initial, key=key, state=state)
        return _page(request, campaign, state, form, saved=request.GET.get("saved") == "1")
    form, json_error = entityforms.posted(kind, request.POST, state=state, key=key, initial=initial)
    if json_error or "show" in request.POST or not form.is_valid():
        return _page(request, campaign, state, form, json_error=json_error, shown="show" in request.POST,
                     status=400 if json_error or (form.errors and "show" not in request.POST) else 200)
    planned = form.plan()
    if not planned:
        return _page(request, campaign, state, form, unchanged=True)
    saved = entityforms.save(campaign, request.user, planned)
    if saved.refused:
        for field, reason in saved.refused:
            if field in form.fields:
                form.add_error(field, f"{reason[:1].upper()}{reason[1:]}.")
            else:
                form.refusals.setdefault(field, []).append(f"{reason[:1].upper()}{reason[1:]}.")
        return _page(request, campaign, state, form, status=400)
    return redirect(reverse("entity_edit", args=[campaign.pk, kind, key or saved.made()]) + "?saved=1")


def _page(request, campaign, state, form, *, status=200, **flags):
    shown = entityforms.document_text(form)
    # JSON the form could not read stays as the person wrote it, to be corrected rather than typed again.
    written = request.POST.get(f"{form.kind}-json", shown) if flags.get("json_error") else shown
    context = {"campaign": campaign, "form": form, "kind": form.kind, "title": TITLES[form.kind], "key": form.key,
               "document": written, "document_shown": shown, **_names(state), **flags}
    return render(request, "campaigns/entity.html", context, status=status)
