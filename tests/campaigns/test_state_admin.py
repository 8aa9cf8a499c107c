"""The admin: corrections go through the typed event pipeline, state rows are never edited directly."""

import html

import pytest
from django.urls import reverse

from campaigns.models import StateEvent, StateRecord
from tests.campaigns.test_lineage import act
from tests.campaigns.test_state import ev, record, state


def test_a_correction_added_in_the_admin_is_a_typed_event_with_its_author(admin_client, admin_user, campaign):
    response = admin_client.post(reverse("admin:campaigns_stateevent_add"), {
        "campaign": campaign.pk, "type": "entity", "subject": "Mara", "object": "character",
        "aliases": "the archivist", "value": "an archivist",
    })
    assert response.status_code == 302
    event = StateEvent.objects.get()
    assert (event.source, event.status, event.author) == ("correction", "applied", admin_user)
    assert state(campaign).resolve("the archivist") == "mara"


def test_a_rejected_admin_correction_says_why(admin_client, campaign):
    response = admin_client.post(reverse("admin:campaigns_stateevent_add"), {
        "campaign": campaign.pk, "type": "add_fact", "value": "Magic can resurrect the dead.",
    }, follow=True)
    assert "The correction was rejected: contradicts campaign canon" in response.content.decode()


def test_state_rows_are_read_only_and_retracted_through_a_correction(admin_client, campaign):
    act(campaign, "look", "Mara is here.")
    record(campaign, ev("introduce", "Mara", "character"))
    row = StateRecord.objects.get(slot="entity:mara")
    assert admin_client.get(reverse("admin:campaigns_staterecord_changelist")).status_code == 200
    assert admin_client.post(reverse("admin:campaigns_staterecord_delete", args=[row.pk]), {"post": "yes"}).status_code == 403
    admin_client.post(reverse("admin:campaigns_staterecord_changelist"),
                      {"action": "make_narrator_only", "_selected_action": [row.pk]})
    assert state(campaign).entity("mara").narrator_only
    admin_client.post(reverse("admin:campaigns_staterecord_changelist"),
                      {"action": "retract", "_selected_action": [row.pk]})
    assert state(campaign).entity("mara") is None
    assert StateRecord.objects.filter(slot="entity:mara").count() == 3, "every change is a new row"
    for name in ("stateevent", "recorderrun"):
        assert admin_client.get(reverse(f"admin:campaigns_{name}_changelist")).status_code == 200


def test_the_admin_lists_places_exits_and_items_with_filters(admin_client, admin_user):
    from campaigns import worldfile
    from tests.campaigns.test_world import document

    campaign, _ = worldfile.create_campaign(admin_user, document())
    places = admin_client.get(reverse("admin:campaigns_placerecord_changelist")).content.decode()
    assert "Corridor" in places and "a vaulted hall with a smoking hearth" in places and "iron key" not in places
    locked = admin_client.get(reverse("admin:campaigns_exitrecord_changelist") + "?state=locked").content.decode()
    assert "iron door" in locked and "exit-open" not in locked and "2 exit records" in locked
    hidden = admin_client.get(reverse("admin:campaigns_itemrecord_changelist") + "?hidden=true").content.decode()
    assert "cloak" in hidden and "1 item record" in hidden
    closed = admin_client.get(reverse("admin:campaigns_itemrecord_changelist") + "?container=closed").content.decode()
    assert "chest" in closed and "2 item records" in closed
    response = admin_client.post(reverse("admin:campaigns_stateevent_add"), {
        "campaign": campaign.pk, "type": "move", "subject": "Aldric", "object": "Tower",
        "data": '{"ignore_exits": true}'})
    assert response.status_code == 302
    assert state(campaign).location_of("aldric") == "tower"


@pytest.mark.parametrize("data, words", [
    ("[" * 5000 + "]" * 5000, "nested more than 24 levels"),
    ('{"n": ' + "7" * 5000 + "}", "5,000 digits long"),
    ('{"triggers": [{"id": "t", "beat": "' + "x" * 2001 + '"}]}', "at most 2,000 fit there"),
], ids=["deep", "digits", "long-text"])
def test_an_admin_correction_holds_the_bounded_reader_and_the_pipelines_limits(admin_client, campaign, data, words):
    response = admin_client.post(reverse("admin:campaigns_stateevent_add"), {
        "campaign": campaign.pk, "type": "trigger_define", "subject": "", "object": "", "value": "", "aliases": "",
        "data": data})
    page = response.content.decode()
    assert response.status_code in (200, 302) and "Traceback" not in page
    if response.status_code == 200:
        assert words in html.unescape(page), page[-3000:]
    else:  # read, then refused by the pipeline: kept as a rejected correction with its reason
        event = StateEvent.objects.latest("pk")
        assert event.status == StateEvent.Status.REJECTED and words in event.reason, event.reason
