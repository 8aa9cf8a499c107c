"""Template filters for the tavern's pages."""

import base64

from django import template

register = template.Library()


@register.filter
def b64(data):
    """Return bytes as base64 text: a portrait the import drew again (never a file's own bytes) as a data URI."""
    return base64.b64encode(bytes(data or b"")).decode("ascii")
