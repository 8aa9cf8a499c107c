"""Checkpoints as rows: eligible only on the head-capped active path, usable only while their fingerprint matches
(seed 000 §11 "As implemented", seed 001 "Checkpoint record", "Source and resource hashes", "Failure semantics")."""

import pytest

from campaigns import lineage, story
from campaigns.models import Node
from memory import checkpoints
from memory.models import Checkpoint
from tests.campaigns.test_lineage import act, retry

from .conftest import play_to

PREFIX = checkpoints.prefix_hash("the stable prefix")


def summarise_through(campaign, end, text="A summary.", **fields):
    campaign.refresh_from_db()
    return checkpoints.write(lineage.path_of(campaign), end, text, PREFIX, **fields)


def current(campaign, prefix=PREFIX):
    campaign.refresh_from_db()
    return checkpoints.eligible_checkpoint(lineage.path_of(campaign), prefix)


@pytest.fixture
def story_of_ten(campaign):
    return play_to(campaign, 10)


def test_a_summary_sits_on_the_node_it_covers_through_and_covers_from_the_opening(story_of_ten):
    checkpoint = summarise_through(story_of_ten, 6)
    node = lineage.path_of(story_of_ten).nodes().get(depth=6)
    assert (checkpoint.branch_id, checkpoint.depth, checkpoint.source_start, checkpoint.source_end) == (
        node.branch_id, 6, 0, 6)
    assert current(story_of_ten) == checkpoint
    assert not checkpoint.typed_by_person


def test_the_deepest_usable_checkpoint_is_the_one_used(story_of_ten):
    summarise_through(story_of_ten, 4)
    deeper = summarise_through(story_of_ten, 8)
    assert current(story_of_ten) == deeper


def test_there_is_none_before_any_is_written(story_of_ten):
    assert current(story_of_ten) is None


def test_undo_before_the_anchor_makes_it_ineligible_and_redo_brings_it_back(story_of_ten):
    checkpoint = summarise_through(story_of_ten, 8)
    story.undo(story_of_ten)
    story.undo(story_of_ten)
    assert current(story_of_ten) is None
    assert Checkpoint.objects.filter(pk=checkpoint.pk).exists()  # abandoned, kept
    story.redo(story_of_ten)
    assert current(story_of_ten) == checkpoint


def test_a_fork_after_the_anchor_shares_it_and_a_fork_before_it_does_not(story_of_ten):
    checkpoint = summarise_through(story_of_ten, 6)
    main_branch = story_of_ten.head_branch
    story.undo(story_of_ten)  # head 8: after the anchor
    act(story_of_ten, "a different road")
    assert story_of_ten.head_branch != main_branch
    assert current(story_of_ten) == checkpoint  # post-checkpoint fork: shared ancestor
    story.switch_branch(story_of_ten, main_branch)
    for _ in range(3):
        story.undo(story_of_ten)  # head 4: before the anchor
    act(story_of_ten, "an earlier turn away")
    assert current(story_of_ten) is None  # pre-checkpoint fork: unreachable
    sibling = summarise_through(story_of_ten, 6, "The earlier turn away.")
    story.switch_branch(story_of_ten, main_branch)
    assert current(story_of_ten) == checkpoint
    assert Checkpoint.objects.filter(pk=sibling.pk).exists()


def test_a_retried_reply_never_sees_the_checkpoint_of_the_reply_it_replaces(story_of_ten):
    replaced = summarise_through(story_of_ten, 10)
    retry(story_of_ten, "A new telling of the last reply.")
    assert current(story_of_ten) != replaced
    assert current(story_of_ten) is None


def test_editing_a_covered_node_makes_the_checkpoint_unusable_with_the_reason(story_of_ten):
    older = summarise_through(story_of_ten, 4)
    checkpoint = summarise_through(story_of_ten, 8)
    Node.objects.filter(campaign=story_of_ten, depth=5).update(text="a line that was never played")
    checkpoints.forget_checks()  # as a restart does: the application itself never edits a node
    lookup = checkpoints.look_up(lineage.path_of(story_of_ten), PREFIX)
    assert lookup.checkpoint == older  # older one does not cover depth 5
    assert lookup.rejected[0].checkpoint == checkpoint
    assert "source hash" in lookup.rejected[0].reason


def test_a_changed_stable_prefix_makes_every_checkpoint_unusable(story_of_ten):
    summarise_through(story_of_ten, 8)
    lookup = checkpoints.look_up(lineage.path_of(story_of_ten), checkpoints.prefix_hash("new canon"))
    assert lookup.checkpoint is None
    assert "stable prefix" in lookup.rejected[0].reason


def test_an_altered_text_a_bad_range_or_an_old_schema_is_unusable(story_of_ten):
    altered = summarise_through(story_of_ten, 8)
    Checkpoint.objects.filter(pk=altered.pk).update(text="")
    bad_range = summarise_through(story_of_ten, 6)
    Checkpoint.objects.filter(pk=bad_range.pk).update(source_start=2)
    old = summarise_through(story_of_ten, 4)
    Checkpoint.objects.filter(pk=old.pk).update(schema_version=checkpoints.SCHEMA_VERSION - 1)
    lookup = checkpoints.look_up(lineage.path_of(story_of_ten), PREFIX)
    assert lookup.checkpoint is None
    reasons = [r.reason for r in lookup.rejected]
    assert "empty" in reasons[0] and "range" in reasons[1] and "schema" in reasons[2]


def test_a_summary_typed_at_the_head_is_eligible_only_on_lines_through_the_head(story_of_ten):
    story_of_ten.refresh_from_db()
    typed = summarise_through(story_of_ten, 6, "What I remember.", origin=Checkpoint.Origin.PERSON,
                              anchor=(story_of_ten.head_branch_id, 10))
    assert typed.typed_by_person and (typed.depth, typed.source_end) == (10, 6)
    assert current(story_of_ten) == typed
    story.undo(story_of_ten)
    assert current(story_of_ten) is None


def test_writing_refuses_an_empty_or_oversized_text_or_a_range_past_the_head(story_of_ten):
    path = lineage.path_of(story_of_ten)
    with pytest.raises(ValueError, match="needs some text"):
        checkpoints.write(path, 4, "  ", PREFIX)
    with pytest.raises(ValueError, match="shorten it"):
        checkpoints.write(path, 4, "word " * (checkpoints.MAX_SUMMARY_TOKENS + 10), PREFIX)
    with pytest.raises(ValueError, match="past the end"):
        checkpoints.write(path, 12, "Too far.", PREFIX)
    assert not Checkpoint.objects.exists()


def test_without_a_prefix_hash_only_the_covered_story_is_checked(story_of_ten):
    checkpoint = summarise_through(story_of_ten, 8)
    assert checkpoints.eligible_checkpoint(lineage.path_of(story_of_ten)) == checkpoint
    Node.objects.filter(campaign=story_of_ten, depth=0).update(text="Another opening.")
    checkpoints.forget_checks()
    assert checkpoints.eligible_checkpoint(lineage.path_of(story_of_ten)) is None


def test_a_source_hash_is_checked_once_per_process_unless_asked_afresh(story_of_ten):
    checkpoint = summarise_through(story_of_ten, 8)
    path = lineage.path_of(story_of_ten)
    assert checkpoints.eligible_checkpoint(path, PREFIX) == checkpoint  # checked in full, remembered
    Node.objects.filter(campaign=story_of_ten, depth=5).update(text="edited behind the application's back")
    assert checkpoints.eligible_checkpoint(path, PREFIX) == checkpoint  # trusted until the process restarts
    assert checkpoints.look_up(path, PREFIX, fresh=True).checkpoint is None  # the Plot panel's check
    checkpoints.forget_checks()
    assert checkpoints.eligible_checkpoint(path, PREFIX) is None
