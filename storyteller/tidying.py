"""Tidying campaigns away: archive one out of the list and back, or delete one with everything it holds.

Deleting is the one way a campaign's rows go (issue 25, point 6). It is
here, in the pipeline, because a campaign's rows live in every app: the
story and its state (campaigns), memories, summaries and the recall index
(memory), imported files and their passages (knowledge), and a long run's
report on disk (diagnostics). Every row goes in one transaction: the
foreign keys cascade, and the two per-campaign counters memory keeps by
plain id are removed beside them. Files go after the commit. The
in-process caches (a campaign's index of memories, of passages) are
bounded and least-recently-used, and ids are never reused, so a deleted
campaign's entry ages out without being looked up again.
"""

from django.db import transaction
from django.utils import timezone

from campaigns.models import Campaign
from knowledge.models import Source
from memory.models import BankStamp, Memory, RecallSync

from .diagnostics import long_run
from .steps import postturn


class DeleteRefused(Exception):
    """The campaign was not deleted; the message says why and what to do. Nothing was removed."""


def archive(campaign):
    """Take ``campaign`` out of the list, keeping every part of it; ``unarchive`` brings it back."""
    Campaign.objects.filter(pk=campaign.pk).update(archived_at=timezone.now())


def unarchive(campaign):
    Campaign.objects.filter(pk=campaign.pk).update(archived_at=None)


def delete(campaign, name):
    """Delete ``campaign`` and every row and file of it, when ``name`` is its title, typed as confirmation.

    Refused while the work after a turn is still running for it (that work
    would write to rows that are gone); the person waits a moment and asks
    again.
    """
    if " ".join(str(name or "").split()) != " ".join(campaign.title.split()):
        raise DeleteRefused(f"Type the campaign's name, “{campaign.title}”, exactly as it is written to delete it; "
                            "nothing was deleted.")
    if postturn.status(campaign).state == "running":
        raise DeleteRefused("The work after the last turn is still running for this campaign; wait until it is "
                            "done (a few seconds) and delete it again. Nothing was deleted.")
    pk = campaign.pk
    with transaction.atomic():
        Campaign.every.filter(pk=pk).delete()
        # Kept by plain id, not a foreign key (their triggers fire as the memories go), so removed here.
        BankStamp.objects.filter(campaign_id=pk).delete()
        RecallSync.objects.filter(campaign_id=pk).delete()
        transaction.on_commit(lambda: long_run.report_path(pk).unlink(missing_ok=True))


def contents(campaign):
    """Return what deleting ``campaign`` removes, counted for the page that asks to confirm it."""
    return {"turns": campaign.nodes.filter(role="player").count(), "branches": campaign.branches.count(),
            "save_points": campaign.save_points.count(), "memories": Memory.objects.filter(campaign=campaign).count(),
            "files": Source.objects.filter(campaign=campaign).count(),
            "records": campaign.state_records.count()}
