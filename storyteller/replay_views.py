"""The replays on the branches page and the compare page: the author's tools for choosing a narrator (issue 29).

The compare page shows the story state of both lines (who is where, holds
what, believes what) and the recorder's events: it is the author's view,
reached from the branches page, as the prompt inspector is from a reply.
"""

from asgiref.sync import sync_to_async
from django import forms
from django.contrib.auth.decorators import login_required
from django.shortcuts import aget_object_or_404, get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRefresh

from campaigns import seating
from campaigns import views as campaign_views
from campaigns.models import MAX_TEMPERATURE, Branch, Campaign, Replay

from . import comparing, replays

API_LABELS = [("", "The same server as now"), ("ollama", "Ollama"), ("openai", "OpenAI-compatible (llama.cpp, "
              "LM Studio, vLLM)"), ("builtin", "The built-in narrator")]


class ReplayForm(forms.Form):
    """A line (a branch, from one turn to another) and the narrator that plays it again."""

    branch = forms.TypedChoiceField(coerce=int, label="Line")
    first = forms.IntegerField(min_value=1, label="From turn")
    last = forms.IntegerField(min_value=1, label="To turn")
    model = forms.CharField(max_length=200, label="Model", help_text="As the server names it.")
    url = forms.URLField(max_length=300, required=False, label="Server address",
                         help_text="Empty: the server the story uses now.", assume_scheme="http")
    api = forms.ChoiceField(choices=API_LABELS, required=False, label="It speaks")
    temperature = forms.FloatField(min_value=0.0, max_value=MAX_TEMPERATURE, required=False,
                                   help_text="Empty: the campaign's.")
    max_output_tokens = forms.IntegerField(min_value=1, max_value=32768, required=False, label="Longest reply",
                                           help_text="In tokens; empty: the campaign's.")
    same_prompts = forms.BooleanField(required=False, label="Same prompts",
                                      help_text="Send each turn's original prompt unchanged, to compare the models "
                                                "alone (the story's own context is not rebuilt).")

    def __init__(self, *args, campaign, **kwargs):
        super().__init__(*args, **kwargs)
        lines = Branch.objects.filter(campaign=campaign).order_by("number").values_list("pk", "number", "name")
        self.fields["branch"].choices = [
            (pk, f"Line {number}" + (f": {name}" if name else "") + (" (current)" if pk == campaign.head_branch_id
                                                                      else "")) for pk, number, name in lines]
        self.fields["branch"].initial = campaign.head_branch_id

    def clean(self):
        data = super().clean()
        if data.get("first") and data.get("last") and data["last"] < data["first"]:
            raise forms.ValidationError("The last turn comes before the first; swap them.")
        return data


def replays_context(campaign, form=None, error=""):
    """Return what ``storyteller/_replays.html`` renders: the campaign's replays, their progress, the form."""
    rows = [{"replay": r, "done": replays.progress(r)} for r in
            Replay.objects.filter(campaign=campaign).select_related("branch", "source")[:20]]
    # A stopped replay whose runner has not let go yet is stopping: the page watches it until it has.
    return {"campaign": campaign, "replays": rows, "form": form or ReplayForm(campaign=campaign), "error": error,
            "playing": any(row["replay"].status == Replay.Status.RUNNING or row["replay"].runner for row in rows)}


@login_required
@require_GET
def replay_list(request, pk):
    """Answer the replays' progress; once the one playing has ended, reload the page (its branches have grown)."""
    campaign = campaign_views.campaign_for_user(request, pk)
    context = replays_context(campaign)
    if request.GET.get("while") == "playing" and not context["playing"] and request.htmx:
        return HttpResponseClientRefresh()
    return render(request, "storyteller/_replays.html", context)


@login_required
@require_POST
async def replay_start(request, pk):
    """Start a replay of the chosen line with the chosen narrator; answer with the replays (or the form's errors)."""
    user = await request.auser()
    campaign = (await seating.areach(user, pk, owner=True)).campaign
    replay, form, error = await sync_to_async(_started)(campaign, request.POST)
    if replay is not None:
        replays.schedule(replay.pk)
    return await _answer(request, campaign, form if replay is None else None, error)


def _started(campaign, data):
    form = ReplayForm(data, campaign=campaign)
    if not form.is_valid():
        return None, form, ""
    value = form.cleaned_data
    try:
        return replays.start(
            campaign, source=Branch.objects.get(pk=value["branch"]), from_depth=2 * value["first"] - 1,
            to_depth=2 * value["last"], model=value["model"], url=value["url"], api=value["api"],
            temperature=value["temperature"], max_output_tokens=value["max_output_tokens"],
            same_prompts=value["same_prompts"]), form, ""
    except replays.ReplayRefused as refusal:
        return None, form, str(refusal)


@login_required
@require_POST
async def replay_stop(request, pk, replay_pk):
    user = await request.auser()
    await seating.areach(user, pk, owner=True)
    replay = await aget_object_or_404(Replay, pk=replay_pk, campaign__pk=pk)
    await sync_to_async(replays.stop)(replay)
    return await _answer(request, await Campaign.objects.aget(pk=pk))


@login_required
@require_POST
async def replay_resume(request, pk, replay_pk):
    """Play a stopped (or failed) replay on from where it stopped."""
    user = await request.auser()
    await seating.areach(user, pk, owner=True)
    replay = await aget_object_or_404(Replay, pk=replay_pk, campaign__pk=pk)
    try:
        await sync_to_async(replays.resume)(replay)
    except replays.ReplayRefused as refusal:
        return await _answer(request, await Campaign.objects.aget(pk=pk), error=str(refusal))
    replays.schedule(replay.pk)
    return await _answer(request, await Campaign.objects.aget(pk=pk))


async def _answer(request, campaign, form=None, error=""):
    if not request.htmx and form is None and not error:
        return redirect("branches", campaign.pk)
    context = await sync_to_async(replays_context)(campaign, form, error)
    return await sync_to_async(render)(request, "storyteller/_replays.html", context,
                                       status=200 if form is None and not error else 422)


@login_required
@require_GET
def compare(request, pk, replay_pk):
    """Show the replay and the line it played again, turn by turn, with a summary on top."""
    campaign = campaign_views.campaign_for_user(request, pk)
    replay = get_object_or_404(Replay.objects.select_related("branch"), pk=replay_pk, campaign=campaign)
    if not campaign.author_view:  # both lines' states: who is where and believes what, the recorder's events
        return campaign_views.author_only(request, campaign, "The comparison of a replay with its line")
    summary, rows = comparing.compare(replay)
    return render(request, "storyteller/compare.html", {
        "campaign": campaign, "replay": replay, "summary": summary, "rows": rows,
        "original_model": next((row.original.model for row in rows if row.original.model), ""),
        "first_turn": (replay.from_depth + 1) // 2})
