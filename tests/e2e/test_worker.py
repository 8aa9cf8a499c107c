"""The post-turn worker's status on the play page in headless Chromium: a failure shows, and a retry clears it."""

import pytest

from tests.e2e.test_play import app, author_view, fake, page, send, sign_in  # noqa: F401 — the shared browser fixtures

pytestmark = pytest.mark.e2e


def test_a_failed_recording_shows_under_the_story_and_a_retry_brings_it_up_to_date(app, fake, page):  # noqa: F811
    fake.script("The lantern gutters and the harbour goes dark.")
    fake.script_json("this is not JSON {", "this is not JSON {")  # the reply, and again when asked once more
    sign_in(app, page)
    send(page, "wait by the lantern")
    page.wait_for_selector("#worker-status[data-worker=failed]", timeout=20_000)
    # The player's view: one sentence, with what to do; which step failed, and why, is the author's.
    status = page.inner_text("#worker-status")
    assert "Some of the work after turn 1 did not finish; the story itself is safe." in status
    assert "Recording" not in status and "JSON" not in status
    assert page.locator("#worker-status [data-action=retry-worker]").count() == 1
    author_view(page)
    page.wait_for_selector("#worker-status[data-worker=failed]")
    page.wait_for_selector("#state-panel[data-recording=failed]")
    # The buttons sit inside the lines they belong to (a <form> inside a <p> closed it and landed outside).
    page.wait_for_selector("#state-recording [data-action=retry-recording]")
    assert page.locator("#worker-status [data-action=retry-worker]").count() == 1
    status = page.inner_text("#worker-status")
    assert "Recording for turn 1 failed:" in status and "not JSON" in status and "Up to date" not in status
    assert "The lantern gutters" in page.inner_text("#story"), "the accepted reply stands"

    fake.script_json({"events": []})
    page.click("[data-action=retry-worker]")
    page.wait_for_selector("#worker-status[data-worker=done]", timeout=20_000)
    assert "Up to date." in page.inner_text("#worker-status")
    page.wait_for_selector("#state-panel[data-recording=applied]")  # the panels load again after the retry
