"""The play page's view of a campaign: the story as its player's character may know it, or the author's view.

``view_of`` reads the campaign's line and returns its ``viewpoint.View``:
every panel, fragment, socket frame and export of a player page is built
from it. ``switch`` turns the author's view on or off for the campaign (a
deliberate switch, remembered, off by default).

At a table (issue 30) each person's pages are built as their own viewer
(``viewer_for``): a campaign handed to a seated person is a
``seating.SeatsCampaign``, which carries their seat's viewer and never the
author's switch, so every panel reading ``view_of`` shows that seat's view.
``seen`` says which passages of the story a seat's character was there for.
"""

from dataclasses import dataclass

from . import lineage
from .models import Node, StateRecord
from .state import PROTAGONIST, state_at
from .state.minds import whereabouts
from .viewpoint import Viewer, view

ELSEWHERE = "You were elsewhere."


def viewer_of(campaign):
    """Return the Viewer the campaign's play page shows the story as (a seat's, for a seated person's page)."""
    seated = getattr(campaign, "seat_viewer", None)
    if seated is not None:
        return seated
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


@dataclass(frozen=True)
class Passage:
    """One node of the line as a viewer gets it: ``node``, or (``elsewhere``) only that they were not there."""

    node: Node
    elsewhere: bool = False
    parts: tuple = ()  # the narration parts the viewer was present for, when the round stored them by stage


def seen(campaign, path, nodes, viewer):
    """Return [Passage] for ``nodes`` of ``path`` as ``viewer`` gets them.

    The author, the owner's own page and a spectator (the public story) get every passage. A seat gets, of a
    table round (one whose narration was stored by stage, ``tablerounds.parts_for``), the parts told where its
    character was and the actions sent there, and "You were elsewhere" when nothing was; of any other turn, the
    reply (and the action before it) when its character was at the protagonist's place before or after that
    reply — the line's own ``location:`` records — else "You were elsewhere" (a seat playing the protagonist:
    every one).
    """
    who = viewer.who
    seat = getattr(campaign, "seat_viewer", None) is not None
    if viewer.author or not who or not seat:
        return [Passage(node) for node in nodes]
    parts_for = _parts_for()
    together = _together(campaign, path, who) if who != PROTAGONIST else (lambda depth: True)
    passages = []
    for node in nodes:
        if node.role == Node.Role.OPENING:
            passages.append(Passage(node))
            continue
        parts = parts_for(node, who) if parts_for is not None else None
        if parts is not None:  # a table round: what was told (or sent) at this character's stage
            passages.append(Passage(node, parts=tuple(parts)) if parts else Passage(node, elsewhere=True))
            continue
        reply_depth = node.depth if node.role == Node.Role.NARRATOR else node.depth + 1
        passages.append(Passage(node, elsewhere=not together(reply_depth)))
    # Runs of "elsewhere" read as one line, not one per passage.
    folded = []
    for passage in passages:
        if passage.elsewhere and folded and folded[-1].elsewhere:
            continue
        folded.append(passage)
    return folded


def _parts_for():
    """Return i30b's ``tablerounds.parts_for`` once it exists (the narration stored by stage), else None."""
    try:
        from .tablerounds import parts_for
    except ImportError:
        return None
    return parts_for


def _together(campaign, path, who):
    """Return ``together(depth)``: whether ``who`` was at the protagonist's place before or after the reply at
    ``depth`` (read from the line's ``location:`` records, depth by depth)."""
    slots = {f"location:{PROTAGONIST}": PROTAGONIST, f"location:{who}": who}
    rows = (StateRecord.objects.filter(path.clause(), campaign_id=campaign.pk, slot__in=list(slots))
            .order_by("depth", "id").values_list("depth", "slot", "value", "retracted"))
    after = {}  # depth -> (protagonist's place, who's place) after that depth's records
    places = {PROTAGONIST: "", who: ""}
    for depth, slot, value, retracted in rows:
        places[slots[slot]] = "" if retracted else value
        after[depth] = (places[PROTAGONIST], places[who])
    depths = sorted(after)

    def at(depth):
        known = [d for d in depths if d <= depth]
        return after[known[-1]] if known else ("", "")

    def together(depth):
        return any(mine and mine == theirs for mine, theirs in (at(depth - 1), at(depth)))

    return together
