"""The edit form: served in its card for htmx, saying first what saving does; others' messages are 404."""

from django.urls import reverse

from campaigns.models import Node
from tests.campaigns.test_lineage import act
from tests.conftest import make_campaign
from tests.storyteller.test_views import HTMX, played  # noqa: F401 — the two-turn story


def test_the_last_reply_edits_as_a_new_version_and_an_earlier_one_says_it_branches(client_of, played):
    last, first = Node.objects.get(depth=4), Node.objects.get(depth=2)
    fragment = client_of.get(reverse("edit_form", args=[played.pk, last.pk]), **HTMX).content.decode()
    assert 'data-later-turns="0"' in fragment and "Save as a new version" in fragment and "Candles gutter." in fragment
    assert '"action": "edit-reply"' in fragment and f'"node": "{last.pk}"' in fragment
    fragment = client_of.get(reverse("edit_form", args=[played.pk, first.pk]), **HTMX).content.decode()
    assert "This starts a new branch here." in fragment and "The 1 turn after this reply stays" in fragment
    assert "Save as a new branch" in fragment


def test_an_earlier_action_says_the_narrator_answers_it_on_a_new_branch(client_of, played):
    action = Node.objects.get(depth=1)
    fragment = client_of.get(reverse("edit_form", args=[played.pk, action.pk]), **HTMX).content.decode()
    assert '"action": "edit"' in fragment and 'value="do" checked' in fragment
    assert "The narrator answers your edited action, and the 1 turn after it stays on the old branch" in fragment
    last = Node.objects.get(depth=3)
    fragment = client_of.get(reverse("edit_form", args=[played.pk, last.pk]), **HTMX).content.decode()
    assert "The narrator answers your edited action anew" in fragment


def test_the_play_page_offers_edit_on_actions_and_replies_and_continue_on_the_last_reply(client_of, played):
    page = client_of.get(reverse("play", args=[played.pk])).content.decode()
    for node in Node.objects.exclude(depth=0):
        assert reverse("edit_form", args=[played.pk, node.pk]) in page
    assert page.count('data-action="continue-reply"') == 1


def test_a_message_off_the_line_answers_with_the_story_and_the_reason(client_of, played):
    from campaigns import story

    node = Node.objects.get(depth=4)
    story.undo(played)
    response = client_of.get(reverse("edit_form", args=[played.pk, node.pk]), **HTMX)
    assert response["HX-Retarget"] == "#play-body" and "no longer on this line" in response.content.decode()


def test_the_edit_form_refuses_posts_and_others_campaigns(client, client_of, played, outsider):
    node = Node.objects.get(depth=4)
    assert client_of.post(reverse("edit_form", args=[played.pk, node.pk])).status_code == 405
    client.force_login(outsider)
    assert client.get(reverse("edit_form", args=[played.pk, node.pk]), **HTMX).status_code == 404
    mine = make_campaign(outsider)
    act(mine, "wave")
    response = client.get(reverse("edit_form", args=[mine.pk, node.pk]), **HTMX)
    assert "no longer on this line" in response.content.decode(), "another campaign's node is never shown"
