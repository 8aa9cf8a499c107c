"""A game master's turn over the real play websocket, and the play page and inspector that show it (issue 15)."""

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.urls import reverse

from campaigns import story
from campaigns.models import Campaign, Node, Round
from storyteller.steps import postturn
from tests.storyteller.test_consumers import connect, frames_until_end, outcome_of
from tests.storyteller.voices.test_played import game, gm, says
from tests.conftest import as_author

pytestmark = pytest.mark.django_db(transaction=True)


@sync_to_async
def page(user, name, *args):
    client = Client()
    client.force_login(user)
    return client.get(reverse(name, args=args)).content.decode()


async def turn(communicator, text="I ask who has the key", **extra):
    await communicator.send_json_to({"mode": "do", "text": text, "direction": "", **extra})
    frames = await frames_until_end(communicator)
    await postturn.settle()
    return frames


async def test_the_socket_shows_each_voice_under_its_name_then_streams_the_narration_escaped(owner, narrator_server):
    campaign = await sync_to_async(game)(owner)
    await sync_to_async(as_author)(campaign)
    narrator_server.script_gm(gm([("Mara", "<b>she</b> holds the key"), ("Aldric", "he is wary")]))
    narrator_server.script_characters(says("<script>alert(1)</script> It is mine."), says("Hand it over.", "steps in"))
    narrator_server.script("The <i>kitchen</i> falls quiet.")
    communicator, connected = await connect(campaign, owner)
    assert connected
    frames = await turn(communicator)
    await communicator.disconnect()
    voices = [f for f in frames if f.startswith('<div id="pending-voices" hx-swap-oob="beforeend">')]
    assert len(voices) == 3, "the round's head, then each character as it speaks"
    assert 'data-activated="mara"' in voices[0] and "&lt;b&gt;she&lt;/b&gt; holds the key" in voices[0]
    assert '<div class="voice-name">Mara</div>' in voices[1] and "&lt;script&gt;alert(1)&lt;/script&gt;" in voices[1]
    assert "<script>alert" not in "".join(frames)
    assert '<div class="voice-name">Aldric</div>' in voices[2] and "steps in" in voices[2]
    streamed = [f for f in frames if 'id="pending-text"' in f]
    assert streamed and "&lt;i&gt;kitchen&lt;/i&gt;" in "".join(streamed)
    end = frames[-1]
    assert outcome_of(end) == "committed"
    assert 'data-round="1"' in end and 'data-speaker="mara"' in end and 'data-speaker="aldric"' in end
    assert '<div class="prose gm-narration" data-voice="gm">The &lt;i&gt;kitchen&lt;/i&gt; falls quiet.</div>' in end


def reply_on_page(html):
    """Return the speakers and narration of the last reply on the play page."""
    last = html.rsplit('class="node node-narrator', 1)[1].split("</article>")[0]
    return last


async def test_undo_retry_and_branches_each_show_their_own_rounds(owner, narrator_server):
    campaign = await sync_to_async(game)(owner)
    communicator, _ = await connect(campaign, owner)
    narrator_server.script_gm(gm([("Mara", "first turn")]))
    narrator_server.script_characters(says("First, Mara."))
    narrator_server.script("One.")
    await turn(communicator, "first")
    narrator_server.script_gm(gm([("Aldric", "second turn")]))
    narrator_server.script_characters(says("Second, Aldric."))
    narrator_server.script("Two.")
    await turn(communicator, "second")
    html = await page(owner, "play", campaign.pk)
    assert "Second, Aldric." in reply_on_page(html) and "First, Mara." in html

    # Retry: the new version of the reply has its own rounds; the old one keeps its own.
    narrator_server.script_gm(gm([("Mara", "the retry")]))
    narrator_server.script_characters(says("Retried, Mara."))
    narrator_server.script("Two again.")
    await communicator.send_json_to({"action": "retry"})
    await frames_until_end(communicator)
    await postturn.settle()
    html = await page(owner, "play", campaign.pk)
    last = reply_on_page(html)
    assert "Retried, Mara." in last and "Second, Aldric." not in last and "Two again." in last

    # Undo: the line ends at the first turn, whose rounds are back on the page; the others are not shown.
    await sync_to_async(story.undo)(await Campaign.objects.aget(pk=campaign.pk))
    html = await page(owner, "play", campaign.pk)
    assert "First, Mara." in reply_on_page(html) and "Retried, Mara." not in html and "Second, Aldric." not in html

    # Switching back to the first version of the second reply shows its rounds again.
    old = await Node.objects.filter(rounds__outputs__icontains="Second, Aldric.").afirst()
    campaign = await Campaign.objects.aget(pk=campaign.pk)
    await sync_to_async(story.switch_branch)(campaign, await sync_to_async(lambda: old.branch)())
    html = await page(owner, "play", campaign.pk)
    assert "Second, Aldric." in reply_on_page(html) and "Retried, Mara." not in html
    assert await Round.objects.acount() == 3
    await communicator.disconnect()


async def test_the_inspector_shows_each_brief_beside_the_game_masters_prompt_of_its_round(owner, narrator_server):
    campaign = await sync_to_async(game)(owner)
    await sync_to_async(as_author)(campaign)
    narrator_server.script_gm(gm([("Mara", "she answers")], narrate=False), gm([("Aldric", "his turn")]))
    narrator_server.script_characters(says("Yes?"), says("No."))
    communicator, _ = await connect(campaign, owner)
    await turn(communicator)
    await communicator.disconnect()
    reply = await Node.objects.aget(depth=2)
    html = await page(owner, "inspector", campaign.pk, reply.pk)
    one = html.split('id="round-1"')[1].split("</section>")[0]
    two = html.split('id="round-2"')[1].split("</section>")[0]
    assert "Round 1 of 3 at Kitchen, with: Aldric; Mara." in one
    assert 'data-brief="mara"' in one and 'data-brief="aldric"' not in one
    assert "You are Mara, the housekeeper." in one
    assert "Round 2 of 3 at Kitchen, with:" in two and 'data-brief="aldric"' in two and "You are Aldric, a hunter." in two
    narration = html.split('id="narration-tail"')[1].split("</section>")[0]
    assert "[assistant] The game master&#x27;s notes on this turn:\nRound 1:\n- Mara said: “Yes?”" in narration
    assert "[user] Narrate the turn." in narration
    assert "Kept for the game master" in html


async def test_the_inspector_says_what_the_world_author_did_in_which_round(owner, narrator_server):
    campaign = await sync_to_async(game)(owner)
    await sync_to_async(as_author)(campaign)
    narrator_server.script_gm(gm(need="arrival", what="a hunter", narrate=True))
    communicator, _ = await connect(campaign, owner)
    await turn(communicator)
    await communicator.disconnect()
    reply = await Node.objects.aget(depth=2)
    html = await page(owner, "inspector", campaign.pk, reply.pk)
    author = html.split('id="world-author"')[1].split("</section>")[0]
    assert 'data-author="refused"' in author and "Round 1: refused" in author and "reuse Aldric" in author



async def test_the_players_view_leaves_out_rounds_in_which_nobody_else_acted_and_the_authors_shows_each(
        owner, narrator_server):
    campaign = await sync_to_async(game)(owner, max_rounds=2)
    narrator_server.script_gm(gm(narrate=False), gm([("Mara", "she answers")]))
    narrator_server.script_characters(says("Yes?"))
    narrator_server.script("The kitchen falls quiet.")
    communicator, _ = await connect(campaign, owner)
    frames = await turn(communicator)
    await communicator.disconnect()
    for html in (frames[-1], reply_on_page(await page(owner, "play", campaign.pk))):
        assert 'data-round="1"' not in html and 'data-round="2"' in html and "Yes?" in html
        assert "nobody else acted" not in html and "Round " not in html and "activated" not in html

    await sync_to_async(as_author)(campaign)
    last = reply_on_page(await page(owner, "play", campaign.pk))
    assert 'data-round="1"' in last and "nobody else acted" in last
    assert 'data-round-head="2">Round 2' in last and 'data-activated="mara"' in last
