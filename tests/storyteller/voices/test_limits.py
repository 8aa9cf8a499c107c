"""The campaign's limits on voices are campaign fields on the edit page, refused with what to change (D9)."""

import pytest
from django.urls import reverse

from campaigns.forms import EditCampaignForm
from campaigns.models import Campaign
from storyteller.voices.limits import Limits, limits_of

pytestmark = pytest.mark.django_db


def edit(campaign, **changes):
    data = {"title": campaign.title, "genre": campaign.genre, "protagonist": campaign.protagonist,
            "point_of_view": "second", "prose_length": "medium", "dialogue_density": "medium",
            "descriptive_richness": "medium", "violence_level": "low", "context_token_budget": 4096,
            "max_output_tokens": 200, "temperature": 0.8, "canon-TOTAL_FORMS": "0", "canon-INITIAL_FORMS": "0"}
    return {**data, **changes}


def test_a_new_campaign_has_the_seeds_limits(campaign):
    assert limits_of(campaign) == Limits()
    assert campaign.game_master is False


def test_the_edit_page_shows_the_voices_fieldset_and_saves_the_limits(client_of, campaign):
    page = client_of.get(reverse("campaign_edit", args=[campaign.pk])).content.decode()
    assert 'id="section-voices"' in page and 'name="max_rounds"' in page and 'name="authoring_consolidate_after"' in page
    response = client_of.post(reverse("campaign_edit", args=[campaign.pk]), edit(
        campaign, game_master="on", max_rounds=2, max_characters=3, offstage_per_turn=0, offstage_per_character=1,
        authoring_per_turn=1, authoring_consolidate_after=8, authoring_enabled="on"))
    assert response.status_code == 302
    campaign.refresh_from_db()
    assert limits_of(campaign) == Limits(max_rounds=2, max_characters=3, offstage_per_turn=0,
                                         offstage_summary=False, authoring_per_turn=1,
                                         authoring_consolidate_after=8)
    assert campaign.game_master is True


@pytest.mark.parametrize("field, value, words", [
    ("max_rounds", 7, "Rounds after a player message may be 1 to 6; choose a number in that range"),
    ("max_rounds", 0, "Rounds after a player message may be 1 to 6"),
    ("max_characters", 9, "Characters in one round may be 1 to 8"),
    ("offstage_per_turn", 5, "0 turns off-stage actions off"),
    ("offstage_per_character", 0, "Off-stage actions of one character after a turn may be 1 to 4"),
    ("authoring_per_turn", 6, "Creations by the world author in one turn may be 0 to 5"),
    ("authoring_consolidate_after", "many", "New things waiting before consolidation may be 1 to 50"),
])
def test_a_limit_out_of_range_is_refused_with_what_to_change_and_nothing_is_saved(client_of, campaign, field, value,
                                                                                   words):
    response = client_of.post(reverse("campaign_edit", args=[campaign.pk]), edit(campaign, **{field: value}))
    assert response.status_code == 200
    assert words in response.content.decode()
    campaign.refresh_from_db()
    assert limits_of(campaign) == Limits()


def test_a_post_without_the_limits_keeps_them(campaign):
    Campaign.objects.filter(pk=campaign.pk).update(max_rounds=2)
    campaign.refresh_from_db()
    form = EditCampaignForm(edit(campaign, offstage_summary="on", authoring_enabled="on"), instance=campaign)
    assert form.is_valid(), form.errors
    assert form.save().max_rounds == 2


def test_another_persons_campaign_edit_page_is_404_and_a_wrong_method_is_refused(client, campaign, outsider,
                                                                                 client_of):
    assert client_of.put(reverse("campaign_edit", args=[campaign.pk])).status_code == 405
    client.force_login(outsider)
    assert client.get(reverse("campaign_edit", args=[campaign.pk])).status_code == 404
    assert client.post(reverse("campaign_edit", args=[campaign.pk]), edit(campaign, max_rounds=1)).status_code == 404
    campaign.refresh_from_db()
    assert campaign.max_rounds == 3


def test_a_bundle_carries_the_limits_and_refuses_one_out_of_range(campaign, owner):
    import json

    from storyteller import bundle

    Campaign.objects.filter(pk=campaign.pk).update(game_master=True, max_characters=2, authoring_enabled=False)
    exported = bundle.export_campaign(Campaign.objects.get(pk=campaign.pk))
    copy = bundle.import_bundle(owner, json.dumps(exported).encode())
    assert (copy.game_master, copy.max_characters, copy.authoring_enabled) == (True, 2, False)
    exported["sections"]["campaigns"]["campaign"]["max_rounds"] = 9
    exported["checksum"] = bundle.checksum(exported["sections"])
    with pytest.raises(bundle.BundleRefused) as refused:
        bundle.import_bundle(owner, json.dumps(exported).encode())
    assert "Rounds after a player message may be 1 to 6" in str(refused.value)
