"""Template filters for showing models as a person reads them."""

from django import template

from storyteller import llm

register = template.Library()


@register.filter
def model_label(name):
    """Return model id `name` as a person reads it: a file path (llama.cpp's ids) by its file name."""
    return llm.model_label(str(name)) if name else ""
