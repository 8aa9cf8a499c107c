"""Off stage after a turn and the "Meanwhile" card (seed 002 离场行动; WP4 scenario 6), with the real fake server.

The card is the away note kept on the head reply's context snapshot: shown
under the head reply only, escaped, gone once the next turn commits and back
on an undo to its reply, and never in a prompt.
"""

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.urls import reverse

from campaigns import lineage, story
from campaigns.models import Campaign, ContextSnapshot, Node, Round
from storyteller import turns
from storyteller.context import Action
from storyteller.steps import away
from tests.storyteller.streaming import while_streaming
from tests.conftest import as_author

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HTTP_HX_REQUEST": "true"}
CANARY = "Mara <b>paid</b> the smith her debt at the Forge."


def head_reply(campaign):
    campaign.refresh_from_db()
    return Node.objects.get(campaign=campaign, branch_id=campaign.head_branch_id, depth=campaign.head_depth)


def account_at(node, campaign, text=CANARY, number=100):
    """Leave an off-stage round with its account under ``node``, as a run does, and write the away note."""
    Round.objects.create(node=node, number=number, kind="offstage", resolution={"account": text},
                         activated=[{"who": "mara", "why": "her debt"}])
    away.write_note(node, campaign)


def card(client, campaign):
    return client.get(reverse("meanwhile", args=[campaign.pk]), **HTMX).content.decode()


async def play(campaign, text):
    async def relay(_):
        pass

    result = await turns.play_turn(campaign.pk, Action(mode="do", text=text), relay)
    await result.post_turn
    return result


def test_the_away_note_is_kept_on_the_replys_snapshot_and_shown_escaped_as_the_meanwhile_card(
        client_of, campaign, narrator_server):
    as_author(campaign)
    async_to_sync(play)(campaign, "knock")
    node = head_reply(campaign)
    account_at(node, campaign)
    assert ContextSnapshot.objects.get(node=node).report["away_note"] == {"lines": [CANARY], "left_out": 0}
    page = card(client_of, campaign)
    assert 'data-meanwhile' in page and "<h3>Meanwhile</h3>" in page
    assert "Mara &lt;b&gt;paid&lt;/b&gt; the smith" in page and "<b>paid</b>" not in page
    assert 'id="meanwhile"' in client_of.get(reverse("play", args=[campaign.pk])).content.decode()


def test_the_card_is_gone_once_the_next_turn_commits_and_back_on_an_undo_to_its_reply(
        client_of, campaign, narrator_server):
    as_author(campaign)
    async_to_sync(play)(campaign, "knock")
    account_at(head_reply(campaign), campaign)
    async_to_sync(play)(campaign, "wait")
    assert "data-meanwhile" not in card(client_of, campaign), "the next reply has no note"
    assert "data-meanwhile" not in card(client_of, Campaign.objects.get(pk=campaign.pk))
    story.undo(Campaign.objects.get(pk=campaign.pk))
    assert CANARY.split("<")[0] in card(client_of, campaign), "an undo to its reply shows it again"


def test_the_away_note_is_never_part_of_the_next_prompt(campaign, narrator_server):
    async_to_sync(play)(campaign, "knock")
    account_at(head_reply(campaign), campaign)
    async_to_sync(play)(campaign, "wait")
    prompts = [body for body in narrator_server.bodies("/api/chat") if "format" not in body]
    assert "wait" in prompts[-1]["messages"][-1]["content"]
    assert all("paid" not in str(message["content"]) for message in prompts[-1]["messages"])


def test_a_campaign_with_the_card_off_keeps_no_note(client_of, campaign, narrator_server):
    Campaign.objects.filter(pk=campaign.pk).update(offstage_summary=False)
    campaign.refresh_from_db()
    async_to_sync(play)(campaign, "knock")
    account_at(head_reply(campaign), campaign)
    assert "away_note" not in ContextSnapshot.objects.get(node=head_reply(campaign)).report
    assert "data-meanwhile" not in card(client_of, campaign)


def test_the_card_is_404_for_another_user_and_answers_only_get(client, campaign, outsider, owner):
    client.force_login(outsider)
    assert client.get(reverse("meanwhile", args=[campaign.pk])).status_code == 404
    client.force_login(owner)
    assert client.post(reverse("meanwhile", args=[campaign.pk])).status_code == 405
    assert client.get(reverse("meanwhile", args=[campaign.pk])).status_code == 200


async def test_while_the_next_turn_streams_the_last_replys_card_does_not_come_back(
        client_of, campaign, narrator_server):
    await sync_to_async(as_author)(campaign)
    # The worker's status line reloads the card whenever the post-turn work is done, which may be while the next
    # turn streams: the head is still the last reply then, and its card was cleared when the turn began.
    await play(campaign, "knock")
    await sync_to_async(lambda: account_at(head_reply(campaign), campaign))()
    assert CANARY.split("<")[0] in await sync_to_async(card)(client_of, campaign)
    async with while_streaming(campaign.pk, narrator_server) as turn:
        assert "data-meanwhile" not in await sync_to_async(card)(client_of, campaign)
    await turn.result.post_turn
    assert "data-meanwhile" not in await sync_to_async(card)(client_of, campaign), "the new reply has no note"


def test_the_turn_clears_the_card_when_it_starts_and_reads_it_again_when_it_ends(client_of, campaign):
    from django.template.loader import render_to_string

    start = render_to_string("campaigns/_turn_start.html", {"campaign": campaign, "action": None})
    assert '<div id="meanwhile" hx-swap-oob="true"></div>' in start
    end = render_to_string("campaigns/_turn_end.html", {"campaign": campaign, "outcome": "stopped"})
    assert 'id="meanwhile" hx-get="/campaigns/' in end and 'hx-swap-oob="true"' in end


def test_the_off_stage_page_shows_each_round_what_its_character_was_told_and_the_account(
        client_of, campaign, narrator_server, outsider, client):
    as_author(campaign)
    async_to_sync(play)(campaign, "knock")
    node = head_reply(campaign)
    Round.objects.create(node=node, number=100, kind="offstage", activated=[{"who": "mara", "why": "her debt"}],
                         outputs=[{"speaker": "mara", "text": "She paid the smith."}],
                         resolution={"what": "settle the debt", "account": "", "account_refused": "told as I",
                                     "perceived_by": ["mara"], "refused": [["move", "no route <b>"]]},
                         briefs={"mara": {"text": "You are Mara <i>, the steward."}})
    away.write_note(node, campaign)
    page = client_of.get(reverse("offstage_rounds", args=[campaign.pk, node.pk])).content.decode()
    assert 'data-round="100"' in page and "settle the debt" in page and "She paid the smith." in page
    assert "left out of the note: told as I" in page and "no route &lt;b&gt;" in page
    assert 'data-brief="mara"' in page and "You are Mara &lt;i&gt;, the steward." in page
    client.force_login(outsider)
    assert client.get(reverse("offstage_rounds", args=[campaign.pk, node.pk])).status_code == 404
