"""Who may reach what at a table (issue 30): every URL of the project and the play socket, for every role.

The URL patterns are read from the resolver itself, so a page added later is
in the matrix without anyone remembering it: a campaign's page is the
owner's unless it is one of the few a seat may read (``SEAT_PAGES``), and
for everyone else — another user, a removed or paused seat's person — it does
not exist (404). Signed out, every page sends to the sign-in page. The ids a
seated player can see (nodes, their seat, their whispers, the campaign) are
then tried against another table's campaign (IDOR).
"""

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from campaigns import lineage, seating, story
from campaigns.models import (
    Branch,
    CharacterCard,
    Node,
    Replay,
    SavePoint,
    Seat,
    TableAction,
)
from knowledge.models import Source
from tests.conftest import make_campaign
from tests.storyteller.test_consumers import connect

pytestmark = pytest.mark.django_db(transaction=True)

# The pages a seated player reaches, each built as their seat's viewer; a spectator reaches the first two.
SEAT_PAGES = {"play", "story_export", "world_panel", "world_map", "items_panel", "state_panel", "minds_panel",
              "whispers"}
SPECTATOR_PAGES = {"play", "story_export"}
# Pages that take no campaign: the person's own (their personas, their model settings list), sign-in, the table's
# join page (an invitation's token), the admin (staff only). Checked on their own below.
NOT_A_CAMPAIGN = {"campaign_list", "favicon", "login", "login_link", "logout", "campaign_create", "import_campaign",
                  "import_progress", "personas", "persona_edit", "portrait", "model_settings", "test_connection",
                  "builtin_status", "restart_builtin", "self_check", "bring", "join"}


def _patterns(resolvers=None, prefix="", outer=()):
    """Yield (name, route, [parameter names]) for every URL pattern the project serves, the admin's apart."""
    for entry in resolvers if resolvers is not None else get_resolver().url_patterns:
        route = prefix + str(entry.pattern)
        params = [*outer, *entry.pattern.converters]
        if isinstance(entry, URLResolver):
            if getattr(entry, "app_name", None) == "admin":
                continue
            yield from _patterns(entry.url_patterns, route, params)
        elif isinstance(entry, URLPattern):
            yield entry.name, route, params


def campaign_patterns():
    found = [(name, params) for name, route, params in _patterns() if name not in NOT_A_CAMPAIGN]
    assert all("pk" in params for _, params in found), [name for name, params in found if "pk" not in params]
    return found


class Table:
    """A campaign with one of each: a seated player, a spectator, a paused and a removed seat; and its ids."""

    def __init__(self, owner):
        users = get_user_model().objects
        self.owner = owner
        self.campaign = make_campaign(owner, title="Table A")
        self.player, self.spectator, self.paused, self.removed, self.other = (
            users.create_user(name, password=None) for name in ("player", "watcher", "paused", "removed", "other"))
        self.seat = self._seat(self.player, "mara")
        self._seat(self.spectator, "", Seat.Kind.SPECTATOR)
        seating.pause(self._seat(self.paused, "aldric"))
        seating.remove(self._seat(self.removed, "wren"))
        self.whisper = seating.whisper(self.seat, "canarywhisper", lineage.path_of(self.campaign))
        self.ids = self._ids()

    def _seat(self, user, character, kind=Seat.Kind.PLAYER):
        seat = seating.open_seat(self.campaign, character, kind)
        _, token = seating.invite(seat)
        seating.take(token, user)
        seat.refresh_from_db()
        return seat

    def _ids(self):
        campaign = self.campaign
        reply = story.commit_turn(campaign.pk, (campaign.head_branch_id, 0), story.PlayerAction("do", "I look around"),
                                  story.Reply("The hall is quiet.", 5, {}, "fake", "ollama"))
        campaign.refresh_from_db()
        story.create_save_point(campaign, "before")
        card = CharacterCard.objects.create(campaign=campaign, entity="mara", name="Mara", portrait=_png(),
                                            portrait_type="image/png")
        source = Source.objects.create(campaign=campaign, title="notes", filename="notes.md", text="", content_hash="x",
                                       size_bytes=0, parser_version=1, chunking_version=1)
        branch = Branch.objects.filter(campaign=campaign).first()
        replay = Replay.objects.create(campaign=campaign, source=branch, from_depth=1, to_depth=2, model="m",
                                       branch=Branch.objects.create(campaign=campaign, parent=branch, fork_depth=0))
        return {"pk": campaign.pk, "node_pk": reply.pk, "branch_pk": branch.pk,
                "save_point_pk": SavePoint.objects.get(campaign=campaign).pk, "replay_pk": replay.pk,
                "card_pk": card.pk, "source_pk": source.pk, "memory_pk": 1, "seat_pk": self.seat.pk,
                "kind": "place", "key": "hall", "who": "mara", "panel": "time", "what": "pause"}

    def url(self, name, params, **override):
        values = {**self.ids, **override}
        return reverse(name, kwargs={param: values[param] for param in params})


def _png():
    import io

    from PIL import Image

    data = io.BytesIO()
    Image.new("RGB", (2, 2)).save(data, "PNG")
    return data.getvalue()


def _client(user=None):
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def table(owner):
    return Table(owner)


def _answers(client, url):
    """Return the statuses of a GET and a POST to ``url`` (htmx, as the pages ask)."""
    return (client.get(url, HTTP_HX_REQUEST="true").status_code,
            client.post(url, HTTP_HX_REQUEST="true").status_code)


def _refused(statuses):
    """Whether neither method reached anything: 404 (or 405 for the method the page does not take), one 404."""
    return set(statuses) <= {404, 405} and 404 in statuses


def test_the_matrix_covers_every_campaign_page_the_project_serves():
    names = {name for name, _ in campaign_patterns()}
    assert {"play", "inspector", "table", "seat_action", "whispers", "knowledge_source", "replay_compare",
            "entity_edit", "export_tavern", "long_run_report", "memory_update"} <= names
    assert SEAT_PAGES <= names


def test_a_removed_or_paused_seat_another_user_and_a_spectator_reach_nothing_they_may_not(table):
    spectator = _client(table.spectator)
    outsiders = {"removed": _client(table.removed), "paused": _client(table.paused), "other": _client(table.other)}
    wrong = []
    for name, params in campaign_patterns():
        url = table.url(name, params)
        for who, client in outsiders.items():
            if not _refused(_answers(client, url)):
                wrong.append((who, name, _answers(client, url)))
        if name not in SPECTATOR_PAGES and not _refused(_answers(spectator, url)):
            wrong.append(("spectator", name, _answers(spectator, url)))
    assert wrong == []


def test_a_seated_player_reaches_the_seat_pages_and_no_other(table):
    player = _client(table.player)
    wrong = []
    for name, params in campaign_patterns():
        statuses = _answers(player, table.url(name, params))
        if name in SEAT_PAGES:
            if 200 not in statuses:
                wrong.append(("refused", name, statuses))
        elif not _refused(statuses):
            wrong.append(("reached", name, statuses))
    assert wrong == []


def test_signed_out_every_campaign_page_sends_to_sign_in(table):
    anonymous = _client()
    wrong = []
    for name, params in campaign_patterns():
        url = table.url(name, params)
        for status, response in ((None, anonymous.get(url)), (None, anonymous.post(url))):
            if response.status_code not in (302, 405) or (response.status_code == 302 and "/login/" not in
                                                            response["Location"]):
                wrong.append((name, response.status_code))
    assert wrong == []


# What only table A's pages hold: its reply, its action, its whisper, its seat's player.
A_MARKS = ("The hall is quiet", "I look around", "canarywhisper", "Table A")
# The one page the table has nothing for: the long-run report of a diagnostic run (storyteller.diagnostics).
OWNER_MISSES = {"long_run_report"}


def test_the_owner_reaches_every_page_of_the_table(table):
    """The matrix means something only if the same addresses are real: the owner's GET of each finds its page (or
    is told the page takes a POST), so a 404 for the others is the access check, not a missing row."""
    owner = _client(table.owner)
    missed = {name for name, params in campaign_patterns()
              if owner.get(table.url(name, params), HTTP_HX_REQUEST="true").status_code == 404}
    assert missed <= OWNER_MISSES, missed


# The pages that take no campaign but belong to the machine's people: a table guest (an account made by taking an
# invitation) gets a 404 for each; the rest (the list of their tables, sign-in and out, joining) are theirs too.
HOSTS_PAGES = {"campaign_create", "import_campaign", "personas", "persona_edit", "model_settings", "test_connection",
               "builtin_status", "restart_builtin", "self_check", "bring"}
GUESTS_TOO = {"campaign_list", "favicon", "login", "login_link", "logout", "join", "import_progress", "portrait"}


def test_every_page_without_a_campaign_is_either_a_hosts_or_a_guests_too():
    names = {name for name, _, _ in _patterns()} - {name for name, _ in campaign_patterns()}
    assert names == HOSTS_PAGES | GUESTS_TOO


def test_a_table_guest_reaches_none_of_the_hosts_pages(table):
    seat = seating.open_seat(table.campaign, "aldric")
    _, token = seating.invite(seat)
    client = Client()
    assert client.post(reverse("join", args=[token]), {"name": "Guest"}).status_code == 302
    params = {name: found for name, _, found in _patterns()}
    values = {"pk": 1}
    wrong = [name for name in sorted(HOSTS_PAGES)
             if not _refused(_answers(client, reverse(name, kwargs={p: values[p] for p in params[name]})))]
    assert wrong == []
    listing = client.get(reverse("campaign_list")).content.decode()
    assert "Your tables" in listing and "Table A" in listing and "New campaign" not in listing
    assert "Model settings" not in listing and "Personas" not in listing
    # Someone of the machine (the outsider who owns campaigns of their own) keeps them after taking a seat.
    other = _client(table.other)
    assert other.get(reverse("model_settings")).status_code == 200


def test_the_admin_and_the_model_settings_are_not_a_players(table):
    player = _client(table.player)
    assert player.get("/admin/").status_code == 302  # the admin's own sign-in: a player is not staff
    page = player.get(reverse("model_settings")).content.decode()
    assert "Table A" not in page


def test_a_seated_players_ids_open_nothing_at_another_table(table, owner):
    """IDOR: every id the player of table A can see (the campaign, its nodes, their seat, their whisper) tried
    against table B, whose owner is someone else; and table B's owner trying A's ids under B's campaign."""
    other_owner = get_user_model().objects.create_user("other-owner", password=None)
    b = make_campaign(other_owner, title="Table B")
    player = _client(table.player)
    seen_nodes = list(Node.objects.filter(campaign=table.campaign).values_list("pk", flat=True))
    wrong = []
    for name, params in campaign_patterns():
        for node in seen_nodes:
            url = table.url(name, params, pk=b.pk, node_pk=node, seat_pk=table.seat.pk)
            if not _refused(_answers(player, url)):
                wrong.append(("player", name, node))
    # Table B's owner, with table A's ids under B's campaign: a 404, or a refusal in words that shows nothing of A.
    b_owner = _client(other_owner)
    for name, params in campaign_patterns():
        if not any(p in params for p in ("node_pk", "seat_pk", "branch_pk", "save_point_pk", "replay_pk",
                                         "card_pk", "source_pk")):
            continue
        url = table.url(name, params, pk=b.pk)
        for response in (b_owner.get(url, HTTP_HX_REQUEST="true"), b_owner.post(url, HTTP_HX_REQUEST="true")):
            text = response.content.decode(errors="replace")
            if response.status_code not in (404, 405) and any(mark in text for mark in A_MARKS):
                wrong.append(("owner of B", name, response.status_code))
    assert wrong == []
    assert Seat.objects.get(pk=table.seat.pk).status == Seat.Status.SEATED  # B's owner paused nothing of A's


def test_a_whisper_is_seen_by_its_sender_and_the_owner_alone(table):
    users = get_user_model().objects
    second = users.create_user("second", password=None)
    seat = seating.open_seat(table.campaign, "aldric")
    _, token = seating.invite(seat)
    seating.take(token, second)
    whispers = reverse("whispers", args=[table.campaign.pk])
    assert "canarywhisper" in _client(table.player).get(whispers).content.decode()
    assert "canarywhisper" in _client(table.owner).get(whispers).content.decode()
    assert "canarywhisper" in _client(table.owner).get(reverse("play", args=[table.campaign.pk])).content.decode()
    assert "canarywhisper" in _client(table.owner).get(reverse("table", args=[table.campaign.pk])).content.decode()
    for page in ("play", "story_export", "whispers"):
        assert "canarywhisper" not in _client(second).get(reverse(page, args=[table.campaign.pk])).content.decode()
    export = _client(table.player).get(reverse("story_export", args=[table.campaign.pk])).content.decode()
    assert "canarywhisper" in export
    assert _client(table.spectator).get(whispers).status_code == 404


def test_a_player_sends_a_whisper_and_the_game_masters_round_reads_it(table):
    response = _client(table.player).post(reverse("whispers", args=[table.campaign.pk]),
                                          {"text": "I pocket the key"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and "Whispered" in response.content.decode()
    path = lineage.path_of(table.campaign)
    assert seating.whispers_for_round(table.campaign, path) == [("mara", "I pocket the key")]
    # The one sent before the turn belongs to the round played from the opening, not to the next one.
    assert seating.whispers_for_round(table.campaign, path.capped(0)) == [("mara", "canarywhisper")]
    empty = _client(table.player).post(reverse("whispers", args=[table.campaign.pk]), {"text": "  "})
    assert empty.status_code == 400 and "A whisper needs a few words." in empty.content.decode()


# --- the play socket -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("who, admitted", [("owner", True), ("player", True), ("spectator", True),
                                           ("paused", False), ("removed", False), ("other", False),
                                           ("anonymous", False)])
async def test_the_play_socket_admits_the_owner_and_the_seated_alone(owner, who, admitted):
    table = await sync_to_async(Table)(owner)
    user = None if who == "anonymous" else getattr(table, who)
    communicator, connected = await connect(table.campaign, user)
    assert connected is admitted
    await communicator.disconnect()


async def test_a_player_cannot_play_a_turn_or_undo_over_the_socket(owner):
    """A seated player's send is their character's action for the round (issue 30, i30b): it waits in the round,
    exactly as sent, and plays no turn of its own; retry, continue and edits stay the owner's."""
    table = await sync_to_async(Table)(owner)
    await sync_to_async(seating.resume)(await Seat.objects.aget(user=table.paused))  # a second player, here too
    communicator, connected = await connect(table.campaign, table.player)
    assert connected
    other, connected = await connect(table.campaign, table.paused)  # so the one send does not complete the round
    assert connected
    before = await Node.objects.filter(campaign=table.campaign).acount()
    await communicator.send_json_to({"action": "turn", "mode": "do", "text": "I take over"})
    frame = await _frame_with(communicator, "I take over")
    assert "Only the table&#x27;s owner can do that" not in frame
    assert await TableAction.objects.filter(seat=table.seat, text="I take over", status="waiting").acount() == 1
    for message in ({"action": "retry"}, {"action": "continue"}, {"action": "edit-reply", "node": "1", "text": "x"},
                    {"action": "edit", "node": "1", "mode": "do", "text": "x"}):
        await communicator.send_json_to(message)
        await _frame_with(communicator, "Only the table&#x27;s owner can do that")
    await communicator.send_json_to({"action": "round-withdraw"})  # so nothing is left to play once both have gone
    await _frame_with(communicator, "not sent yet")
    await communicator.disconnect()
    await other.disconnect()
    assert await Node.objects.filter(campaign=table.campaign).acount() == before  # nothing was played


async def _frame_with(communicator, needle):
    """Return the first frame holding ``needle`` (presence frames may come before it)."""
    while True:
        frame = await communicator.receive_from(timeout=5)
        if needle in frame:
            return frame


@pytest.mark.parametrize("how", ["remove", "pause"])
async def test_removing_or_pausing_a_seat_closes_its_open_socket_within_a_second(owner, how):
    table = await sync_to_async(Table)(owner)
    communicator, connected = await connect(table.campaign, table.player)
    assert connected
    started = time.perf_counter()
    await sync_to_async(getattr(seating, how))(await Seat.objects.aget(pk=table.seat.pk))
    closed = await communicator.receive_output(timeout=1)
    elapsed = time.perf_counter() - started
    assert closed == {"type": "websocket.close", "code": 4403}
    assert elapsed < 1.0, elapsed
    await communicator.wait(timeout=1)
    again, connected = await connect(table.campaign, table.player)
    assert not connected  # and it cannot come back
    await again.disconnect()
    page = await sync_to_async(lambda: _client(table.player).get(reverse("play", args=[table.campaign.pk])))()
    assert page.status_code == 404


async def test_a_socket_whose_seat_went_away_meanwhile_is_closed_at_its_next_message(owner):
    table = await sync_to_async(Table)(owner)
    communicator, connected = await connect(table.campaign, table.player)
    assert connected
    await Seat.objects.filter(pk=table.seat.pk).aupdate(status=Seat.Status.REMOVED)  # no close message sent
    await communicator.send_json_to({"action": "whisper", "text": "hello"})
    assert (await communicator.receive_output(timeout=2))["type"] == "websocket.close"
    await asyncio.sleep(0)
