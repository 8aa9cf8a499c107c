"""The controls of an evening's play, in headless Chromium against the fake server: edit any message, Continue in
place, Impersonate, the author's note, a persona, reasoning models' thinking and reading aloud."""

import re

import pytest

from tests.e2e.test_play import (  # noqa: F401 — the shared browser fixtures
    app, author_view, connected, fake, narrator_nodes, page, send, settled, sign_in,
)
from tests.fake_ollama import Thought

pytestmark = pytest.mark.e2e

# A page script in place of the browser's speech synthesis: it records every call (window.__speech) and says
# each utterance in 200 ms, so a test can read what was spoken, in which voice, and when it was stopped.
FAKE_SPEECH = """
(() => {
  const calls = []; window.__speech = calls;
  const voices = VOICES;
  class Utterance { constructor(text) { this.text = text; this.voice = null; this.lang = ""; } }
  window.SpeechSynthesisUtterance = Utterance;
  let queue = [];
  function next() { const u = queue.shift(); if (!u) return; calls.push({ended: u.text}); u.onend && u.onend();
                    if (queue.length) setTimeout(next, 200); }
  const synth = { get speaking() { return queue.length > 0; }, pending: false, getVoices: () => voices,
    addEventListener() {},
    speak(u) { calls.push({speak: u.text, voice: u.voice && u.voice.voiceURI}); queue.push(u);
               if (queue.length === 1) setTimeout(next, 200); },
    cancel() { calls.push({cancel: true}); const q = queue; queue = []; q.forEach(u => u.onerror && u.onerror()); } };
  Object.defineProperty(window, "speechSynthesis", {value: synth});
})();
"""
VOICES = ('[{name: "Alice", voiceURI: "alice", lang: "en-GB", default: true, localService: true},'
          ' {name: "Bruno", voiceURI: "bruno", lang: "en-US", default: false, localService: true}]')


def narrations(fake):
    return [body for body in fake.bodies("/api/chat") if "format" not in body]


def structured(fake):
    return [body for body in fake.bodies("/api/chat") if "format" in body]


def last_reply(page):
    return narrator_nodes(page).last


def versions_of(node):
    return node.locator("[data-versions]").first.get_attribute("data-versions")


def outcome(page, wanted):
    page.wait_for_function("w => document.querySelector('#turn-notice').innerText.includes(w)", arg=wanted)


def test_edit_the_last_reply_and_an_earlier_action_then_flip_both_back(app, fake, page):
    sign_in(app, page)
    fake.script("The quay is empty.", "The cottage door is shut.")
    send(page, "look along the quay")
    send(page, "walk up the hill")
    settled(page)

    reply = last_reply(page)
    reply.locator("[data-action=edit]").click()
    warning = page.wait_for_selector(".edit-form .edit-warning")
    assert "takes this reply's place; the old one stays one flip away" in warning.inner_text()
    page.fill(".edit-form textarea", "The cottage door stands ajar, and a lamp burns inside.")
    page.click(".edit-form [data-action=save-edit]")
    page.wait_for_function("() => document.querySelector('#story').innerText.includes('a lamp burns inside')")
    reply = last_reply(page)
    assert versions_of(reply) == "2/2" and "The cottage door is shut." not in page.inner_text("#story")
    settled(page)
    reply.locator("[data-action=version-previous]").click()
    page.wait_for_function("() => document.querySelector('#story').innerText.includes('The cottage door is shut.')")
    settled(page)

    shown = narrator_nodes(page).count()
    action = page.locator("#story [data-role=player][data-node-id]").nth(-2)
    assert "look along the quay" in action.inner_text()
    action.locator("[data-action=edit]").click()
    warning = page.wait_for_selector(".edit-form .edit-warning")
    assert "This starts a new branch here." in warning.inner_text(), "the branch is said before it happens"
    assert "the 1 turn after it stays on the old branch" in warning.inner_text()
    fake.script("Gulls wheel over the empty nets.")
    page.fill(".edit-form textarea", "look at the fishing nets")
    page.click(".edit-form [data-action=save-edit]")
    page.wait_for_function("n => document.querySelectorAll('#story [data-role=narrator][data-node-id]').length === n",
                           arg=shown - 1)
    assert "Gulls wheel over the empty nets." in page.inner_text("#story")
    assert "The cottage door is shut." not in page.inner_text("#story")
    edited = page.locator("#story [data-role=player][data-node-id]").last
    assert "look at the fishing nets" in edited.inner_text() and versions_of(edited) == "2/2"
    settled(page)
    edited.locator("[data-action=version-previous]").click()
    page.wait_for_function("() => document.querySelector('#story').innerText.includes('The cottage door is shut.')")
    assert narrator_nodes(page).count() == shown, "flipping the action back brings the whole old line"


def test_continue_lengthens_the_reply_in_place_and_stop_keeps_what_was_written(app, fake, page):
    sign_in(app, page)
    fake.script("The lamp gutters in the window.")
    send(page, "watch the window")
    settled(page)
    before = last_reply(page).locator(".prose").inner_text()
    count = narrator_nodes(page).count()
    fake.chunk_delay(0.1)
    fake.script(" Then" + " slowly" * 200)
    try:
        last_reply(page).locator("[data-action=continue-reply]").click()
        page.wait_for_function(
            "b => { const p = document.querySelector('#pending-reply[data-continuing] .prose');"
            " return p && p.innerText.startsWith(b) && p.innerText.includes('slowly slowly'); }", arg=before)
        assert page.locator("#pending-reply").count() == 1 and narrator_nodes(page).count() == count - 1, \
            "the reply streams on in its own card"
        page.click("[data-action=stop]")
        outcome(page, "is kept, as a new version")
    finally:
        fake.chunk_delay(0)
    reply = last_reply(page)
    text = reply.locator(".prose").inner_text()
    assert text.startswith(before + " Then slowly") and text.count("slowly") < 200
    assert narrator_nodes(page).count() == count and versions_of(reply) == "2/2"
    settled(page)
    reply.locator("[data-action=version-previous]").click()
    page.wait_for_function("b => document.querySelector('#story [data-role=narrator][data-node-id]:last-of-type')"
                           " && !document.querySelector('#story').innerText.includes('Then slowly')", arg=before)
    assert last_reply(page).locator(".prose").inner_text() == before


def test_impersonate_fills_the_box_with_a_draft_and_sends_nothing(app, fake, page):
    sign_in(app, page)
    author_view(page)  # the prompt inspector, where the drafts are, is the author's
    settled(page)
    count, requests = narrator_nodes(page).count(), len(narrations(fake))
    fake.script("I knock twice on the cottage door and call for Mara.")
    page.click("[data-action=impersonate]")
    page.wait_for_function("() => document.querySelector('#action-text').value.includes('call for Mara')")
    outcome(page, "A draft of your next move is in the box")
    assert page.input_value("#action-text") == "I knock twice on the cottage door and call for Mara."
    assert narrator_nodes(page).count() == count and len(narrations(fake)) == requests + 1, "nothing was sent"
    assert "draft" in narrations(fake)[-1]["messages"][-1]["content"]

    fake.script("The door creaks; nobody answers.")
    page.fill("#action-text", "I knock twice on the cottage door.")
    page.click("#send-button")
    page.wait_for_function("n => document.querySelectorAll('#story [data-role=narrator][data-node-id]').length === n",
                           arg=count + 1)
    settled(page)
    last_reply(page).locator("a[data-inspect]").click()
    page.wait_for_selector("#drafts")
    draft = page.inner_text("[data-draft='1']")
    assert "edited before it was sent" in draft and "call for Mara" in draft


def test_an_authors_note_at_depth_2_every_3_turns_sits_exactly_there(app, fake, page):
    sign_in(app, page)
    author_view(page)  # the prompt inspector is the author's
    settled(page)
    page.wait_for_selector("#note-panel form", state="attached")
    page.fill("#note-panel textarea[name=text]", "Keep the rain in every scene.")
    page.fill("#note-panel input[name=depth]", "2")
    page.fill("#note-panel input[name=interval]", "3")
    page.click("#note-panel [data-action=save-note]")
    page.wait_for_selector("#note-message")
    due = int(page.get_attribute("#note-status", "data-next-turn"))
    turn = int(page.evaluate("document.querySelectorAll('#story [data-role=narrator][data-node-id]').length")) + 1
    shown = page.evaluate("document.querySelectorAll('#story [data-node-id]').length")
    assert shown == 2 * turn - 1, "the whole line is on the page"
    while turn <= due + 1:
        fake.script(f"Rain, turn {turn}.")
        before = len(narrations(fake))
        send(page, f"go on, turn {turn}")
        settled(page)
        body = narrations(fake)[before]
        placed = [i for i, m in enumerate(body["messages"]) if "Keep the rain in every scene." in m["content"]]
        if turn == due:
            assert placed == [len(body["messages"]) - 3], "two messages from the end"
            assert body["messages"][-2]["role"] == "assistant" and body["messages"][-3]["role"] == "system"
            last_reply(page).locator("a[data-inspect]").click()
            page.wait_for_selector("#note-placement")
            assert page.get_attribute("#note-placement", "data-from-end") == "2"
            assert re.search(r"cost \d+ tokens here", page.inner_text("#note-placement"))
            assert page.inner_text("[data-section=author_note] h3").strip().endswith("Author's note")
            page.go_back()
            page.wait_for_selector("#story [data-role=opening]")
            connected(page)
        else:
            assert placed == [], f"turn {turn} is not given the note"
        turn += 1
    page.wait_for_selector("#note-panel form", state="attached")
    page.fill("#note-panel textarea[name=text]", "")
    page.click("#note-panel [data-action=save-note]")
    page.wait_for_selector("#note-message")


def test_a_persona_plays_the_campaign_under_its_name(app, fake, page):
    sign_in(app, page)
    play_url = page.url
    page.click("header.top >> text=Personas")
    page.fill("input[name=name]", "Wren")
    page.fill("textarea[name=description]", "A lamplighter's apprentice with soot on her sleeves.")
    page.click("[data-action=save-persona]")
    page.wait_for_selector("#personas >> text=Wren")
    page.goto(play_url)
    page.click("text=Edit & canon")
    page.select_option("select[name=persona]", label="Wren")
    page.click("form.campaign-form button[type=submit]")
    page.wait_for_selector("#playing-as")
    assert page.inner_text("#playing-as") == "You play as Wren."
    connected(page)
    fake.script("The fisherman nods to Wren.")
    before = len(narrations(fake))
    send(page, "greet the fisherman")
    system = narrations(fake)[before]["messages"][0]["content"]
    assert "Call the player's character Wren" in system and "soot on her sleeves" in system


def test_each_form_of_thinking_stays_out_of_the_story_history_and_recording(app, fake, page):
    sign_in(app, page)
    author_view(page)  # the narrator's thinking is the author's view
    secrets = {form: f"Secret {form}: the key is under the loose brick." for form in ("field", "tags", "open")}
    for form, secret in secrets.items():
        settled(page)
        fake.chunk_delay(0.05 if form == "tags" else 0)
        fake.script(Thought(secret, f"The wind turns ({form}).", form=form))
        if form == "tags":
            page.fill("#action-text", f"listen ({form})")
            page.click("#send-button")
            page.wait_for_selector("#pending-thinking-text:not(:empty)", state="attached")
            assert not page.is_visible("#pending-thinking-text"), "collapsed while it streams"
            assert "loose brick" not in page.inner_text("#pending-reply .prose")
            page.wait_for_function("() => !document.querySelector('#pending-reply')")
        else:
            send(page, f"listen ({form})")
        fake.chunk_delay(0)
        reply = last_reply(page)
        assert reply.locator(".prose").inner_text() == f"The wind turns ({form})."
        assert reply.locator("[data-thinking] .thinking-text").text_content() == secret, "kept beside the reply, collapsed"
    settled(page)
    before = len(narrations(fake))
    fake.script("Quiet.")
    send(page, "wait")
    settled(page)
    history = str(narrations(fake)[before]["messages"])
    assert all(f"The wind turns ({form})." in history for form in secrets)
    assert "loose brick" not in history, "no thinking in the history the narrator reads"
    assert not any("loose brick" in str(body["messages"]) for body in structured(fake)), \
        "no thinking in the recorder's (or any step's) input"
    assert all(body["think"] is False for body in structured(fake)[-3:])


def test_read_aloud_speaks_each_character_in_their_voice_and_stops(app, fake, page):
    page.add_init_script(FAKE_SPEECH.replace("VOICES", VOICES))
    sign_in(app, page)
    settled(page)
    page.wait_for_selector("#voices-panel [data-voice-for=narrator] option[value=alice]", state="attached")
    page.select_option("#voices-panel [data-voice-for=narrator] select", "alice")
    mara = page.locator("#voices-panel li[data-names*=Mara] select")
    mara.select_option("bruno")
    fake.script("You lift the lamp. “Careful with that,” says Mara, “it is older than the town.” The flame steadies.")
    send(page, "lift the lamp")
    settled(page)
    last_reply(page).locator("[data-action=read-aloud]").click()
    page.wait_for_function("() => window.__speech.filter(c => c.speak).length >= 5")
    spoken = [call for call in page.evaluate("window.__speech") if "speak" in call]
    assert {"speak": "Careful with that,", "voice": "bruno"} in spoken
    assert {"speak": "it is older than the town.", "voice": "bruno"} in spoken
    assert {"speak": "You lift the lamp.", "voice": "alice"} in spoken
    assert last_reply(page).locator("[data-action=read-aloud]").inner_text() == "Stop reading"
    last_reply(page).locator("[data-action=read-aloud]").click()
    assert {"cancel": True} in page.evaluate("window.__speech")
    assert last_reply(page).locator("[data-action=read-aloud]").inner_text() == "Read"

    # A game master's reply, marked up as campaigns/_voice_rounds.html renders one: each character's words in
    # their voice, what they do and the narration in the narrator's.
    mara_key = page.get_attribute("#voices-panel li[data-names*=Mara]", "data-voice-for")
    page.evaluate("""key => document.querySelector('#story').insertAdjacentHTML('beforeend',
        `<article data-node-id="gm-test" data-role="narrator-test"><div class="voices"><section class="round">
         <div class="voice" data-speaker="${key}"><div class="voice-name">Mara</div>
         <p class="voice-speech">“Hush, both of you.”</p><p class="voice-action">She points at the door.</p></div>
         </section></div><div class="prose gm-narration" data-voice="gm">The wind howls.</div>
         <span class="reply-actions"><button type="button" data-action="read-aloud">Read</button></span></article>`)""",
                  mara_key)
    page.click("[data-node-id=gm-test] [data-action=read-aloud]")
    page.wait_for_function("() => window.__speech.some(c => c.speak === 'The wind howls.')")
    spoken = [call for call in page.evaluate("window.__speech") if "speak" in call]
    assert spoken[-3:] == [{"speak": "Hush, both of you.", "voice": "bruno"},
                           {"speak": "She points at the door.", "voice": "alice"},
                           {"speak": "The wind howls.", "voice": "alice"}]
    page.click("[data-node-id=gm-test] [data-action=read-aloud]")
    page.evaluate("document.querySelector('[data-node-id=gm-test]').remove()")

    page.check("#voices-panel [data-auto-read]")
    page.reload()
    page.wait_for_selector("#voices-panel li[data-names*=Mara] option[value=bruno]", state="attached")
    assert page.locator("#voices-panel li[data-names*=Mara] select").input_value() == "bruno", "kept per campaign"
    assert page.is_checked("#voices-panel [data-auto-read]")
    connected(page)
    fake.script("“Who is there?” Mara calls.")
    send(page, "knock")
    page.wait_for_function("() => window.__speech.some(c => c.speak === 'Who is there?')")
    assert {"speak": "Who is there?", "voice": "bruno"} in page.evaluate("window.__speech"), "read as it was written"
    page.uncheck("#voices-panel [data-auto-read]")
    settled(page)


def test_where_the_browser_has_no_voices_the_controls_say_so(app, fake, page):
    page.add_init_script(FAKE_SPEECH.replace("VOICES", "[]"))
    sign_in(app, page)
    page.wait_for_selector("#voices-panel [data-no-voices]", state="attached")
    assert page.is_visible("#voices-panel [data-no-voices]")
    assert "has no voices to read with" in page.inner_text("#voices-panel [data-no-voices]")
    button = last_reply(page).locator("[data-action=read-aloud]")
    assert button.inner_text() == "No voices to read with" and button.is_disabled()
