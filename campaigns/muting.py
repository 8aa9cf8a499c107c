"""Who the player muted for the scene: characters the game master does not have answer while the scene lasts.

A scene lasts while the player's character stays at one place: the list is
kept with that place (``Campaign.muted``), and is void once it leaves. It is
the person's choice of how the game master plays, not part of the story, so
undo and branches do not touch it.
"""


def muted_at(campaign, place):
    """Return the keys muted at ``place`` (the game master's read, with the place it already knows)."""
    kept = campaign.muted or {}
    return set(kept.get("who", ())) if place and kept.get("place") == place else set()


def toggle(campaign, who, place):
    """Mute ``who`` for the scene at ``place``, or unmute them; return whether they are muted now."""
    kept = campaign.muted or {}
    names = set(kept.get("who", ())) if kept.get("place") == place else set()
    names ^= {who}
    campaign.muted = {"place": place, "who": sorted(names)}
    campaign.save(update_fields=["muted"])
    return who in names


