"""Story time in headless Chromium: skip eight hours with a reason, and the clock, Mara's new place (her routine
moved her) and the fired bell show without a reload; a roll shows its dice."""

import json

import pytest

from tests.campaigns.test_story_time import BELL, rules_document
from tests.e2e.test_play import _manage, app, author_view, connected, fake, page  # noqa: F401 — the shared browser fixtures

pytestmark = pytest.mark.e2e


def world_file(tmp_path):
    """The Lantern Keep at 13:00 on Friday 14 March 2031, Edrin in the Corridor, the bell announced for eight."""
    bell = {**BELL, "announce": {"audience": "everyone", "text": "The great bell will toll at eight tonight",
                                 "at": "2031-03-14T20:00"}}
    doc = rules_document(starting_time="2031-03-14T13:00", triggers=[bell])
    doc["campaign"]["title"] = "Lantern Keep (story time)"
    doc["characters"][0]["place"] = "Corridor"
    path = tmp_path / "keep.json"
    path.write_text(json.dumps(doc))
    return path


def test_skip_eight_hours_and_the_clock_mara_and_the_bell_follow_without_a_reload_and_a_roll_shows_its_dice(
        app, page, tmp_path):
    page.goto(_manage(app["env"], "login_link", "--base-url", app["base"]))
    page.goto(app["base"] + "/campaigns/new/")
    page.set_input_files("input[name=world]", str(world_file(tmp_path)))
    page.click("form.campaign-form button[type=submit]")
    page.wait_for_selector("#story [data-role=opening]")
    author_view(page)  # where Mara is, and a trigger not announced, are the author's
    page.wait_for_selector("#time-panel [data-clock]")
    assert "Friday 14 March 2031, 13:00 in the afternoon" in page.inner_text("#time-panel .clock")
    assert page.get_attribute("#time-panel [data-person=mara]", "data-place") == "hall"
    page.wait_for_selector("#triggers-panel [data-trigger=bell][data-status=dormant]")
    assert "The great bell will toll at eight tonight" in page.inner_text("#triggers-panel")
    url = page.url

    page.fill("#skip-form [name=by_minutes]", "480")
    page.fill("#skip-form [name=reason]", "they wait for nightfall")
    page.click("#skip-form [data-action=skip-time]")
    page.wait_for_function("() => document.querySelector('#time-panel .clock')?.innerText.includes('21:00')")
    assert "Friday 14 March 2031, 21:00 at night" in page.inner_text("#time-panel .clock")
    assert "Skipped 8 hours." in page.inner_text("#time-panel")
    page.wait_for_selector("#time-panel [data-person=mara][data-place=tavern]")
    assert "drinking" in page.inner_text("#time-panel [data-person=mara]")
    page.wait_for_selector("#triggers-panel [data-trigger=bell][data-status=fired]")
    assert "The bell tolls eight times across the Keep." in page.inner_text("#triggers-panel")
    assert page.url == url, "no reload"

    page.select_option("#roll-form [name=check]", "lockpick")
    page.fill("#roll-form [name=subject]", "Edrin")
    page.fill("#roll-form [name=reason]", "the iron door")
    page.click("#roll-form [data-action=roll]")
    page.wait_for_selector("#rolls-panel [data-roll]")
    dice = page.locator("#rolls-panel [data-roll] .die")
    assert dice.count() == 2 and all(1 <= int(dice.nth(n).inner_text()) <= 6 for n in range(2))
    assert page.url == url
