"""Files as they are dropped: each read to what it is, and every hostile one refused or contained, in words."""

import base64
import io
import json
import zipfile
import zlib

import pytest

from storyteller.tavern import files

from . import make

LIMIT = 8 * 1024 * 1024


def read(name, data, limit=LIMIT):
    return files.read(name, data, limit)


@pytest.mark.parametrize("name, data, kind, label", [
    ("mara.json", json.dumps(make.v2()).encode(), "card", "character card (V2)"),
    ("mara.json", json.dumps(make.hybrid()).encode(), "card", "character card (V2, SillyTavern hybrid)"),
    ("mara3.json", json.dumps(make.v3()).encode(), "card", "character card (V3)"),
    ("old.json", json.dumps(make.v1()).encode(), "card", "character card (V1)"),
    ("pyg.json", json.dumps(make.pygmalion()).encode(), "card", "character card (Pygmalion)"),
    ("mara.png", make.card_png(make.v2()), "card", "character card (V3)"),
    ("mara.charx", make.charx(make.v3(assets=[{"type": "icon", "uri": "embeded://assets/icon/images/main.png",
                                               "name": "main", "ext": "png"}])), "card", "character card (V3)"),
    ("abbey.json", json.dumps(make.world_info()).encode(), "lorebook", "World Info"),
    ("nai.json", json.dumps(make.novelai_book()).encode(), "lorebook", "NovelAI lorebook"),
    ("Greyhollow.lorebook", json.dumps(make.novelai_book()).encode(), "lorebook", "NovelAI lorebook"),
    ("chat.jsonl", make.mara_chat(), "chat", "SillyTavern chat"),
    ("group.jsonl", make.group_chat(), "chat", "SillyTavern group chat"),
    ("save.json", json.dumps(make.kobold_save()).encode(), "kobold", "Kobold save"),
])
def test_every_kind_of_file_is_read_to_what_it_is(name, data, kind, label):
    reading = read(name, data)
    assert (reading.refused, reading.kind, reading.label) == ("", kind, label)


def test_a_png_card_prefers_ccv3_and_takes_its_picture_as_the_portrait():
    data = make.card_png(make.v2(name="Chara"), keywords=("chara",))
    both = make.png_with(make.chunk(b"tEXt", b"ccv3\0" + base64.b64encode(
        json.dumps(make.v3(name="Ccv3")).encode())), image=data)
    reading = read("card.png", both)
    assert reading.card.name == "Ccv3" and reading.portrait.startswith(b"\x89PNG")


def test_a_charx_icon_inside_the_archive_is_the_portrait():
    reading = read("mara.charx", make.charx(make.v3(assets=[
        {"type": "icon", "uri": "embeded://assets/icon/images/main.png", "name": "main", "ext": "png"}])))
    assert reading.portrait.startswith(b"\x89PNG")


def test_a_bad_ccv3_chunk_beside_a_good_chara_chunk_is_named_and_the_good_one_read():
    good = make.card_png(make.v2(), keywords=("chara",))
    data = make.png_with(make.chunk(b"tEXt", b"ccv3\0!!!not base64!!!"), image=good)
    reading = read("card.png", data)
    assert reading.card.name == "Mara" and "ccv3 chunk could not be read" in reading.problems[0]


# --- hostile files: each refused whole in words, or read with the bad part named --------------------------------


def test_a_png_with_a_100_mb_text_chunk_is_refused_before_it_is_read():
    body = b"chara\0" + b"A" * (100 * 1024 * 1024)
    data = make.png_with(make.chunk(b"tEXt", body))
    reading = read("huge.png", data, limit=200 * 1024 * 1024)
    assert reading.refused and "text chunk of 104,857,606 bytes" in reading.refused
    assert read("huge.png", data).refused.startswith("huge.png is 104,8")  # and over the file limit, unread


def test_a_compressed_chunk_bomb_is_refused_not_inflated():
    bomb = zlib.compress(b"A" * (300 * 1024 * 1024), 9)
    reading = read("bomb.png", make.png_with(make.chunk(b"zTXt", b"chara\0\0" + bomb)))
    assert "inflates past" in reading.refused and "decompression bomb" in reading.refused


def test_a_charx_zip_bomb_is_refused_as_it_inflates():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("card.json", json.dumps(make.v3()))
        archive.writestr("assets/x.png", b"\0" * (50 * 1024 * 1024))
    reading = read("bomb.charx", out.getvalue())
    assert "unpacks to more than 8,388,608 bytes" in reading.refused


def test_a_zip_path_that_climbs_out_is_never_read_and_named():
    reading = read("sly.charx", make.charx(make.v3(assets=[
        {"type": "icon", "uri": "embeded://../../etc/passwd", "name": "main", "ext": "png"}]),
        members={"../../evil.png": make.picture(), "assets/icon/images/main.png": make.picture()}))
    assert reading.card.name == "Mara"
    said = " ".join(reading.problems)
    assert "outside itself" in said and "points outside the card" in said
    assert reading.portrait == b""


def test_json_nested_ten_thousand_deep_is_refused():
    reading = read("deep.json", make.nested(10_000))
    assert "nested more than" in reading.refused


def test_base64_that_is_not_is_refused_in_words():
    data = make.png_with(make.chunk(b"tEXt", b"chara\0%%%% this is not base64 %%%%"))
    assert "is not base64" in read("x.png", data).refused


def test_an_asset_that_points_to_the_network_is_named_and_never_fetched(fake_ollama):
    uri = f"{fake_ollama.url}/portrait.png"
    reading = read("net.json", json.dumps(make.v3(assets=[{"type": "icon", "uri": uri, "name": "main",
                                                           "ext": "png"}])).encode())
    assert reading.card.name == "Mara" and reading.portrait == b""
    assert "points to the network" in reading.problems[0] and "not fetched" in reading.problems[0]
    assert fake_ollama.requests == []  # nothing asked the address, though a server answers there


def test_text_that_is_not_utf8_and_json_that_is_not_a_card_are_refused():
    assert "not UTF-8" in read("x.json", b"\xff\xfe{}").refused
    assert "not a character card, a lorebook" in read("x.json", b'{"hello": 1}').refused
    assert "no character card" in read("plain.png", make.picture()).refused


def test_a_file_over_the_limit_is_refused_unread():
    assert "at most 10" in read("big.json", b" " * 20, limit=10).refused
