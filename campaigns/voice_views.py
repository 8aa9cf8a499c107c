"""The reading-aloud panel of the play page: a voice for the narrator and for each character the viewer knows.

The voices themselves are the browser's (``speechSynthesis``: nothing is
sent anywhere, nothing is installed); the panel lists who can be given one
and play.js fills in the voices, keeping each choice in the browser for
this campaign. In the player's view only characters the player's character
knows are listed (it has met them, knows of them, or sees them now); the
author's view lists every one.
"""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_GET

from . import viewing
from .models import CharacterCard
from .state import PROTAGONIST
from .viewpoint import Viewer, view as view_at
from .views import campaign_for_user


def known_characters(now, who=PROTAGONIST):
    """Return [{key, name, names}] of the characters ``who`` knows on the line ``now``, by name (``names`` for
    attribution): the player's view of them."""
    return listed(view_at(now, Viewer(who)))


def listed(view):
    """Return [{key, name, names}] of the characters ``view`` knows (the author's: every one)."""
    return [{"key": key, "name": name, "names": names} for key, name, names in view.people_known()]


@login_required
@require_GET
def voices_panel(request, pk):
    campaign = campaign_for_user(request, pk)
    view = viewing.view_of(campaign)
    characters = listed(view)
    portraits = dict(CharacterCard.objects.filter(campaign=campaign, entity__in=[c["key"] for c in characters])
                     .exclude(portrait_type="").values_list("entity", "pk"))
    for character in characters:
        character["portrait"] = portraits.get(character["key"])
    template = "campaigns/_voices_panel.html" if request.htmx else "campaigns/voices.html"
    return render(request, template, {"campaign": campaign, "view": view, "characters": characters})
