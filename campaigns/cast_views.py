"""The cast: the characters brought from character cards that the player's character knows, with their portraits.

A player's page, like the reading-aloud panel: only characters the
protagonist has met, knows of or sees now are listed (``known_characters``).
Each shows its portrait, the one line the story knows of it, and its card's
creator's notes — shown to the person, never sent to a model. A portrait
is served to the campaign's owner only, as the picture type the import drew
it again as.
"""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from . import lineage, state
from .models import CharacterCard
from .views import campaign_for_user
from .voice_views import known_characters


def cast_of(campaign, now):
    """Return [{card, name, line}] of the campaign's carded characters the protagonist knows on the line ``now``."""
    known = {character["key"]: character for character in known_characters(now)}
    found = []
    for card in CharacterCard.objects.filter(campaign=campaign, entity__in=known).defer("card"):
        entity = now.entity(card.entity)
        found.append({"card": card, "name": known[card.entity]["name"],
                      "line": entity.data.get("description", "") if entity else ""})
    return found


@login_required
@require_GET
def cast_panel(request, pk):
    campaign = campaign_for_user(request, pk)
    now = state.state_at(lineage.path_of(campaign), campaign)
    template = "campaigns/_cast_panel.html" if request.htmx else "campaigns/cast.html"
    return render(request, template, {"campaign": campaign, "cast": cast_of(campaign, now)})


@login_required
@require_GET
def card_portrait(request, pk, card_pk):
    campaign = campaign_for_user(request, pk)
    card = CharacterCard.objects.filter(campaign=campaign, pk=card_pk).exclude(portrait_type="").first()
    if card is None:
        raise Http404("This character has no portrait.")
    response = HttpResponse(bytes(card.portrait), content_type=card.portrait_type)
    response["Cache-Control"] = "private, max-age=300"
    response["X-Content-Type-Options"] = "nosniff"
    return response
