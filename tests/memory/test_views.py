"""The memory panel and the admin: list, pin, forget, restore, correct, downgrade, add, rebuild (seed 000 §35-§36)."""

import numpy as np
import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse

from memory import bank
from memory.models import Memory, MemoryVector
from storyteller.steps import memories

from .conftest import play_to, remember_at
from tests.conftest import as_author

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def _authors_view(campaign):
    """The memory panel is the narrator's memory: the author's view, where its tools are."""
    as_author(campaign)


@pytest.fixture
def remembered(campaign):
    play_to(campaign, 12)
    return remember_at(campaign, 5, "Aldric promised to return before dawn.")


def update(client, memory, action, **data):
    url = reverse("memory_update", args=[memory.campaign_id, memory.pk])
    return client.post(url, {"action": action, **data}, **HTMX)


def test_the_page_and_the_fragment_list_this_lines_memories_with_range_authority_and_uses(client_of, remembered):
    page = client_of.get(reverse("memory_panel", args=[remembered.campaign_id])).content.decode()
    assert "<h1>" in page and 'id="memory-panel"' in page
    fragment = client_of.get(reverse("memory_panel", args=[remembered.campaign_id]), **HTMX).content.decode()
    assert "<h1>" not in fragment and fragment.lstrip().startswith('<aside id="memory-panel"')
    assert "Aldric promised to return before dawn." in fragment and "depths 0–5" in fragment
    assert "Accepted story" in fragment and "used 0×" in fragment


def test_the_play_page_loads_the_memory_panel(client_of, campaign):
    page = client_of.get(reverse("play", args=[campaign.pk])).content.decode()
    assert reverse("memory_panel", args=[campaign.pk]) in page


def test_in_the_players_view_the_narrators_memory_is_not_shown(client_of, remembered):
    campaign = remembered.campaign
    campaign.author_view = False
    campaign.save()
    assert 'data-panel="memory"' not in client_of.get(reverse("play", args=[campaign.pk])).content.decode()
    fragment = client_of.get(reverse("memory_panel", args=[campaign.pk]), **HTMX).content.decode()
    assert "Aldric promised" not in fragment and "the author's view" in fragment.replace("&#x27;", "'")
    page = client_of.get(reverse("memory_panel", args=[campaign.pk]))
    assert page.status_code == 403 and "Aldric promised" not in page.content.decode()


def test_pin_forget_restore_and_downgrade_change_only_their_flag(client_of, remembered):
    assert "pinned" in update(client_of, remembered, "pin").content.decode()
    assert Memory.objects.get(pk=remembered.pk).pinned
    update(client_of, remembered, "forget")
    memory = Memory.objects.get(pk=remembered.pk)
    assert memory.forgotten and memory.pinned
    update(client_of, remembered, "restore")
    fragment = update(client_of, remembered, "downgrade").content.decode()
    memory = Memory.objects.get(pk=remembered.pk)
    assert not memory.forgotten and memory.authority == "heuristic"
    assert "[inferred]" in fragment
    assert Memory.objects.count() == 1  # nothing is ever deleted


def test_correcting_the_text_keeps_the_original_and_drops_the_stale_vector(client_of, remembered):
    bank.store_vectors("nomic-embed-text", [(remembered.pk, np.ones(4))])
    fragment = update(client_of, remembered, "edit", text="Aldric promised to return <b>by noon</b>.").content.decode()
    memory = Memory.objects.get(pk=remembered.pk)
    assert memory.text == "Aldric promised to return <b>by noon</b>."
    assert memory.original_text == "Aldric promised to return before dawn."
    assert not MemoryVector.objects.filter(memory=memory).exists()
    assert "&lt;b&gt;by noon&lt;/b&gt;" in fragment and "<b>by noon" not in fragment


def test_a_correction_that_hedges_makes_the_memory_inferred_and_an_empty_one_changes_nothing(client_of, remembered):
    update(client_of, remembered, "edit", text="Aldric probably promised to return.")
    assert Memory.objects.get(pk=remembered.pk).authority == "heuristic"
    fragment = update(client_of, remembered, "edit", text="   ").content.decode()
    assert "Nothing was changed" in fragment and "forget it instead" in fragment
    assert Memory.objects.get(pk=remembered.pk).text == "Aldric probably promised to return."


def test_an_unknown_action_names_the_ones_that_exist(client_of, remembered):
    fragment = update(client_of, remembered, "promote").content.decode()
    assert "unknown action" in fragment and "downgrade" in fragment


def test_a_memory_added_by_hand_is_anchored_at_the_head_with_no_range(client_of, campaign):
    as_author(campaign)
    play_to(campaign, 8)
    campaign.refresh_from_db()
    client_of.post(reverse("memory_add", args=[campaign.pk]), {"text": "The ferryman owes Aldric a favour."}, **HTMX)
    memory = Memory.objects.get()
    assert (memory.branch_id, memory.depth) == (campaign.head_branch_id, 8)
    assert memory.source_start is None and memory.origin == "person"
    fragment = client_of.post(reverse("memory_add", args=[campaign.pk]), {"text": ""}, **HTMX).content.decode()
    assert "Nothing was added" in fragment and Memory.objects.count() == 1


def test_the_wrong_method_is_refused(client_of, remembered):
    assert client_of.get(reverse("memory_update", args=[remembered.campaign_id, remembered.pk])).status_code == 405
    assert client_of.get(reverse("memory_add", args=[remembered.campaign_id])).status_code == 405
    assert client_of.post(reverse("memory_panel", args=[remembered.campaign_id])).status_code == 405


def test_another_users_memories_are_404(client, outsider, remembered):
    client.force_login(outsider)
    assert client.get(reverse("memory_panel", args=[remembered.campaign_id])).status_code == 404
    assert update(client, remembered, "forget").status_code == 404
    assert client.post(reverse("memory_add", args=[remembered.campaign_id]), {"text": "x"}).status_code == 404
    assert client.post(reverse("memory_rebuild", args=[remembered.campaign_id])).status_code == 404
    assert not Memory.objects.get(pk=remembered.pk).forgotten


@pytest.mark.django_db(transaction=True)
def test_rebuilding_embeddings_replaces_every_vector(client_of, campaign, narrator_server):
    as_author(campaign)
    play_to(campaign, 12)
    memory = remember_at(campaign, 5, "Aldric promised to return before dawn.")
    assert async_to_sync(memories.embed_missing)(campaign) == (1, "")
    first = MemoryVector.objects.get(memory=memory).created_at
    fragment = client_of.post(reverse("memory_rebuild", args=[campaign.pk]), **HTMX).content.decode()
    assert "Rebuilt 1 memory embedding." in fragment
    assert MemoryVector.objects.get(memory=memory).created_at > first


def test_the_admin_lists_memories_and_keeps_the_original_when_text_is_corrected(admin_client, remembered):
    listing = admin_client.get(reverse("admin:memory_memory_changelist")).content.decode()
    assert "Aldric promised to return before dawn." in listing
    url = reverse("admin:memory_memory_change", args=[remembered.pk])
    admin_client.post(url, {"text": "Aldric swore to return before dawn.", "authority": "accepted_story",
                            "pinned": "on", "enabled": "on"})
    memory = Memory.objects.get(pk=remembered.pk)
    assert memory.text == "Aldric swore to return before dawn." and memory.pinned
    assert memory.original_text == "Aldric promised to return before dawn."


def test_the_admin_never_promotes_an_inferred_memory(admin_client, remembered):
    remembered.authority = "heuristic"
    remembered.save()
    url = reverse("admin:memory_memory_change", args=[remembered.pk])
    admin_client.post(url, {"text": remembered.text, "authority": "accepted_story", "enabled": "on"})
    assert Memory.objects.get(pk=remembered.pk).authority == "heuristic"
