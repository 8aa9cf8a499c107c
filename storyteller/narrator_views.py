"""The built-in narrator on the pages: whether it is ready, running or refused, the self-check, starting it again.

The play page's banner and the model settings page's section poll while the
narrator is being prepared, so it takes over on the page as soon as its
build is done, without a reload. Async views: asking the model server, or
the narrator's process, never holds the database's thread.
"""

import asyncio

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from campaigns import seating

from . import doctor, llm
from .llm import preparing, supervisor


async def banner_context(narrator):
    """Return what the play page's narrator banner needs, for ``narrator``."""
    if narrator.api != "builtin":
        return {"narrator": narrator}
    return {"narrator": narrator, "build": await asyncio.to_thread(preparing.state), "refused": supervisor.refused()}


@login_required
@require_GET
async def narrator_banner(request, pk):
    """The play page's line about who narrates; polled while the built-in narrator is being prepared."""
    user = await request.auser()
    campaign = (await seating.areach(user, pk, owner=True)).campaign
    context = await banner_context(await llm.anarrator_for(campaign.narrator_model or None))
    return await sync_to_async(render)(request, "campaigns/_narrator_banner.html", {"campaign": campaign, **context})


@login_required
@require_GET
@seating.hosts_only
async def builtin_status(request):
    """The model settings page's section on the built-in narrator: its build, its process, its memory."""
    return await sync_to_async(render)(request, "storyteller/_builtin_narrator.html", await builtin_context())


@login_required
@require_POST
@seating.hosts_only
async def restart_builtin(request):
    """Start the built-in narrator again after it stopped restarting itself: the person asked for it."""
    supervisor.allow_restart()
    try:
        await asyncio.to_thread(supervisor.start)
    except llm.NarratorError:
        pass  # the section says why
    return await sync_to_async(render)(request, "storyteller/_builtin_narrator.html", await builtin_context())


@login_required
@require_POST
@seating.hosts_only
async def self_check(request):
    """Run the self-check (``manage.py doctor``) and show its findings."""
    findings = await doctor.acheck()
    return await sync_to_async(render)(request, "storyteller/_self_check.html", {"findings": findings})


async def builtin_context():
    """Return what the model settings page's section on the built-in narrator needs."""
    return {"builtin": await asyncio.to_thread(doctor.builtin_report)}
