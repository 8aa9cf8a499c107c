"""Template filters for the ways of the world as a player reads them."""

from django import template

from campaigns.worldmap import duration as _duration

register = template.Library()


@register.filter
def duration(seconds):
    """Return how long a way takes, briefly: "30 s", "1 min 30 s", "5 min"."""
    return _duration(seconds or 0)
