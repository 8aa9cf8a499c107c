"""The story time, variables, dice and triggers panels, and the campaign's clock settings: every change a typed
correction, every refusal in words, only the owner's campaign."""

import html

import pytest
from django.urls import reverse

from campaigns import lineage, worldfile
from campaigns.models import Campaign, StateEvent
from campaigns.state import state_at
from campaigns.state.time import rulebook
from tests.campaigns.test_story_time import START, rules_document
from tests.conftest import as_author

HTMX = {"HTTP_HX_REQUEST": "true"}
PANELS = ("time_panel", "variables_panel", "rolls_panel", "triggers_panel")


@pytest.fixture
def keep(owner):
    campaign, _ = worldfile.create_campaign(owner, rules_document())
    return campaign


def now(campaign):
    campaign.refresh_from_db()
    return state_at(lineage.path_of(campaign), campaign)


def post(client, campaign, panel, **fields):
    return client.post(reverse("rules_correct", args=[campaign.pk, panel]), fields, **HTMX).content.decode()


@pytest.mark.parametrize("name", PANELS)
def test_each_panel_is_a_fragment_for_htmx_a_page_otherwise_and_only_the_owners(client_of, keep, outsider, client,
                                                                               name):
    url = reverse(name, args=[keep.pk])
    fragment = client_of.get(url, **HTMX).content.decode()
    key = name.split("_")[0]
    assert fragment.lstrip().startswith(f'<aside id="{key}-panel"')
    page = client_of.get(url).content.decode()
    assert "<html" in page and f'id="{key}-panel"' in page
    assert client_of.post(url).status_code == 405
    client.force_login(outsider)
    assert client.get(url, **HTMX).status_code == 404
    assert client.post(reverse("rules_correct", args=[keep.pk, key]), {"type": "roll"}).status_code == 404


def test_the_play_page_lists_the_rule_panels(client_of, keep):
    page = client_of.get(reverse("play", args=[keep.pk])).content.decode()
    for key in ("time", "variables", "rolls", "triggers"):
        assert f'id="side-{key}"' in page


def test_the_time_panel_shows_the_date_in_words_where_everyone_is_and_should_be(client_of, keep):
    panel = client_of.get(reverse("time_panel", args=[keep.pk]), **HTMX).content.decode()
    assert f'data-clock="{START}"' in panel and "Friday 14 March 2031, 08:00 in the morning" in panel
    assert 'data-person="mara" data-place="hall"' in panel


def test_skip_time_from_the_panel_moves_the_clock_and_mara_and_reloads_the_other_panels(client_of, keep):
    as_author(keep)
    client_of.post(reverse("world_correct", args=[keep.pk]), {"type": "move", "subject": "Edrin", "object": "Yard"},
                   **HTMX)
    panel = post(client_of, keep, "time", type="skip", by_minutes="480", reason="they rest")
    assert "Skipped 8 hours." in panel and "Friday 14 March 2031, 16:00 in the afternoon" in panel
    assert 'data-person="mara" data-place="forge"' in panel
    assert 'id="reload-world"' in panel and 'id="reload-time"' not in panel, "the others reload; this one is new"
    [skip] = StateEvent.objects.filter(campaign=keep, payload__type="skip")
    assert skip.source == "correction" and skip.author.username == "reader"


def test_a_skip_without_a_reason_or_too_long_is_refused_naming_what_to_change(client_of, keep):
    assert "a skip needs a reason" in post(client_of, keep, "time", type="skip", by_minutes="30", reason="")
    refused = post(client_of, keep, "time", type="skip", by_minutes=str(40 * 24 * 60), reason="a long sleep")
    assert "Nothing was changed" in refused and "raise max_skip_days" in refused
    assert rulebook.now_of(now(keep)) == START


def test_a_roll_shows_its_dice_in_the_log(client_of, keep):
    panel = post(client_of, keep, "rolls", type="roll", check="lockpick", subject="Edrin", reason="the iron door")
    [roll] = rulebook.rolls_of(now(keep))
    assert f'data-roll="{roll.slot}"' in panel and panel.count('class="die"') == 2
    assert roll.data["initiator"] == "player" and roll.data["band"] in panel
    assert "says why" in post(client_of, keep, "rolls", type="roll", expression="1d6", reason="")


def test_variables_and_triggers_are_corrected_and_bad_json_is_refused_in_words(client_of, keep):
    as_author(keep)
    panel = post(client_of, keep, "variables", type="variable_change", subject="Mara", object="debt", to="85")
    assert 'data-variable="mara:debt"' in panel and "debt 85 (crushing)" in panel
    refused = post(client_of, keep, "variables", type="variable_define", definition="{not json")
    assert "definition is not valid JSON" in refused
    post(client_of, keep, "time", type="skip", until_time="21:00", reason="evening")
    panel = client_of.get(reverse("triggers_panel", args=[keep.pk]), **HTMX).content.decode()
    assert 'data-trigger="bell" data-status="fired"' in panel and "The bell tolls eight times" in panel
    assert "not this panel" in post(client_of, keep, "triggers", type="roll", expression="1d6", reason="x")


def test_a_failed_trigger_shows_why_and_fires_once_reset_after_the_world_is_fixed(client_of, owner):
    from campaigns import storytime

    collapse = {"id": "collapse", "when": {"type": "time", "after": "2031-03-14T09:00"},
                "effects": [{"type": "exit_change", "subject": "Hall", "object": "Cellar"}], "beat": "A way opens."}
    campaign, _ = worldfile.create_campaign(owner, rules_document(triggers=[collapse]))
    as_author(campaign)
    post(client_of, campaign, "time", type="skip", by_minutes="90", reason="an hour and a half")
    panel = html.unescape(client_of.get(reverse("triggers_panel", args=[campaign.pk]), **HTMX).content.decode())
    assert 'data-trigger="collapse" data-status="failed"' in panel and "'Cellar' is not a known place" in panel
    storytime.correct(campaign, owner, {"type": "introduce", "subject": "Cellar", "object": "place"})
    panel = post(client_of, campaign, "triggers", type="trigger_reset", subject="collapse")
    assert 'data-trigger="collapse" data-status="fired"' in panel, "reset, it fires at the check after the reset"
    assert now(campaign).get("exit:hall:cellar") is not None


def test_the_campaign_form_checks_the_clock_settings_and_a_mode_switch(client_of, keep):
    url = reverse("campaign_edit", args=[keep.pk])
    form = client_of.get(url).content.decode()
    assert 'name="time_zone"' in form and 'name="clock_mode"' in form and 'id="section-advanced"' in form
    fields = {"title": keep.title, "protagonist": keep.protagonist, "point_of_view": "second",
              "prose_length": "medium", "dialogue_density": "medium", "descriptive_richness": "medium",
              "violence_level": "low", "context_token_budget": 4096, "max_output_tokens": 200, "temperature": 0.8,
              "clock_mode": "simulated", "time_zone": "Mars/Olympus", "round_seconds": 30, "max_skip_days": 30,
              "trigger_cap": 3, "beat_turns": 3, "cue_turns": 1, "canon-TOTAL_FORMS": 0, "canon-INITIAL_FORMS": 0}
    refused = client_of.post(url, fields).content.decode()
    assert "is not a time zone this machine knows; write an IANA name" in refused
    fields.update(time_zone="Europe/Lisbon", round_seconds=90_000)
    assert "A turn lasts 1 to 86,400 seconds" in client_of.post(url, fields).content.decode()
    fields.update(round_seconds=60, clock_mode="real")
    refused = client_of.post(url, fields).content.decode()
    assert "cannot switch" in refused and "can never follow the wall clock again" in refused
    assert Campaign.objects.get(pk=keep.pk).clock_mode == "simulated", "nothing was saved"
    fields.update(clock_mode="simulated")
    assert client_of.post(url, fields).status_code == 302
    assert Campaign.objects.get(pk=keep.pk).round_seconds == 60
    older = {name: value for name, value in fields.items() if name not in (
        "clock_mode", "time_zone", "round_seconds", "max_skip_days", "trigger_cap", "beat_turns", "cue_turns")}
    assert client_of.post(url, older).status_code == 302, "a form without the story time section keeps it"
    assert (Campaign.objects.get(pk=keep.pk).round_seconds, Campaign.objects.get(pk=keep.pk).time_zone) == (
        60, "Europe/Lisbon")
