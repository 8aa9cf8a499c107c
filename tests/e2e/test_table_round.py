"""A table in headless Chromium (issue 30): the owner and three players, three characters in two places, 20 rounds.

The real app under Daphne on 127.0.0.1 and the fake model server (its
narration written per stage, a canary per place and round). Four browser
contexts, each with its own signed-in session: the owner on the play page
(the round panel, Go, the narration streaming); each player's context opens
the play socket from the app's own origin and sends its character's action
every round. Every frame each context received is read: a canary told in
the Yard never reaches a Kitchen player, nor the other way round; each round
is played once, each action in it as sent.
"""

import json
import re

import pytest

from tests.e2e.test_play import CHROMIUM, CHROMIUM_FLAGS, _manage, connected, serve, sign_in  # noqa: F401
from tests.fake_ollama import FakeModelServer

pytestmark = pytest.mark.e2e

PORT = 8041
ROUNDS = 20
PLAYERS = (("bea", "protagonist", "Kitchen"), ("cal", "mara", "Kitchen"), ("dot", "aldric", "Yard"))
SHOTS = "/tmp/i30b-shots"


class Stages:
    """The fake server's narration: one part per stage the direction names, with a canary of its place."""

    told = 0

    def reply(self, messages, schema):
        named = re.findall(r"\[At ([A-Za-z]+)\]", " ".join(m["content"] for m in messages) if schema is None else "")
        if not named:
            return None
        Stages.told += 1
        return "\n\n".join(f"[At {place}]\nThe lamp gutters. CANARY-{place.upper()}-{Stages.told}."
                           for place in dict.fromkeys(named))

    def embed(self, text):
        from storyteller.llm.fake_server import vector_for

        return vector_for(text)


SETUP = """
import json
from django.contrib.auth import get_user_model, SESSION_KEY, BACKEND_SESSION_KEY, HASH_SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from campaigns import worldfile
from campaigns.models import Seat
from storyteller import signin
document = json.loads(open({world!r}).read())
for c in document["characters"]:
    c["place"] = {{"Edrin": "Kitchen", "Mara": "Kitchen", "Aldric": "Yard"}}[c["name"]]
document["campaign"]["title"] = "The Table"
campaign, _ = worldfile.create_campaign(signin.owner(), worldfile.read(json.dumps(document).encode()),
                                        game_master=True, offstage_per_turn=0)
sessions = {{}}
for name, character in {players!r}:
    user = get_user_model().objects.create_user(name)
    Seat.objects.create(campaign=campaign, character=character, user=user, status="seated")
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    sessions[name] = store.session_key
print(json.dumps({{"campaign": campaign.pk, "sessions": sessions}}))
"""


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    from pathlib import Path

    world = Path(__file__).resolve().parents[1] / "campaigns" / "worlds" / "kitchen.json"
    with FakeModelServer(stubs=Stages()) as fake:
        import os

        env = {**os.environ, "STORYTELLER_DATA_DIR": str(tmp_path_factory.mktemp("table")),
               "STORYTELLER_LLM_URL": fake.url, "STORYTELLER_LLM_API": "ollama"}
        _manage(env, "migrate", "--noinput")
        made = json.loads(_manage(env, "shell", "-c", SETUP.format(
            world=str(world), players=[(n, c) for n, c, _ in PLAYERS])).splitlines()[-1])
        process = serve(env, PORT)
        yield {"base": f"http://127.0.0.1:{PORT}", "env": env, **made}
        process.terminate()
        process.wait(timeout=10)


def _player(browser, table, name):
    """A player's browser context: signed in as ``name``, the play socket opened from the app's origin, every
    frame it receives kept."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_cookies([{"name": "sessionid", "value": table["sessions"][name], "url": table["base"]}])
    page = context.new_page()
    page.set_default_timeout(20_000)
    frames = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: frames.append(str(payload))))
    page.goto(table["base"] + "/login/")
    page.evaluate("""pk => new Promise((resolve, reject) => {
        window.table = new WebSocket(`ws://${location.host}/ws/play/${pk}/`);
        window.table.onopen = resolve; window.table.onerror = reject; })""", table["campaign"])
    return context, page, frames


def _wait(page, frames, needle, count, timeout=30_000):
    page.wait_for_function("() => true")  # let the page's event loop deliver what arrived
    deadline = timeout / 250
    while sum(needle in frame for frame in frames) < count and deadline > 0:
        page.wait_for_timeout(250)
        deadline -= 1
    assert sum(needle in frame for frame in frames) >= count, (needle, count, frames[-3:])


def test_four_contexts_play_twenty_rounds_and_a_canary_never_crosses_places(table):
    import os

    from playwright.sync_api import sync_playwright

    os.makedirs(SHOTS, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        owner = browser.new_context(viewport={"width": 1280, "height": 900})
        page = owner.new_page()
        page.set_default_timeout(20_000)
        owner_frames = []
        page.on("websocket", lambda ws: ws.on("framereceived", lambda payload: owner_frames.append(str(payload))))
        page.goto(_manage(table["env"], "login_link", "--base-url", table["base"]))
        page.click("text=The Table")
        connected(page)
        players = {name: _player(browser, table, name) for name, _, _ in PLAYERS}
        page.wait_for_selector("#round-panel .round-seat[data-seat-here=yes] >> nth=2")
        for number in range(1, ROUNDS + 1):
            for name, _, place in PLAYERS:
                players[name][1].evaluate("text => window.table.send(JSON.stringify({action: 'turn', text}))",
                                          f"Round {number}: {name} acts <i>as sent</i> ACT-{place.upper()}-{number}")
            for name, (_, player_page, frames) in players.items():
                _wait(player_page, frames, "data-told=", number)
            if number == 1:
                page.wait_for_selector("#story .node >> nth=1")
                page.screenshot(path=f"{SHOTS}/owner-1280.png", full_page=False)
                page.set_viewport_size({"width": 390, "height": 844})
                page.locator("#round-panel").scroll_into_view_if_needed()
                page.screenshot(path=f"{SHOTS}/owner-390.png", full_page=False)
                page.set_viewport_size({"width": 1280, "height": 900})
        page.wait_for_timeout(500)
        story = page.inner_text("#story")
        for context, _, _ in players.values():
            context.close()
        browser.close()

    for name, _, place in PLAYERS:
        frames = "\n".join(players[name][2])
        other = "YARD" if place == "Kitchen" else "KITCHEN"
        assert f"CANARY-{place.upper()}-" in frames
        assert f"CANARY-{other}-" not in frames, name
        assert f"ACT-{other}-" not in frames, name
    owner_text = "\n".join(owner_frames)
    assert "CANARY-YARD-" in owner_text and "CANARY-KITCHEN-" in owner_text
    # Each round played once, each action in its input exactly as sent.
    nodes = json.loads(_manage(table["env"], "shell", "-c", (
        "import json; from campaigns.models import Node; print(json.dumps(list(Node.objects.filter("
        f"branch__campaign_id={table['campaign']}, role='player').values_list('depth', 'text'))))")).splitlines()[-1])
    assert len(nodes) == ROUNDS
    for depth, text in nodes:
        number = depth // 2 + 1
        for name, _, place in PLAYERS:
            assert text.count(f"Round {number}: {name} acts <i>as sent</i> ACT-{place.upper()}-{number}") == 1
    assert "Round 20" in story
