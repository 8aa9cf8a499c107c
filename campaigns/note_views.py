"""The author's note panel of the play page: the note this line of the story is given, and the form that sets it.

One fragment, served alone to htmx and inside a page otherwise, as the
other panels; saving answers with the panel again. The note is campaign
configuration, not story: it changes no node, and the next turn reads it.
"""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from . import lineage, notes
from .forms import AuthorNoteForm
from .models import AuthorNote
from .views import campaign_for_user


def note_panel_context(campaign, form=None, *, message=""):
    """Return what ``campaigns/_note_panel.html`` renders: the note in effect, its next turn, and the form."""
    note = notes.note_for(lineage.path_of(campaign))
    own = note is not None and note.branch_id is not None and note.branch_id == campaign.head_branch_id
    turn = campaign.turn_count + 1
    if form is None:
        row = AuthorNote(text=note.text, depth=note.depth, interval=note.interval, role=note.role) if note else None
        form = AuthorNoteForm(instance=row, initial={"branch_only": own})
    return {"campaign": campaign, "note": note, "own_branch_note": own, "form": form, "note_message": message,
            "next_turn": note.next_turn(turn) if note else None, "inherited": note is not None and
            note.branch_id is not None and not own}


def render_note_panel(request, campaign, form=None, **extra):
    template = "campaigns/_note_panel.html" if request.htmx else "campaigns/note.html"
    return render(request, template, note_panel_context(campaign, form, **extra))


@login_required
@require_GET
def note_panel(request, pk):
    return render_note_panel(request, campaign_for_user(request, pk))


@login_required
@require_POST
def note_save(request, pk):
    """Save the note (the campaign's, or only this branch's); ``remove`` takes this branch's own note away."""
    campaign = campaign_for_user(request, pk)
    if request.POST.get("remove"):
        notes.remove_branch_note(campaign, campaign.head_branch_id)
        return render_note_panel(request, campaign, message="This branch now follows the campaign's note.")
    form = AuthorNoteForm(request.POST)
    if not form.is_valid():
        return render_note_panel(request, campaign, form)
    notes.save_note(campaign, branch_only=form.cleaned_data["branch_only"],
                    **{name: form.cleaned_data[name] for name in ("text", "depth", "interval", "role")})
    where = "this branch" if form.cleaned_data["branch_only"] else "the campaign"
    return render_note_panel(request, campaign, message=f"Saved for {where}; the narrator is given it from the next "
                                                        "turn it is due.")
