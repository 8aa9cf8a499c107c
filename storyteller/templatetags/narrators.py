"""Template filters for showing models as a person reads them."""

from django import template

from storyteller import context, llm

register = template.Library()


@register.filter
def model_label(name):
    """Return model id `name` as a person reads it: a file path (llama.cpp's ids) by its file name."""
    return llm.model_label(str(name)) if name else ""


@register.filter
def with_user(text, campaign):
    """Return story text as the player reads it: ``{{user}}`` as the name of their character (``campaign``'s)."""
    if not text or ("{" not in text and "<" not in text) or not hasattr(campaign, "protagonist"):
        return text
    return context.fill_user(text, context.player_name(campaign))
