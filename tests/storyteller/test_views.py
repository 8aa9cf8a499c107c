"""Pages: each serves the page, its htmx fragment, refuses the wrong method and hides others' campaigns."""

import pytest
from django.urls import reverse

from campaigns import lineage, story
from campaigns.models import Campaign, CanonRule, Node
from storyteller import signin
from tests.campaigns.test_lineage import act, retry
from tests.conftest import make_campaign
from tests.conftest import as_author

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def played(campaign):
    act(campaign, "open the gate", "The gate creaks open.")
    act(campaign, "enter the chapel", "Candles gutter.")
    return campaign


def test_every_page_needs_a_signed_in_user(client, campaign):
    for url in [reverse("campaign_list"), reverse("play", args=[campaign.pk]), reverse("model_settings")]:
        response = client.get(url)
        assert response.status_code == 302 and response.url.startswith(reverse("login"))


def test_another_users_campaign_is_404_everywhere(client, campaign, outsider):
    node = Node.objects.get(depth=0)
    client.force_login(outsider)
    gets = ["play", "campaign_edit", "branches"]
    for name in gets:
        assert client.get(reverse(name, args=[campaign.pk])).status_code == 404
    for name in ["undo", "redo", "save_point", "choose_model"]:
        assert client.post(reverse(name, args=[campaign.pk])).status_code == 404
    assert client.get(reverse("inspector", args=[campaign.pk, node.pk])).status_code == 404
    assert campaign.title not in client.get(reverse("campaign_list")).content.decode()


def test_the_play_page_shows_the_lineage_with_stable_hooks(client_of, played):
    as_author(played)
    page = client_of.get(reverse("play", args=[played.pk])).content.decode()
    assert 'id="story"' in page and 'form id="action-form"' in page
    for node in lineage.path_of(played).nodes():
        assert f'data-node-id="{node.pk}" data-depth="{node.depth}" data-role="{node.role}"' in page
    for action in ["undo", "redo", "retry", "stop", "save-point"]:
        assert f'data-action="{action}"' in page
    assert 'id="turn-error"' in page and "data-inspect" in page


def test_the_play_page_as_htmx_returns_the_story_with_its_controls_and_panels_out_of_band(client_of, played):
    as_author(played)
    fragment = client_of.get(reverse("play", args=[played.pk]), **HTMX).content.decode()
    assert fragment.lstrip().startswith('<div id="play-body"')
    assert "<html" not in fragment
    assert '<div id="controls" class="controls" hx-swap-oob="true">' in fragment
    for key in ["state", "memory", "plot", "knowledge"]:
        assert f'id="reload-{key}"' in fragment and f'hx-target="#{key}-panel"' in fragment
    assert 'id="turn-error"' not in fragment, "re-reading the story keeps the message on the page"


def test_the_play_page_puts_the_action_box_under_the_story_and_the_panels_beside_it(client_of, played):
    as_author(played)
    page = client_of.get(reverse("play", args=[played.pk])).content.decode()
    story, dock, panels = page.index('id="story"'), page.index('id="action-dock"'), page.index('id="side-panels"')
    assert story < dock < panels
    assert page.index('id="action-form"') < page.index('id="controls"') < panels
    for key in ["state", "memory", "plot", "knowledge"]:
        assert f'<details id="side-{key}" class="side-panel" data-panel="{key}" open>' in page
    assert 'maxlength="4000"' not in page, "a long paste is refused in words, never cut by the browser"
    assert 'data-limit="4000"' in page and 'data-limit="1000"' in page


def test_a_reply_with_retries_shows_which_version_it_is(client_of, played):
    first = Node.objects.get(depth=4)
    retry(played, "Candles gutter, second telling.")
    page = client_of.get(reverse("play", args=[played.pk])).content.decode()
    assert 'data-versions="2/2"' in page
    assert reverse("show_version", args=[played.pk, first.pk]) in page


def test_showing_another_version_swaps_the_story_in_place_with_the_panels_following(client_of, played):
    first = Node.objects.get(depth=4)
    retry(played, "Candles gutter, second telling.")
    response = client_of.post(reverse("show_version", args=[played.pk, first.pk]), **HTMX)
    fragment = response.content.decode()
    assert response.status_code == 200 and fragment.lstrip().startswith('<div id="play-body"')
    assert "Candles gutter." in fragment and "second telling" not in fragment and 'data-versions="1/2"' in fragment
    assert 'id="reload-state"' in fragment and 'id="worker-status"' in fragment
    assert lineage.path_of(Campaign.objects.get(pk=played.pk)).contains(first.branch_id, 4)
    assert client_of.post(reverse("show_version", args=[played.pk, first.pk])).status_code == 302
    assert client_of.get(reverse("show_version", args=[played.pk, first.pk])).status_code == 405


def test_another_users_reply_versions_are_404(client, played, outsider, owner):
    node = Node.objects.get(depth=4)
    client.force_login(outsider)
    assert client.post(reverse("show_version", args=[played.pk, node.pk])).status_code == 404
    mine = make_campaign(outsider)
    assert client.post(reverse("show_version", args=[mine.pk, node.pk])).status_code == 404
    assert Campaign.objects.get(pk=played.pk).head_depth == 4


def test_a_never_played_campaign_does_not_claim_to_have_been_played(client_of, campaign):
    page = client_of.get(reverse("campaign_list")).content.decode()
    assert "not played yet" in page and "last played" not in page
    act(campaign, "open the gate", "The gate creaks open.")
    page = client_of.get(reverse("campaign_list")).content.decode()
    assert "last played 0" in page and "not played yet" not in page


def test_the_favicon_is_served_from_the_apps_own_files(client, campaign):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response.url.endswith("favicon.svg")
    page = client.get(reverse("login")).content.decode()
    assert 'rel="icon"' in page and "favicon.svg" in page


def test_the_knowledge_panel_lists_the_files_and_links_to_the_knowledge_page(client_of, campaign, client, outsider):
    from knowledge import importer

    importer.import_source(campaign, "notes.md", b"# Traveller's Notes\n\nThe <b>ferry</b> runs at dawn.", "reference")
    fragment = client_of.get(reverse("knowledge_panel", args=[campaign.pk]), **HTMX).content.decode()
    assert 'id="knowledge-panel"' in fragment and "Traveller&#x27;s Notes" in fragment and "Reference" in fragment
    assert reverse("knowledge", args=[campaign.pk]) in fragment
    assert client_of.get(reverse("knowledge_panel", args=[campaign.pk])).status_code == 302
    client.force_login(outsider)
    assert client.get(reverse("knowledge_panel", args=[campaign.pk]), **HTMX).status_code == 404


def test_model_output_and_player_text_are_escaped_on_the_page(client_of, campaign):
    act(campaign, "<img src=x onerror=alert(1)>", "<script>alert('x')</script>")
    page = client_of.get(reverse("play", args=[campaign.pk])).content.decode()
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page


def test_undo_and_redo_move_the_head_and_return_the_fragment(client_of, played):
    response = client_of.post(reverse("undo", args=[played.pk]), **HTMX)
    assert response.status_code == 200 and "Candles gutter." not in response.content.decode()
    assert Campaign.objects.get(pk=played.pk).head_depth == 2
    response = client_of.post(reverse("redo", args=[played.pk]), **HTMX)
    assert "Candles gutter." in response.content.decode()


def test_head_moves_refuse_get(client_of, played):
    for name in ["undo", "redo", "save_point"]:
        assert client_of.get(reverse(name, args=[played.pk])).status_code == 405


def test_without_htmx_head_moves_redirect_to_the_play_page(client_of, played):
    response = client_of.post(reverse("undo", args=[played.pk]))
    assert response.status_code == 302 and response.url == reverse("play", args=[played.pk])


def test_save_point_then_restore_from_the_branches_page(client_of, played):
    client_of.post(reverse("save_point", args=[played.pk]), {"name": "chapel"}, **HTMX)
    point = played.save_points.get()
    story.undo(played)
    story.undo(played)
    page = client_of.get(reverse("branches", args=[played.pk])).content.decode()
    assert "chapel" in page
    response = client_of.post(reverse("restore_save_point", args=[played.pk, point.pk]))
    assert response.status_code == 302
    assert Campaign.objects.get(pk=played.pk).head_depth == 4


def test_branches_page_lists_every_branch_and_switches(client_of, played):
    first = played.head_branch
    story.undo(played)
    act(played, "leave", "You leave.")
    page = client_of.get(reverse("branches", args=[played.pk])).content.decode()
    assert f'data-branch="{first.pk}"' in page and f'data-branch="{played.head_branch_id}"' in page
    client_of.post(reverse("switch_branch", args=[played.pk, first.pk]))
    assert Campaign.objects.get(pk=played.pk).head_branch_id == first.pk


def test_creating_a_campaign_starts_its_story(client_of, owner):
    response = client_of.post(reverse("campaign_create"), {
        "title": "Europa", "genre": "science fiction", "protagonist": "Commander Ilse",
        "opening": "Ice groans beneath the lander.", "point_of_view": "second", "prose_length": "medium",
        "dialogue_density": "medium", "descriptive_richness": "medium", "violence_level": "low",
        "context_token_budget": 8192, "max_output_tokens": 400, "temperature": 0.7,
    })
    campaign = Campaign.objects.get(title="Europa")
    assert response.status_code == 302
    assert campaign.owner == owner and campaign.head_depth == 0
    assert Node.objects.get(campaign=campaign).text == "Ice groans beneath the lander."


def test_canon_rules_are_edited_on_the_campaign_page(client_of, campaign):
    rule = campaign.canon_rules.get()
    data = {
        "title": campaign.title, "genre": "fantasy", "protagonist": campaign.protagonist,
        "point_of_view": "second", "prose_length": "medium", "dialogue_density": "medium",
        "descriptive_richness": "medium", "violence_level": "low", "context_token_budget": 4096,
        "max_output_tokens": 200, "temperature": 0.8,
        "canon-TOTAL_FORMS": "2", "canon-INITIAL_FORMS": "1",
        "canon-0-id": rule.pk, "canon-0-text": "Magic cannot resurrect the dead.", "canon-0-position": 0,
        "canon-1-text": "FTL travel does not exist.", "canon-1-enabled": "on", "canon-1-position": 1,
    }
    response = client_of.post(reverse("campaign_edit", args=[campaign.pk]), data)
    assert response.status_code == 302
    assert list(CanonRule.objects.filter(campaign=campaign, enabled=True).values_list("text", flat=True)) == [
        "FTL travel does not exist."
    ]


@pytest.mark.django_db(transaction=True)
def test_the_inspector_shows_every_section_in_prompt_order_with_totals(client_of, campaign, narrator_server):
    as_author(campaign)
    from asgiref.sync import async_to_sync

    from storyteller import turns
    from storyteller.context import Action

    async def relay(text):
        pass

    result = async_to_sync(turns.play_turn)(campaign.pk, Action(mode="do", text="look", direction="be brief"), relay)
    page = client_of.get(reverse("inspector", args=[campaign.pk, result.node_id])).content.decode()
    order = [page.index(f'data-section="{key}"') for key in
             ["narrator_rules", "campaign_profile", "canon", "history", "direction", "player_input"]]
    assert order == sorted(order)
    assert "Level 1 canon" in page and "Reserved for the reply" in page
    snapshot = Node.objects.get(pk=result.node_id).snapshot
    assert f'<td data-total>{snapshot.report["budget"]["prompt_tokens"]}</td>' in page


def test_the_login_link_signs_in_once(client, db):
    link = signin.login_link(signin.owner())
    path = link.removeprefix("http://127.0.0.1:8000")
    response = client.get(path)
    assert response.status_code == 302 and response.url == reverse("campaign_list")
    client.logout()
    assert client.get(path).status_code == 403


def test_the_model_settings_page_reports_the_configured_server(client_of, campaign, narrator_server):
    page = client_of.get(reverse("model_settings")).content.decode()
    assert narrator_server.url in page and "qwen2.5:3b-instruct" in page
    narrator_server.refuse()
    fragment = client_of.post(reverse("test_connection"), **HTMX).content.decode()
    assert "does not answer" in fragment


def test_choosing_a_model_warns_when_the_budget_exceeds_its_context(client_of, campaign, narrator_server):
    narrator_server.context_length = 2048
    fragment = client_of.post(reverse("choose_model", args=[campaign.pk]), {"narrator_model": "qwen2.5:3b-instruct"},
                              **HTMX).content.decode()
    assert 'data-fact="window">2048 tokens' in fragment and "exceeds what this model can read" in fragment
    assert Campaign.objects.get(pk=campaign.pk).narrator_model == "qwen2.5:3b-instruct"


def test_the_model_settings_page_warns_about_a_budget_beyond_the_models_context(
    client_of, campaign, narrator_server
):
    narrator_server.context_length = 2048
    page = client_of.get(reverse("model_settings")).content.decode()
    assert 'data-fact="window">2048 tokens' in page and "exceeds what this model can read" in page


def test_model_settings_refuses_anonymous_and_wrong_methods(client, client_of):
    assert client_of.post(reverse("model_settings")).status_code == 405
    assert client_of.get(reverse("test_connection")).status_code == 405


def test_the_play_page_is_never_cached(client_of, campaign):
    response = client_of.get(reverse("play", args=[campaign.pk]))
    assert "no-cache" in response["Cache-Control"] and "no-store" in response["Cache-Control"]
