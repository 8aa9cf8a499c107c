"""The in-process caches over the database notice what another process wrote (issue 31).

Each cache is kept per process and stamped by a cheap read of the database
on every use (docs/decisions.md, "Per-process state across processes"):
here a real other process (tests/elsewhere.py) writes through the app's own
write path, and this process's next read must show it — which it would not
if a cache trusted what it had, as a thread sharing the cache could not show.
"""

import pytest

from campaigns import lineage
from campaigns.models import Node
from campaigns.state import apply_events, state_at
from campaigns.state.minds import whereabouts
from knowledge import retrieval
from memory import recall_index
from memory.models import RecallItem
from storyteller.context import memories as memory_section
from tests.campaigns.test_state import ev
from tests.elsewhere import run_elsewhere

pytestmark = pytest.mark.django_db(transaction=True)


def head(campaign):
    campaign.refresh_from_db()
    return Node.objects.get(branch_id=campaign.head_branch_id, depth=campaign.head_depth)


def test_the_recall_pool_shows_rows_another_process_indexed_or_rewrote(campaign):
    node = head(campaign)
    anchor = (node.branch_id, node.depth)
    recall_index.index(campaign.pk, [recall_index.Entry("perception:e1:mara", "perception", "mara", "The lantern went dark", anchor)])
    path = lineage.path_of(campaign)
    assert [item.text for item in recall_index.items_at(campaign.pk, path, "mara")] == ["The lantern went dark"]

    run_elsewhere(f"""
        from memory import recall_index
        anchor = {anchor!r}
        recall_index.index({campaign.pk}, [
            recall_index.Entry("perception:e1:mara", "perception", "mara", "The lantern was relit", anchor),
            recall_index.Entry("perception:e2:mara", "perception", "mara", "Edrin left by the back door", anchor)])
    """)

    assert sorted(item.text for item in recall_index.items_at(campaign.pk, path, "mara")) == [
        "Edrin left by the back door", "The lantern was relit"]


def test_the_recall_vectors_show_what_another_process_embedded(campaign):
    node = head(campaign)
    anchor = (node.branch_id, node.depth)
    recall_index.index(campaign.pk, [recall_index.Entry("perception:e1:mara", "perception", "mara", "The lantern went dark", anchor),
                                     recall_index.Entry("perception:e2:mara", "perception", "mara", "Edrin left", anchor)])
    first, second = RecallItem.objects.filter(campaign=campaign).order_by("id").values_list("id", flat=True)
    recall_index.store_vectors(campaign.pk, "nomic-embed-text", [(first, [1.0, 0.0, 0.0])])
    matrix, rows = recall_index._matrix_for(campaign.pk, "mara", "nomic-embed-text", [first, second])
    assert rows.tolist() == [0, -1]

    run_elsewhere(f"""
        from memory import recall_index
        recall_index.store_vectors({campaign.pk}, "nomic-embed-text", [({second}, [0.0, 1.0, 0.0])])
    """)

    matrix, rows = recall_index._matrix_for(campaign.pk, "mara", "nomic-embed-text", [first, second])
    assert -1 not in rows.tolist()
    assert matrix[rows[1]].tolist() == [0.0, 1.0, 0.0]


def test_the_state_shows_events_another_process_applied(campaign):
    node = head(campaign)
    apply_events(node, [ev("introduce", "Mara", "character", "a guarded archivist")], source="correction")
    path = lineage.path_of(campaign)
    assert state_at(path, campaign).entity("mara") is not None
    assert state_at(path, campaign).entity("ghost") is None  # the base is cached now

    run_elsewhere(f"""
        from campaigns.models import Node
        from campaigns.state import apply_events
        node = Node.objects.get(pk={node.pk})
        apply_events(node, [{{"type": "introduce", "subject": "Ghost", "object": "character", "value": "",
                              "narrator_only": False}}], source="correction")
    """)

    assert state_at(path, campaign).entity("ghost") is not None


def test_the_whereabouts_show_what_another_process_recorded(campaign):
    node = head(campaign)
    apply_events(node, [ev("introduce", "Mara", "character"), ev("introduce", "kitchen", "place"),
                        ev("introduce", "iron key", "item")], source="correction")
    path = lineage.path_of(campaign)
    whereabouts.minds_at(path, campaign)
    version = whereabouts._lines[campaign.pk][-1].version

    run_elsewhere(f"""
        from campaigns.models import Node
        from campaigns.state import apply_events
        node = Node.objects.get(pk={node.pk})
        apply_events(node, [{{"type": "introduce", "subject": "Ghost", "object": "character", "value": "",
                              "narrator_only": False}}], source="correction")
    """)

    whereabouts.minds_at(path, campaign)
    assert whereabouts._lines[campaign.pk][-1].version > version, "the other process's records were not read"


def test_the_library_shows_a_source_another_process_imported_or_switched_off(campaign):
    assert retrieval.library_index(campaign.pk).sources == {}

    run_elsewhere(f"""
        from campaigns.models import Campaign
        from knowledge.importer import import_source
        import_source(Campaign.objects.get(pk={campaign.pk}), "harbour.md", b"# The harbour\\n\\nGulls over the quay.",
                      "reference")
    """)

    (source_id,) = retrieval.library_index(campaign.pk).sources
    assert retrieval.library_index(campaign.pk).sources[source_id].enabled

    run_elsewhere(f"""
        from knowledge.models import Source
        source = Source.objects.get(pk={source_id})
        source.enabled = False
        source.save()
    """)

    assert not retrieval.library_index(campaign.pk).sources[source_id].enabled


def test_the_memory_bank_shows_a_memory_another_process_wrote(campaign):
    node = head(campaign)
    assert memory_section.bank_index(campaign.pk) is memory_section.bank_index(campaign.pk)  # kept between reads
    before = memory_section.bank_index(campaign.pk).generation

    run_elsewhere(f"""
        from memory.models import Memory
        Memory.objects.create(campaign_id={campaign.pk}, branch_id={node.branch_id}, depth={node.depth},
                              text="The abbey bell is cracked.", authority=Memory.Authority.HEURISTIC)
    """)

    assert memory_section.bank_index(campaign.pk).generation > before
