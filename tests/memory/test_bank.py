"""The bank's write path: rows kept on eviction, a whole campaign still deletable, the cursor per line."""

from campaigns import lineage, story
from campaigns.models import Campaign
from memory import bank
from memory.models import Memory
from tests.campaigns.test_lineage import act

from .conftest import play_to, remember_at


def test_a_campaign_with_memories_can_still_be_deleted_whole(long_story):
    remember_at(long_story, 5, "Aldric promised to return before dawn.")
    Campaign.objects.get(pk=long_story.pk).delete()
    assert not Memory.objects.exists()


def test_eviction_marks_rows_forgotten_and_never_deletes_them(long_story):
    for end in (5, 11, 17, 23):
        remember_at(long_story, end, f"Memory ending at {end}.")
    evicted = bank.evict(long_story.pk, capacity=2)
    assert len(evicted) == 2 and Memory.objects.count() == 4
    assert set(Memory.objects.filter(forgotten=True).values_list("id", flat=True)) == set(evicted)


def test_the_cursor_follows_the_line_so_a_diverged_line_writes_its_own_memories(long_story):
    remember_at(long_story, 5, "Early.")
    remember_at(long_story, 17, "Later, on the first line.")
    path = lineage.path_of(long_story)
    assert bank.cursor(long_story.pk, path) == 18
    for _ in range(5):
        story.undo(long_story)  # head 14
    act(long_story, "another way")
    long_story.refresh_from_db()
    assert bank.cursor(long_story.pk, lineage.path_of(long_story)) == 6


def test_use_is_counted_with_its_time(long_story):
    memory = remember_at(long_story, 5, "Aldric promised to return before dawn.")
    bank.record_use([memory.pk])
    bank.record_use([memory.pk])
    memory.refresh_from_db()
    assert memory.use_count == 2 and memory.last_used_at is not None


def test_a_memory_typed_by_hand_is_classified_by_its_wording_too(campaign):
    play_to(campaign, 4)
    campaign.refresh_from_db()
    assert bank.add_by_hand(campaign, "The abbot probably lied.").authority == "heuristic"
