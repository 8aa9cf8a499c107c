"""The model settings page in headless Chromium: what plays, unclipped on a wide and a narrow screen; a visible test."""

import pytest

from tests.e2e.test_play import app, fake, page, sign_in  # noqa: F401 — the shared browser fixtures

pytestmark = pytest.mark.e2e

# Every fact of a campaign's row, and its model choice, inside its own box and inside the window; a select's
# chosen option (whose overflow no scrollWidth shows) measured in the select's own font, beside its arrow.
UNCLIPPED = """() => {
    const pen = document.createElement('canvas').getContext('2d');
    const cut = e => {
        if (e.tagName !== 'SELECT') return e.scrollWidth > e.clientWidth + 1;
        pen.font = getComputedStyle(e).font;
        return pen.measureText(e.options[e.selectedIndex].text).width + 30 > e.clientWidth;
    };
    return [...document.querySelectorAll('.model-facts dd, .model-choice select, .model-choice button')]
        .filter(e => cut(e) || e.getBoundingClientRect().right > window.innerWidth)
        .map(e => e.outerHTML.slice(0, 120));
}"""


@pytest.mark.parametrize("width,height", [(1280, 900), (390, 844)])
def test_each_campaign_shows_its_model_window_and_budget_unclipped(app, fake, page, width, height):  # noqa: F811
    page.set_viewport_size({"width": width, "height": height})
    sign_in(app, page)
    page.goto(app["base"] + "/settings/models/")

    row = page.locator(".campaign-model").first
    assert row.locator("[data-fact=plays] strong").inner_text() == "qwen2.5:3b-instruct"
    assert row.locator("[data-fact=window]").inner_text().startswith("32768 tokens — the most this model reads")
    assert row.locator("[data-fact=budget]").inner_text().startswith("4096 tokens — what this campaign sends")
    assert page.evaluate(UNCLIPPED) == []
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


def test_test_connection_shows_its_result(app, fake, page):  # noqa: F811
    sign_in(app, page)
    page.goto(app["base"] + "/settings/models/")
    assert page.locator("#connection-status [data-tested]").count() == 0

    page.click("[data-action=test-connection]")

    result = page.locator("#connection-status [data-tested]")
    result.wait_for()
    assert result.is_visible()
    assert "the server answers, with 2 models." in result.inner_text()
