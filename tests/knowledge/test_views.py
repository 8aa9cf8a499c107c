"""The knowledge pages: page, htmx fragment, wrong method and another person's campaign for each."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from campaigns.models import ContextSnapshot, Node
from knowledge.models import Passage, Source
from storyteller.context import Action
from tests.knowledge.conftest import import_fixture, read_fixture
from tests.conftest import as_author

HTMX = {"HTTP_HX_REQUEST": "true"}
# Imports run on their own thread with its own database connection, which sees only committed rows.
pytestmark = pytest.mark.django_db(transaction=True)


def upload(client, campaign, *names, **fields):
    files = [SimpleUploadedFile(name, read_fixture(name) if not isinstance(name, tuple) else name[1])
             for name in names]
    data = {"classification": "reference", "files": files, **fields}
    return client.post(reverse("knowledge_upload", args=[campaign.pk]), data)


def test_several_files_are_imported_at_once_and_listed(client_of, campaign):
    response = upload(client_of, campaign, "reference.md", "inspiration.md", "invalid-utf8.txt")
    page = response.content.decode()
    assert response.status_code == 200
    assert "Imported reference.md" in page and "Imported inspiration.md" in page
    assert "invalid-utf8.txt is not valid UTF-8" in page and "offset" in page
    assert Source.objects.filter(campaign=campaign).count() == 2
    assert 'id="sources"' in page and "Notes on Victorian River Towns" in page


def test_a_duplicate_upload_names_the_existing_source_and_can_be_forced(client_of, campaign):
    upload(client_of, campaign, "canon.md", classification="canon")
    refused = upload(client_of, campaign, "canon.md", classification="canon")
    assert refused.status_code == 400 and "same content as “Westhaven Setting Bible”" in refused.content.decode()
    forced = upload(client_of, campaign, "canon.md", classification="canon", allow_duplicate="on")
    assert forced.status_code == 200 and Source.objects.count() == 2


def test_always_include_is_refused_for_anything_but_canon_on_upload(client_of, campaign):
    response = upload(client_of, campaign, "reference.md", always_include="on")
    assert response.status_code == 400 and "Only Canon can be always included" in response.content.decode()
    assert not Source.objects.exists()


def test_an_oversized_upload_is_refused_without_being_stored(client_of, campaign):
    big = SimpleUploadedFile("huge.md", b"# Huge\n\n" + b"The river runs on. " * 60000)
    response = client_of.post(reverse("knowledge_upload", args=[campaign.pk]),
                              {"classification": "reference", "files": [big]})
    assert response.status_code == 400 and "at most 1,048,576 bytes" in response.content.decode()
    assert not Source.objects.exists()


def test_the_knowledge_page_and_its_fragment(client_of, campaign):
    source = import_fixture(campaign, "canon.md")
    page = client_of.get(reverse("knowledge", args=[campaign.pk])).content.decode()
    assert "<html" in page and source.title in page and f'id="source-{source.pk}"' in page
    fragment = client_of.get(reverse("knowledge", args=[campaign.pk]), **HTMX).content.decode()
    assert fragment.lstrip().startswith('<section id="sources"') and "<html" not in fragment


def test_the_source_page_shows_text_passages_and_settings(client_of, campaign):
    source = import_fixture(campaign, "canon.md", hidden=True)
    page = client_of.get(source.get_absolute_url()).content.decode()
    assert "The dead cannot be resurrected." in page and source.content_hash in page
    for passage in source.passages.all():
        assert f'id="passage-{passage.pk}"' in page
    assert "No turn has used this source yet." in page


def test_reclassify_disable_and_always_include_through_the_settings_form(client_of, campaign):
    source = import_fixture(campaign, "canon.md")
    url = reverse("knowledge_source_update", args=[campaign.pk, source.pk])
    response = client_of.post(url, {"classification": "canon", "always_include": "on", "hidden": "on", "notes": "x"})
    assert response.status_code == 302
    source.refresh_from_db()
    assert (source.enabled, source.always_include, source.hidden) == (False, True, True)
    refused = client_of.post(url, {"classification": "reference", "always_include": "on", "enabled": "on"}, **HTMX)
    assert refused.status_code == 400 and "Only Canon" in refused.content.decode()
    fragment = client_of.post(url, {"classification": "reference", "enabled": "on"}, **HTMX).content.decode()
    assert fragment.lstrip().startswith('<section class="card" id="source-settings"') and "Saved." in fragment
    source.refresh_from_db()
    assert source.classification == "reference" and source.enabled and not source.always_include


def test_deleting_a_source_keeps_what_earlier_prompts_were_given(client_of, campaign):
    as_author(campaign)
    from campaigns import lineage
    from storyteller import context
    from tests.campaigns.test_lineage import act

    source = import_fixture(campaign, "reference.md")
    ctx = context.build(campaign, lineage.path_of(campaign), Action(mode="do", text="warp drives between stars"))
    act(campaign, "warp drives between stars", "No such ships exist.")
    snapshot = ContextSnapshot.objects.get()
    snapshot.report = ctx.report
    snapshot.save()
    assert "Used in turns" in client_of.get(source.get_absolute_url()).content.decode()
    assert f"/replies/{snapshot.node_id}/inspect/" in client_of.get(source.get_absolute_url()).content.decode()
    response = client_of.post(reverse("knowledge_source_delete", args=[campaign.pk, source.pk]), **HTMX)
    assert response["HX-Redirect"] == reverse("knowledge", args=[campaign.pk])
    assert not Source.objects.exists() and not Passage.objects.exists()
    inspector = client_of.get(reverse("inspector", args=[campaign.pk, snapshot.node_id])).content.decode()
    assert "fold space" in inspector, "the prompt snapshot keeps the text it used"
    assert 'id="knowledge-passages"' in inspector and "reference.md" in inspector


def test_the_inspector_lists_passages_with_scores_reason_and_what_had_no_room(client_of, campaign):
    as_author(campaign)
    from campaigns import lineage
    from storyteller import context
    from tests.campaigns.test_lineage import act

    for name in ["canon.md", "reference.md", "inspiration.md"]:
        import_fixture(campaign, name)
    campaign.context_token_budget = 2000
    campaign.save()
    scene = "At the Crooked Lantern tavern by the ferry landing, Mara pours ale from the cellar casks"
    ctx = context.build(campaign, lineage.path_of(campaign), Action(mode="do", text=scene))
    act(campaign, scene, "Ale foams.")
    ContextSnapshot.objects.update(report=ctx.report)
    node = Node.objects.get(role="narrator")
    page = client_of.get(reverse("inspector", args=[campaign.pk, node.pk])).content.decode()
    assert "data-knowledge-passage" in page and "matched" in page and "canon.md" in page
    assert 'id="knowledge-dropped"' in page and "Reference" in page and "tokens (" in page
    assert "No semantic retrieval" in page


def test_rebuild_recuts_and_reembeds_without_touching_the_story(client_of, campaign, narrator_server):
    source = import_fixture(campaign, "canon.md")
    before = list(source.passages.values_list("text", flat=True))
    nodes = Node.objects.count()
    response = client_of.post(reverse("knowledge_rebuild", args=[campaign.pk]), **HTMX)
    assert response.status_code == 200 and "re-cut from its stored text" in response.content.decode()
    source.refresh_from_db()
    assert source.semantic_state == "ready" and list(source.passages.values_list("text", flat=True)) == before
    assert Node.objects.count() == nodes


def test_the_search_box_uses_the_same_retrieval_and_may_find_nothing(client_of, campaign):
    import_fixture(campaign, "reference.md")
    url = reverse("knowledge_search", args=[campaign.pk])
    page = client_of.get(url, {"q": "warp drives"}).content.decode()
    assert "<html" in page and "fold space" in page and "matched drives, warp" in page
    fragment = client_of.get(url, {"q": "spaceship fuel gauge"}, **HTMX).content.decode()
    assert fragment.lstrip().startswith('<section id="search-results"') and 'id="no-results"' in fragment


def test_wrong_methods_are_refused(client_of, campaign):
    source = import_fixture(campaign, "canon.md")
    assert client_of.get(reverse("knowledge_upload", args=[campaign.pk])).status_code == 405
    assert client_of.get(reverse("knowledge_rebuild", args=[campaign.pk])).status_code == 405
    assert client_of.get(reverse("knowledge_source_delete", args=[campaign.pk, source.pk])).status_code == 405
    assert client_of.get(reverse("knowledge_source_update", args=[campaign.pk, source.pk])).status_code == 405
    assert client_of.post(reverse("knowledge", args=[campaign.pk])).status_code == 405
    assert client_of.post(reverse("knowledge_search", args=[campaign.pk])).status_code == 405


def test_another_persons_knowledge_is_404_everywhere(client, campaign, outsider):
    source = import_fixture(campaign, "canon.md")
    client.force_login(outsider)
    for name in ["knowledge", "knowledge_search"]:
        assert client.get(reverse(name, args=[campaign.pk])).status_code == 404
    assert client.get(reverse("knowledge_source", args=[campaign.pk, source.pk])).status_code == 404
    for name in ["knowledge_upload", "knowledge_rebuild"]:
        assert client.post(reverse(name, args=[campaign.pk])).status_code == 404
    for name in ["knowledge_source_update", "knowledge_source_delete"]:
        assert client.post(reverse(name, args=[campaign.pk, source.pk])).status_code == 404
    assert Source.objects.filter(pk=source.pk, enabled=True).exists()


def test_the_pages_need_a_signed_in_user(client, campaign):
    response = client.get(reverse("knowledge", args=[campaign.pk]))
    assert response.status_code == 302 and "/login/" in response.url


def test_an_htmx_upload_returns_the_import_fragment(client_of, campaign):
    files = [SimpleUploadedFile("canon.md", read_fixture("canon.md"))]
    response = client_of.post(reverse("knowledge_upload", args=[campaign.pk]),
                              {"classification": "canon", "files": files}, **HTMX)
    fragment = response.content.decode()
    assert response.status_code == 200 and fragment.lstrip().startswith('<section class="card" id="import"')
    assert "Imported canon.md" in fragment and "<html" not in fragment


def test_with_the_builtin_narrator_the_pages_say_there_is_no_embedding_model(client_of, campaign, settings):
    as_author(campaign)
    from campaigns import lineage
    from knowledge.importer import embed_source
    from storyteller import context
    from tests.campaigns.test_lineage import act

    settings.STORYTELLER_LLM_URL = "http://127.0.0.1:9"  # nothing answers: the built-in narrator plays
    settings.STORYTELLER_LLM_URL_CONFIGURED = False
    source = import_fixture(campaign, "reference.md")
    embed_source(source)
    assert "No embedding model" in client_of.get(reverse("knowledge", args=[campaign.pk])).content.decode()
    from knowledge import retrieval

    path = lineage.path_of(campaign)
    action = Action(mode="do", text="warp drives between stars")
    query = retrieval.embed_query(campaign, context.knowledge_query(campaign, path, action))
    ctx = context.build(campaign, path, action, query=query)
    act(campaign, "warp drives between stars", "None here.")
    ContextSnapshot.objects.update(report=ctx.report)
    node = Node.objects.get(role="narrator")
    page = client_of.get(reverse("inspector", args=[campaign.pk, node.pk])).content.decode()
    assert "No semantic retrieval: No embedding model" in page and "fold space" in page
