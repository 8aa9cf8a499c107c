"""A table's rounds over real websockets (issue 30): the owner and three players, three characters in two places.

Real parts: the ASGI application with WebsocketCommunicator, SQLite, the fake
model server over HTTP on 127.0.0.1. Edrin (the protagonist) and Mara are in
the Kitchen, Aldric in the Yard.
"""

import asyncio
import copy
import json

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from campaigns import tablerounds, worldfile
from campaigns.models import Campaign, Node, RoundProposal, Seat, TableAction
from storyteller import table_rounds
from tests.campaigns.test_minds import kitchen_document
from tests.storyteller.test_consumers import connect

pytestmark = pytest.mark.django_db(transaction=True)

KITCHEN_CANARY = "CANARY-KETTLE-7731"
YARD_CANARY = "CANARY-WELL-4402"
SPLIT = (f"[At Kitchen]\nSteam curls while the kettle hums: {KITCHEN_CANARY}.\n\n"
         f"[At Yard]\nRain beads on the old well: {YARD_CANARY}.")


def table_document():
    document = copy.deepcopy(kitchen_document())
    for character in document["characters"]:
        character["place"] = {"Edrin": "Kitchen", "Mara": "Kitchen", "Aldric": "Yard"}[character["name"]]
    return document


@sync_to_async
def make_table(owner, **fields):
    campaign, _ = worldfile.create_campaign(owner, worldfile.read(json.dumps(table_document()).encode()),
                                            game_master=True, **fields)
    people = {}
    for name, character in (("bea", "protagonist"), ("cal", "mara"), ("dot", "aldric")):
        user = User.objects.create_user(name, password="pw-" + name)
        Seat.objects.create(campaign=campaign, character=character, user=user, status=Seat.Status.SEATED)
        people[name] = user
    return campaign, people


class Socket:
    """One connected play socket and every frame it received."""

    def __init__(self, communicator):
        self.communicator = communicator
        self.frames = []
        self.read = 0  # frames before this one were read by an earlier ``until``

    async def send(self, **fields):
        await self.communicator.send_json_to(fields)

    async def until(self, needle, timeout=15):
        """Read frames until one after the last ``until``'s contains ``needle``; return it."""
        while True:
            while self.read < len(self.frames):
                frame = self.frames[self.read]
                self.read += 1
                if needle in frame:
                    return frame
            self.frames.append(await self.communicator.receive_from(timeout=timeout))

    async def drain(self, quiet=0.3):
        """Read every frame that arrives until none has for ``quiet`` seconds (without ending the socket)."""
        while not await self.communicator.receive_nothing(timeout=quiet):
            self.frames.append(await self.communicator.receive_from())

    def text(self):
        return "\n".join(self.frames)


async def sit(campaign, user):
    communicator, connected = await connect(campaign, user)
    assert connected
    socket = Socket(communicator)
    await socket.until('id="round-status"')
    return socket


async def table_of(campaign, owner, people, *names):
    sockets = {"owner": await sit(campaign, owner)}
    for name in names:
        sockets[name] = await sit(campaign, people[name])
    return sockets


async def close(sockets):
    for socket in sockets.values():
        await socket.communicator.disconnect()
    for task in list(table_rounds._rounds.values()):
        await asyncio.gather(task, return_exceptions=True)


@sync_to_async
def actions_of(campaign):
    return list(TableAction.objects.filter(campaign=campaign).order_by("id").values_list(
        "character", "text", "status", "node_id", "place"))


@sync_to_async
def head_nodes(campaign):
    campaign = Campaign.objects.get(pk=campaign.pk)
    return list(Node.objects.filter(branch__campaign=campaign, depth__gt=0).order_by("depth").values_list(
        "depth", "role", "text"))


async def test_a_round_sent_by_every_player_is_played_once_with_each_action_as_sent(owner, narrator_server):
    narrator_server.script(SPLIT)
    campaign, people = await make_table(owner)
    sockets = await table_of(campaign, owner, people, "bea", "cal", "dot")
    sent = {"bea": "I open the pantry door. <b>slowly</b>", "cal": "  I pour the tea.  ", "dot": "I draw water."}
    for name, text in sent.items():
        await sockets[name].send(action="turn", text=text)
    await sockets["owner"].until('data-outcome="committed"')
    for name in ("bea", "cal", "dot"):
        await sockets[name].until('data-told=')
    await close(sockets)
    nodes = await head_nodes(campaign)
    assert [(depth, role) for depth, role, _ in nodes] == [(1, "player"), (2, "narrator")]
    player_text = nodes[0][2]
    for text in sent.values():
        assert player_text.count(text) == 1
    assert "Edrin: I open the pantry door." in player_text and "Aldric: I draw water." in player_text
    actions = await actions_of(campaign)
    assert sorted(a[:3] for a in actions) == sorted(
        (c, t, "played") for c, t in (("protagonist", sent["bea"]), ("mara", sent["cal"]), ("aldric", sent["dot"])))
    assert {a[3] for a in actions} == {(await sync_to_async(
        lambda: Node.objects.get(branch__campaign=campaign, depth=1).pk)())}
    assert {a[0]: a[4] for a in actions} == {"protagonist": "kitchen", "mara": "kitchen", "aldric": "yard"}


async def test_a_canary_told_in_one_place_never_reaches_the_other_places_player(owner, narrator_server):
    narrator_server.script(SPLIT)
    campaign, people = await make_table(owner)
    sockets = await table_of(campaign, owner, people, "bea", "cal", "dot")
    await sockets["dot"].send(action="turn", text=f"I whisper to the well: {YARD_CANARY}-ACTION")
    await sockets["bea"].send(action="turn", text=f"I look around. {KITCHEN_CANARY}-ACTION")
    await sockets["cal"].send(action="turn", text="I wait.")
    await sockets["owner"].until('data-outcome="committed"')
    for name in ("bea", "cal", "dot"):
        await sockets[name].until("data-told=")
        await sockets[name].drain()
    await close(sockets)
    kitchen, yard = sockets["bea"].text() + sockets["cal"].text(), sockets["dot"].text()
    assert KITCHEN_CANARY in kitchen and YARD_CANARY not in kitchen
    assert YARD_CANARY in yard and KITCHEN_CANARY not in yard
    assert KITCHEN_CANARY in sockets["owner"].text() and YARD_CANARY in sockets["owner"].text()

    @sync_to_async
    def parts():
        reply = Node.objects.get(branch__campaign=campaign, depth=2)
        player = Node.objects.get(branch__campaign=campaign, depth=1)
        return {key: (tablerounds.parts_for(player, key), tablerounds.parts_for(reply, key))
                for key in ("protagonist", "mara", "aldric")}

    told = await parts()
    assert all(KITCHEN_CANARY in " ".join(told[key][1]) for key in ("protagonist", "mara"))
    assert YARD_CANARY not in " ".join(told["mara"][0] + told["mara"][1])
    assert told["aldric"][0] == [f"Aldric: I whisper to the well: {YARD_CANARY}-ACTION"]
    assert KITCHEN_CANARY not in " ".join(told["aldric"][0] + told["aldric"][1])


async def test_a_spectator_is_told_the_whole_round_as_their_page_shows_it(owner, narrator_server):
    # A spectator follows the public story: their page gives every passage (campaigns.viewing.seen), so the
    # live frame of a round must too; it once said "Nothing was told of where you are" (a spectator is nowhere).
    narrator_server.script(SPLIT)
    campaign, people = await make_table(owner)

    @sync_to_async
    def watcher():
        user = User.objects.create_user("eve", password="pw-eve")
        Seat.objects.create(campaign=campaign, character="", user=user, kind=Seat.Kind.SPECTATOR,
                            status=Seat.Status.SEATED)
        return user

    sockets = await table_of(campaign, owner, people, "bea", "cal", "dot")
    sockets["eve"] = await sit(campaign, await watcher())
    for name, text in (("bea", "I look around."), ("cal", "I wait."), ("dot", "I draw water.")):
        await sockets[name].send(action="turn", text=text)
    frame = await sockets["eve"].until("data-told=")
    await close(sockets)
    assert KITCHEN_CANARY in frame and YARD_CANARY in frame
    assert "Aldric: I draw water." in frame and "Nothing was told" not in frame


async def test_the_round_waits_for_everyone_here_but_not_for_an_absent_player(owner, narrator_server):
    narrator_server.script(SPLIT)
    campaign, people = await make_table(owner)
    sockets = await table_of(campaign, owner, people, "bea", "cal")  # dot (Aldric) is away
    await sockets["bea"].send(action="turn", text="I knock.")
    frame = await sockets["cal"].until('data-seat-sent="yes"')
    assert "I knock." in frame  # the same place: Mara's player reads it
    assert (await head_nodes(campaign)) == []
    await sockets["cal"].send(action="turn", text="I answer.")
    await sockets["owner"].until('data-outcome="committed"')
    await close(sockets)
    assert [a[2] for a in await actions_of(campaign)] == ["played", "played"]


async def test_a_player_elsewhere_sees_that_another_has_sent_but_never_the_text(owner, narrator_server):
    campaign, people = await make_table(owner)
    sockets = await table_of(campaign, owner, people, "bea", "cal", "dot")
    await sockets["bea"].send(action="turn", text="SECRET-KITCHEN-PLAN")
    await sockets["dot"].until('data-seat-sent="yes"')
    await sockets["owner"].until("SECRET-KITCHEN-PLAN")
    await sockets["dot"].drain()
    await close(sockets)
    assert "SECRET-KITCHEN-PLAN" not in sockets["dot"].text()
    assert "Edrin" not in sockets["dot"].text()  # nor whom the other place's player plays


async def test_the_owner_says_go_with_what_was_sent(owner, narrator_server):
    campaign, people = await make_table(owner)
    sockets = await table_of(campaign, owner, people, "bea", "cal", "dot")
    await sockets["bea"].send(action="turn", text="I alone act.")
    await sockets["owner"].until('data-seat-sent="yes"')
    await sockets["owner"].send(action="round-go", text="the storm breaks")
    await sockets["owner"].until('data-outcome="committed"')
    await close(sockets)
    [(_, _, player), _] = await head_nodes(campaign)
    assert player == "At Kitchen:\nEdrin: I alone act."
    direction = await sync_to_async(lambda: Node.objects.get(branch__campaign=campaign, depth=1).direction)()
    assert "the storm breaks" in direction and "[At Kitchen] then [At Yard]" in direction

    # The owner's page shows the round's input without the table's stage direction (engine words) and without an
    # Edit that the table would refuse: a round is moved by Retry and Undo, not edited as one person's action.
    @sync_to_async
    def owners_page():
        client = Client()
        client.force_login(owner)
        return client.get(reverse("play", args=[campaign.pk])).content.decode()

    page = await owners_page()
    node = await sync_to_async(lambda: Node.objects.get(branch__campaign=campaign, depth=1).pk)()
    article = page.split(f'id="node-{node}"', 1)[1].split("</article>", 1)[0]
    assert "Edrin: I alone act." in article
    assert "[At Kitchen]" not in article and "player-edit" not in article


async def test_the_tables_timer_plays_the_round_with_what_was_sent(owner, narrator_server):
    campaign, people = await make_table(owner, round_timer_seconds=1)
    sockets = await table_of(campaign, owner, people, "bea", "cal", "dot")
    await sockets["cal"].send(action="turn", text="I tap my foot.")
    await sockets["owner"].until('data-outcome="committed"', timeout=20)
    await close(sockets)
    assert [a[:3] for a in await actions_of(campaign)] == [("mara", "I tap my foot.", "played")]


async def test_an_action_is_edited_or_withdrawn_by_its_sender_until_the_round_plays(owner, narrator_server):
    campaign, people = await make_table(owner)
    sockets = await table_of(campaign, owner, people, "bea", "cal")
    await sockets["bea"].send(action="turn", text="first thought")
    await sockets["bea"].until("first thought")
    await sockets["bea"].send(action="turn", text="second thought")
    await sockets["bea"].until("second thought")
    assert [a[1:3] for a in await actions_of(campaign)] == [("second thought", "waiting")]
    await sockets["bea"].send(action="round-withdraw")
    await sockets["bea"].until("No one has sent")
    assert [a[2] for a in await actions_of(campaign)] == ["withdrawn"]
    await sockets["cal"].send(action="round-withdraw")
    await sockets["cal"].until("You have no action waiting")
    await close(sockets)


async def test_two_players_sending_at_once_is_one_round_with_both_actions(owner, narrator_server):
    campaign, people = await make_table(owner)
    sockets = await table_of(campaign, owner, people, "bea", "cal")
    await asyncio.gather(sockets["bea"].send(action="turn", text="A at once"),
                         sockets["cal"].send(action="turn", text="B at once"))
    await sockets["owner"].until('data-outcome="committed"')
    await sockets["bea"].until("data-told=")
    await sockets["cal"].until("data-told=")
    await close(sockets)
    nodes = await head_nodes(campaign)
    assert len(nodes) == 2 and "A at once" in nodes[0][2] and "B at once" in nodes[0][2]
    assert "moved on" not in sockets["bea"].text() + sockets["cal"].text()
    assert [a[2] for a in await actions_of(campaign)] == ["played", "played"]


async def test_undo_and_retry_are_the_owners_and_a_player_proposes_them(owner, narrator_server):
    campaign, people = await make_table(owner)
    sockets = await table_of(campaign, owner, people, "bea", "cal", "dot")
    await sockets["bea"].send(action="retry")  # refused by the play socket's own rule (the seats' access)
    await sockets["bea"].until("Only the table&#x27;s owner can do that")
    await sockets["bea"].send(action="turn", text="one")
    await sockets["cal"].send(action="turn", text="two")
    await sockets["dot"].send(action="turn", text="three")
    await sockets["owner"].until('data-outcome="committed"')
    await sockets["bea"].send(action="propose", op="undo")
    frame = await sockets["owner"].until("proposes")
    assert "bea proposes: undo the last round" in frame
    pk = await sync_to_async(lambda: RoundProposal.objects.get(campaign=campaign).pk)()
    await sockets["owner"].send(action="proposal", op="accept", node=str(pk))
    await sockets["bea"].until('id="story-refresh"')
    await close(sockets)
    head = await sync_to_async(lambda: Campaign.objects.get(pk=campaign.pk).head_depth)()
    assert head == 0
    assert await sync_to_async(lambda: RoundProposal.objects.get(pk=pk).status)() == "accepted"


async def test_a_single_players_game_master_campaign_plays_as_before(owner, narrator_server):
    narrator_server.script("The kettle sings.")
    campaign, _ = await sync_to_async(worldfile.create_campaign)(
        owner, worldfile.read(json.dumps(table_document()).encode()), game_master=True)
    communicator, connected = await connect(campaign, owner)
    assert connected
    socket = Socket(communicator)
    await socket.send(action="turn", text="I wait.", mode="do")
    await socket.until('data-outcome="committed"')
    await communicator.disconnect()
    assert "round-panel" not in socket.text()
    assert [role for _, role, _ in await head_nodes(campaign)] == ["player", "narrator"]


async def test_typing_is_throttled_carries_no_text_and_clears_by_itself(owner, narrator_server, monkeypatch):
    monkeypatch.setattr(table_rounds.table, "TYPING_SECONDS", 1.5)  # the throttle stays as it is (2 s)
    campaign, people = await make_table(owner)
    sockets = await table_of(campaign, owner, people, "bea", "cal", "dot")
    for socket in sockets.values():
        await socket.drain()
    seen = {name: len(socket.frames) for name, socket in sockets.items()}
    for _ in range(5):  # a burst of keystrokes, with a draft a client should never send and nobody may see
        await sockets["cal"].send(action="typing", text="SECRET-DRAFT-77")
    await asyncio.gather(*(socket.drain(quiet=0.4) for socket in sockets.values()))  # at once: within 1 s
    burst = {name: socket.frames[seen[name]:] for name, socket in sockets.items()}
    for name in ("owner", "bea", "dot"):
        assert len(burst[name]) == 1, (name, len(burst[name]))  # one presence frame for five messages
        assert "cal</strong>" in burst[name][0] and "typing…" in burst[name][0]
    assert "Mara" not in burst["dot"][0].split("cal</strong>")[1].split("</li>")[0]  # the Yard: who, not as whom
    seen = {name: len(socket.frames) for name, socket in sockets.items()}
    await asyncio.sleep(1.8)  # no keystroke for longer than TYPING_SECONDS: everyone is told it stopped
    await asyncio.gather(*(socket.drain(quiet=0.3) for socket in sockets.values()))
    cleared = sockets["bea"].frames[seen["bea"]:]
    assert cleared and "typing…" not in cleared[-1]
    await sockets["cal"].send(action="typing")  # past the throttle's two seconds: told again
    assert "typing…" in await sockets["bea"].until("typing…", timeout=3)
    await close(sockets)
    assert all("SECRET-DRAFT" not in socket.text() for socket in sockets.values())
