"""The memory panel: see what the narrator may remember on this line, and correct it (seed 000 §35-§36).

Every change goes through ``memory.bank``: pin, forget and restore, disable,
downgrade to heuristic, correct the text (the original is kept), add a memory
by hand at the current position. The panel is one fragment, served alone to
htmx and inside a page otherwise, and re-rendered after every change.
"""

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET, require_POST

from campaigns import lineage
from campaigns.models import Node
from campaigns.views import author_only, campaign_for_user

from . import bank, checkpoints
from .models import Checkpoint, CheckpointRun, Memory, MemoryRun

# What each button asks of bank.set_flags.
FLAGS = {
    "pin": {"pinned": True},
    "unpin": {"pinned": False},
    "forget": {"forgotten": True},
    "restore": {"forgotten": False},
    "disable": {"enabled": False},
    "enable": {"enabled": True},
    "downgrade": {"authority": Memory.Authority.HEURISTIC},
}


def panel_context(campaign, *, message="", error=""):
    """Return what ``memory/_memory_panel.html`` renders: this line's memories and the last memory pass."""
    path = lineage.path_of(campaign)
    on_line = Memory.objects.filter(path.clause(), campaign=campaign).order_by("-depth", "-id")
    head = path.nodes().filter(depth=campaign.head_depth, role=Node.Role.NARRATOR).first()
    return {
        "campaign": campaign,
        "memories": on_line,
        "elsewhere": Memory.objects.filter(campaign=campaign).exclude(pk__in=on_line.values("pk")).count(),
        "run": MemoryRun.objects.filter(node=head).first() if head else None,
        "memory_message": message,
        "memory_error": error,
    }


def render_panel(request, campaign, **extra):
    """Return the panel fragment for htmx, or the memory page around it: the narrator's memory is the author's
    view (it is written from the story for the narrator, and the narrator knows more than the player)."""
    campaign.refresh_from_db()
    if not campaign.author_view:
        if request.htmx:
            return render(request, "memory/_memory_panel.html", {"campaign": campaign, "player_view": True})
        return author_only(request, campaign, "The narrator's memory")
    template = "memory/_memory_panel.html" if request.htmx else "memory/memories.html"
    return render(request, template, {**panel_context(campaign, **extra), "view": {"author": True}})


@login_required
@require_GET
def memory_panel(request, pk):
    return render_panel(request, campaign_for_user(request, pk))


@login_required
@require_POST
def memory_add(request, pk):
    campaign = campaign_for_user(request, pk)
    try:
        bank.add_by_hand(campaign, request.POST.get("text", ""))
    except ValueError as error:
        return render_panel(request, campaign, error=f"Nothing was added: {error}")
    return render_panel(request, campaign, message="Added at the current position; the narrator may recall it "
                                                    "from the next turn on this line.")


@login_required
@require_POST
def memory_update(request, pk, memory_pk):
    campaign = campaign_for_user(request, pk)
    memory = get_object_or_404(Memory, pk=memory_pk, campaign=campaign)
    action = request.POST.get("action", "")
    try:
        if action == "edit":
            bank.edit_text(memory, request.POST.get("text", ""))
        elif action in FLAGS:
            bank.set_flags(memory, **FLAGS[action])
        else:
            return render_panel(request, campaign, error=f"Nothing was changed: unknown action {action!r}; "
                                                         f"use one of edit, {', '.join(FLAGS)}.")
    except ValueError as error:
        return render_panel(request, campaign, error=f"Nothing was changed: {error}")
    return render_panel(request, campaign, message=f"Memory #{memory.pk}: {action} done.")


def plot_context(campaign, stable_prefix_hash, *, message="", error=""):
    """Return what ``memory/_plot_panel.html`` renders: this line's summary, its anchor and range, and why others
    on the line are not used. ``stable_prefix_hash`` is the prefix a build would send now (the pipeline's to
    compute), so the panel refuses what the next turn would refuse."""
    path = lineage.path_of(campaign)
    lookup = checkpoints.look_up(path, stable_prefix_hash, fresh=True)  # a person looking at it sees it checked now
    head = path.nodes().filter(depth=campaign.head_depth, role=Node.Role.NARRATOR).first()
    return {
        "campaign": campaign,
        "summary": lookup.checkpoint,
        "rejected": lookup.rejected,
        "elsewhere": Checkpoint.objects.filter(campaign=campaign).exclude(path.clause()).count(),
        "run": CheckpointRun.objects.filter(node=head).first() if head else None,
        "plot_message": message,
        "plot_error": error,
    }


def render_plot(request, campaign, stable_prefix_hash, **extra):
    """Return the Plot panel fragment for htmx, or the plot page around it (the author's view: with its workings)."""
    template = "memory/_plot_panel.html" if request.htmx else "memory/plot.html"
    return render(request, template, {**plot_context(campaign, stable_prefix_hash, **extra),
                                      "view": {"author": campaign.author_view}})
