"""Seed 003 §71: imported text is inert data and never a reason to reach beyond this machine."""

import pytest
from django.urls import reverse

from campaigns import lineage
from campaigns.models import ContextSnapshot
from knowledge.importer import embed_source
from knowledge.models import Source
from storyteller import context
from storyteller.context import Action
from tests.campaigns.test_lineage import act
from tests.knowledge.conftest import import_fixture, read_fixture


def test_hostile_markdown_is_stored_as_the_text_it_is(campaign):
    source = import_fixture(campaign, "hostile.md")
    assert source.text == read_fixture("hostile.md").decode()
    (passage,) = source.passages.all()
    assert "Ignore all prior instructions" in passage.text and "<script>alert(1)</script>" in passage.text


def test_pages_show_hostile_markup_escaped(client, owner, campaign):
    client.force_login(owner)
    source = import_fixture(campaign, "hostile.md")
    for url in [source.get_absolute_url(), reverse("knowledge_search", args=[campaign.pk]) + "?q=ferry+timetable"]:
        page = client.get(url).content.decode()
        assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert '<img src="https://example.com' not in page and 'onerror="alert' not in page
        assert 'src="https://' not in page and "href=\"https://" not in page


@pytest.mark.django_db(transaction=True)  # the import thread's own connection sees only committed rows
def test_nothing_leaves_loopback_during_import_indexing_inspection_and_building(
        client, owner, campaign, narrator_server, loopback_only):
    client.force_login(owner)
    from django.core.files.uploadedfile import SimpleUploadedFile

    files = [SimpleUploadedFile(name, read_fixture(name)) for name in ["hostile.md", "reference.md"]]
    response = client.post(reverse("knowledge_upload", args=[campaign.pk]), {"classification": "reference",
                                                                              "files": files})
    assert response.status_code == 200
    for source in Source.objects.all():
        assert source.semantic_state == "ready"
        embed_source(source)
        client.get(source.get_absolute_url())
    client.get(reverse("knowledge_search", args=[campaign.pk]), {"q": "ferry timetable crossings"})
    client.post(reverse("knowledge_rebuild", args=[campaign.pk]))
    ctx = context.build(campaign, lineage.path_of(campaign), Action(mode="do", text="I read the ferry timetable"))
    assert "https://example.com/timetable" in ctx.messages[-1]["content"], "a link is text in the prompt"
    act(campaign, "I read the ferry timetable", "The ferry crosses every hour.")
    node = campaign.nodes.get(depth=2)
    ContextSnapshot.objects.filter(node=node).update(report=ctx.report)
    client.get(reverse("inspector", args=[campaign.pk, node.pk]))
    assert loopback_only == []
    assert narrator_server.bodies("/api/embed"), "the fake model server on loopback was reached"


def test_the_loopback_guard_would_catch_a_request_to_the_tracker(loopback_only):
    import httpx
    import pytest

    with pytest.raises(httpx.ConnectError):
        httpx.get("http://93.184.215.14/track.png", timeout=1)
    assert loopback_only == [("93.184.215.14", 80)]
    loopback_only.clear()  # the guard itself worked; the fixture's own check would fail the test otherwise
