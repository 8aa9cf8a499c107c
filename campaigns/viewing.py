"""The play page's view of a campaign: the story as its player's character may know it, or the author's view.

``view_of`` reads the campaign's line and returns its ``viewpoint.View``:
every panel, fragment, socket frame and export of a player page is built
from it. ``switch`` turns the author's view on or off for the campaign (a
deliberate switch, remembered, off by default).
"""

from . import lineage
from .state import PROTAGONIST, state_at
from .state.minds import whereabouts
from .viewpoint import Viewer, view


def viewer_of(campaign):
    """Return the Viewer the campaign's play page shows the story as."""
    return Viewer(PROTAGONIST, author=bool(campaign.author_view))


def viewer_for(campaign, user):
    """Return the Viewer ``user``'s pages of ``campaign`` are built as (issue 30: a seat's character; the owner's is
    ``viewer_of``; a spectator's the public story). Raises Http404 for someone with no access."""
    from . import seating
    return seating.viewer_for(campaign, user)


def view_of(campaign, *, path=None, state=None, viewer=None):
    """Return the View of ``campaign`` at its head (or ``path``), as its play page shows it (or as ``viewer``)."""
    path = path or lineage.path_of(campaign)
    state = state if state is not None else state_at(path, campaign)
    return view(state, viewer or viewer_of(campaign), lambda: whereabouts.minds_at(path, campaign),
                time_zone=campaign.time_zone, depth=path.head_depth)


def switch(campaign, on):
    """Show ``campaign``'s play page as its author (``on``: everything, spoilers included) or as its player."""
    campaign.author_view = bool(on)
    campaign.save(update_fields=["author_view"])
