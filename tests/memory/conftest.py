import pytest

from campaigns import lineage
from memory import bank
from tests.campaigns.test_lineage import act


def remember_at(campaign, end, text, **fields):
    """Store a summarised memory of the block ending at ``end`` on the campaign's current line."""
    campaign.refresh_from_db()
    node = lineage.path_of(campaign).nodes().get(depth=end)
    [memory] = bank.write(campaign.pk, [bank.Written(max(0, end - 5), end, node.branch_id, text, "test")])
    for name, value in fields.items():
        setattr(memory, name, value)
    if fields:
        memory.save()
    return memory


def play_to(campaign, depth):
    """Act until the head reaches ``depth`` (even)."""
    campaign.refresh_from_db()
    while campaign.head_depth < depth:
        act(campaign, f"step {campaign.head_depth // 2 + 1}")
    return campaign


@pytest.fixture
def long_story(campaign):
    return play_to(campaign, 24)
