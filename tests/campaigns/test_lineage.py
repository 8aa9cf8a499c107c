"""The story tree: undo, redo, divergence, retry as sibling, save points — nothing ever deleted."""

import pytest

from campaigns import lineage, story
from campaigns.models import Campaign, Node
from storyteller.context import node_tokens


def reply(text):
    return story.Reply(text=text, tokens=node_tokens("narrator", "", text), report={}, model="test", api="test")


def act(campaign, text, answer=None):
    """Commit a turn at the current head, as the turn pipeline does after the model answers."""
    campaign.refresh_from_db()
    story.commit_turn(
        campaign.pk,
        (campaign.head_branch_id, campaign.head_depth),
        story.PlayerAction(mode="do", text=text, tokens=node_tokens("player", "do", text)),
        reply(answer or f"reply to {text}"),
    )
    campaign.refresh_from_db()
    return campaign


def retry(campaign, answer):
    campaign.refresh_from_db()
    story.commit_retry(campaign.pk, (campaign.head_branch_id, campaign.head_depth), reply(answer))
    campaign.refresh_from_db()


def texts(campaign):
    return [node.text for node in lineage.path_of(campaign).nodes()]


@pytest.fixture
def played(campaign):
    act(campaign, "open the gate", "The gate creaks open.")
    act(campaign, "enter the chapel", "Candles gutter in the chapel.")
    return campaign


def test_turns_are_addressed_by_depth_opening_zero_then_action_and_reply(played):
    nodes = list(lineage.path_of(played).nodes())
    assert [(n.depth, n.role) for n in nodes] == [
        (0, "opening"), (1, "player"), (2, "narrator"), (3, "player"), (4, "narrator"),
    ]
    assert played.head_depth == 4


def test_undo_moves_the_head_back_one_turn_and_deletes_nothing(played):
    before = Node.objects.count()
    assert story.undo(played)
    assert played.head_depth == 2
    assert "Candles gutter in the chapel." not in texts(played)
    assert Node.objects.count() == before


def test_undo_at_the_opening_does_nothing(campaign):
    assert not story.undo(campaign)
    assert campaign.head_depth == 0


def test_redo_returns_to_the_undone_turn(played):
    story.undo(played)
    assert lineage.can_redo(played)
    assert story.redo(played)
    assert texts(played)[-1] == "Candles gutter in the chapel."
    assert not lineage.can_redo(played)
    assert not story.redo(played)


def test_acting_after_undo_diverges_onto_a_new_branch_keeping_the_old_one(played):
    old_branch = played.head_branch_id
    story.undo(played)
    act(played, "climb the bell tower", "The bells hang silent.")
    assert played.head_branch_id != old_branch
    assert texts(played)[-2:] == ["climb the bell tower", "The bells hang silent."]
    assert "enter the chapel" not in texts(played)
    # The abandoned line is still stored and reachable by switching to it.
    story.switch_branch(played, played.head_branch.parent)
    assert texts(played)[-1] == "Candles gutter in the chapel."


def test_redo_after_diverging_follows_the_new_branch_not_the_abandoned_one(played):
    story.undo(played)
    act(played, "climb the bell tower", "The bells hang silent.")
    story.undo(played)
    story.redo(played)
    assert texts(played)[-1] == "The bells hang silent."


def test_retry_makes_a_sibling_reply_on_a_new_branch_and_keeps_the_old_reply(played):
    old = lineage.path_of(played).nodes().last()
    retry(played, "The chapel is dark and cold.")
    path_nodes = list(lineage.path_of(played).nodes())
    assert path_nodes[-1].text == "The chapel is dark and cold."
    assert path_nodes[-1].depth == old.depth
    # Same player action: the sibling shares its parent turn.
    assert path_nodes[-2].text == "enter the chapel"
    assert Node.objects.filter(text="enter the chapel").count() == 1
    assert Node.objects.filter(pk=old.pk).exists()
    story.switch_branch(played, old.branch)
    assert texts(played)[-1] == "Candles gutter in the chapel."


def test_retry_with_no_reply_is_refused(campaign):
    with pytest.raises(story.NothingToRetry):
        story.commit_retry(campaign.pk, (campaign.head_branch_id, 0), reply("x"))


def test_save_point_restores_the_exact_head(played):
    point = story.create_save_point(played, "before the crypt")
    act(played, "descend to the crypt", "Bones everywhere.")
    story.undo(played)
    story.undo(played)
    act(played, "leave the abbey", "You walk into the rain.")
    story.restore_save_point(point)
    played.refresh_from_db()
    assert (played.head_branch_id, played.head_depth) == (point.branch_id, point.depth)
    assert texts(played)[-1] == "Candles gutter in the chapel."


def test_commit_refuses_when_the_head_moved_during_generation(played):
    stale = (played.head_branch_id, played.head_depth)
    story.undo(played)
    count = Node.objects.count()
    with pytest.raises(story.StoryMovedOn):
        story.commit_turn(played.pk, stale, story.PlayerAction(mode="do", text="late"), reply("too late"))
    assert Node.objects.count() == count
    assert Campaign.objects.get(pk=played.pk).head_depth == 2


def test_path_is_capped_at_every_fork_depth(played):
    story.undo(played)
    act(played, "climb the bell tower")
    path = lineage.path_of(played)
    old_branch = path.head_branch_id
    assert path.contains(played.head_branch.parent_id, 2)
    assert not path.contains(played.head_branch.parent_id, 3)
    assert not path.contains(played.head_branch.parent_id, 4)
    assert path.contains(old_branch, 4)


def test_undo_below_a_fork_then_acting_branches_from_the_head_branch_lineage(played):
    story.undo(played)
    act(played, "climb the bell tower")
    story.undo(played)
    story.undo(played)  # now at the opening, on the second branch
    act(played, "turn back to the ferry", "The ferry has gone.")
    assert texts(played) == [played.opening, "turn back to the ferry", "The ferry has gone."]


def test_every_node_carries_the_running_token_total_of_its_own_line(played):
    story.undo(played)
    act(played, "climb the bell tower", "The bells hang silent.")
    retry(played, "The bells are gone.")
    for node in Node.objects.all():
        line = lineage.path_at(played.pk, node.branch_id, node.depth).nodes()
        assert node.tokens_through == sum(n.tokens for n in line), node


def shown_versions(campaign):
    """Return {reply text: "position/count"} for the replies on the line that have versions."""
    nodes = list(lineage.path_of(campaign).nodes())
    found = lineage.versions(campaign.pk, nodes)
    return {node.text: f"{found[node.pk].position}/{found[node.pk].count}" for node in nodes if node.pk in found}


def test_retries_are_versions_of_one_reply_in_the_order_written(played):
    assert shown_versions(played) == {}
    retry(played, "Candles gutter, second telling.")
    retry(played, "Candles gutter, third telling.")
    assert shown_versions(played) == {"Candles gutter, third telling.": "3/3"}
    first, second, third = Node.objects.filter(depth=4).order_by("pk")
    found = lineage.versions(played.pk, [first, second, third])
    assert (found[second.pk].previous, found[second.pk].next) == (first.pk, third.pk)
    assert found[first.pk].previous is None and found[third.pk].next is None


def test_a_new_action_after_undo_is_not_a_version_of_the_old_reply(played):
    story.undo(played)
    act(played, "climb the bell tower", "The bells hang silent.")
    # A different action's reply at the same depth is another line, not a version; the action itself is a version of
    # the one it replaced there (as an edited action is: its ‹ › flips between the two lines).
    assert shown_versions(played) == {"climb the bell tower": "2/2"}


def test_versions_group_by_the_action_they_answer_on_any_branch_of_the_tree():
    # Branch 1 (root) holds the opening, action 1 and reply A; branch 2 retried it (fork 1) with reply B; branch 3
    # retried B (its parent is 2, fork 1) with reply C. Branch 4 forked at depth 0 with its own action: reply D.
    branches = {1: (None, -1), 2: (1, 1), 3: (2, 1), 4: (1, 0)}
    replies = [(10, 1, 2), (20, 2, 2), (30, 3, 2), (40, 4, 2)]
    found = lineage.group_versions(branches, replies, {10, 20, 30, 40})
    assert {pk: (v.position, v.count) for pk, v in found.items()} == {10: (1, 3), 20: (2, 3), 30: (3, 3)}


def test_showing_another_version_at_the_head_moves_the_head_to_it(played):
    first = Node.objects.get(depth=4)
    retry(played, "Candles gutter, second telling.")
    assert story.show_version(played, first)
    assert texts(played)[-1] == "Candles gutter in the chapel." and played.head_depth == 4
    assert not story.show_version(played, first), "it is already shown"
    second = Node.objects.get(text="Candles gutter, second telling.")
    assert story.show_version(played, second) and texts(played)[-1] == "Candles gutter, second telling."


def test_showing_an_earlier_version_keeps_what_was_played_after_each(played):
    first = Node.objects.get(depth=2)
    story.undo(played)
    retry(played, "The gate stays shut.")
    act(played, "knock", "Nobody answers.")
    assert story.show_version(played, first)
    assert texts(played)[-3:] == ["The gate creaks open.", "enter the chapel", "Candles gutter in the chapel."], \
        "the first version's line, to where it ends"
    assert story.show_version(played, Node.objects.get(text="The gate stays shut."))
    assert texts(played)[-2:] == ["knock", "Nobody answers."]
