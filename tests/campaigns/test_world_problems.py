"""World-file errors a person can fix (issue 25, point 4): one line per problem, with the JSON path as the file
writes it (0-based) and the entry's name, knock-on errors folded under their cause, the file kept in the form,
and a button that says what it does."""

import copy
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from campaigns import kept, worldfile
from campaigns.models import Campaign, StateRecord
from tests.campaigns.test_world import PROTAGONIST_LINE, document
from tests.campaigns.test_world_views import STYLE, upload
from tests.imports import finished_import


def seven_problems():
    """The Lantern Keep broken seven ways: a wrong holder (the chest, holding the key, the box and the ring in it),
    a misspelt exit, a relationship to no one, a feature without a name, a section the format has not, a variable
    of no type and an exit state of "ajar"."""
    doc = copy.deepcopy(document())
    doc["items"][0]["holder"] = "Hal"
    doc["exits"][0]["to"] = "Coridor"
    doc["characters"][1]["relationships"][0]["to"] = "Edwin"
    doc["places"][4]["features"] = [{"text": "a cracked bell"}]
    doc["weather"] = "rain"
    doc["variables"] = [{"name": "debt", "type": "money"}]
    doc["exits"][4]["state"] = "ajar"
    return doc


EXPECTED = [
    "unknown section 'weather'; a world file has campaign, slots, places, exits, factions, characters, items, "
    "facts, starting_time, clock, calendar, routines, engagements, intents, variables, dice, triggers, lore",
    "places[4].features[0] (Tower) has no name",
    "items[0].holder (chest): unknown place or character or item 'Hal'",
    "exits[0].to (Hall → Coridor): unknown place 'Coridor'",
    "characters[1].relationships[0].to (Mara): unknown character or faction 'Edwin'",
    "exits[4].state (Yard → Tower) must be one of open, locked, blocked, not 'ajar'",
    "variables[0] (debt): debt: type 'money' is not one of number, flag, choice, text",
]


def test_seven_problems_are_seven_lines_with_0_based_paths_and_the_knock_ons_folded_under_their_cause():
    with pytest.raises(worldfile.WorldRefused) as refused:
        worldfile.prepare(None, seven_problems())
    problems = refused.value.problems
    assert [problem.text for problem in problems] == EXPECTED
    holder = problems[2]
    assert holder.knock_ons == [
        "items[1] (iron key): names 'chest', which could not be made",
        "items[2] (box): names 'chest', which could not be made",
        "items[3] (ring): names 'box', which could not be made",
        "exits[1] (Corridor → Vault): names 'iron-key', which could not be made",
        "exits[2] (Vault → Corridor): names 'iron-key', which could not be made",
        "world_lint: Corridor is joined to no other place: it cannot be entered or left",
        "world_lint: Vault is joined to no other place: it cannot be entered or left",
    ], "the key is in the chest, the exits open with the key: fixing the holder fixes them all"
    assert problems[5].knock_ons == ["world_lint: Tower cannot be reached from Hall, where the protagonist is"]
    assert [p.knock_ons for p in problems if p not in (holder, problems[5])] == [[]] * 5
    message = str(refused.value)
    assert message.startswith("The world file was not imported (7 problems): ")
    assert "'Hal' (and 7 that follow from it)" in message and "'ajar' (and 1 that follows from it)" in message


def test_a_file_with_nothing_else_wrong_still_shows_its_lint_errors_as_problems_of_their_own():
    doc = document()
    doc["places"].append({"name": "Hall"})
    checked = worldfile.check(doc, PROTAGONIST_LINE)
    assert [(p.text, p.knock_ons) for p in checked.report] == [
        ("world_lint: 2 places are called 'Hall' (hall, hall-2)", []),
        ("world_lint: Hall is joined to no other place: it cannot be entered or left", [])]


def test_each_refused_trigger_is_a_line_of_its_own_at_its_place_in_the_file():
    doc = document()
    doc["triggers"] = [{"id": "a", "when": {"type": "time", "after": "3 Smarch"}, "beat": "x"},
                       {"id": "fine", "when": {"type": "time", "after": "2031-01-01T00:00"}, "beat": "y"},
                       {"id": "b", "when": {"type": "at", "who": "Nobody", "place": "Hall"}, "beat": "z",
                        "max_fires": 0}]
    texts = [p.text for p in worldfile.check(doc, PROTAGONIST_LINE).report]
    assert texts[0].startswith("triggers[0] (a): when: after: cannot read '3 smarch' as a day")
    assert texts[1] == "triggers[2] (b): when: unknown character 'Nobody'; max_fires is 0; a whole number from 1 to 10,000"
    assert len(texts) == 2


# --- on the page ---------------------------------------------------------------------------------------------------


def lines(page):
    return re.findall(r"<li data-problem>([^<]*)", page)


@pytest.mark.django_db(transaction=True)
def test_the_page_lists_seven_lines_folds_the_knock_ons_and_keeps_the_file(client_of, owner):
    page = client_of.post(reverse("campaign_create"), {**STYLE, "world": upload(seven_problems())}).content.decode()
    assert "The world file has 7 problems, listed below; nothing was made. Fix the file and choose it again." in page
    assert len(lines(page)) == 7
    assert "items[0].holder (chest): unknown place or character or item &#x27;Hal&#x27;" in page
    assert "7 more that follow from this" in page and "1 more that follows from this" in page
    assert page.count("<li data-knock-on>") == 8
    token = re.search(r'name="world_kept" value="([^"]+)"', page).group(1)
    assert "Kept from your last try: <strong>keep.json</strong>" in page
    assert not Campaign.objects.exists() and not StateRecord.objects.exists()

    again = client_of.post(reverse("campaign_create"), {**STYLE, "world_kept": token}).content.decode()
    assert len(lines(again)) == 7, "the kept file is checked again without being chosen again"
    assert f'name="world_kept" value="{token}"' in again


@pytest.mark.django_db(transaction=True)
def test_a_kept_file_is_used_once_the_form_is_fixed_and_is_nobody_elses(client_of, owner):
    doc = document()
    del doc["campaign"]["title"]
    page = client_of.post(reverse("campaign_create"), {**STYLE, "world": upload(doc)}).content.decode()
    assert lines(page) == ["the campaign needs a title (give them in the form or the file&#x27;s campaign section)"]
    token = re.search(r'name="world_kept" value="([^"]+)"', page).group(1)

    stranger = get_user_model().objects.create_user("stranger")
    assert kept.find(stranger, token) is None, "another person's token finds nothing"

    response = client_of.post(reverse("campaign_create"), {**STYLE, "title": "The Keep Again", "world_kept": token})
    assert response.status_code == 302 and response.url.startswith("/imports/")
    finished_import(client_of, response.url)
    campaign = Campaign.objects.get()
    assert campaign.title == "The Keep Again" and campaign.opening.startswith("Rain lashes the Keep")
    assert kept.find(owner, token) is None, "a kept file goes once it is used"


def test_the_button_says_what_it_does(client_of):
    page = client_of.get(reverse("campaign_create")).content.decode()
    assert "Create campaign and start the story" in page and "Create and add canon" not in page
    assert "opens its first scene" in page


def test_a_campaign_without_a_world_file_opens_its_first_scene(client_of, owner):
    response = client_of.post(reverse("campaign_create"), {
        **STYLE, "title": "Europa", "protagonist": "Commander Ilse", "opening": "Ice groans beneath the lander."})
    campaign = Campaign.objects.get(title="Europa")
    assert response.status_code == 302 and response.url == reverse("play", args=[campaign.pk])


def test_a_kept_file_older_than_a_day_is_gone(owner, settings, tmp_path):
    import os
    import time

    settings.DATA_DIR = tmp_path
    token = kept.keep(owner, "keep.json", json.dumps(document()).encode())
    assert kept.find(owner, token)[0] == "keep.json"
    old = time.time() - kept.KEPT_SECONDS - 1
    for path in (tmp_path / "kept").iterdir():
        os.utime(path, (old, old))
    assert kept.find(owner, token) is None
    assert list((tmp_path / "kept").iterdir()) == []
