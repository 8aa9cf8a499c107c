"""A table in headless Chromium (issue 30): the owner and three players, three characters in two places, 20 rounds.

The real app under Daphne on 127.0.0.1 and the fake model server (its
narration written per stage, a canary per place and round). Four browser
contexts: the owner opens a seat per character on the seats page and makes
an invitation; each player opens their link in a context of their own, makes
an account there (i30a's join page) and lands on their seat's own play page,
where the round panel is. Every round each player types their character's
action into that panel and sends it. Every frame each context received and
every player's page (live, then read again) is checked: a canary told in the
Yard never reaches a Kitchen player, nor the other way round; each round is
played once, each action in it exactly as sent. A whisper reaches only its
sender and the owner. Removing a seat closes its player's socket within a
second and every page of the campaign refuses them. The round panel at
1280x900 and 390x844 (no sideways scroll), with screenshots.
"""

import json
import os
import re
import time

import pytest

from tests.e2e.test_play import (
    CHROMIUM,
    CHROMIUM_FLAGS,
    _free_port,
    _manage,
    connected,
    serve,
)
from tests.fake_ollama import FakeModelServer

pytestmark = pytest.mark.e2e

ROUNDS = 20
# (person, character key, character name, place)
PLAYERS = (("bea", "protagonist", "Edrin", "Kitchen"), ("cal", "mara", "Mara", "Kitchen"),
           ("dot", "aldric", "Aldric", "Yard"))
WIDE, PHONE = {"width": 1280, "height": 900}, {"width": 390, "height": 844}
SHOTS = os.environ.get("STORYTELLER_SHOTS", "/tmp/i30b-shots")
WHISPER = "WHISPER-CANARY-dot-hides-the-key"


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
from django.urls import reverse
from campaigns import worldfile
from storyteller import signin
document = json.loads(open({world!r}).read())
for c in document["characters"]:
    c["place"] = {{"Edrin": "Kitchen", "Mara": "Kitchen", "Aldric": "Yard"}}[c["name"]]
document["campaign"]["title"] = "The Table"
campaign, _ = worldfile.create_campaign(signin.owner(), worldfile.read(json.dumps(document).encode()),
                                        game_master=True, offstage_per_turn=0)
pages = [reverse(name, args=[campaign.pk]) for name in
         ("play", "story_export", "world_panel", "world_map", "items_panel", "state_panel", "minds_panel", "whispers")]
print(json.dumps({{"campaign": campaign.pk, "pages": pages}}))
"""


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    from pathlib import Path

    world = Path(__file__).resolve().parents[1] / "campaigns" / "worlds" / "kitchen.json"
    with FakeModelServer(stubs=Stages(), port=_free_port()) as fake:
        env = {**os.environ, "STORYTELLER_DATA_DIR": str(tmp_path_factory.mktemp("table")),
               "STORYTELLER_LLM_URL": fake.url, "STORYTELLER_LLM_API": "ollama"}
        _manage(env, "migrate", "--noinput")
        made = json.loads(_manage(env, "shell", "-c", SETUP.format(world=str(world))).splitlines()[-1])
        port = _free_port()
        process = serve(env, port)
        yield {"base": f"http://127.0.0.1:{port}", "env": env, **made}
        process.terminate()
        process.wait(timeout=10)


def _fits(page):
    """The page is not wider than its window: nothing to scroll sideways for."""
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


def _shot(page, name):
    os.makedirs(SHOTS, exist_ok=True)
    page.screenshot(path=f"{SHOTS}/{name}.png", full_page=True)


def _keep_frames(page, frames, closed=None):
    def opened(ws):
        ws.on("framereceived", lambda payload: frames.append(str(payload)))
        if closed is not None:
            ws.on("close", lambda _: closed.append(time.monotonic()))

    page.on("websocket", opened)


def _invite(owner, table, key, name):
    """On the seats page: open a seat for character ``key`` and return its invitation link."""
    seats = owner.locator("#seats .seat").count()
    owner.select_option("select[data-field=character]", value=key)
    owner.click("[data-action=open-seat]")
    owner.wait_for_function("n => document.querySelectorAll('#seats .seat').length > n", arg=seats)
    owner.locator("#seats .seat").last.locator("[data-action=invite]").click()
    owner.wait_for_selector(f"#invite-link >> text={name}")
    link = owner.locator("#invite-link [data-link]").input_value()
    assert link.startswith(table["base"] + "/join/")
    return link


def _join(browser, link, person, name):
    """A player's own browser context: takes the invitation, makes an account, lands on the seat's play page."""
    context = browser.new_context(viewport=WIDE)
    page = context.new_page()
    page.set_default_timeout(20_000)
    frames, closed = [], []
    _keep_frames(page, frames, closed)
    page.goto(link)
    assert f"play {name}" in page.inner_text("#join")
    page.fill("[data-field=name]", person)
    page.click("[data-action=join]")
    page.wait_for_selector("#story [data-role=opening]")
    connected(page)
    assert f"You play {name}." in page.inner_text("#playing-as")
    page.wait_for_selector("#round-panel #round-text")  # the round panel, on the seat's own page
    return {"context": context, "page": page, "frames": frames, "closed": closed}


def _told(page, count):
    page.wait_for_function("n => document.querySelectorAll('#story [data-told]').length >= n", arg=count,
                           timeout=30_000)


def test_four_contexts_play_twenty_rounds_and_a_canary_never_crosses_places(table):
    from playwright.sync_api import sync_playwright

    if CHROMIUM is None:
        pytest.fail("Chromium is not installed; the test command installs it (apt-get install chromium).")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        owner = browser.new_context(viewport=WIDE).new_page()
        owner.set_default_timeout(20_000)
        owner_frames = []
        _keep_frames(owner, owner_frames)
        owner.goto(_manage(table["env"], "login_link", "--base-url", table["base"]))
        owner.click("text=The Table")
        connected(owner)
        play_url = owner.url
        owner.click("[data-table]")
        owner.wait_for_selector("#seats")
        links = {person: _invite(owner, table, key, name) for person, key, name, _ in PLAYERS}
        players = {person: _join(browser, links[person], person, name) for person, _, name, _ in PLAYERS}
        owner.goto(play_url)
        connected(owner)
        owner.wait_for_selector("#round-panel .round-seat[data-seat-here=yes] >> nth=2")

        for number in range(1, ROUNDS + 1):
            for person, _, _, place in PLAYERS:
                page = players[person]["page"]
                page.fill("#round-text", f"Round {number}: {person} acts <i>as sent</i> ACT-{place.upper()}-{number}")
                page.click("#round-send")
            for person in players:
                _told(players[person]["page"], number)
            if number == 1:
                # The box a told round's action was sent from is empty again, ready for the next.
                players["bea"]["page"].wait_for_function("() => document.querySelector('#round-text').value === ''")
                owner.wait_for_selector("#story .node >> nth=1")
                _look_at_the_round_panel(owner, players)
            if number == 10:  # a whisper, from the Yard, to the game master
                dot = players["dot"]["page"]
                dot.fill(".whisper-form [name=text]", WHISPER)
                dot.click("[data-action=whisper]")
                dot.wait_for_selector("#whisper-notice")
                owner.wait_for_selector(f"#whisper-list >> text={WHISPER}")
        owner.wait_for_timeout(500)
        story = owner.inner_text("#story")
        live = {person: player["page"].inner_text("#story") for person, player in players.items()}
        for player in players.values():  # the seats' pages read again, as a reload builds them
            player["page"].reload()
            player["page"].wait_for_selector("#story [data-role=opening]")
        reread = {person: player["page"].content() for person, player in players.items()}
        whispers = {person: player["page"].inner_text("#whispers-panel") for person, player in players.items()}

        removal = _remove_a_seat(owner, play_url, players["cal"], table)
        for player in players.values():
            player["context"].close()
        browser.close()

    for person, _, _, place in PLAYERS:
        seen = "\n".join([*players[person]["frames"], live[person], reread[person]])
        other = "YARD" if place == "Kitchen" else "KITCHEN"
        assert f"CANARY-{place.upper()}-" in live[person], person
        assert f"CANARY-{other}-" not in seen, person
        assert f"ACT-{other}-" not in seen, person
    owner_text = "\n".join(owner_frames)
    assert "CANARY-YARD-" in owner_text and "CANARY-KITCHEN-" in owner_text
    # The whisper: its sender and the owner only.
    assert WHISPER in whispers["dot"]
    for person in ("bea", "cal"):
        assert WHISPER not in "\n".join([*players[person]["frames"], live[person], reread[person], whispers[person]])
    # Each round played once, each action in its input exactly as sent.
    nodes = json.loads(_manage(table["env"], "shell", "-c", (
        "import json; from campaigns.models import Node; print(json.dumps(list(Node.objects.filter("
        f"branch__campaign_id={table['campaign']}, role='player').values_list('depth', 'text'))))")).splitlines()[-1])
    assert len(nodes) == ROUNDS
    for depth, text in nodes:
        number = depth // 2 + 1
        for person, _, _, place in PLAYERS:
            assert text.count(f"Round {number}: {person} acts <i>as sent</i> ACT-{place.upper()}-{number}") == 1
    assert "Round 20" in story
    print(f"removed seat: {removal}")
    assert removal["close_after_removed"] < 1.0, removal
    assert removal["statuses"] == [404] * len(table["pages"]), removal


def _look_at_the_round_panel(owner, players):
    """The owner's page and a seat's page with the round panel, at 1280x900 and 390x844: screenshots, no sideways
    scroll, the panel's words."""
    bea = players["bea"]["page"]
    for size, viewport in (("1280", WIDE), ("390", PHONE)):
        for name, page in (("owner", owner), ("seat", bea)):
            page.set_viewport_size(viewport)
            page.wait_for_timeout(300)
            assert _fits(page), (name, size)
            page.locator("#round-panel").scroll_into_view_if_needed()
            _shot(page, f"table-round-{name}-{size}")
    panel = bea.inner_text("#round-panel")
    assert "What your character does this round" in panel and "Send for this round" in panel
    assert "bea as Edrin (you)" in panel and "cal as Mara" in panel
    assert "dot (in another scene) · here" in panel and "Aldric" not in panel  # who is at the table, not as whom
    assert "Go: tell the round now" in owner.inner_text("#round-panel")
    assert owner.locator("#action-form").is_hidden()  # at a table the owner's story moves by the round panel
    for page in (owner, bea):
        page.set_viewport_size(WIDE)


def _remove_a_seat(owner, play_url, player, table):
    """The owner removes ``player``'s seat on the seats page: how long their open socket took to close after the
    removal was done, and what every page of the campaign answers them then."""
    owner.goto(play_url.rstrip("/") + "/table/")
    owner.once("dialog", lambda dialog: dialog.accept())
    player["closed"].clear()  # the reload closed a socket of its own: count from here
    owner.locator("#seats .seat", has=owner.locator("strong", has_text="Mara")).locator("[data-action=remove]").click()
    owner.wait_for_selector("#seats-notice >> text=removed")
    removed = time.monotonic()
    page = player["page"]
    page.wait_for_selector("#play:not([data-connected=true])", state="attached", timeout=5_000)
    while not player["closed"] and time.monotonic() - removed < 5:
        page.wait_for_timeout(20)
    close_after = (player["closed"][0] - removed) if player["closed"] else 99.0
    statuses = [page.request.get(table["base"] + url).status for url in table["pages"]]
    return {"close_after_removed": close_after, "statuses": statuses}
