"""Warming: a campaign's indexes are read before its first turn needs them, off the shared thread."""

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext

from storyteller import warming
from storyteller.context import memories as memory_section
from tests.storyteller.test_stalled_model import _login, _remembering_campaign, _socket

pytestmark = pytest.mark.django_db(transaction=True)


async def test_opening_the_socket_warms_the_campaign_so_its_first_turn_reads_no_bank(campaign, owner, narrator_server):
    await sync_to_async(_remembering_campaign)(campaign)
    campaign.embed_model = "nomic-embed-text"
    await campaign.asave(update_fields=["embed_model"])
    memory_section.forget()  # as in a process that has just started
    socket = await _socket(campaign, await sync_to_async(_login)(owner))
    connected, _ = await socket.connect()
    assert connected
    await warming.settle()

    @sync_to_async
    def bank_read_by_a_turn():
        with CaptureQueriesContext(connection) as queries:
            memory_section.bank_index(campaign.pk)
        return [query["sql"] for query in queries.captured_queries]

    assert await bank_read_by_a_turn() == [
        f"SELECT generation FROM memory_bankstamp WHERE campaign_id = {campaign.pk}"], "only the stamp"
    await socket.disconnect()
