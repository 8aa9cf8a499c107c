"""Game-master turns a player can steer (issue 24 point 7): a character named in a Say, or asked with its Ask button,
answers in that round; one muted for the scene does not, until the player's character leaves the place."""

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from campaigns import muting
from campaigns.models import Campaign, Round
from campaigns.state import PROTAGONIST
from storyteller.steps import postturn
from storyteller.voices import rounds
from tests.campaigns.test_world import keep
from tests.storyteller.test_consumers import connect, frames_until_end
from tests.storyteller.voices.test_played import game, gm, says

HTMX = {"HTTP_HX_REQUEST": "true"}


def test_a_say_speaks_to_the_characters_it_names_in_the_order_named_and_never_to_the_player():
    state = keep()
    assert rounds.addressed(state, "say", "Mara, what is in the chest? And you, Aldric?") == ("mara", "aldric")
    assert rounds.addressed(state, "say", "Edrin, you fool, I say to myself.") == ()
    assert rounds.addressed(state, "do", "I look at Mara.") == (), "only a Say speaks to someone"
    assert rounds.addressed(state, "do", "I wait.", ("aldric",)) == ("aldric",), "Ask asks whatever the mode"
    assert rounds.addressed(state, "say", "Open the chest.", ()) == (), "a thing named is no one spoken to"


def _activate(requested, **wishes):
    names = {"mara": "Mara", "aldric": "Aldric", "tam": "Tam"}
    return rounds.activate(requested, present={"mara", "aldric"}, resolve=lambda n: n.lower() if n.lower() in names
                           else None, name_of=names.get, max_characters=4, **wishes)


def test_whom_the_player_spoke_to_acts_first_and_the_muted_never():
    chosen = _activate([("Aldric", "he is wary")], addressed=("mara",))
    assert chosen.acting == ("mara", "aldric") and chosen.why["mara"] == rounds.ADDRESSED
    both = _activate([("Mara", "she holds the key")], addressed=("mara",))
    assert both.acting == ("mara",) and both.why["mara"] == "she holds the key", "the game master's reason says more"
    muted = _activate([("Mara", "she holds the key"), ("Aldric", "")], muted=frozenset({"mara"}))
    assert muted.acting == ("aldric",) and muted.refused == (("Mara", "the player muted Mara for this scene"),)
    assert _activate([], addressed=("mara",), muted=frozenset({"mara"})).acting == ()
    assert _activate([], addressed=("tam",)).acting == (), "one not with the player is not asked"


def test_a_mute_lasts_while_the_scene_does(owner):
    campaign = Campaign.objects.create(owner=owner, title="t", protagonist="Edrin", opening="o")
    assert muting.toggle(campaign, "mara", "kitchen") is True
    assert muting.muted_at(campaign, "kitchen") == {"mara"} and muting.muted_at(campaign, "yard") == set()
    assert muting.toggle(campaign, "aldric", "yard") is True
    assert muting.muted_at(campaign, "kitchen") == set(), "a new place is a new scene"
    assert muting.toggle(campaign, "aldric", "yard") is False and muting.muted_at(campaign, "yard") == set()


@pytest.mark.django_db(transaction=True)
async def test_a_named_or_asked_character_answers_though_the_game_master_chose_no_one(owner, narrator_server):
    campaign = await sync_to_async(game)(owner)
    communicator, connected = await connect(campaign, owner)
    assert connected
    narrator_server.script_gm(gm([]))  # the game master would have nobody answer
    narrator_server.script_characters(says("The chest? Old linen."))
    await communicator.send_json_to({"mode": "say", "text": "Mara, what is in the chest?"})
    frames = await frames_until_end(communicator)
    await postturn.settle()
    assert "The chest? Old linen." in "".join(frames)
    narrator_server.script_gm(gm([]))
    narrator_server.script_characters(says("Nothing to say."))
    await communicator.send_json_to({"mode": "say", "text": "Well?", "ask": "aldric"})
    frames = await frames_until_end(communicator)
    await postturn.settle()
    await communicator.disconnect()
    assert "Nothing to say." in "".join(frames)
    spoken = await sync_to_async(lambda: [row.activated for row in Round.objects.filter(kind="gm")
                                          .order_by("node__depth", "number")])()
    assert [[a["who"] for a in row] for row in spoken] == [["mara"], ["aldric"]]


@pytest.mark.django_db(transaction=True)
async def test_a_character_muted_from_here_does_not_answer_even_when_named(owner, narrator_server):
    from django.test import Client

    campaign = await sync_to_async(game)(owner)

    @sync_to_async
    def mute(who):
        client = Client()
        client.force_login(owner)
        return client.post(reverse("mute", args=[campaign.pk]), {"who": who}, **HTMX).content.decode()

    panel = await mute("mara")
    assert 'data-person="mara" data-muted="true"' in panel and "muted until you leave this place" in panel
    assert "Unmute" in panel and 'data-ask="mara"' not in panel, "no Ask for the muted"
    assert "Only someone here" in await mute("tam")
    communicator, _ = await connect(campaign, owner)
    narrator_server.script_gm(gm([("Mara", "she holds the key")]))
    narrator_server.script_characters(says("Hand it over, Edrin."))
    await communicator.send_json_to({"mode": "say", "text": "Mara, Aldric, which of you has it?"})
    frames = "".join(await frames_until_end(communicator))
    await postturn.settle()
    await communicator.disconnect()
    [row] = await sync_to_async(lambda: list(Round.objects.filter(kind="gm").values("activated", "resolution")))()
    assert [a["who"] for a in row["activated"]] == ["aldric"]
    assert ["Mara", "the player muted Mara for this scene"] in row["resolution"]["not_activated"]
    assert "Hand it over, Edrin." in frames
    assert "muted" not in frames, "why Mara did not answer is the author's view"
    campaign = await Campaign.objects.aget(pk=campaign.pk)
    assert campaign.muted == {"place": "kitchen", "who": ["mara"]} and PROTAGONIST not in campaign.muted["who"]
