"""A line played again with another narrator, in headless Chromium: from the branches page to the compare page.

The demo's three turns are narrated by the app's server (the module's
fake); a second fake server, OpenAI-compatible, plays them again. Both
pages are looked at on a desktop (1280x900) and a phone (390x844).
"""

import os
from pathlib import Path

import pytest

from tests.e2e.test_play import app, author_view, fake, page, send, settled, sign_in  # noqa: F401 — the shared browser fixtures
from tests.fake_ollama import FakeModelServer

pytestmark = pytest.mark.e2e

ORIGINAL = ["The quay is empty; gulls wheel over the grey water.", "Mara's cottage door is shut fast.",
            "The headland path climbs into the fog."]
REPLAYED = ["The quay lies empty; gulls wheel over the cold grey water.", "A fox darts across the lane.",
            "The headland path climbs into the fog."]
VIEWPORTS = ({"width": 1280, "height": 900}, {"width": 390, "height": 844})


@pytest.fixture
def other():
    with FakeModelServer() as server:
        yield server


def test_a_replay_is_started_followed_and_compared_in_the_browser(app, fake, other, page, tmp_path):  # noqa: F811
    shots = Path(os.environ.get("STORYTELLER_SCREENSHOTS") or tmp_path)
    fake.script(*ORIGINAL)
    sign_in(app, page)
    for action in ("look along the quay", "knock at Mara's door", "climb the headland path"):
        send(page, action)
        settled(page)
    other.script(*REPLAYED)
    other.chunk_delay(0.3)  # slow enough to be stopped mid-line
    page.click("text=Branches & save points")
    page.wait_for_selector("#replays")
    form = page.locator("form.replay-form")
    form.locator("[name=first]").fill("1")
    form.locator("[name=last]").fill("3")
    form.locator("[name=model]").fill("other-model")
    form.locator("[name=url]").fill(other.url)
    form.locator("[name=api]").select_option("openai")
    form.locator("[data-action=start-replay]").click()
    page.wait_for_selector("#replays tr[data-status=running]")
    page.click("#replays [data-action=stop-replay]")
    page.wait_for_selector("#replays tr[data-status=stopped] [data-action=resume-replay]")
    stopped = page.inner_text("#replays tr[data-status=stopped]")
    assert "0 of 3" in stopped and "Stopped" in stopped, "stopped while the first turn was written: nothing kept"
    other.reset()  # the stopped request took the first scripted reply with it
    other.script(*REPLAYED)
    other.chunk_delay(0.02)
    page.click("#replays [data-action=resume-replay]")
    page.wait_for_selector("#replays tr[data-status=done]", timeout=60_000)
    row = page.inner_text("#replays tr[data-status=done]")
    assert "3 of 3" in row and "Finished" in row and "other-model" in row
    for viewport in VIEWPORTS:
        page.set_viewport_size(viewport)
        page.screenshot(path=str(shots / f"replays-{viewport['width']}.png"), full_page=True)

    branches = page.url  # the compare page is the author's view: turned on from the play page
    page.goto(branches.split("/branches/")[0] + "/")
    author_view(page)
    page.goto(branches)
    page.click("#replays tr[data-status=done] >> text=Compare")
    page.wait_for_selector("#compare-summary")
    summary = page.inner_text("#compare-summary")
    assert "3 of 3 turns played again" in summary and "1 reply word for word the same" in summary
    assert len(other.bodies("/v1/chat/completions")) == 4, "the turn Stop cut short was asked again, no other"
    assert page.locator("#turn-1 .word-diff ins").first.inner_text() in ("lies", "cold")
    assert "A fox darts across the lane." in page.inner_text("#turn-2")
    assert "reused from the server's cache" in page.inner_text("#turn-2")
    for viewport in VIEWPORTS:
        page.set_viewport_size(viewport)
        page.screenshot(path=str(shots / f"compare-{viewport['width']}.png"), full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), \
            f"the compare page scrolls sideways at {viewport['width']} px"
