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

from . import lineage, state
from .state import PROTAGONIST
from .state.world import world
from .models import CharacterCard
from .views import campaign_for_user


def known_characters(now):
    """Return [{key, name, names}] of the characters the protagonist knows, by name; ``names`` for attribution."""
    known = set(world.relationships_of(now, PROTAGONIST))
    known |= {target for targets in world.knowledge(now, PROTAGONIST).values() for target in targets}
    place = now.place()
    if place:
        known |= set(world.place_view(now, place, PROTAGONIST).people)
    found = []
    for key in world.characters(now):
        entity = now.entity(key)
        if key == PROTAGONIST or key not in known or entity is None:
            continue
        names = [entity.value, *entity.data.get("aliases", ())]
        found.append({"key": key, "name": now.name_of(key), "names": [name for name in names if name]})
    return found


@login_required
@require_GET
def voices_panel(request, pk):
    campaign = campaign_for_user(request, pk)
    now = state.state_at(lineage.path_of(campaign), campaign)
    template = "campaigns/_voices_panel.html" if request.htmx else "campaigns/voices.html"
    characters = known_characters(now)
    portraits = dict(CharacterCard.objects.filter(campaign=campaign, entity__in=[c["key"] for c in characters])
                     .exclude(portrait_type="").values_list("entity", "pk"))
    for character in characters:
        character["portrait"] = portraits.get(character["key"])
    return render(request, template, {"campaign": campaign, "characters": characters})
