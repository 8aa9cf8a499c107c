"""A game master's turn in headless Chromium: two characters' voices, then the narration streaming; Stop (issue 15).

A campaign made from a world file (the Kitchen, with Edrin, Mara and Aldric
together), switched to the game master on its Edit page; the fake server
answers the game master's step, each character, then streams the narration
slowly, so the page is read while it streams.
"""

import json

import pytest

from tests.e2e.test_play import (  # noqa: F401 — shared fixtures
    _manage, app, connected, fake, narrator_nodes, page, settled,
)
from tests.storyteller.voices.test_played import gm, says, scene_document

pytestmark = pytest.mark.e2e


def start_game(app, page, tmp_path):
    world = tmp_path / "kitchen.json"
    world.write_text(json.dumps(scene_document()))
    page.goto(_manage(app["env"], "login_link", "--base-url", app["base"]))
    page.goto(app["base"] + "/campaigns/new/")
    page.set_input_files("input[name=world]", str(world))
    page.click("form.campaign-form button[type=submit]")
    page.wait_for_selector("#story [data-role=opening]")
    play_url = page.url
    page.goto(play_url.rstrip("/") + "/edit/")
    page.click("#section-voices > summary")
    page.check("input[name=game_master]")
    page.click("form.campaign-form button[type=submit]")
    page.goto(play_url)
    page.wait_for_selector("#story [data-role=opening]")
    connected(page)


def test_two_characters_speak_under_their_names_then_the_game_master_narrates_streaming(app, fake, page, tmp_path):
    start_game(app, page, tmp_path)
    fake.script_gm(gm([("Mara", "she holds the key"), ("Aldric", "he wants it")]))
    fake.script_characters(says("The key stays with me, <b>child</b>."), says("We will see.", "reaches for it"))
    fake.script("The kettle" + " hisses" * 60 + ".")
    fake.chunk_delay(0.05)
    try:
        page.fill("form#action-form [name=text]", "Who has the key?")
        page.click("form#action-form button[type=submit]")
        page.wait_for_function("() => document.querySelector('#pending-text')?.innerText.includes('hisses')")
        voices = page.inner_text("#pending-voices")
        assert "Mara" in voices and "The key stays with me, <b>child</b>." in voices, "markup shows as text"
        assert "Aldric" in voices and "We will see." in voices and "reaches for it" in voices
        assert "Round 1" not in voices and "she holds the key" not in voices, \
            "who was activated, and why, is the author's view (tests/storyteller/voices/test_voices_socket.py)"
        assert page.query_selector("#pending-voices b") is None
    finally:
        fake.chunk_delay(0)
    page.wait_for_selector("#story [data-role=narrator][data-node-id] .gm-narration")
    reply = narrator_nodes(page).last
    assert reply.locator("[data-speaker=mara] .voice-speech").inner_text() == "“The key stays with me, <b>child</b>.”"
    assert reply.locator("[data-speaker=aldric] .voice-name").inner_text() == "Aldric"
    assert "The kettle hisses" in reply.locator(".gm-narration").inner_text()
    settled(page)


def test_stop_during_a_game_master_turn_saves_nothing(app, fake, page, tmp_path):
    start_game(app, page, tmp_path)
    before = narrator_nodes(page).count()
    fake.script_gm(gm([("Mara", "she answers")]))
    fake.script_characters(says("Hush."))
    fake.script(" slowly" * 200)
    fake.chunk_delay(0.1)
    try:
        page.fill("form#action-form [name=text]", "wait and listen")
        page.click("form#action-form button[type=submit]")
        page.wait_for_function("() => document.querySelector('#pending-text')?.innerText.includes('slowly')")
        assert "Hush." in page.inner_text("#pending-voices")
        page.click("[data-action=stop]")
        page.wait_for_function("() => document.querySelector('#turn-notice').innerText.includes('Nothing was saved')")
    finally:
        fake.chunk_delay(0)
    assert narrator_nodes(page).count() == before
    assert page.query_selector("#pending-reply") is None
    page.reload()
    page.wait_for_selector("#story [data-role=opening]")
    assert narrator_nodes(page).count() == before and page.query_selector("[data-speaker=mara]") is None
