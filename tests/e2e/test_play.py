"""End to end in headless Chromium against the real app (Daphne) and the fake Ollama server.

Plays two turns, undoes, retries and opens the inspector, exactly as a person
would, through the stable hooks the play page promises.
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.fake_ollama import FakeModelServer

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _manage(env, *args):
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def fake():
    with FakeModelServer() as server:
        yield server


@pytest.fixture(scope="module")
def app(tmp_path_factory, fake):
    """Run the real app under Daphne on a free loopback port, with its own data folder."""
    port = _free_port()
    env = {
        **os.environ,
        "STORYTELLER_DATA_DIR": str(tmp_path_factory.mktemp("data")),
        "STORYTELLER_LLM_URL": fake.url,
        "STORYTELLER_LLM_API": "ollama",
    }
    _manage(env, "migrate", "--noinput")
    _manage(env, "seed_demo")
    process = serve(env, port)
    yield {"base": f"http://127.0.0.1:{port}", "env": env}
    process.terminate()
    process.wait(timeout=10)


def serve(env, port, daphne=("-m", "daphne")):
    """Start the app under Daphne on ``port`` and return its process once it answers.

    Its log goes to a file, not a pipe: a pipe nobody reads fills after 64 KiB of log, and the app's next line
    then blocks its event loop (storyteller.diagnostics.load.LiveApp met it)."""
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        [sys.executable, *daphne, "-b", "127.0.0.1", "-p", str(port), "storyteller.asgi:application"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/login/", timeout=1)
            return process
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    process.wait(timeout=10)
    log.seek(0)
    pytest.fail("the app did not start: " + log.read().decode(errors="replace")[-2000:])


@pytest.fixture
def page(app):
    if CHROMIUM is None:
        pytest.fail("Chromium is not installed; the test command installs it (apt-get install chromium).")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page()
        page.set_default_timeout(15_000)
        yield page
        browser.close()


def sign_in(app, page):
    page.goto(_manage(app["env"], "login_link", "--base-url", app["base"]))
    page.click("text=The Lantern of Greyhollow")
    page.wait_for_selector("#story [data-role=opening]")
    connected(page)


def connected(page):
    """Wait until the play page's socket is open: before that the page refuses a Send (keeping the text)."""
    page.wait_for_selector("#play[data-connected=true]", state="attached")


def author_view(page):
    """Turn on the campaign's author's view from the play page, if it is off (the tools these tests use, the
    inspector, the correction forms, memory and everyone's whereabouts, are the author's; issue 24)."""
    if page.locator("[data-action=author-view]").count():
        page.click("[data-action=author-view]")
        page.wait_for_selector("[data-action=player-view]")
    connected(page)


def narrator_nodes(page):
    return page.locator("#story [data-role=narrator][data-node-id]")


def send(page, text):
    before = narrator_nodes(page).count()
    page.fill("form#action-form [name=text]", text)
    page.click("form#action-form button[type=submit]")
    page.wait_for_function(
        "n => document.querySelectorAll('#story [data-role=narrator][data-node-id]').length === n", arg=before + 1
    )


def settled(page):
    """Wait until the post-turn worker is not running: nothing reloads the panels or takes a scripted reply then."""
    page.wait_for_selector("#worker-status[data-worker]:not([data-worker=running])", state="attached", timeout=30_000)


def test_play_two_turns_undo_retry_and_inspect(app, fake, page, tmp_path):
    fake.script(
        'The door opens onto a hall. <img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>',
        "A lantern burns at the far end.",
        "RETRIED: the hall is empty and cold.",
    )
    sign_in(app, page)

    send(page, "open the door")
    first = narrator_nodes(page).nth(0)
    assert "The door opens onto a hall." in first.inner_text()
    assert "<script>" in first.inner_text(), "markup from the model shows as text"
    assert page.evaluate("window.__pwned") is None

    send(page, "walk towards the light")
    assert "A lantern burns" in narrator_nodes(page).nth(1).inner_text()
    depths = page.eval_on_selector_all("#story [data-node-id]", "els => els.map(e => +e.dataset.depth)")
    assert depths == [0, 1, 2, 3, 4]

    page.click("[data-action=undo]")
    page.wait_for_function("() => document.querySelectorAll('#story [data-role=narrator][data-node-id]').length === 1")
    assert "A lantern burns" not in page.inner_text("#story")

    page.click("[data-action=retry]")
    page.wait_for_function(
        "() => document.querySelector('#story').innerText.includes('RETRIED: the hall is empty and cold.')"
    )
    page.wait_for_selector("#story [data-role=narrator][data-node-id]")
    assert narrator_nodes(page).count() == 1
    assert "The door opens onto a hall." not in page.inner_text("#story")
    assert page.inner_text("#turn-error").strip() == ""
    page.screenshot(path=str(tmp_path / "play.png"), full_page=True)

    # Redo is unavailable after a retry: the retried reply is the newest thing on its branch.
    assert page.is_disabled("[data-action=redo]")

    assert page.locator("#story a[data-inspect]").count() == 0, "what the narrator was told is the author's"
    author_view(page)
    page.click("#story a[data-inspect]")
    page.wait_for_selector("[data-section=player_input]")
    text = page.inner_text("main")
    assert "What the narrator was told" in text
    assert "open the door" in page.inner_text("[data-section=player_input]")
    assert "The door opens onto a hall." not in page.inner_text("[data-section=history]"), \
        "a retry's prompt never contains the reply it replaces"
    assert page.inner_text("[data-total]").strip().isdigit()


def test_a_failed_turn_shows_the_error_inline_and_keeps_the_text(app, fake, page):
    sign_in(app, page)
    fake.not_found()
    page.fill("form#action-form [name=text]", "search the cellar")
    page.click("form#action-form button[type=submit]")
    page.wait_for_function("() => document.querySelector('#turn-error').innerText.includes('ollama pull')")
    assert page.input_value("form#action-form [name=text]") == "search the cellar"


def test_stop_cancels_a_streaming_reply_and_saves_nothing(app, fake, page):
    sign_in(app, page)
    before = narrator_nodes(page).count()
    fake.chunk_delay(0.1)
    fake.script(" slowly" * 200)
    try:
        page.fill("form#action-form [name=text]", "wait and listen")
        page.click("form#action-form button[type=submit]")
        page.wait_for_function("() => document.querySelector('#pending-text')?.innerText.includes('slowly')")
        assert page.is_disabled("#send-button") and page.is_enabled("[data-action=stop]")
        page.click("[data-action=stop]")
        page.wait_for_function("() => document.querySelector('#turn-notice').innerText.includes('Nothing was saved')")
    finally:
        fake.chunk_delay(0)
    assert narrator_nodes(page).count() == before
    assert page.query_selector("#pending-reply") is None
    assert page.is_enabled("#send-button")
    assert page.input_value("form#action-form [name=text]") == "wait and listen"
