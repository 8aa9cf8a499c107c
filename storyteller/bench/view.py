"""``view``: the play page and its panels as the player's view and as the author's, on a world of 500 entities and
2,000 items (issue 24: the player's view costs at most 10 % more than the panels showing everything).

The world: 150 places in a ring with chords, 300 characters, 50 factions
and 2,000 items, up to four deep in open containers; the player's character
knows a third of the places and the ways between them, and stands where 40
items lie. One sample renders the play page and every panel it loads (each
an htmx request, as the page makes them) in one view; the figures are the
whole page's, in each view, and the player's view's cost beside the
author's. The author's view is what the panels showed before the player's
view was built (everything); docs/performance.md gives the branch point's
figure on the same world.
"""

import random
import time

from .measure import REPLIES, bench_user, figure
from .world import item_chains

PLACES, CHARACTERS, FACTIONS, ITEMS = 150, 300, 50, 2_000
KNOWN = 50  # the places the player's character knows, and the ways among them
# The panels the play page loads (templates/campaigns/_side_panels.html), by their URL names.
PANELS = ("world_panel", "world_map", "items_panel", "cast_panel", "time_panel", "state_panel", "minds_panel",
          "triggers_panel", "variables_panel", "rolls_panel", "plot_panel", "memory_panel", "knowledge_panel",
          "note_panel", "voices_panel")


def run(sizes, repeat):
    """The play page and its panels, the player's view against the author's, on 500 entities and 2,000 items."""
    from campaigns import worldfile

    campaign, _ = worldfile.create_campaign(bench_user(), view_document(random.Random(2024)))
    size = f"{PLACES + CHARACTERS + FACTIONS} entities, {ITEMS:,} items"
    client = _client()
    found = {}
    for author in (True, False, True, False):  # alternately, so the machine's load falls on both alike
        campaign.author_view = author
        campaign.save(update_fields=["author_view"])
        found.setdefault(author, []).extend(_page(client, campaign) for _ in range(max(3, repeat // 4)))
    player, everything = sorted(found[False]), sorted(found[True])
    ratio = (player[len(player) // 2] / everything[len(everything) // 2]) if everything else 0
    return [figure("page, author's view", size, everything, "today's panels: everything"),
            figure("page, player's view", size, player, f"at most 10 % more ({ratio:.2f}× the author's)")]


def _client():
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(get_user_model().objects.get(username="bench"))
    return client


def _page(client, campaign):
    """Return the CPU seconds the play page and every panel it loads take to render, one after another (the client
    renders in this process; CPU time leaves out the load of others on a shared machine)."""
    from django.urls import reverse

    started = time.process_time()
    assert client.get(reverse("play", args=[campaign.pk])).status_code == 200
    for name in PANELS:
        response = client.get(reverse(name, args=[campaign.pk]), HTTP_HX_REQUEST="true")
        assert response.status_code == 200, (name, response.status_code)
    return time.process_time() - started


def view_document(rng):
    """A world file of 500 entities and 2,000 items; Edrin knows the first ``KNOWN`` places and the ways among them."""
    rooms = [f"Room {n}" for n in range(PLACES)]
    exits, pairs = [], set()

    def join(one, other):
        if one != other and (one, other) not in pairs:
            pairs.update({(one, other), (other, one)})
            exits.append({"from": rooms[one], "to": rooms[other], "travel_seconds": rng.randrange(10, 120),
                          "both_ways": True})

    for n in range(PLACES):
        join(n, (n + 1) % PLACES)
    while len(exits) < PLACES * 2:
        join(rng.randrange(PLACES), rng.randrange(PLACES))
    known = [e for e in exits if int(e["from"].split()[1]) < KNOWN and int(e["to"].split()[1]) < KNOWN]
    characters = [{"name": f"Villager {n}", "place": rooms[rng.randrange(PLACES)],
                   "condition": {"public": "tired", "inner": f"afraid of room {n}", "activity": "waiting"}}
                  for n in range(CHARACTERS)]
    for villager in characters[:6]:
        villager["place"] = rooms[0]
    characters.append({"name": "Edrin", "protagonist": True, "place": rooms[0], "knowledge": {
        "locations": rooms[:KNOWN], "exits": [{"from": e["from"], "to": e["to"]} for e in known]
        + [{"from": e["to"], "to": e["from"]} for e in known]}})
    items = item_chains(ITEMS, lambda number: rooms[0] if number < 40 else rooms[number // 4 % PLACES] if number % 3
                        else f"Villager {number // 4 % CHARACTERS}", hidden=lambda number: number % 11 == 0)
    return {"format": "storyteller-world", "version": 1,
            "campaign": {"title": "View bench", "protagonist": "Edrin, a lamplighter", "opening": REPLIES[0]},
            "places": [{"name": room, "description": f"{room} of the bench"} for room in rooms],
            "factions": [{"name": f"Guild {n}"} for n in range(FACTIONS)],
            "exits": exits, "characters": characters, "items": items}
