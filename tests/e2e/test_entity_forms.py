"""Characters, places and items made in forms, in headless Chromium, and played: the narrator is told of them."""

import json

import pytest

from tests.e2e.test_play import app, author_view, connected, fake, page, send, settled  # noqa: F401 — shared fixtures
from tests.e2e.test_world import start_from_world_file

pytestmark = pytest.mark.e2e


def fill(page, kind, values):
    for name, value in values.items():
        page.fill(f"[name={kind}-{name}]", value)


def test_an_author_adds_a_place_a_character_and_an_item_in_forms_and_the_narrator_is_told_of_them(app, fake, page,
                                                                                                    tmp_path):
    start_from_world_file(app, page, tmp_path)
    author_view(page)  # the world's forms are the author's
    play = page.url
    page.wait_for_selector("#world-panel #entity-links a")
    page.click("#entity-links a")
    page.wait_for_selector("#entity-list")
    assert page.locator("[data-kind=character] [data-entity=mara]").count() == 1

    page.click("[data-action=add-place]")
    fill(page, "place", {"name": "Boathouse", "description": "a leaning shed over black water",
                         "feature_0_name": "slipway", "feature_0_text": "a slick stone slipway",
                         "exit_0_to": "Corridor", "exit_0_label": "boathouse door", "exit_0_minutes": "1"})
    assert page.is_checked("[name=place-exit_0_both_ways]"), "a way is a door with two sides unless unticked"
    page.click("[data-action=save-place]")
    page.wait_for_selector("#entity-saved")
    assert page.input_value("[name=place-exit_0_to]") == "Corridor"

    page.click("text=All characters, places and items")
    page.click("[data-action=add-character]")
    fill(page, "character", {"name": "Mara", "place": "Corridor"})
    page.click("[data-action=save-character]")
    page.wait_for_selector("#entity-refused")
    assert "“Mara” is already a character in this world" in page.inner_text("[data-field=name] ~ ul.errorlist")
    fill(page, "character", {"name": "Wren", "aliases": "the ferrywoman",
                             "description": "a ferrywoman with tar on her hands",
                             "personality": "dry and patient, counts every coin twice",
                             "brief": "She smuggles letters for the Watch; she will not say so.",
                             "place": "Corridor", "carries": "brass lantern"})
    page.click("[data-action=save-character]")
    page.wait_for_selector("#entity-saved")
    assert page.input_value("[name=character-carries]") == "brass lantern"
    page.fill("[name=character-description]", "a ferrywoman with tar on her hands, soaked")
    page.click("[data-action=save-character]")
    page.wait_for_selector("#entity-saved")
    assert page.input_value("[name=character-description]").endswith("soaked"), "a field's change is not lost"
    page.click("summary:has-text('Advanced: the same as JSON')")
    shown = json.loads(page.input_value("#entity-json"))
    assert shown["characters"][0]["description"].endswith("soaked") and shown["items"] == [
        {"name": "brass lantern", "holder": "Wren"}]
    shown["characters"][0]["description"] = "a ferrywoman with tar on her hands"
    page.fill("#entity-json", json.dumps(shown, indent=2))
    page.click("[data-action=show-json]")
    page.wait_for_selector("[name=character-description]")
    assert page.input_value("[name=character-description]") == "a ferrywoman with tar on her hands"
    page.click("[data-action=save-character]")
    page.wait_for_selector("#entity-saved")

    page.click("text=All characters, places and items")
    page.click("[data-action=add-item]")
    fill(page, "item", {"name": "tin whistle", "description": "a dented tin whistle", "holder": "Wren"})
    page.click("[data-action=save-item]")
    page.wait_for_selector("#entity-saved")
    page.click("text=All characters, places and items")
    wren = page.inner_text("[data-kind=character] [data-entity=wren]")
    assert "at Corridor" in wren
    assert "carried by Wren" in page.inner_text("[data-kind=item]")

    page.goto(play)
    connected(page)
    fake.script("Wren lifts her brass lantern toward the boathouse door.")
    send(page, "I greet the ferrywoman")
    settled(page)
    [prompt] = [json.dumps(body) for body in fake.bodies("/api/chat")
                if body and "I greet the ferrywoman" in json.dumps(body) and body.get("stream", True) is not False
                and not body.get("format")]
    for told in ("Wren", "a ferrywoman with tar on her hands", "dry and patient, counts every coin twice",
                 "She smuggles letters for the Watch", "brass lantern", "tin whistle", "Boathouse",
                 "boathouse door"):
        assert told in prompt, told
