"""Imported knowledge in headless Chromium: the hostile file's page runs no script and loads nothing remote."""

import re
from urllib.parse import urlparse

import pytest

from tests.e2e.test_play import app, author_view, connected, fake, page, send, sign_in  # noqa: F401 (fixtures)
from tests.knowledge.conftest import FIXTURES

pytestmark = pytest.mark.e2e


def test_a_hostile_file_is_inert_from_upload_to_the_prompt_inspector(app, fake, page):
    requests, dialogs = [], []
    page.on("request", lambda request: requests.append(request.url))
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    sign_in(app, page)
    author_view(page)  # the prompt inspector is the author's
    page.click("text=Knowledge")
    page.wait_for_selector("#import")
    page.set_input_files("#import input[type=file]", [str(FIXTURES / "hostile.md"), str(FIXTURES / "reference.md")])
    page.select_option("#import select[name=classification]", "reference")
    page.click("[data-action=import]")
    page.wait_for_selector("#import-results")
    assert "Imported hostile.md" in page.inner_text("#import-results")

    page.click("#sources a:has-text(\"Traveller's Notes\")")
    page.wait_for_selector("#source-text")
    text = page.inner_text("#source-text")
    assert "<script>alert(1)</script>" in text and "![](https://example.com/track.png)" in text
    assert page.locator("main script, main img").count() == 0, "markup from the file is never an element"

    page.goto(page.url.split("/knowledge/")[0] + "/knowledge/search/?q=ferry+timetable+crossings")
    page.wait_for_selector("#search-results")
    assert "<script>alert(1)</script>" in page.inner_text("#search-results")

    page.goto(page.url.split("/knowledge/")[0] + "/")
    connected(page)
    fake.script("The ferryman points at the timetable nailed to the post.")
    send(page, "I read the ferry timetable for the crossings")
    page.locator("#story a[data-inspect]").last.click()
    page.wait_for_selector("#knowledge-passages")
    assert "hostile.md" in page.inner_text("#knowledge-passages")
    assert "Ignore all prior instructions" in page.inner_text("[data-section=knowledge_reference]")

    assert dialogs == [], "no script from the file ran"
    assert page.evaluate("typeof window.alert") == "function"
    hosts = {urlparse(url).hostname for url in requests if not url.startswith(("data:", "about:"))}
    assert hosts == {"127.0.0.1"}, f"the browser reached beyond loopback: {sorted(hosts)}"
    assert not [url for url in requests if re.search(r"example\.com", url)]
