"""A table's presence across processes (issue 31): who is here and who is typing, whichever process holds the socket.

The owner and Bea are connected here (real websockets); Mara's player (cal)
is connected through another process — a real one (tests/elsewhere.py),
which writes her socket's presence as its consumer would.
"""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from campaigns.models import Seat, TablePresence
from storyteller import table_rounds
from tests.elsewhere import Elsewhere, thread_connections_closed  # noqa: F401 - a fixture
from tests.storyteller.test_table_rounds import actions_of, close, head_nodes, make_table, table_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("thread_connections_closed")]

SHARED = {"STORYTELLER_SHARED_PLAYING": "1"}

# Mara's player's socket on the other process: arrives, types when told, leaves when told.
ELSEWHERE = """
from storyteller import table_rounds

campaign_id, seat = (int(value) for value in heard().split())
table_rounds._arrive(campaign_id, "elsewhere.cal", seat, "mara")
said("here")
heard()
table_rounds._typed_shared("elsewhere.cal", True)
said("typing")
heard()
from campaigns.models import TablePresence
TablePresence.objects.filter(channel="elsewhere.cal").delete()
said("left")
"""


@pytest.fixture
def shared(settings):
    settings.STORYTELLER_SHARED_PLAYING = True


async def test_the_round_waits_for_a_player_here_through_another_process(owner, narrator_server, shared):
    campaign, people = await make_table(owner)
    sockets = await table_of(campaign, owner, people, "bea")
    mara = await Seat.objects.aget(campaign=campaign, character="mara")
    other = Elsewhere(ELSEWHERE, **SHARED)
    other.tell(f"{campaign.pk} {mara.pk}")
    assert other.said() == "here"

    await sockets["bea"].send(action="turn", text="I knock.")
    await sockets["owner"].until('data-seat-sent="yes"')
    await sockets["owner"].drain(quiet=0.6)
    assert await head_nodes(campaign) == [], "the round played without Mara, who is here through another process"

    other.tell()
    assert other.said() == "typing"
    await sockets["bea"].send(action="typing")  # any change sends the panel again, from one snapshot
    frame = await sockets["owner"].until("typing…")
    [mara_row] = [row for row in frame.split("<li")[1:] if "cal</strong>" in row]
    assert 'data-seat-here="yes"' in mara_row and "typing…" in mara_row, mara_row

    other.tell()
    assert other.said() == "left"
    other.finish()
    await sockets["owner"].send(action="round-go")  # nobody else is here now: the owner's go plays it
    await sockets["owner"].until('data-outcome="committed"')
    await close(sockets)
    assert [a[:3] for a in await actions_of(campaign)] == [("protagonist", "I knock.", "played")]


async def test_a_socket_of_a_process_that_died_stops_counting_after_its_lease(owner, shared):
    campaign, _ = await make_table(owner)
    mara = await Seat.objects.aget(campaign=campaign, character="mara")
    other = Elsewhere(ELSEWHERE, **SHARED)
    other.tell(f"{campaign.pk} {mara.pk}")
    assert other.said() == "here"
    other.kill()
    assert await sync_to_async(table_rounds._shared_here)(campaign.pk) == {mara.pk}
    await TablePresence.objects.filter(channel="elsewhere.cal").aupdate(until=timezone.now() - timedelta(seconds=1))
    assert await sync_to_async(table_rounds._shared_here)(campaign.pk) == set()


async def test_one_process_writes_no_presence(owner, narrator_server):
    campaign, people = await make_table(owner)
    sockets = await table_of(campaign, owner, people, "bea")
    await sockets["bea"].send(action="typing")
    await sockets["owner"].until("typing…")
    assert not await TablePresence.objects.aexists()
    snap = await sync_to_async(table_rounds.snapshot)(campaign.pk)
    assert "here" not in snap and "typing" not in snap
    await close(sockets)
