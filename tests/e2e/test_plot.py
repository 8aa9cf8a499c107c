"""The Plot panel in headless Chromium: type a summary, see it escaped with its range, see the narrator given it."""

import pytest

from tests.e2e.test_play import app, author_view, fake, page, send, settled, sign_in  # noqa: F401 — the shared browser fixtures

pytestmark = pytest.mark.e2e


def test_a_summary_typed_in_the_plot_panel_is_shown_escaped_and_reaches_the_narrator(app, fake, page):  # noqa: F811
    fake.script("The gate opens.", "The hall is dark.", "A lantern burns.")
    sign_in(app, page)
    author_view(page)  # writing the plot's summary and the prompt inspector are the author's
    send(page, "open the gate")
    send(page, "enter the hall")
    settled(page)  # the worker's reload of the panels is done before we write in one
    page.wait_for_selector("#plot-panel #plot-write")
    assert "No summary on this line yet" in page.inner_text("#plot-panel")
    page.click("#plot-write > summary")  # the form that writes is behind a disclosure

    page.fill("#plot-text", "Edrin opened the gate <b>and entered</b>.")
    page.click("#plot-panel form.plot-form button")
    page.wait_for_selector("#plot-message")
    panel = page.inner_text("#plot-panel")
    assert "Edrin opened the gate <b>and entered</b>." in panel, "typed text shows as text"
    assert "Covers depths 0–2" in panel and "Typed by you" in panel

    send(page, "look for the lantern")
    page.locator("#story a[data-inspect]").last.click()
    page.wait_for_selector("#checkpoint-anchor")
    assert "covers depths 0–2" in page.inner_text("#checkpoint-anchor")
    assert "Edrin opened the gate <b>and entered</b>." in page.inner_text("[data-section=summary]")
    assert "Verbatim: depths 3–" in page.inner_text("#history-coverage")
    assert "open the gate" not in page.inner_text("[data-section=history]"), "covered turns are not repeated"
