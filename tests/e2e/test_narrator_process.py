"""In headless Chromium against a real Daphne that is killed, restarted and stopped mid-turn (issue 21).

Nothing typed is lost when the app dies mid-turn; the built-in narrator's
process dies with the app; the page says what a turn waits for, and that the
built-in narrator is being prepared, and it takes over when it is ready.
"""

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.test_page import browser  # noqa: F401 — the fixture
from tests.e2e.test_play import _free_port, _manage, connected, serve
from tests.fake_ollama import FakeModelServer

pytestmark = pytest.mark.e2e

LOST = "Your last action was not played; it is back in the box."

# Daphne as a terminal starts it: a suite run in the background (nohup scripts/test &) ignores SIGINT, an ignored
# signal stays ignored across exec, and Twisted then leaves Ctrl-C ignored too (docs/decisions.md, "Where it runs").
AS_FROM_A_TERMINAL = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                      "sys.argv = ['daphne'] + sys.argv[1:]; runpy.run_module('daphne', run_name='__main__')")


class App:
    """The real app under Daphne, which a test may kill, restart and stop."""

    def __init__(self, data, env):
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.data = data
        self.env = {**os.environ, "STORYTELLER_DATA_DIR": str(data), **env}
        for variable in ("STORYTELLER_LLM_URL", "STORYTELLER_LLM_API"):
            if variable not in env:
                self.env.pop(variable, None)
        _manage(self.env, "migrate", "--noinput")
        _manage(self.env, "seed_demo")
        self.process = None

    def start(self):
        self.process = serve(self.env, self.port, daphne=("-c", AS_FROM_A_TERMINAL))

    def children(self):
        """Return the pids of the app's living child processes (the built-in narrator's, once started)."""
        found = []
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            try:
                found += [int(pid) for pid in (task / "children").read_text().split()]
            except FileNotFoundError:  # a thread that ended meanwhile
                pass
        return [pid for pid in found if alive(pid)]

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def nodes(self):
        database = sqlite3.connect(self.data / "storyteller.sqlite3")
        try:
            return database.execute("SELECT count(*) FROM campaigns_node").fetchone()[0]
        finally:
            database.close()


def open_demo(app, browser, viewport=None):
    page = browser.new_page(viewport=viewport or {"width": 1280, "height": 900})
    page.set_default_timeout(20_000)
    page.goto(_manage(app.env, "login_link", "--base-url", app.base))
    page.click("text=The Lantern of Greyhollow")
    page.wait_for_selector("#story [data-role=opening]")
    connected(page)
    return page


def send(page, text):
    page.fill("form#action-form [name=text]", text)
    page.click("form#action-form button[type=submit]")


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.fixture
def fake():
    with FakeModelServer() as server:
        yield server


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 900}, {"width": 390, "height": 844}],
                         ids=["desktop", "phone"])
def test_an_action_sent_as_the_app_dies_is_back_in_the_box_after_it_restarts(fake, browser, tmp_path, viewport):
    app = App(tmp_path / "data", {"STORYTELLER_LLM_URL": fake.url, "STORYTELLER_LLM_API": "ollama"})
    app.start()
    try:
        page = open_demo(app, browser, viewport)
        before = app.nodes()
        fake.chunk_delay(0.2)
        fake.script(" The lantern gutters." * 100)
        send(page, "I climb the lighthouse stairs, counting each step.")
        page.wait_for_function("() => document.querySelector('#pending-text')?.innerText.includes('lantern')")

        app.process.send_signal(signal.SIGKILL)  # a crash: no end of the turn ever reaches the page
        app.process.wait()
        page.wait_for_selector("#play[data-connected=false]", state="attached")
        assert "reconnecting" in page.inner_text("#connection")
        fake.chunk_delay(0)
        app.start()

        page.wait_for_function("() => document.querySelector('#turn-notice').innerText.includes('not played')",
                               timeout=30_000)
        assert page.input_value("form#action-form [name=text]") == "I climb the lighthouse stairs, counting each step."
        assert page.inner_text("#turn-notice").strip() == LOST
        assert page.query_selector("#pending-reply") is None and page.query_selector("#pending-player") is None
        assert page.is_enabled("#send-button")
        assert app.nodes() == before, "nothing of the killed turn was saved"
        page.screenshot(path=str(tmp_path / f"reconnected-{viewport['width']}.png"), full_page=True)

        # Sent again, it plays; the page's copy is dropped once the turn ends, so a reload gives nothing back.
        fake.script("You reach the lamp room.")
        page.click("form#action-form button[type=submit]")
        page.wait_for_function("() => [...document.querySelectorAll('#story [data-role=narrator][data-node-id]')]"
                               ".some(node => node.innerText.includes('You reach the lamp room.'))")
        page.wait_for_selector("#send-button:not([disabled])")
        page.reload()
        connected(page)
        assert page.input_value("form#action-form [name=text]") == ""
        assert LOST not in page.inner_text("#turn-notice")
    finally:
        app.stop()


def test_a_reload_mid_turn_gives_the_unplayed_action_back(fake, browser, tmp_path):
    app = App(tmp_path / "data", {"STORYTELLER_LLM_URL": fake.url, "STORYTELLER_LLM_API": "ollama"})
    app.start()
    try:
        page = open_demo(app, browser)
        fake.chunk_delay(0.2)
        fake.script(" Rain." * 100)
        send(page, "I wait by the harbour wall.")
        page.wait_for_function("() => document.querySelector('#pending-text')?.innerText.includes('Rain')")
        page.reload()  # the socket closes: the turn is stopped, nothing saved
        connected(page)
        page.wait_for_function("() => document.querySelector('#turn-notice').innerText.includes('not played')")
        assert page.input_value("form#action-form [name=text]") == "I wait by the harbour wall."
    finally:
        fake.chunk_delay(0)
        app.stop()


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_stopping_the_app_mid_reply_ends_it_and_the_narrator_within_two_seconds(browser, tmp_path, how):
    app = App(tmp_path / "data", {})  # nothing configured, nothing at Ollama's address: the built-in narrator plays
    app.start()
    try:
        page = open_demo(app, browser)
        assert "built-in demo narrator" in page.inner_text("#narrator-banner")
        send(page, "Tell me, at great length, the whole history of the lighthouse.")
        page.wait_for_function("() => (document.querySelector('#pending-text')?.innerText || '').length > 20",
                               timeout=60_000)
        [narrator] = app.children()
        maps = Path(f"/proc/{app.process.pid}/maps").read_text()
        assert "libllama" not in maps and "libggml" not in maps, "llama.cpp is never loaded into the app's process"
        assert "libllama" in Path(f"/proc/{narrator}/maps").read_text()

        started = time.monotonic()
        app.process.send_signal(how)
        app.process.wait(timeout=10)
        exited = time.monotonic() - started
        while alive(narrator) and time.monotonic() - started < 2:
            time.sleep(0.02)
        assert exited < 2, f"the app took {exited:.1f} s to exit"
        assert not alive(narrator), "the narrator's process ended with the app"
    finally:
        app.stop()


def test_the_page_says_the_narrator_is_being_prepared_and_it_takes_over_when_ready(browser, tmp_path):
    app = App(tmp_path / "data", {})
    building = subprocess.Popen(["sleep", "600"])  # stands for scripts/prepare-narrator's build, running
    status = app.data / "narrator" / "build.json"
    status.parent.mkdir(parents=True, exist_ok=True)
    status.write_text(json.dumps({"state": "building", "started": time.time() - 60, "pid": building.pid}))
    app.start()
    try:
        page = open_demo(app, browser)
        banner = page.inner_text("#narrator-banner")
        assert "The built-in narrator is being prepared (about" in banner
        assert "connect Ollama to play now" in banner
        page.screenshot(path=str(tmp_path / "preparing.png"), full_page=True)
        send(page, "I look around.")
        page.wait_for_function("() => document.querySelector('#turn-error').innerText.includes('being prepared')")
        assert page.input_value("form#action-form [name=text]") == "I look around.", "the action is kept"

        status.write_text(json.dumps({"state": "ready", "started": time.time() - 60, "finished": time.time()}))
        building.kill()
        page.wait_for_function("() => document.querySelector('#narrator-banner').dataset.builtin === 'ready'",
                               timeout=15_000)
        page.click("form#action-form button[type=submit]")
        # The model loads first (a cold start): the page says what it waits for, counting seconds.
        page.wait_for_function("() => document.querySelector('#story').innerText.includes('I look around.')")
        page.wait_for_function(
            "() => document.querySelectorAll('#story [data-role=narrator][data-node-id]').length === 1",
            timeout=60_000)
        assert page.input_value("form#action-form [name=text]") == ""
    finally:
        building.kill()
        app.stop()


def test_a_cold_turn_says_what_it_waits_for_with_a_count_of_seconds(browser, tmp_path):
    app = App(tmp_path / "data", {})
    app.start()
    try:
        page = open_demo(app, browser)
        # The socket's warming starts the narrator's process as the page opens; end it, for a cold turn.
        deadline = time.monotonic() + 30
        while not app.children() and time.monotonic() < deadline:
            time.sleep(0.05)
        [warmed] = app.children()
        os.kill(warmed, signal.SIGKILL)
        while alive(warmed):
            time.sleep(0.05)
        send(page, "I look around.")
        deadline = time.monotonic() + 30
        while not app.children() and time.monotonic() < deadline:
            time.sleep(0.01)
        for pid in app.children():
            os.kill(pid, signal.SIGSTOP)  # still loading, as on a slow machine: it neither answers nor dies
        page.wait_for_function("() => /Waiting for the built-in narrator to load its model.*\\d+ s/"
                               ".test(document.querySelector('#turn-notice').innerText)")
        page.screenshot(path=str(tmp_path / "waiting.png"), full_page=True)
        first = page.inner_text("#turn-notice")
        time.sleep(1.5)
        assert page.inner_text("#turn-notice") != first, "the seconds count"
        for pid in app.children():
            os.kill(pid, signal.SIGCONT)
        page.wait_for_function(
            "() => document.querySelectorAll('#story [data-role=narrator][data-node-id]').length === 1",
            timeout=60_000)
    finally:
        app.stop()
