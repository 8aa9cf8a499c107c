"""The demo played from the page in headless Chromium (issue 24): a new player crosses the quay to the cottage,
finds the key and unlocks the lamp-room door with it using only Here and the map, against the fake server (which
records nothing); the door is then open from its other side. And the phone-sized page: the story, the action box
and Send on the first screen, the panels in one drawer with Here, Map and Items first, and no page that scrolls
sideways."""

import pytest

from tests.e2e.test_page import PHONE, WIDE, browser, open_page  # noqa: F401 — the shared browser fixtures
from tests.e2e.test_play import _manage, app, connected, fake, settled, sign_in  # noqa: F401

pytestmark = pytest.mark.e2e


def replies(page):
    return page.locator("#story [data-role=narrator][data-node-id]").count()


def click_and_play(page, selector):
    """Click a button of Here or a place on the map: a turn plays; wait for its reply and the panels after it."""
    before = replies(page)
    page.click(selector)
    page.wait_for_function(
        "n => document.querySelectorAll('#story [data-role=narrator][data-node-id]').length === n", arg=before + 1,
        timeout=20_000)
    settled(page)
    page.wait_for_selector("#world-panel #world-exits", state="attached")


def way(page, slot):
    return f"#world-exits [data-exit='{slot}']"


def test_a_new_player_unlocks_the_lamp_room_with_its_key_using_only_here_and_the_map(app, fake, browser, tmp_path):
    page = open_page(browser, WIDE)
    sign_in(app, page)
    page.wait_for_selector("#world-panel #world-exits")
    assert page.locator("#world-people [data-person=old-tam]").count() == 1
    assert "he saw a light" not in page.inner_text("#side-panels"), "Old Tam's inner state is not the player's"

    click_and_play(page, f"{way(page, 'exit:quay:chapel-lane')} [data-act=go]")
    assert "Go to Chapel Lane (1 minute and 30 seconds)." in page.inner_text("#story")
    click_and_play(page, f"{way(page, 'exit:chapel-lane:cottage-door')} [data-act=go]")
    assert page.inner_text("#world-place").startswith("Mara's cottage")
    assert page.locator("#world-items [data-item='brass-key']").count() == 0, "shut in the tea tin"
    click_and_play(page, "#world-items [data-item='tea-tin'] [data-act=open]")
    click_and_play(page, "#world-items [data-item='brass-key'] [data-act=take]")
    assert page.locator("#world-carried [data-item='brass-key']").count() == 1

    # The map: the headland path is a place Edrin has seen a way to; a click there travels, and says how long.
    page.wait_for_selector("#map-panel [data-travel='headland-path']", state="attached")
    click_and_play(page, "#map-panel svg [data-travel='headland-path']")
    assert "Go to Headland path by Chapel Lane (4 minutes and 30 seconds)." in page.inner_text("#story")
    click_and_play(page, f"{way(page, 'exit:headland-path:foot-of-the-lantern')} [data-act=go]")

    door = way(page, "exit:foot-of-the-lantern:lamp-room-door")
    assert page.get_attribute(door, "data-state") == "locked"
    assert page.inner_text(f"{door} [data-act=unlock]") == "Unlock with the brass key"
    click_and_play(page, f"{door} [data-act=unlock]")
    assert "Unlock the lamp-room door with the brass key." in page.inner_text("#story")
    assert page.get_attribute(door, "data-state") == "open"
    click_and_play(page, f"{door} [data-act=go]")
    assert page.inner_text("#world-place").startswith("Lamp room")
    assert page.get_attribute(way(page, "exit:lamp-room:lamp-room-door"), "data-state") == "open", \
        "the same door, open from its other side"
    assert "Mara" in page.inner_text("#world-people")
    page.screenshot(path=str(tmp_path / "lamp-room.png"), full_page=True)


def test_a_refused_click_is_shown_where_the_click_was_and_nothing_is_played(app, fake, browser):
    page = open_page(browser, WIDE)
    sign_in(app, page)
    page.wait_for_selector("#world-panel #world-exits")
    before = replies(page)
    # A page left behind by the story: its first Go names a way from a place Edrin is not at (as if he had gone on).
    here = page.get_attribute("#world-panel", "data-place")
    elsewhere = "exit:anchor:inn-door" if here != "anchor" else "exit:quay:inn-door"
    go = page.locator("#world-exits [data-act=go]").first
    go.evaluate("""(button, exit) => button.setAttribute("hx-vals", JSON.stringify(
        {action: "act", op: "go", exit: exit, at: "stale"}))""", elsewhere)
    page.evaluate("() => document.querySelector('#world-exits .act-buttons').insertAdjacentHTML('beforeend', "
                  "'<span id=\"refusal-stale\"></span>')")
    go.click()
    page.wait_for_selector("#refusal-stale:not(:empty)")
    assert "you are not there" in page.inner_text("#refusal-stale")
    assert replies(page) == before and page.is_enabled("#send-button")


def scroll_width(page):
    return page.evaluate("document.scrollingElement.scrollWidth")


def test_on_a_phone_the_story_and_send_come_first_the_panels_are_a_drawer_and_no_page_scrolls_sideways(
        app, fake, browser, tmp_path):
    page = open_page(browser, PHONE)
    sign_in(app, page)
    fake.script("The fisherman looks up from his nets.")
    page.fill("form#action-form [name=text]", "greet the fisherman")
    page.click("form#action-form button[type=submit]")
    page.wait_for_selector("#story [data-role=narrator][data-node-id]")
    settled(page)
    page.screenshot(path=str(tmp_path / "play-390.png"))
    found = page.evaluate("""() => Object.fromEntries(['#story', '#action-text', '#send-button', '#side-panels']
        .map(s => [s, document.querySelector(s).getBoundingClientRect().toJSON()]))""")
    assert found["#story"]["top"] < PHONE["height"], "the story is on the first screen"
    for name in ("#action-text", "#send-button"):
        assert 0 <= found[name]["top"] and found[name]["bottom"] <= PHONE["height"], f"{name} on the first screen"
    assert found["#side-panels"]["left"] >= PHONE["width"], "the panels wait in their drawer"
    assert scroll_width(page) <= PHONE["width"]

    page.click("#drawer-toggle")
    page.wait_for_function("() => document.querySelector('#side-panels').getBoundingClientRect().left < 10")
    first = page.eval_on_selector_all("#side-panels details.side-panel", "ds => ds.map(d => [d.dataset.panel, d.open])")
    assert first[:3] == [["world", True], ["map", True], ["items", True]], first
    assert all(not opened for _, opened in first[3:]), "the others wait closed"
    page.wait_for_selector("#world-panel #world-exits")
    page.screenshot(path=str(tmp_path / "drawer-390.png"))
    assert scroll_width(page) <= PHONE["width"]
    page.click("[data-action=close-drawer]")
    page.wait_for_function("() => document.querySelector('#side-panels').getBoundingClientRect().left >= 390")

    reply = page.get_attribute("#story [data-role=narrator][data-node-id]", "data-node-id")
    pages = {"recall": "/campaigns/1/minds/protagonist/", "knowledge": "/campaigns/1/knowledge/",
             "map": "/campaigns/1/state/world/map/", "here": "/campaigns/1/state/world/"}
    for name, path in pages.items():
        page.goto(app["base"] + path)
        assert scroll_width(page) <= PHONE["width"], name
    page.goto(app["base"] + "/campaigns/1/")
    page.click("[data-action=author-view]")
    page.wait_for_selector("[data-action=player-view]")
    for name, path in {**pages, "inspector": f"/campaigns/1/replies/{reply}/inspect/",
                       "recall of another": "/campaigns/1/minds/old-tam/", "play": "/campaigns/1/"}.items():
        page.goto(app["base"] + path)
        page.wait_for_timeout(300)
        page.screenshot(path=str(tmp_path / f"{name}-390.png"), full_page=True)
        assert scroll_width(page) <= PHONE["width"], f"{name}, in the author's view"
    page.click("[data-action=player-view]")
    page.wait_for_selector("[data-action=author-view]")
