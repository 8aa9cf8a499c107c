"""The author's note of a line of the story: the campaign's, or the one its branch (or a branch it grew from) has.

A note set "for this branch only" belongs to the head's branch; every
branch grown from it later (a retry, an edit, a turn after an undo) keeps
it, as it keeps the story before it. Other branches keep the campaign's.
"""

from dataclasses import dataclass

from django.db import transaction

from .models import AuthorNote, Branch


@dataclass(frozen=True)
class Note:
    text: str
    depth: int
    interval: int
    role: str
    branch_id: int | None  # the branch whose own note it is; None: the campaign's

    def due(self, turn):
        """Return whether the note goes into the prompt of turn number ``turn`` (1 for the first)."""
        return bool(self.text.strip()) and self.interval > 0 and turn % self.interval == 0

    def next_turn(self, turn):
        """Return the first turn from ``turn`` on that is given the note, or None when none is."""
        if not self.text.strip() or self.interval <= 0:
            return None
        return turn + (-turn) % self.interval


def note_for(path):
    """Return the Note that holds at the end of ``path`` (the deepest branch's own first), or None."""
    notes = {note.branch_id: note for note in AuthorNote.objects.filter(campaign_id=path.campaign_id)}
    if not notes:
        return None
    for branch_id in _branches_up(path):
        if branch_id in notes:
            return _note(notes[branch_id])
    return _note(notes[None]) if None in notes else None


def _branches_up(path):
    """Return the head's branch and each branch it grew from, deepest first."""
    parents = dict(Branch.objects.filter(campaign_id=path.campaign_id).values_list("pk", "parent_id"))
    found, branch = [], path.head_branch_id
    while branch is not None and branch not in found:
        found.append(branch)
        branch = parents.get(branch)
    return found


def _note(row):
    return Note(row.text, row.depth, row.interval, row.role, row.branch_id)


def save_note(campaign, *, text, depth, interval, role, branch_only):
    """Save the campaign's note, or (``branch_only``) the head branch's own; return the row."""
    branch = campaign.head_branch if branch_only else None
    with transaction.atomic():
        note, _ = AuthorNote.objects.update_or_create(
            campaign=campaign, branch=branch,
            defaults={"text": text.strip(), "depth": depth, "interval": interval, "role": role})
    return note


def remove_branch_note(campaign, branch_id):
    """Remove a branch's own note: the line is given the campaign's (or an older branch's) again."""
    AuthorNote.objects.filter(campaign=campaign, branch_id=branch_id).delete()
