"""Tidying campaigns away (issue 25, point 6): archive out of the list and back with one click; delete asks for
the name and removes every row of the campaign in one transaction, and its files, touching nobody else's."""

import json

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.urls import reverse

from campaigns import lineage, notes, story
from campaigns.models import Campaign, CanonRule
from knowledge.importer import embed_source
from memory import bank
from memory.models import RecallItem
from storyteller import tidying
from storyteller.diagnostics import long_run
from storyteller.steps import compaction
from tests.knowledge.conftest import import_fixture
from tests.storyteller.test_minds_step import HIDING, TURN, kitchen
from tests.storyteller.test_recorder import play

# FTS5 keeps its index in shadow tables whose pages are merged as it likes: the virtual table's own count is
# what it holds.
SHADOWS = ("_data", "_idx", "_docsize", "_config", "_content")


def counts():
    """Return the row count of every table of the database (FTS5 tables by their own count)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        tables = [name for (name,) in cursor.fetchall() if not name.endswith(SHADOWS)]
        found = {}
        for table in tables:
            cursor.execute(f'SELECT count(*) FROM "{table}"')
            found[table] = cursor.fetchone()[0]
    return found


async def whole_campaign(owner, server, title):
    """A campaign with a world, a story on three branches, memories and their vectors, the minds' recall index,
    knowledge files with passages and vectors, a save point, a summary, an author's note and a long run's file."""
    campaign = await sync_to_async(kitchen)(owner, title=title)
    server.script(TURN)
    server.script_minds(HIDING)
    await play(campaign, "I listen at the door.")
    server.script("Mara pours the tea.")
    await play(campaign, "I knock.")

    @sync_to_async
    def the_rest():
        campaign.refresh_from_db()
        story.undo(campaign)
        campaign.refresh_from_db()
        return campaign

    await the_rest()
    server.script("You walk away.")
    await play(campaign, "I leave.")

    @sync_to_async
    def more():
        campaign.refresh_from_db()
        for name in ("canon.md", "reference.md"):
            embed_source(import_fixture(campaign, name))
        memory = bank.add_by_hand(campaign, "Mara keeps the key in the teapot.")
        bank.store_vectors("nomic-embed-text", [(memory.pk, [0.5] * 64)])
        bank.record_use([memory.pk])
        CanonRule.objects.create(campaign=campaign, text="The teapot is never moved.")
        story.create_save_point(campaign, "at the door")
        compaction.write_by_hand(campaign, "Edrin listened at the kitchen door while Mara hid the key.")
        notes.save_note(campaign, text="Keep it quiet.", depth=1, interval=1, role="system", branch_only=True)
        long_run.runs_dir().mkdir(parents=True, exist_ok=True)
        long_run.report_path(campaign.pk).write_text(json.dumps({"campaign": campaign.pk}))
        return campaign

    return await more()


@pytest.mark.django_db(transaction=True)
async def test_delete_removes_every_row_and_file_of_the_campaign_and_no_one_elses(owner, outsider, narrator_server):
    theirs = await whole_campaign(outsider, narrator_server, "Their Kitchen")
    before = await sync_to_async(counts)()
    mine = await whole_campaign(owner, narrator_server, "My Kitchen")
    during = await sync_to_async(counts)()
    grown = sorted(table for table in during if during[table] > before[table])
    for table in ("campaigns_node", "campaigns_branch", "campaigns_stateevent", "campaigns_staterecord",
                  "campaigns_savepoint", "campaigns_authornote", "campaigns_canonrule", "campaigns_recorderrun",
                  "campaigns_contextsnapshot", "memory_memory", "memory_memoryvector", "memory_bankstamp",
                  "memory_checkpoint", "memory_recallitem", "memory_recallitem_fts", "memory_recallsync",
                  "knowledge_source", "knowledge_passage", "knowledge_passage_fts"):
        assert table in grown, f"the campaign has rows in {table}, so the test counts their going"
    assert await sync_to_async(RecallItem.objects.filter(campaign=mine).count)() > 0

    with pytest.raises(tidying.DeleteRefused, match="Type the campaign's name, “My Kitchen”, exactly"):
        await sync_to_async(tidying.delete)(mine, "my kitchen?")
    assert await sync_to_async(counts)() == during, "a wrong name deletes nothing"

    await sync_to_async(tidying.delete)(mine, "My Kitchen")
    after = await sync_to_async(counts)()
    assert {t: (before[t], after[t]) for t in after if after[t] != before[t]} == {}, "every row of it is gone"
    assert not long_run.report_path(mine.pk).exists() and long_run.report_path(theirs.pk).exists()
    assert await Campaign.objects.filter(pk=theirs.pk).aexists()
    path = await sync_to_async(lineage.path_of)(await Campaign.objects.aget(pk=theirs.pk))
    assert await sync_to_async(path.nodes().count)() == 5, "their story is whole"


def test_archive_takes_a_campaign_out_of_the_list_and_one_click_brings_it_back(client_of, campaign):
    listed = client_of.get(reverse("campaign_list")).content.decode()
    assert f'id="campaign-{campaign.pk}"' in listed and "Archived (" not in listed
    response = client_of.post(reverse("archive_campaign", args=[campaign.pk]))
    assert response.status_code == 302 and response.url == reverse("campaign_list")
    listed = client_of.get(reverse("campaign_list")).content.decode()
    assert f'id="campaign-{campaign.pk}"' not in listed and f'id="archived-{campaign.pk}"' in listed
    assert "is archived: out of the list, kept whole" in listed and "Archived (1)" in listed
    assert client_of.get(reverse("play", args=[campaign.pk])).status_code == 200, "kept whole, still playable"
    client_of.post(reverse("unarchive_campaign", args=[campaign.pk]))
    listed = client_of.get(reverse("campaign_list")).content.decode()
    assert f'id="campaign-{campaign.pk}"' in listed and "Archived (" not in listed and "is back in the list" in listed


def test_delete_asks_for_the_name_and_a_wrong_one_deletes_nothing(client_of, campaign):
    url = reverse("delete_campaign", args=[campaign.pk])
    page = client_of.get(url).content.decode()
    assert "Type the campaign's name, <strong>The Silver Key</strong>, to delete it" in page
    assert "its story on every branch (0 turns on 1 branch)" in page
    wrong = client_of.post(url, {"name": "The Silver"})
    assert wrong.status_code == 400 and "exactly as it is written" in wrong.content.decode()
    assert Campaign.objects.filter(pk=campaign.pk).exists()
    done = client_of.post(url, {"name": "The Silver Key"})
    assert done.status_code == 302 and not Campaign.objects.filter(pk=campaign.pk).exists()
    assert "“The Silver Key” is deleted, with everything it held." in client_of.get(
        reverse("campaign_list")).content.decode()


def test_another_persons_campaign_cannot_be_archived_or_deleted_and_a_get_changes_nothing(client, outsider,
                                                                                           campaign):
    client.force_login(outsider)
    for name in ("archive_campaign", "unarchive_campaign", "delete_campaign"):
        assert client.post(reverse(name, args=[campaign.pk]), {"name": campaign.title}).status_code == 404
    assert client.get(reverse("delete_campaign", args=[campaign.pk])).status_code == 404
    client.force_login(campaign.owner)
    assert client.get(reverse("archive_campaign", args=[campaign.pk])).status_code == 405
    campaign.refresh_from_db()
    assert campaign.archived_at is None and Campaign.objects.filter(pk=campaign.pk).exists()
