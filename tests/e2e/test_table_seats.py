"""End to end in headless Chromium (issue 30): the owner opens a seat and invites; a second browser context takes
the link, makes an account and lands on the play page as that character; a whisper reaches the owner's page live;
removing the seat closes the player's page. At 1280x900 and at 390x844, with screenshots."""

import os
from pathlib import Path

import pytest

from tests.e2e.test_play import (
    CHROMIUM,
    CHROMIUM_FLAGS,
    _free_port,
    _manage,
    connected,
    serve,
    sign_in,
)
from tests.fake_ollama import FakeModelServer

pytestmark = pytest.mark.e2e

SIZES = {"wide": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
SHOTS = Path(os.environ.get("STORYTELLER_SHOTS", "/tmp/storyteller-shots"))


@pytest.fixture(scope="module")
def fake():
    with FakeModelServer() as server:
        yield server


@pytest.fixture(scope="module")
def app(tmp_path_factory, fake):
    env = {**os.environ, "STORYTELLER_DATA_DIR": str(tmp_path_factory.mktemp("data")),
           "STORYTELLER_LLM_URL": fake.url, "STORYTELLER_LLM_API": "ollama"}
    _manage(env, "migrate", "--noinput")
    _manage(env, "seed_demo")
    port = _free_port()
    process = serve(env, port)
    yield {"base": f"http://127.0.0.1:{port}", "env": env}
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture
def browser(app):
    if CHROMIUM is None:
        pytest.fail("Chromium is not installed; the test command installs it (apt-get install chromium).")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


def _shot(page, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"table-{name}.png"), full_page=True)


def _fits(page):
    """The page is not wider than the window (nothing to scroll sideways for)."""
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


@pytest.mark.parametrize("size", ["wide", "phone"])
def test_an_invited_friend_takes_a_seat_and_plays_as_that_character(app, browser, size):
    owner_context = browser.new_context(viewport=SIZES[size])
    owner = owner_context.new_page()
    owner.set_default_timeout(15_000)
    sign_in(app, owner)
    owner.click("[data-table]")
    owner.wait_for_selector("#seats")
    owner.select_option("select[data-field=character]", label="Old Tam")
    owner.click("[data-action=open-seat]")
    owner.wait_for_selector("#seats-notice")
    seat = owner.locator("#seats .seat").last
    seat.locator("[data-action=invite]").click()
    link = owner.locator("[data-link]").input_value()
    assert link.startswith(app["base"] + "/join/")
    assert _fits(owner)
    _shot(owner, f"seats-{size}")

    friend_context = browser.new_context(viewport=SIZES[size])  # another browser: no cookie of the owner's
    friend = friend_context.new_page()
    friend.set_default_timeout(15_000)
    frames = []
    friend.on("websocket", lambda ws: ws.on("framereceived", lambda frame: frames.append(frame)))
    friend.goto(link)
    assert "play Old Tam" in friend.inner_text("#join")
    assert _fits(friend)
    _shot(friend, f"join-{size}")
    friend.fill("[data-field=name]", f"Robin {size}")
    friend.click("[data-action=join]")
    friend.wait_for_selector("#story [data-role=opening]")
    connected(friend)
    assert "You play Old Tam." in friend.inner_text("#playing-as")
    assert friend.locator("[data-action=undo], [data-action=retry], #view-switch, [data-inspect]").count() == 0
    friend.wait_for_selector("#world-panel", state="attached")
    friend.wait_for_selector("#map-panel", state="attached")
    # A seat's Here and map have no buttons: what a seated player does goes into the table's round.
    assert friend.locator("#world-panel button.act, #map-panel [data-travel]").count() == 0
    assert _fits(friend)
    _shot(friend, f"seat-play-{size}")
    if size == "phone":
        friend.click("#drawer-toggle")
        friend.wait_for_selector("#world-panel", state="visible")
        friend.wait_for_timeout(600)  # the drawer slides in
        _shot(friend, "seat-drawer-phone")
        friend.click("[data-action=close-drawer]")

    # The link is spent: opened again (anyone, anywhere) it seats nobody.
    stranger = browser.new_context(viewport=SIZES[size]).new_page()
    stranger.goto(link)
    assert "used already" in stranger.inner_text("#join-refused")

    # A whisper reaches the owner's open play page live, and only there.
    owner.goto(app["base"] + owner.url.split(app["base"])[1].replace("table/", ""))
    connected(owner)
    friend.fill(".whisper-form [name=text]", f"Tam pockets the brass key ({size})")
    friend.click("[data-action=whisper]")
    friend.wait_for_selector("#whisper-notice")
    owner.wait_for_selector(f"#whisper-list >> text=Tam pockets the brass key ({size})")
    owner.locator("#whispers-panel").scroll_into_view_if_needed()
    assert _fits(owner)
    _shot(owner, f"owner-whisper-{size}")
    assert "brass key" not in stranger.content()

    # Removed: the player's socket closes and the page is gone for them.
    owner.goto(owner.url.rstrip("/") + "/table/")
    owner.once("dialog", lambda dialog: dialog.accept())
    owner.locator("#seats .seat").last.locator("[data-action=remove]").click()
    owner.wait_for_selector("#seats-notice >> text=removed")
    friend.wait_for_selector("#play:not([data-connected=true])", state="attached", timeout=5_000)
    response = friend.goto(friend.url)
    assert response.status == 404
    assert all("brass key" not in (frame if isinstance(frame, str) else "") for frame in frames)
    owner_context.close()
    friend_context.close()
