"""Bring your story, in headless Chromium: drop a card, its lorebook and a chat, read the preview, import, play,
read why an entry fired; add a card to a campaign; a hostile card stays inert; both screen sizes."""

import io
import json
import re
import zipfile
import zlib
from urllib.parse import urlparse

import pytest

from tests.e2e.test_play import app, connected, fake, page, send, settled, sign_in  # noqa: F401 (fixtures)
from tests.storyteller.tavern import make

pytestmark = pytest.mark.e2e

SIZES = ({"width": 1280, "height": 900}, {"width": 390, "height": 844})


def _files(tmp_path):
    card = tmp_path / "mara.png"
    card.write_bytes(make.card_png(make.v2(character_book=make.character_book(),
                                           creator_notes=f"Play it slow. {make.HOSTILE}")))
    book = tmp_path / "abbey.json"
    book.write_text(json.dumps(make.world_info()))
    chat = tmp_path / "mara.jsonl"
    chat.write_bytes(make.mara_chat())
    return [str(card), str(book), str(chat)]


def _open_bring(page):
    page.goto(page.url.split("/campaigns/")[0] + "/")
    page.click("[data-action=bring]")
    page.wait_for_selector("#bring-form")


@pytest.mark.parametrize("viewport", SIZES, ids=["desktop", "phone"])
def test_a_card_its_book_and_a_chat_become_a_campaign_through_the_page(app, fake, page, tmp_path, viewport):
    requests, dialogs = [], []
    page.on("request", lambda request: requests.append(request.url))
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.set_viewport_size(viewport)
    sign_in(app, page)
    _open_bring(page)
    page.fill("#bring-form [name=persona]", "Wren")
    page.set_input_files("#bring-files", _files(tmp_path))
    page.wait_for_selector("[data-preview]")
    preview = page.inner_text("[data-preview]")
    assert "A new campaign: “Mara”" in preview
    assert "1 character · 4 lorebook entries · 3 turns with 3 other versions" in preview
    assert "Play it slow. <script>alert('x')</script><b>bold</b>" in preview, "the creator's notes, escaped"
    assert "teapot" in preview and "dragon, wyrm" in preview and "(always in)" in preview
    for unplaced in ("talkativeness", "someones_tool", "vector search", "integrity check"):
        assert unplaced in preview
    assert page.locator("[data-preview] script, [data-preview] b").count() == 0
    assert page.locator("[data-preview] img.card-portrait").evaluate("img => img.naturalWidth") > 0
    page.screenshot(path=str(tmp_path / f"bring-{viewport['width']}.png"), full_page=True)

    page.select_option("[data-book=abbey] select", "reference")
    page.click("[data-action=import]")
    page.wait_for_selector("#story [data-role=opening]", timeout=30_000)
    connected(page)
    story = page.inner_text("#story")
    assert "Tea, please." in story and "She pours." in story and "The storm grows." in story
    tea = page.locator("#story [data-role=narrator]", has_text="Tea?")
    assert "2 / 3" in tea.inner_text() or "2 of 3" in tea.inner_text()
    page.wait_for_selector("#cast-panel [data-cast=mara] img", state="attached")  # a closed panel on a phone
    page.wait_for_function("document.querySelector('#cast-panel [data-cast=mara] img').naturalWidth > 0")
    page.screenshot(path=str(tmp_path / f"imported-{viewport['width']}.png"), full_page=True)

    fake.script("Mara lifts the teapot's lid; something metal glints inside.")
    send(page, "I look at the teapot on the stove")
    settled(page)
    page.locator("#story a[data-inspect]").last.click()
    page.wait_for_selector("#lorebook-fired")
    fired = page.inner_text("#lorebook-fired")
    assert "The teapot" in fired and "its key “teapot” in turn 4 (you)" in fired
    assert "The cellar" in fired and "constant: always in" in fired
    page.screenshot(path=str(tmp_path / f"lorebook-{viewport['width']}.png"), full_page=True)

    assert dialogs == []
    hosts = {urlparse(url).hostname for url in requests if not url.startswith(("data:", "about:", "blob:"))}
    assert hosts == {"127.0.0.1"}, f"the browser reached beyond loopback: {sorted(hosts)}"


def test_a_card_added_to_a_campaign_joins_its_cast_and_the_export_downloads(app, fake, page, tmp_path):
    sign_in(app, page)
    play_url = page.url
    _open_bring(page)
    card = tmp_path / "tova.json"
    card.write_text(json.dumps(make.v3(name="Tova", first_mes="Hm.")))
    page.set_input_files("#bring-files", [str(card)])
    page.wait_for_selector("[data-preview] >> text=A new campaign: “Tova”")
    assert page.is_visible("#bring-form [name=title]")
    page.select_option("#bring-form [name=campaign]", label="The Lantern of Greyhollow")
    page.wait_for_selector("[data-preview] >> text=Added to “The Lantern of Greyhollow”")
    assert not page.is_visible("#bring-form [name=title]"), "no title is asked for an addition"
    assert "greeting(s) are kept with the card" in page.inner_text("[data-preview]")
    page.click("[data-action=import]")
    page.wait_for_url(play_url)
    page.wait_for_selector("#cast-panel [data-cast=tova]")
    page.goto(page.url.split("/campaigns/")[0] + "/")
    with page.expect_download() as download:
        page.locator("[data-action=export-tavern]").first.click()
    with zipfile.ZipFile(io.BytesIO(open(download.value.path(), "rb").read())) as archive:
        names = archive.namelist()
    assert any(re.match(r"characters/.+\.png$", name) for name in names)


def test_a_hostile_file_is_refused_in_words_and_nothing_is_written(app, fake, page, tmp_path):
    sign_in(app, page)
    _open_bring(page)
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(make.png_with(make.chunk(b"zTXt", b"chara\0\0" + zlib.compress(b"A" * 50_000_000))))
    page.set_input_files("#bring-files", [str(bomb)])
    page.wait_for_selector("[data-preview]")
    assert "decompression bomb" in page.inner_text("[data-preview]")
    assert "Nothing here can be brought in" in page.inner_text("[data-preview]")
    page.click("[data-action=import]")
    page.wait_for_selector("#bring-preview [role=alert] >> text=Nothing was imported")
    assert "decompression bomb" in page.inner_text("#bring-preview [role=alert]")


def test_every_other_kind_of_file_is_shown_and_brought_in_through_the_page(app, fake, page, tmp_path):
    made = {"old.json": json.dumps(make.v1(name="Oswin")), "hild.json": json.dumps(make.hybrid(name="Hild")),
            "pell.json": json.dumps(make.pygmalion(name="Pell")), "nai.json": json.dumps(make.novelai_book()),
            "tova.charx": make.charx(make.v3(name="Tova", assets=[
                {"type": "icon", "uri": "embeded://assets/icon/images/main.png", "name": "main", "ext": "png"}])),
            "group.jsonl": make.group_chat()}
    for name, data in made.items():
        (tmp_path / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    sign_in(app, page)
    _open_bring(page)
    page.fill("#bring-form [name=persona]", "Wren")
    page.set_input_files("#bring-files", [str(tmp_path / name) for name in made])
    page.wait_for_selector("[data-preview]")
    preview = page.inner_text("[data-preview]")
    for shown in ("old.json: character card (V1)", "hild.json: character card (V2, SillyTavern hybrid)",
                  "pell.json: character card (Pygmalion)", "tova.charx: character card (V3)",
                  "nai.json: NovelAI lorebook", "group.jsonl: SillyTavern group chat",
                  "4 characters", "played with a game master", "Greyhollow — keys: Greyhollow"):
        assert shown in preview, shown
    page.click("[data-action=import]")
    page.wait_for_selector("#story [data-role=opening]", timeout=30_000)
    story = page.inner_text("#story")
    assert "Mara: Welcome back." in story and "Edrin: Sit." in story and "Hello both." in story
    for name in ("oswin", "hild", "pell", "tova"):
        page.wait_for_selector(f"#cast-panel [data-cast={name}]", state="attached")
    page.wait_for_function("document.querySelector('#cast-panel [data-cast=tova] img').naturalWidth > 0")

    _open_bring(page)
    save = tmp_path / "save.json"
    save.write_text(json.dumps(make.kobold_save()))
    page.set_input_files("#bring-files", [str(save)])
    page.wait_for_selector("[data-preview] >> text=save.json: Kobold save")
    page.click("[data-action=import]")
    page.wait_for_selector("#story [data-role=opening]", timeout=30_000)
    story = page.inner_text("#story")
    assert "The ferry docks at Greyhollow." in story and "The rain starts." in story and "A bell rings." in story
