"""Personas: who a person plays as, kept per person and chosen per campaign (its edit page).

A person sees and changes only their own personas (anyone else's is a
404); a portrait is served only to its owner, as the picture type its bytes
were checked to be.
"""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from . import seating
from .forms import PersonaForm
from .models import Persona


def _get_persona_for_user(request, pk):
    return get_object_or_404(Persona, pk=pk, owner=request.user)


@login_required
@require_http_methods(["GET", "POST"])
@seating.hosts_only
def personas(request):
    """The person's personas, and the form for a new one."""
    form = PersonaForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        persona = form.save(commit=False)
        persona.owner = request.user
        persona.save()
        return redirect("personas")
    return render(request, "campaigns/personas.html", {
        "personas": Persona.objects.filter(owner=request.user), "form": form})


@login_required
@require_http_methods(["GET", "POST"])
@seating.hosts_only
def persona_edit(request, pk):
    persona = _get_persona_for_user(request, pk)
    form = PersonaForm(request.POST or None, request.FILES or None, instance=persona)
    if request.method == "POST" and form.is_valid():
        form.save()
        return redirect("personas")
    return render(request, "campaigns/persona_form.html", {"persona": persona, "form": form})


@login_required
@require_GET
def portrait(request, pk):
    persona = _get_persona_for_user(request, pk)
    if not persona.portrait:
        raise Http404("This persona has no portrait.")
    response = HttpResponse(bytes(persona.portrait), content_type=persona.portrait_type)
    response["Cache-Control"] = "private, max-age=300"
    return response
