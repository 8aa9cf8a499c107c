"""The "Meanwhile" card in headless Chromium: after Skip time and a turn, what Mara did off stage shows under the
reply without a reload, and the next turn takes it away."""

import json

import pytest

from tests.e2e.test_play import (  # noqa: F401 — fixtures
    _manage, app, author_view, connected, fake, narrator_nodes, page, send, settled,
)
from tests.storyteller.voices.test_offstage_runs import MARA, answer, keep_document

pytestmark = pytest.mark.e2e


def world_file(tmp_path):
    doc = keep_document()
    doc["campaign"]["title"] = "Lantern Keep (meanwhile)"
    doc["engagements"] = doc["engagements"][:1]  # Mara meets Tobin at the Forge at 08:10
    path = tmp_path / "keep.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_meanwhile_card_appears_after_a_skip_and_a_turn_and_is_gone_next_turn(app, fake, page, tmp_path):
    page.goto(_manage(app["env"], "login_link", "--base-url", app["base"]))
    page.goto(app["base"] + "/campaigns/new/")
    page.set_input_files("input[name=world]", str(world_file(tmp_path)))
    page.click("form.campaign-form button[type=submit]")
    page.wait_for_selector("#story [data-role=opening]")
    author_view(page)  # what happened off stage is what the player's character did not see
    page.wait_for_selector("#time-panel [data-clock]")
    url = page.url

    page.fill("#skip-form [name=by_minutes]", "60")
    page.fill("#skip-form [name=reason]", "the morning passes")
    page.click("#skip-form [data-action=skip-time]")
    page.wait_for_function("() => document.querySelector('#time-panel .clock')?.innerText.includes('09:00')")
    assert page.locator("[data-meanwhile]").count() == 0, "a skip alone plays nothing off stage"

    fake.script("You wait by the fire.", "The fire crackles.")
    fake.script_json({"events": []}, answer(MARA))
    send(page, "wait by the fire")
    page.wait_for_selector("[data-meanwhile]", timeout=30_000)
    assert MARA in page.inner_text("#meanwhile")
    assert page.text_content("#meanwhile h3") == "Meanwhile"
    assert page.url == url, "no reload"
    settled(page)

    send(page, "wait longer")
    assert page.locator("[data-meanwhile]").count() == 0, "the next turn takes the card away"
    settled(page)
    assert page.locator("[data-meanwhile]").count() == 0
    assert MARA not in page.inner_text("#play-body")
