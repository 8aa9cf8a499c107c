"""The world panel, the map and the items panel over HTTP, and world corrections from the panel."""

import pytest
from django.urls import reverse

from campaigns import worldfile
from campaigns.models import StateEvent
from campaigns.state import state_at
from campaigns.state.world import world
from campaigns import lineage
from tests.campaigns.test_world import document
from tests.conftest import as_author
from tests.imports import finished_import

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def keep(owner):
    doc = document()
    doc["characters"][0]["knowledge"] = {"locations": ["Vault"], "exits": [{"from": "Corridor", "to": "iron door"}]}
    campaign, _ = worldfile.create_campaign(owner, doc)
    return campaign


def get(client, name, campaign, **extra):
    return client.get(reverse(name, args=[campaign.pk]), **extra).content.decode()


def test_the_world_panel_shows_the_place_exits_people_and_items_with_what_is_unseen(client_of, keep):
    as_author(keep)
    page = get(client_of, "world_panel", keep, **HTMX)
    assert page.lstrip().startswith('<aside id="world-panel"') and "<html" not in page
    assert "Hall" in page and "a vaulted hall with a smoking hearth" in page
    assert 'data-exit="exit:hall:corridor" data-state="open"' in page
    assert "Mara" in page and "tending the fire" in page and "inside: afraid of what is in the vault" in page
    assert "the cloak is hidden" in page and "iron key" in page and "iron key ← chest ← Hall" in page
    [mara] = [chunk for chunk in page.split("<li") if 'data-person="mara"' in chunk]
    assert "knows of" in mara and "Vault" in mara and "Edrin" in mara
    whole = get(client_of, "world_panel", keep)
    assert "<html" in whole and 'id="world-panel"' in whole


def test_the_map_draws_the_known_places_the_exits_by_state_and_marks_where_the_protagonist_is(client_of, keep):
    page = get(client_of, "world_map", keep, **HTMX)
    assert page.lstrip().startswith('<aside id="map-panel"') and "<svg" in page
    for place in ("hall", "corridor", "yard", "vault"):
        assert f'data-place="{place}"' in page
    assert 'data-place="tower"' not in page, "the protagonist does not know the tower"
    assert 'class="map-place current" data-place="hall"' in page
    assert 'data-exit="exit:corridor:iron-door" data-state="locked"' in page
    [known] = [line for line in page.split("<line")[1:] if "exit:hall:corridor" in line]
    assert "exit:corridor:hall" not in known and "marker-end" in known, "Edrin has seen the way from the Hall only"
    everything = get(client_of, "world_map", as_author(keep), **HTMX)
    [passage] = [line for line in everything.split("<line")[1:] if "exit:hall:corridor" in line]
    assert 'data-state="open"' in passage and 'data-both-ways="true"' in passage, "a way there and back: one line"
    assert "exit:corridor:hall" in passage and "marker-end" not in passage


def test_the_items_panel_lists_every_item_with_its_holding_chain(client_of, keep):
    as_author(keep)
    page = get(client_of, "items_panel", keep, **HTMX)
    assert "ring ← box ← chest ← Hall" in page and "owned by Mara" in page
    assert "20 <strong>arrows</strong>" in page and "arrows ← Aldric ← Yard" in page


def test_a_world_correction_applies_and_reloads_the_panels(client_of, keep):
    url = reverse("world_correct", args=[keep.pk])
    page = client_of.post(url, {"type": "item_changes", "subject": "Edrin", "op": "take", "item": "iron key"},
                          **HTMX).content.decode()
    assert "Nothing was changed: the iron key is inside the closed chest." in page
    client_of.post(url, {"type": "item_changes", "subject": "Edrin", "op": "open", "item": "chest"}, **HTMX)
    page = client_of.post(url, {"type": "exit_change", "subject": "Corridor", "object": "Vault", "state": "open"},
                          **HTMX).content.decode()
    assert "Corrected." in page and 'id="map-panel"' in page and 'hx-swap-oob="true"' in page
    now = state_at(lineage.path_of(keep), keep)
    assert world.item_of(now, "chest").container == "open"
    assert world.find_exit(now, "corridor", "Vault").state == "open"
    page = client_of.post(url, {"type": "move", "subject": "Aldric", "object": "Tower", "ignore_exits": "on"},
                          **HTMX).content.decode()
    assert "Corrected." in page
    assert StateEvent.objects.filter(source="correction", payload__type="move").get().payload["data"] == {
        "ignore_exits": True}


@pytest.mark.parametrize("name", ["world_panel", "world_map", "items_panel"])
def test_another_persons_world_is_not_found(client, outsider, keep, name):
    client.force_login(outsider)
    assert client.get(reverse(name, args=[keep.pk]), **HTMX).status_code == 404


def test_the_panels_refuse_the_wrong_method_and_the_corrections_a_get(client_of, keep):
    assert client_of.post(reverse("world_panel", args=[keep.pk]), **HTMX).status_code == 405
    assert client_of.get(reverse("world_correct", args=[keep.pk]), **HTMX).status_code == 405


def test_the_play_page_loads_the_world_map_and_items_panels(client_of, keep):
    page = get(client_of, "play", keep)
    for name in ("world_panel", "world_map", "items_panel"):
        assert f'hx-get="{reverse(name, args=[keep.pk])}"' in page
    assert f'<a href="{reverse("world_map", args=[keep.pk])}" data-map-page>Map</a>' in page, "the map's own page"


def test_text_from_a_world_file_is_escaped(client_of, owner):
    doc = document()
    doc["places"][0]["description"] = "<script>alert(1)</script>"
    doc["items"].append({"name": "<b>odd</b>", "holder": "Hall"})
    campaign, _ = worldfile.create_campaign(owner, doc)
    for name in ("world_panel", "world_map", "items_panel"):
        page = get(client_of, name, campaign, **HTMX)
        assert "<script>alert(1)" not in page and "<b>odd</b>" not in page


STYLE = {"point_of_view": "second", "prose_length": "medium", "dialogue_density": "medium",
         "descriptive_richness": "medium", "violence_level": "low", "context_token_budget": 8192,
         "max_output_tokens": 400, "temperature": 0.7}


def upload(doc, name="keep.json"):
    from django.core.files.uploadedfile import SimpleUploadedFile
    import json

    return SimpleUploadedFile(name, json.dumps(doc).encode(), content_type="application/json")


# The campaign is made on the import thread, with a connection of its own: the test's data must be committed.
@pytest.mark.django_db(transaction=True)
def test_a_new_campaign_starts_from_a_world_file_on_the_new_campaign_page(client_of, owner):
    from campaigns.models import Campaign

    page = client_of.get(reverse("campaign_create")).content.decode()
    assert 'enctype="multipart/form-data"' in page and 'name="world"' in page
    response = client_of.post(reverse("campaign_create"), {**STYLE, "title": "", "world": upload(document())})
    assert response.status_code == 302 and response.url.startswith("/imports/")
    where = finished_import(client_of, response.url)
    campaign = Campaign.objects.get()
    assert where == reverse("play", args=[campaign.pk])
    assert campaign.title == "Lantern Keep" and campaign.owner == owner
    assert world.find_exit(state_at(lineage.path_of(campaign), campaign), "corridor", "Vault").state == "locked"


# The campaign is made on the import thread, with a connection of its own: the test's data must be committed.
@pytest.mark.django_db(transaction=True)
def test_a_broken_world_file_is_refused_on_the_page_with_every_reason_and_nothing_stored(client_of):
    from campaigns.models import Campaign, StateRecord

    doc = document()
    doc["exits"].append({"from": "Hall", "to": "Moon"})
    doc["places"].append({"name": "Hall"})
    response = client_of.post(reverse("campaign_create"), {**STYLE, "world": upload(doc)})
    page = response.content.decode()
    assert response.status_code == 200
    assert "exits[6].to (Hall → Moon): unknown place &#x27;Moon&#x27;" in page and "2 places are called" in page
    bad = client_of.post(reverse("campaign_create"), {**STYLE, "world": upload("x", "bad.json")}).content.decode()
    assert "a world file is a JSON object" in bad
    from django.core.files.uploadedfile import SimpleUploadedFile

    broken = SimpleUploadedFile("bad.json", b"{nope", content_type="application/json")
    page = client_of.post(reverse("campaign_create"), {**STYLE, "world": broken}).content.decode()
    assert "not valid JSON" in page
    assert not Campaign.objects.exists() and not StateRecord.objects.exists()
