"""The inspector's table of what a reply asked of the model server, in headless Chromium (issue 27).

The app runs under Daphne against a fake Ollama with one prompt cache: its
prompt_eval_count is what such a server reads of each prompt, so the table
shows the steps after the reply reading only what they add.
"""

import pytest

from tests.e2e.test_play import app, page, send, settled, sign_in  # noqa: F401 (fixtures)
from tests.fake_ollama import FakeModelServer

pytestmark = pytest.mark.e2e

DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def fake():
    with FakeModelServer(cache_slots=1) as server:
        yield server


def request_rows(page):
    return page.eval_on_selector_all(
        "#model-request-table tbody tr[data-request]",
        "rows => rows.map(r => [r.dataset.request, ...[...r.cells].map(c => c.innerText.trim())])")


def test_the_inspector_shows_each_request_the_reply_made_and_what_the_server_read(app, fake, page, tmp_path):
    fake.script("Rain drums on the lantern-maker's shutters as you step inside.")
    sign_in(app, page)
    send(page, "step inside out of the rain")
    settled(page)
    page.click("#story a[data-inspect]")
    page.wait_for_selector("#model-request-table")

    for name, size in (("desktop", DESKTOP), ("phone", PHONE)):
        page.set_viewport_size(size)
        page.locator("#model-requests").scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / f"inspector-requests-{name}.png"))
        # The table scrolls inside its own box on a phone; the page itself never scrolls sideways.
        wider = page.evaluate("""() => [...document.querySelectorAll('main > *')]
            .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1).map(e => e.id || e.className)""")
        assert wider == [] and page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), \
            (name, wider)

    rows = request_rows(page)
    kinds = [row[0] for row in rows]
    assert kinds[0] == "narration" and "recorder" in kinds, kinds
    for kind, _number, _name, _messages, prompt, shared, new, read, _written in rows[1:]:
        # Each step continued the narration: its prompt begins with the narration's and the reply, and the one-cache
        # server read only part of it (the fake counts words, the table estimates tokens).
        assert int(shared) > 0 and 0 < int(new) < int(prompt), (kind, shared, new, prompt)
        assert read.isdigit() and int(read) < int(prompt), (kind, read, prompt)
    assert "prompt_eval_count" in page.inner_text("#model-request-source")
    page.click("[data-asked='1'] summary")
    assert "keep the record" in page.inner_text("[data-asked='1'] pre")
