"""Characters' minds in headless Chromium: Sally and Anne played in the browser, then what each remembers (issue 14).

The House world (Sally and Anne in the Room, the marble in the open basket);
two turns played through the play page, the fake server answering the state
recorder (Sally leaves; Anne moves the marble to the box) and the minds
recorder (what each perceived). Then the "What does she remember now?" page
for Sally and for Anne: different memories, different beliefs about the
marble. No accuracy label reaches any prompt the fake server received.
"""

import pytest

from tests.e2e.test_play import (  # noqa: F401 — the shared browser fixtures
    _manage, app, author_view, connected, fake, page, send, settled,
)
from tests.storyteller.test_whereabouts import HOUSE

pytestmark = pytest.mark.e2e

LABELS = ("accuracy", "accurate", "partial")


def event(type, subject="", object="", value="", **data):
    return {"type": type, "subject": subject, "object": object, "value": value, "narrator_only": False,
            **({"data": data} if data else {})}


def minds(events=(), perceptions=()):
    return {"events": list(events), "perceptions": list(perceptions), "beliefs": [], "notices": []}


def test_what_sally_and_anne_remember_after_the_scene_differs(app, fake, page):  # noqa: F811
    page.goto(_manage(app["env"], "login_link", "--base-url", app["base"]))
    page.goto(app["base"] + "/campaigns/new/")
    page.set_input_files("input[name=world]", str(HOUSE))
    page.click("form.campaign-form button[type=submit]")
    page.wait_for_selector("#story [data-role=opening]")
    author_view(page)  # what Sally and Anne each remember is the author's view
    play_url = page.url

    fake.script("Sally skips out into the hall, leaving the marble in its basket.")
    fake.script_json({"events": [event("move", "Sally", "Hall")]})
    fake.script_minds(minds(
        [{"id": "e1", "text": "Sally left the room for the hall.", "importance": 2, "participants": ["Sally"],
          "location": "Room"}],
        [{"event": "e1", "who": "Sally", "mode": "witnessed", "wording": "I went out to the hall; my marble is "
          "safe in the basket.", "accuracy": "accurate"},
         {"event": "e1", "who": "Anne", "mode": "witnessed", "wording": "Sally went out and left her marble.",
          "accuracy": "accurate"}]))
    send(page, "Sally goes out to the hall.")
    settled(page)

    fake.script("Anne lifts the marble from the basket and drops it into the box.")
    fake.script_json({"events": [event("item_changes", "Anne", ops=[{"op": "take", "item": "marble"},
                                                                    {"op": "put", "item": "marble", "to": "box"}])]})
    fake.script_minds(minds(
        [{"id": "e1", "text": "Anne moved the marble from the basket to the box.", "importance": 3,
          "participants": ["Anne"], "location": "Room", "items": ["marble", "box", "basket"]}],
        [{"event": "e1", "who": "Anne", "mode": "witnessed", "wording": "I hid Sally's marble in the box.",
          "accuracy": "accurate"},
         {"event": "e1", "who": "Sally", "mode": "heard", "wording": "Anne was rattling the toys in the room.",
          "gist": "A rattle from the room.", "accuracy": "partial"}]))
    send(page, "Anne moves the marble to the box.")
    settled(page)

    page.wait_for_selector("#minds-panel [data-character=sally]")
    page.click("#minds-panel [data-character=sally] [data-action=remember]")
    page.wait_for_selector("#remember-results")
    page.fill("input[name=q]", "marble")
    page.click("form.campaign-form button[type=submit]")
    page.wait_for_function("() => document.querySelector('#remember-results').innerText.includes('rattling')")
    sally = page.inner_text("#remember-results")
    sally_beliefs = page.inner_text("#believes")
    assert "Anne was rattling the toys in the room." in sally and "I hid Sally's marble" not in sally
    assert page.get_attribute("#believes [data-item=marble]", "data-wrong") == "true"
    assert "in the basket" in sally_beliefs and "in the box" in sally_beliefs

    page.goto(play_url)
    page.wait_for_selector("#minds-panel [data-character=anne]")
    page.click("#minds-panel [data-character=anne] [data-action=remember]")
    page.wait_for_selector("#remember-results")
    page.fill("input[name=q]", "marble")
    page.click("form.campaign-form button[type=submit]")
    page.wait_for_function("() => document.querySelector('#remember-results').innerText.includes('hid')")
    anne = page.inner_text("#remember-results")
    assert "I hid Sally's marble in the box." in anne and "rattling" not in anne
    assert page.get_attribute("#believes [data-item=marble]", "data-wrong") is None
    assert "What does Anne remember now?" in page.inner_text("h1")

    prompts = [message["content"] for body in fake.bodies("/api/chat") for message in body["messages"]]
    assert any("Sally left the room for the hall." in prompt for prompt in prompts), "the minds recorder saw events"
    for label in LABELS:
        assert not [prompt for prompt in prompts if label in prompt], f"an accuracy label ({label}) reached a prompt"
