"""Branches a person can tell apart: numbered per campaign, named after where they split or by the person, and a tree."""

import re

import pytest
from django.urls import reverse

from campaigns import branchtree, story
from campaigns.models import Branch, Campaign
from tests.campaigns.test_lineage import act, retry
from tests.conftest import make_campaign


@pytest.fixture
def forked(campaign):
    """Three lines: the first, one from 'I open the chest' after turn 1, and another reply to 'look around'."""
    act(campaign, "walk in", "The hall is cold.")
    act(campaign, "look around", "Dust everywhere.")
    story.undo(campaign)
    act(campaign, "I open the chest", "It is empty.")
    retry(campaign, "A moth flies out.")
    return Campaign.objects.get(pk=campaign.pk)


def test_branches_are_numbered_from_one_in_each_campaign(forked, outsider):
    other = make_campaign(outsider, title="Elsewhere")
    act(other, "wait", "Nothing.")
    story.undo(other)
    act(other, "run", "You run.")
    assert list(Branch.objects.filter(campaign=forked).values_list("number", flat=True)) == [1, 2, 3]
    assert list(Branch.objects.filter(campaign=other).values_list("number", flat=True)) == [1, 2]


def test_a_line_is_called_after_the_action_where_it_split(forked):
    lines = branchtree.lines(forked)
    assert [line.label for line in lines] == [
        "the first line, from the opening", "from: I open the chest", "another reply to: I open the chest"]
    assert [(line.parent_number, line.fork_turn) for line in lines] == [(None, 0), (1, 1), (2, 1)]
    assert [line.active for line in lines] == [False, False, True]


def test_a_name_given_replaces_the_default_and_an_empty_one_brings_it_back(client_of, forked):
    second = Branch.objects.get(campaign=forked, number=2)
    url = reverse("name_branch", args=[forked.pk, second.pk])
    response = client_of.post(url, {"name": "  the chest   line "})
    assert response.status_code == 302 and response.url.endswith("#line-2")
    assert Branch.objects.get(pk=second.pk).name == "the chest line"
    page = client_of.get(response.url).content.decode()
    assert "Line 2 is now called “the chest line”." in page and "the chest line" in page
    client_of.post(url, {"name": ""})
    assert branchtree.lines(forked)[1].label == "from: I open the chest"


def test_a_name_too_long_is_refused_in_words_and_changes_nothing(client_of, forked):
    second = Branch.objects.get(campaign=forked, number=2)
    response = client_of.post(reverse("name_branch", args=[forked.pk, second.pk]), {"name": "x" * 121})
    assert response.status_code == 400
    assert "at most 120 characters; this one has 121" in response.content.decode()
    assert Branch.objects.get(pk=second.pk).name == ""


def test_another_persons_line_cannot_be_named(client, forked, outsider):
    client.force_login(outsider)
    second = Branch.objects.get(campaign=forked, number=2)
    assert client.post(reverse("name_branch", args=[forked.pk, second.pk]), {"name": "mine"}).status_code == 404
    assert Branch.objects.get(pk=second.pk).name == ""


def test_the_page_draws_the_tree_with_the_current_line_marked_and_each_line_a_link(client_of, forked):
    page = client_of.get(reverse("branches", args=[forked.pk])).content.decode()
    tree = page[page.index("<svg"):page.index("</svg>")]
    assert "<script" not in page[page.index("<main"):]
    assert re.findall(r'<a href="#line-(\d)"', tree) == ["1", "2", "3"]
    assert tree.count('class="on-path"') == 3  # the current line crosses all three lines
    assert tree.count('class="head"') == 1 and 'data-line="3" class="current"' in tree
    assert 'id="line-2"' in page and "line 1, after turn 1" in page


def test_the_tree_puts_children_under_their_parent_and_marks_only_the_current_stretch(forked):
    story.switch_branch(forked, Branch.objects.get(campaign=forked, number=1))
    forked.refresh_from_db()
    drawing = branchtree.drawing(branchtree.lines(forked), forked.head_depth)
    first, second, third = drawing.lanes
    assert first.y < second.y < third.y and second.start_y == first.y and third.start_y == second.y
    assert first.path_to == first.end_x and second.path_to is None and third.path_to is None
    assert first.head_x == first.end_x


def test_a_bundle_carries_the_names_and_the_new_campaign_numbers_its_lines_from_one(forked, owner):
    from storyteller import bundle

    story.name_branch(Branch.objects.get(campaign=forked, number=2), "the chest line")
    restored = bundle.import_bundle(owner, bundle.dumps(forked))
    assert list(Branch.objects.filter(campaign=restored).values_list("number", "name")) == [
        (1, ""), (2, "the chest line"), (3, "")]
    assert [line.label for line in branchtree.lines(restored)][1:] == [
        "the chest line", "another reply to: I open the chest"]
