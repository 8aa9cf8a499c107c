"""A person's correction from the panels is seen by those present, or by nobody when ticked "nobody saw it" (issue 24
point 5), over HTTP: the world panel's and the state panel's forms, and the beliefs they leave."""

import pytest
from django.urls import reverse

from campaigns import lineage, worldfile
from campaigns.models import StateEvent
from campaigns.state.minds import whereabouts
from tests.campaigns.test_world import document
from tests.conftest import as_author

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def keep(owner):
    whereabouts.forget()
    campaign, _ = worldfile.create_campaign(owner, document())
    return campaign


def beliefs(campaign, item):
    campaign.refresh_from_db()
    minds = whereabouts.minds_at(lineage.path_of(campaign), campaign)
    return {who: minds.believes(who).get(item, "no idea") for who in ("aldric", "mara", "protagonist")}


def post(client, name, campaign, **fields):
    return client.post(reverse(name, args=[campaign.pk]), fields, **HTMX).content.decode()


def test_the_correction_forms_offer_nobody_saw_it_where_something_can_be_seen(client_of, keep):
    as_author(keep)
    page = client_of.get(reverse("world_panel", args=[keep.pk])).content.decode()
    assert "{#" not in page and "#}" not in page, "a template comment reached the page"
    for form in ("move", "exit_change", "item_changes", "introduce", "item_edit", "set_holder"):
        chunk = page.split(f'data-form="{form}"', 1)[1].split("</form>", 1)[0]
        assert 'name="unseen"' in chunk and "nobody saw it" in chunk, form


def test_a_chest_moved_from_the_panel_is_seen_by_who_stayed_and_not_by_who_left(client_of, keep):
    assert "Corrected." in post(client_of, "world_correct", keep, type="move", subject="Aldric", object="Hall")
    assert "Corrected." in post(client_of, "world_correct", keep, type="move", subject="Mara", object="Yard")
    assert "Corrected." in post(client_of, "state_correct", keep, type="set_holder", subject="Corridor",
                                object="chest")
    assert beliefs(keep, "chest") == {"aldric": "corridor", "mara": "hall", "protagonist": "corridor"}


def test_a_correction_ticked_nobody_saw_it_leaves_every_belief_as_it_was(client_of, keep):
    post(client_of, "world_correct", keep, type="move", subject="Aldric", object="Hall")
    page = post(client_of, "world_correct", keep, type="set_holder", subject="Corridor", object="chest", unseen="on")
    assert "Corrected." in page
    assert StateEvent.objects.filter(payload__type="set_holder").get().payload["data"] == {"unseen": True}
    assert beliefs(keep, "chest") == {"aldric": "hall", "mara": "hall", "protagonist": "hall"}
    observed = [event.payload["data"]
                for event in StateEvent.objects.filter(payload__type="observe", source="correction")]
    assert observed == [observed[0]] and "chest" not in str(observed), "only the move was seen, not the chest's"
