"""The long-run report page: what a long run played, kept and recalled, for the campaign's owner."""

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import render
from django.views.decorators.http import require_GET

from campaigns.views import campaign_for_user

from . import long_run


@login_required
@require_GET
def long_run_report(request, pk):
    campaign = campaign_for_user(request, pk)
    run = long_run.load(campaign.pk)
    if run is None or run.get("campaign") != campaign.pk:
        raise Http404("This campaign has no long-run report; manage.py long_run makes one.")
    return render(request, "storyteller/long_run.html", long_run.page(campaign, run))
