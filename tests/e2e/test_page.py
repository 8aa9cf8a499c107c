"""The play page as a player meets it, in headless Chromium: built around the story, losing nothing typed,
retries as versions to flip through, and no 404s, clipped placeholders or touching buttons."""

import re

import pytest

from tests.e2e.test_play import (  # noqa: F401 — the shared browser fixtures
    CHROMIUM, CHROMIUM_FLAGS, _manage, app, author_view, connected, fake, narrator_nodes, send, settled, sign_in,
)

pytestmark = pytest.mark.e2e

WIDE = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}

# A reply long enough that three of them do not fit in the window.
LONG_REPLY = ("Rain drums on the slate roofs of Greyhollow while the lamplighter's ladder leans against the "
              "wall, forgotten. " * 12).strip()


@pytest.fixture
def browser():
    if CHROMIUM is None:
        pytest.fail("Chromium is not installed; the test command installs it (apt-get install chromium).")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


def open_page(browser, viewport):
    page = browser.new_page(viewport=viewport)
    page.set_default_timeout(15_000)
    return page


def boxes(page, **selectors):
    """Return {name: box} of every selector, all read in one script: one layout, whatever moves between reads.

    The page scrolls itself to keep the action box in view when the story
    column grows (the worker's status line changing length under it), so boxes
    read one by one can each come from a different scroll position.
    """
    return page.evaluate("""selectors => Object.fromEntries(Object.entries(selectors).map(([name, selector]) => {
        const r = document.querySelector(selector).getBoundingClientRect();
        return [name, {top: r.top, bottom: r.bottom, left: r.left, right: r.right}];
    }))""", selectors)


def overlap(a, b):
    """Return True when two boxes share more than half a pixel in both directions."""
    return min(a["right"], b["right"]) - max(a["left"], b["left"]) > 0.5 and \
        min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > 0.5


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1280x900", "390x844"])
def test_the_action_box_is_under_the_story_in_view_after_three_turns_and_nothing_overlaps(
        app, fake, browser, viewport, tmp_path):
    page = open_page(browser, viewport)
    sign_in(app, page)
    for turn in range(3):
        fake.script(f"{turn + 1}. {LONG_REPLY}")
        send(page, f"walk down the lane, turn {turn + 1}")
    page.wait_for_selector("#state-panel h2", state="attached")
    page.wait_for_timeout(300)  # let the panels that reload after the turn settle
    page.screenshot(path=str(tmp_path / f"play-{viewport['width']}.png"))

    found = boxes(page, story="#story", text="#action-text", dock="#action-dock", side="#side-panels",
                  controls="#controls", top="header.top", title=".page-head")
    story, text, dock, side, controls = (found[name] for name in ("story", "text", "dock", "side", "controls"))
    assert story["bottom"] - story["top"] > viewport["height"], "the story is longer than the window"
    assert 0 <= text["top"] and text["bottom"] <= viewport["height"], "the action box is in view without scrolling"
    assert 0 <= dock["top"] and dock["bottom"] <= viewport["height"]
    assert 0 <= dock["top"] - story["bottom"] < 40, "the action box is directly under the story"

    regions = {"top bar": found["top"], "title": found["title"], "story": story, "dock": dock, "panels": side}
    for first in regions:
        for second in regions:
            if first < second:
                assert not overlap(regions[first], regions[second]), f"{first} overlaps {second}"
    assert not overlap(text, controls), "the controls sit beside the action box, not over it"

    if viewport is WIDE:
        assert side["left"] >= story["right"], "the panels are a column beside the story"
        assert controls["left"] >= text["right"], "the controls are beside the action box"
        assert page.eval_on_selector_all("details.side-panel", "ds => ds.every(d => d.open)")
    else:
        assert side["left"] >= viewport["width"], "on a phone the panels wait in their drawer, off the story"
        page.click("#drawer-toggle")
        page.wait_for_function("() => document.querySelector('#side-panels').getBoundingClientRect().left < 10")
        page.click("#side-state > summary")  # a panel beyond the first three opens as a closed section
        page.wait_for_selector("#state-panel h2", state="visible")


def test_a_send_before_the_socket_is_open_is_refused_keeping_the_text_and_asking_nothing(app, fake, browser):
    """The page says whether its socket is open (#play[data-connected], what the tests wait for after sign-in);
    a Send while it is not is refused in words, the text stays, and the reply scripted for it is still there for the
    Send that follows once it is open."""
    page = open_page(browser, WIDE)
    sockets = []

    def first_never_reaches_the_app(socket):
        sockets.append(socket)
        if len(sockets) == 1:
            socket.close(code=1000, reason="not yet")  # closed normally: the page does not reconnect by itself
        else:
            socket.connect_to_server()

    page.route_web_socket(re.compile(r"/ws/play/"), first_never_reaches_the_app)
    page.goto(_manage(app["env"], "login_link", "--base-url", app["base"]))
    page.click("text=The Lantern of Greyhollow")
    page.wait_for_selector("#story [data-role=opening]")
    page.wait_for_function("() => document.querySelector('#connection').innerText.includes('Connection to the app')")
    assert page.get_attribute("#play", "data-connected") == "false"
    fake.script("The ferryman waves you aboard.")
    asked, before = len(fake.bodies("/api/chat")), narrator_nodes(page).count()

    page.fill("#action-text", "hail the ferry")
    page.click("#send-button")
    page.wait_for_function("() => document.querySelector('#turn-error').innerText.includes('Not connected')")
    assert page.input_value("#action-text") == "hail the ferry", "the refused text is kept"
    assert narrator_nodes(page).count() == before and len(fake.bodies("/api/chat")) == asked, "nothing was asked"

    page.reload()
    page.wait_for_selector("#story [data-role=opening]")
    connected(page)
    assert len(sockets) == 2
    send(page, "hail the ferry")
    assert "The ferryman waves you aboard." in narrator_nodes(page).last.inner_text()


def test_text_typed_while_a_reply_streams_is_kept_when_it_finishes(app, fake, browser):
    page = open_page(browser, WIDE)
    sign_in(app, page)
    fake.chunk_delay(0.05)
    fake.script("The ferry creaks" + " slowly" * 30 + ".")
    try:
        before = narrator_nodes(page).count()
        page.fill("#action-text", "call out to the ferryman")
        page.click("#send-button")
        page.wait_for_function("() => document.querySelector('#pending-text')?.innerText.includes('slowly')")
        assert page.input_value("#action-text") == "", "the sent action moved into the story"
        page.type("#action-text", "then climb aboard")
        page.fill("#action-direction", "keep it quiet")
        page.wait_for_function(
            "n => document.querySelectorAll('#story [data-role=narrator][data-node-id]').length === n",
            arg=before + 1)
    finally:
        fake.chunk_delay(0)
    assert page.input_value("#action-text") == "then climb aboard"
    assert page.input_value("#action-direction") == "keep it quiet"
    assert page.is_checked("#action-form [name=mode][value=do]")


def test_a_paste_over_the_limit_is_counted_refused_with_the_limit_named_and_kept_whole(app, fake, browser):
    page = open_page(browser, WIDE)
    sign_in(app, page)
    before = narrator_nodes(page).count()
    page.fill("#action-text", "a" * 3_500)
    assert page.inner_text("#action-count") == "3,500 / 4,000 characters", "a count shows near the limit"
    pasted = "The whole of the lamplighter's ledger. " * 2_700  # about 100 KB
    page.fill("#action-text", pasted)
    assert page.input_value("#action-text") == pasted, "nothing is cut"
    assert "over the limit" in page.inner_text("#action-count")
    page.click("#send-button")
    page.wait_for_function("() => document.querySelector('#turn-error').innerText.includes('the limit is 4,000')")
    error = page.inner_text("#turn-error")
    assert f"{len(pasted.strip()):,} characters long" in error and "Write what you do" not in error
    assert page.input_value("#action-text") == pasted, "the refused text is still there, whole"
    assert narrator_nodes(page).count() == before

    page.fill("#action-text", "")
    page.click("#send-button")
    page.wait_for_function("() => document.querySelector('#turn-error').innerText.includes('Write what you do')")


def test_a_failed_turn_gives_the_text_back_with_what_was_typed_meanwhile(app, fake, browser):
    page = open_page(browser, WIDE)
    sign_in(app, page)
    fake.chunk_delay(0.1)
    fake.fail_mid_stream(after_chunks=8)
    fake.script(" slowly" * 20)
    try:
        page.fill("#action-text", "search the cellar")
        page.fill("#action-direction", "be brief")
        page.click("#send-button")
        page.wait_for_function("() => document.querySelector('#pending-text')?.innerText.includes('slowly')")
        page.type("#action-text", "and the attic")
        page.wait_for_function("() => document.querySelector('#turn-error').innerText.includes('Nothing was saved')")
    finally:
        fake.chunk_delay(0)
    assert page.input_value("#action-text") == "search the cellar\nand the attic"
    assert page.input_value("#action-direction") == "be brief"
    assert page.is_enabled("#send-button") and page.query_selector("#pending-reply") is None


def introduce(name):
    return {"events": [{"type": "introduce", "subject": name, "object": "character", "value": "", "narrator_only": False}]}


def test_retries_are_versions_flipped_in_place_with_the_panels_following(app, fake, browser):
    page = open_page(browser, WIDE)
    sign_in(app, page)
    author_view(page)  # the whole state and the plot's form are the author's
    page.evaluate("window.__samePage = true")
    fake.script("FIRST VERSION: Sella waits at the well.", "SECOND VERSION: Tobin waits at the well.")
    settled(page)  # the recorder is the first to ask after a reply: each recording below is its own
    fake.script_json(introduce("Sella"))
    send(page, "go to the well")
    page.wait_for_function("() => document.querySelector('#state-panel')?.innerText.includes('Sella')",
                           timeout=20_000)
    settled(page)
    fake.script_json(introduce("Tobin"))
    page.click("[data-action=retry]")
    page.wait_for_function("() => document.querySelector('#story').innerText.includes('SECOND VERSION')")
    page.wait_for_selector("#story [data-versions='2/2']")
    page.wait_for_function("() => document.querySelector('#state-panel')?.innerText.includes('Tobin')",
                           timeout=20_000)
    assert "FIRST VERSION" not in page.inner_text("#story")
    assert page.inner_text("#story .versions [data-versions]") == "2 / 2"

    page.click("#story [data-action=version-previous]")
    page.wait_for_selector("#story [data-versions='1/2']")
    assert "FIRST VERSION" in page.inner_text("#story") and "SECOND VERSION" not in page.inner_text("#story")
    page.wait_for_function("() => !document.querySelector('#state-panel').innerText.includes('Tobin')")
    assert "Sella" in page.inner_text("#state-panel"), "the state panel follows the version shown"
    assert page.is_disabled("#story [data-action=version-previous]")

    page.click("#story [data-action=version-next]")
    page.wait_for_selector("#story [data-versions='2/2']")
    assert "SECOND VERSION" in page.inner_text("#story")
    page.wait_for_function("() => document.querySelector('#state-panel').innerText.includes('Tobin')")
    assert page.evaluate("window.__samePage") is True, "flipping never reloads the page"


def test_a_panel_being_written_in_is_not_redrawn_under_the_persons_hands(app, fake, browser):
    page = open_page(browser, WIDE)
    sign_in(app, page)
    author_view(page)  # the whole state and the plot's form are the author's
    fake.script("The gate opens.", "The hall is dark.")
    send(page, "open the gate")
    send(page, "enter the hall")
    settled(page)
    page.click("#plot-write > summary")
    page.fill("#plot-text", "A draft of the plot, half written")
    page.click("#state-corrections > summary")  # open, nothing typed
    before = narrator_nodes(page).count()
    page.click("[data-action=undo]")  # the story moves: every panel reads itself again
    page.wait_for_function(
        "n => document.querySelectorAll('#story [data-role=narrator][data-node-id]').length === n", arg=before - 1)
    page.wait_for_timeout(1_000)  # the panels' loaders have answered
    assert page.input_value("#plot-text") == "A draft of the plot, half written"
    assert page.eval_on_selector("#plot-write", "d => d.open")
    assert page.eval_on_selector("#state-corrections", "d => d.open"), "an open disclosure stays open"
    page.click("#plot-panel form.plot-form button")
    page.wait_for_selector("#plot-message")
    assert "A draft of the plot, half written" in page.inner_text("#plot-summary")


def test_no_page_asks_for_something_missing(app, fake, browser):
    page = open_page(browser, WIDE)
    missing = []
    page.on("response", lambda response: missing.append(response.url) if response.status >= 400 else None)
    sign_in(app, page)
    page.wait_for_selector("#state-panel h2", state="attached")
    page.goto(app["base"] + "/")
    page.wait_for_selector("ul.campaigns")
    page.wait_for_timeout(300)
    assert missing == []
    assert page.evaluate("fetch('/favicon.ico').then(r => r.ok && r.headers.get('content-type'))") == "image/svg+xml"


def test_placeholders_fit_their_fields_and_no_buttons_touch(app, fake, browser, tmp_path):
    for viewport in (WIDE, PHONE):
        page = open_page(browser, viewport)
        sign_in(app, page)
        author_view(page)  # the correction forms and story memory are the author's
        page.wait_for_selector("#state-panel h2", state="attached")
        if viewport is PHONE:
            page.click("#drawer-toggle")
            page.wait_for_function("() => document.querySelector('#side-panels').getBoundingClientRect().left < 10")
            for summary in page.query_selector_all("details.side-panel:not([open]) > summary"):
                summary.click()
        page.wait_for_selector("#memory-panel .memory-lines", state="visible")
        for summary in page.query_selector_all("#side-panels details:not([open]) > summary"):
            summary.click()  # every disclosure open: the correction forms and the per-line edits
        assert page.eval_on_selector("#state-corrections", "d => d.open")
        clipped = page.evaluate("""() => {
            const canvas = document.createElement('canvas').getContext('2d');
            return [...document.querySelectorAll('#state-corrections input[placeholder]')].filter(input => {
                const style = getComputedStyle(input);
                canvas.font = `${style.fontSize} ${style.fontFamily}`;
                const room = input.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
                return canvas.measureText(input.placeholder).width > room;
            }).map(input => input.placeholder);
        }""")
        page.locator("#state-corrections").screenshot(path=str(tmp_path / f"corrections-{viewport['width']}.png"))
        assert clipped == [], f"placeholders cut off at {viewport['width']}px: {clipped}"
        if viewport is PHONE:  # the drawer closed again: its buttons lie beside the story's, not over them
            page.click("[data-action=close-drawer]")
            page.wait_for_function("() => document.querySelector('#side-panels').getBoundingClientRect().left >= 390")
        touching = page.evaluate("""() => {
            const buttons = [...document.querySelectorAll('#play button')].filter(b => b.offsetParent !== null);
            const boxes = buttons.map(b => [b, b.getBoundingClientRect()]);
            const found = [];
            for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
                const [a, ra] = boxes[i], [b, rb] = boxes[j];
                const gapX = Math.max(ra.left, rb.left) - Math.min(ra.right, rb.right);
                const gapY = Math.max(ra.top, rb.top) - Math.min(ra.bottom, rb.bottom);
                if (gapX < 4 && gapY < 4) found.push(a.textContent.trim() + ' / ' + b.textContent.trim());
            }
            return found;
        }""")
        assert touching == [], f"buttons touching at {viewport['width']}px: {touching}"
        page.close()
