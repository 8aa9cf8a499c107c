"""The minds panel and "What does Mara remember now?": see and correct what characters perceived and believe.

Every change is a typed correction (``campaigns.state.correct``), validated
like anything the recorder proposes; the recall index follows it at once
(``recall_index.sync``). The page's recall runs on a worker thread, since a
configured reranker is a network call and nothing waits on the database's
shared thread for one.
"""

import asyncio

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from campaigns import state as story_state
from campaigns.forms import CorrectionForm
from campaigns.models import StateEvent
from campaigns.views import campaign_for_user, campaign_for_viewer
from memory import recall_index

from . import remembering

# The correction types the minds forms post.
TYPES = ("event", "perception", "perception_edit", "belief", "belief_edit", "notice", "retract")
MAX_QUERY = 500


def render_panel(request, campaign, **extra):
    """Return the minds panel fragment for htmx, or the minds page around it."""
    campaign.refresh_from_db()
    template = "memory/_minds_panel.html" if request.htmx else "memory/minds.html"
    return render(request, template, remembering.panel_context(campaign, **extra))


@login_required
@require_GET
def minds_panel(request, pk):
    return render_panel(request, campaign_for_viewer(request, pk))


@login_required
@require_POST
def minds_correct(request, pk):
    """Apply one correction of what characters perceived or believe; then the panel, or back to the page asked."""
    campaign = campaign_for_user(request, pk)
    form = CorrectionForm(request.POST)
    if not form.is_valid() or form.cleaned_data["type"] not in TYPES:
        problems = "; ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())
        return render_panel(request, campaign, error=f"Nothing was changed ({problems or 'not a minds correction'}).")
    event = story_state.correct(campaign, request.user, form.payload(request.POST))
    if event.status == StateEvent.Status.REJECTED:
        return render_panel(request, campaign, error=f"Nothing was changed: {event.reason}.")
    recall_index.sync(campaign.pk)
    back = request.POST.get("who", "")
    if back and back == story_state.key_for(back) and not request.htmx:  # a character's key, nothing else
        return redirect(reverse("remember", args=[campaign.pk, back]) + "?corrected=1")
    return render_panel(request, campaign, message="Corrected. Characters recall it from the next turn.")


@login_required
@require_POST
def minds_rebuild(request, pk):
    """Rebuild the derived recall index from the records (and, asked, drop its vectors); the story is untouched."""
    campaign = campaign_for_user(request, pk)
    made = recall_index.rebuild_from_records(campaign.pk)
    message = f"The recall index was rebuilt from the records: {made} rows."
    if request.POST.get("vectors"):
        dropped = recall_index.reset_vectors(campaign.pk)
        message += f" {dropped} vectors were dropped; the next minds step embeds them again."
    return render_panel(request, campaign, message=message)


@login_required
@require_GET
async def remember(request, pk, who):
    """What does this character remember now: her recall at the head with every score, her beliefs beside the truth."""
    request.user = await request.auser()
    text = request.GET.get("q", "").strip()[:MAX_QUERY]
    campaign = await sync_to_async(campaign_for_user)(request, pk)
    if not campaign.author_view and who != story_state.PROTAGONIST:
        return await sync_to_async(render)(request, "storyteller/author_only.html", {
            "campaign": campaign, "what": "What another character remembers"}, status=403)
    prepared = await sync_to_async(_prepare)(request, pk, who, text)
    vector, note = await remembering.embed(prepared)
    found = await asyncio.to_thread(remembering.run_recall, prepared, vector, note)
    context = {"campaign": prepared.campaign, "who": prepared, "q": text, "recall": found,
               "author_view": prepared.campaign.author_view,
               "corrected": request.GET.get("corrected") == "1",
               "report": found.report, "rows": found.report["scores"]}
    template = "memory/remember.html#results" if request.htmx else "memory/remember.html"
    return await sync_to_async(render)(request, template, context)


def _prepare(request, pk, who, text):
    campaign = campaign_for_user(request, pk)
    if len(who) > 200:
        raise Http404("no such character in this story")
    return remembering.prepare(campaign, who, text)
