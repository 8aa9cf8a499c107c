"""The memory panel in headless Chromium: add a memory by hand, pin it, see the narrator given it, follow undo."""

import pytest

from tests.e2e.test_play import app, author_view, fake, page, send, settled, sign_in  # noqa: F401 — the shared browser fixtures

pytestmark = pytest.mark.e2e


def panel_text(page):
    return page.inner_text("#memory-panel")


def test_a_memory_added_and_pinned_in_the_panel_reaches_the_narrator_and_follows_undo(app, fake, page):  # noqa: F811
    fake.script("The ferryman nods at you.", "Rain on the river.")
    sign_in(app, page)
    author_view(page)  # story memory is the narrator's: the author's view
    send(page, "hail the ferryman")
    settled(page)  # the worker's reload of the panels is done before we write in one
    page.wait_for_selector("#memory-panel #memory-lines")
    assert "No memories on this line yet" in panel_text(page)

    page.click("#memory-write > summary")  # the form that writes is behind a disclosure
    page.fill("#memory-new", "The ferryman owes Edrin <b>a favour</b>.")
    page.click("#memory-panel form.memory-form button")
    page.wait_for_selector("#memory-message")
    assert "The ferryman owes Edrin <b>a favour</b>." in panel_text(page), "typed text shows as text"
    assert "added by hand at depth 2" in panel_text(page)
    page.click("#memory-panel button[value=pin]")
    page.wait_for_function("() => document.querySelector('#memory-panel').innerText.includes('pinned')")

    send(page, "ask the ferryman about the favour")
    page.locator("#story a[data-inspect]").last.click()
    page.wait_for_selector("#memories-used")
    used = page.inner_text("#memory-rows")
    assert "The ferryman owes Edrin <b>a favour</b>." in used and "pinned" in used
    assert "The ferryman owes Edrin" in page.inner_text("[data-section=memories]")
    page.click("text=Back to the story")

    page.wait_for_selector("#memory-panel #memory-lines")
    page.click("[data-action=undo]")
    page.wait_for_function("() => document.querySelectorAll('#story [data-role=narrator][data-node-id]').length === 1")
    page.click("[data-action=undo]")  # back before the turn the memory was typed at
    page.wait_for_function("() => document.querySelectorAll('#story [data-role=narrator][data-node-id]').length === 0")
    page.reload()  # the panel as the page now loads it, whichever of the two refreshes after undo landed last
    page.wait_for_selector("#memory-panel #memory-lines")
    assert "1 more on other lines" in panel_text(page)
    assert "ferryman owes" not in panel_text(page)
