"""Archive, bring back and delete a campaign from the list (``tidying`` does each); thin views."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from campaigns import seating

from . import tidying


def _campaign_for_user(request, pk):
    """Return the person's campaign ``pk``, archived or not; another person's (a seat's too) is a 404."""
    return seating.owned(request, pk)


@login_required
@require_POST
def archive(request, pk):
    campaign = _campaign_for_user(request, pk)
    tidying.archive(campaign)
    messages.success(request, f"“{campaign.title}” is archived: out of the list, kept whole. Bring it back from "
                              "Archived below.")
    return redirect("campaign_list")


@login_required
@require_POST
def unarchive(request, pk):
    campaign = _campaign_for_user(request, pk)
    tidying.unarchive(campaign)
    messages.success(request, f"“{campaign.title}” is back in the list.")
    return redirect("campaign_list")


@login_required
@require_http_methods(["GET", "POST"])
def delete(request, pk):
    """Ask for the campaign's name, then delete it with everything it holds."""
    campaign = _campaign_for_user(request, pk)
    error = ""
    if request.method == "POST":
        try:
            tidying.delete(campaign, request.POST.get("name", ""))
        except tidying.DeleteRefused as refusal:
            error = str(refusal)
        else:
            messages.success(request, f"“{campaign.title}” is deleted, with everything it held.")
            return redirect("campaign_list")
    return render(request, "campaigns/campaign_delete.html", {"campaign": campaign, "error": error,
                                                              "contents": tidying.contents(campaign)},
                  status=400 if error else 200)
