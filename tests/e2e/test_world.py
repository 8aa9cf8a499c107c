"""The world in headless Chromium: a campaign from a world file, its map and world view following a turn and undo."""

import json

import pytest

from tests.campaigns.test_world import document
from tests.e2e.test_play import _manage, app, connected, fake, page  # noqa: F401 — the shared browser fixtures

pytestmark = pytest.mark.e2e

DOOR = "exit:corridor:iron-door"


def world_file(tmp_path):
    """The Lantern Keep, with Edrin in the Corridor holding the iron key and knowing the vault and its door."""
    doc = document()
    doc["campaign"]["title"] = "Lantern Keep (e2e)"
    edrin = doc["characters"][0]
    edrin["place"] = "Corridor"
    edrin["knowledge"] = {"locations": ["Vault"], "exits": [{"from": "Corridor", "to": "iron door"}]}
    [key] = [item for item in doc["items"] if item["name"] == "iron key"]
    key["holder"] = "Edrin"
    path = tmp_path / "keep.json"
    path.write_text(json.dumps(doc))
    return path


def start_from_world_file(app, page, tmp_path):
    """Sign in and start the e2e Lantern Keep from its world file; wait for the opening."""
    page.goto(_manage(app["env"], "login_link", "--base-url", app["base"]))
    page.goto(app["base"] + "/campaigns/new/")
    page.set_input_files("input[name=world]", str(world_file(tmp_path)))
    page.click("form.campaign-form button[type=submit]")
    page.wait_for_selector("#story [data-role=opening]")


def door_state(page, panel):
    return page.get_attribute(f"{panel} [data-exit='{DOOR}']", "data-state")


def test_a_campaign_from_a_world_file_shows_its_map_and_a_turn_that_opens_the_door_updates_it(app, fake, page,
                                                                                             tmp_path):
    start_from_world_file(app, page, tmp_path)
    connected(page)
    page.wait_for_selector("#map-panel svg")
    for place in ("corridor", "hall", "vault"):
        assert page.locator(f"#map-panel svg [data-place={place}]").count() == 1, place
    assert page.locator("#map-panel [data-place=tower]").count() == 0, "Edrin does not know the tower"
    assert page.get_attribute("#map-panel .map-place.current", "data-place") == "corridor"
    assert door_state(page, "#map-panel") == "locked"
    page.wait_for_selector("#world-panel #world-exits")
    assert door_state(page, "#world-panel") == "locked"

    fake.script("You turn the iron key; the door to the vault swings open.")
    fake.script_json({"events": [{
        "type": "item_changes", "subject": "Edrin", "object": "", "value": "", "narrator_only": False,
        "data": {"ops": [{"op": "unlock", "item": "", "quantity": 0, "to": "", "key": "iron key", "slot": "",
                          "exit": "iron door", "from": ""}]},
    }]})
    url = page.url
    page.fill("form#action-form [name=text]", "unlock the iron door")
    page.click("form#action-form button[type=submit]")
    page.wait_for_function(f"() => document.querySelector(\"#map-panel [data-exit='{DOOR}']\")?.dataset.state "
                           "=== 'open'", timeout=20_000)
    page.wait_for_function(f"() => document.querySelector(\"#world-panel [data-exit='{DOOR}']\")?.dataset.state "
                           "=== 'open'")
    assert page.url == url, "no reload"

    page.click("[data-action=undo]")
    page.wait_for_function(f"() => document.querySelector(\"#map-panel [data-exit='{DOOR}']\")?.dataset.state "
                           "=== 'locked'")
    page.wait_for_function(f"() => document.querySelector(\"#world-panel [data-exit='{DOOR}']\")?.dataset.state "
                           "=== 'locked'")
    assert page.url == url
