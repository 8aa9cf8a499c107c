"""The state panel in headless Chromium: recorded after a turn, corrected by hand, following undo."""

import pytest

from tests.e2e.test_play import app, author_view, fake, page, send, sign_in  # noqa: F401 — the shared browser fixtures

pytestmark = pytest.mark.e2e


def event(type, subject="", object="", value="", narrator_only=False):
    return {"type": type, "subject": subject, "object": object, "value": value, "narrator_only": narrator_only}


def panel_text(page):
    return page.inner_text("#state-panel")


def test_the_state_is_recorded_after_a_turn_corrected_in_the_panel_and_follows_undo(app, fake, page):  # noqa: F811
    fake.script("The cottage door opens; Mara's ledger lies on the table.")
    recorded = {"events": [
        event("introduce", "Lamplighter's cottage", "place"),
        event("scene", "", "Lamplighter's cottage", "Edrin stands in the empty cottage."),
        event("introduce", "ledger", "item", "Mara's lamp-oil ledger"),
        {**event("item_changes", "Edrin"), "data": {"ops": [{"op": "take", "item": "ledger"}]}},
        event("move", "Edrin", "moon"),  # fits the schema; the world refuses it
    ]}
    fake.script_json(recorded)
    sign_in(app, page)
    author_view(page)  # the whole state, its events and the correction forms are the author's
    send(page, "open the cottage door")
    page.wait_for_function(
        "() => document.querySelector('#state-panel')?.dataset.recording === 'applied'", timeout=20_000)
    text = panel_text(page)
    assert "Edrin stands in the empty cottage." in text, text
    assert "Edrin Vale possesses ledger." in text

    page.click("#state-panel a:has-text('its events')")
    page.wait_for_selector("#state-events")
    events = page.inner_text("#state-events")
    assert "rejected: unknown entity 'moon'" in events and events.count("applied") >= 4
    page.click("text=Back to the story")
    page.wait_for_selector("#state-panel[data-recording=applied]")

    page.click("#state-corrections summary")
    form = page.locator("form[data-form=add_fact]")
    form.locator("[name=value]").fill("Mara hid the ledger <b>on purpose</b>.")
    form.locator("[name=subject]").fill("ledger")
    form.locator("[name=narrator_only]").check()
    form.locator("button").click()
    page.wait_for_selector("#state-message")
    [line] = [li for li in page.locator("#state-fact li").all() if "Mara hid the ledger" in li.inner_text()]
    assert "narrator only" in line.inner_text().lower() and "manual correction" in line.inner_text()
    assert "<b>on purpose</b>" in line.inner_text(), "typed text shows as text"

    page.click("[data-action=undo]")
    page.wait_for_function(
        "() => !document.querySelector('#state-panel').innerText.includes('possesses ledger')")
    assert "Mara hid the ledger" not in panel_text(page)
    page.click("[data-action=redo]")
    page.wait_for_function(
        "() => document.querySelector('#state-panel').innerText.includes('Mara hid the ledger')")
