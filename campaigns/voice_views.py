"""The reading-aloud panel of the play page: a voice for the narrator and for each character the player knows.

The voices themselves are the browser's (``speechSynthesis``: nothing is
sent anywhere, nothing is installed); the panel lists who can be given one
and play.js fills in the voices, keeping each choice in the browser for
this campaign. Only characters the player's character knows are listed (it
has met them, knows of them, or sees them now): the panel is a player's page.
"""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_GET

from . import viewing
from .views import campaign_for_user


@login_required
@require_GET
def voices_panel(request, pk):
    campaign = campaign_for_user(request, pk)
    view = viewing.view_of(campaign)
    characters = [{"key": key, "name": name, "names": names} for key, name, names in view.people_known()]
    template = "campaigns/_voices_panel.html" if request.htmx else "campaigns/voices.html"
    return render(request, template, {"campaign": campaign, "view": view, "characters": characters})
