"""The branches page (every line of the story, named, and its tree) and naming a line; thin views."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from campaigns import branchtree, story
from campaigns import views as campaign_views
from campaigns.models import BRANCH_NAME_CHARS, Branch, Replay, SavePoint

from . import replay_views


@login_required
@require_GET
def branches(request, pk):
    campaign = campaign_views.campaign_for_user(request, pk)
    return render(request, "campaigns/branches.html", branches_context(campaign))


def branches_context(campaign, error="", refused=None):
    """Return what the branches page renders: the save points, the lines and their tree, and the replays."""
    lines = branchtree.lines(campaign)
    replayed = dict(Replay.objects.filter(campaign=campaign).values_list("branch_id", "model"))
    return {**replay_views.replays_context(campaign), "campaign": campaign, "lines": lines,
            "line_rows": [(line, replayed.get(line.branch.pk, "")) for line in lines],
            "tree": branchtree.drawing(lines, campaign.head_depth),
            "save_points": SavePoint.objects.filter(campaign=campaign), "name_chars": BRANCH_NAME_CHARS,
            "name_error": error, "refused": refused}


@login_required
@require_POST
def name_branch(request, pk, branch_pk):
    campaign = campaign_views.campaign_for_user(request, pk)
    branch = get_object_or_404(Branch, pk=branch_pk, campaign=campaign)
    try:
        story.name_branch(branch, request.POST.get("name", ""))
    except story.NameRefused as refusal:
        return render(request, "campaigns/branches.html", branches_context(campaign, str(refusal), branch.pk),
                      status=400)
    messages.success(request, f"Line {branch.number} is now called “{branch.name}”." if branch.name
                     else f"Line {branch.number} is called after where it split again.")
    return redirect(reverse("branches", args=[campaign.pk]) + f"#line-{branch.number}")
