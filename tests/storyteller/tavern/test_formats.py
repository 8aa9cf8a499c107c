"""The formats read into one shape and written back: cards, lorebooks and chats, each field accounted for (pure)."""

import io
import json

import pytest
from PIL import Image

from knowledge import worldinfo
from storyteller.tavern import books, cards, chats, png

from . import make


@pytest.mark.parametrize("made, spec", [(make.v1(), "V1"), (make.v2(), "V2"), (make.v3(), "V3"),
                                        (make.hybrid(), "V2"), (make.pygmalion(), "Pygmalion")])
def test_every_card_version_reads_to_the_same_shape(made, spec):
    card = cards.read(made)
    assert (card.spec, card.name) == (spec, "Mara")
    assert card.description and card.first_mes and card.scenario
    assert card.hybrid == (made is not None and "chat" in made)


def test_a_v2_card_keeps_every_field_and_names_what_has_no_place_here():
    card = cards.read(make.v2())
    assert card.alternate_greetings == ["*The kettle screams.* Oh! {{user}}!", "*Mara is asleep by the fire.*"]
    assert card.greetings[0].startswith("*{{char}} looks up")
    assert card.depth_prompt == {"prompt": "Mara never lies.", "depth": 4, "role": "system"}
    assert card.book is None
    said = " | ".join(card.unplaced)
    for word in ("talkativeness", "World Info file", "someones_tool", "tags (cook, fantasy)",
                 "creator “someone”", "character version “1.2”"):
        assert word in said
    assert card.data["extensions"]["someones_tool"] == {"keep": ["this", 1]}


def test_talkativeness_as_a_string_and_other_odd_types_are_read_without_refusing():
    card = cards.read(make.v2(description=12, tags="a, b", alternate_greetings="one"))
    assert card.description == "" and "description is not text" in card.problems[0]
    assert card.tags == ["a", "b"] and card.alternate_greetings == ["one"]


def test_a_v3_card_reads_its_own_parts_and_a_newer_version_warns():
    made = make.v3(nickname="Mags", group_only_greetings=["Both of you!"],
                   creator_notes_multilingual={"fr": "Pour les soirs"}, assets=[
                       {"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png"},
                       {"type": "emotion", "uri": "https://example.com/x.png", "name": "happy", "ext": "png"}])
    made["spec_version"] = "3.4"
    card = cards.read(made)
    assert card.called == "Mags" and cards.fill_char("{{char}} and <BOT>", card) == "Mags and Mags"
    assert any("newer than this reads" in p for p in card.problems)
    assert any("group chats only" in u for u in card.unplaced) and any("fr" in u for u in card.unplaced)
    assert len(card.assets) == 2


def test_fill_char_reads_char_and_bot_and_leaves_user_for_the_persona():
    card = cards.read(make.v1())
    assert cards.fill_char(card.first_mes, card) == "Hello, <USER>. I am Mara."


def test_a_card_without_a_name_is_refused_in_words():
    with pytest.raises(cards.CardRefused, match="no name"):
        cards.read(make.v2(name=""))


def test_an_embedded_character_book_converts_with_sillytaverns_mapping_and_back():
    card = cards.read(make.v2(character_book=make.character_book()))
    book = card.book.book
    teapot, cellar = book.entries
    assert (teapot.keys, teapot.order, teapot.position, teapot.sticky, teapot.cooldown) == (("teapot",), 50, 0, 2, 1)
    assert (cellar.constant, cellar.secondary, cellar.position) == (True, ("dark",), 1)
    back = books.character_book(worldinfo.parse(worldinfo.dump(book)))
    assert back["entries"][0]["extensions"]["unknown_tool_key"] == {"deep": [1, 2]}
    assert back["entries"][0]["extensions"]["sticky"] == 2
    assert back["entries"][0]["insertion_order"] == 50 and back["entries"][0]["position"] == "before_char"
    assert {k: back[k] for k in ("name", "scan_depth", "token_budget", "extensions")} == {
        "name": "Mara's book", "scan_depth": 3, "token_budget": 500, "extensions": {"bookExt": 1}}


def test_world_info_keyed_by_uid_keeps_every_field_through_a_dump_and_names_what_is_not_used():
    converted = books.convert(make.world_info(), "Abbey")
    dragons, ferry = converted.book.entries
    assert (dragons.keys, dragons.secondary, dragons.position, dragons.depth) == (("dragon", "wyrm"), ("fire",), 4, 4)
    assert ferry.constant
    again = json.loads(worldinfo.dump(converted.book))
    assert again["entries"]["0"]["madeUpByAnotherTool"] == {"kept": True}
    assert again["entries"]["0"] == make.every_field_entry(0)
    assert any("vector search" in u for u in converted.unplaced)


@pytest.mark.parametrize("made, kind, keys", [
    (make.novelai_book(), "NovelAI lorebook", ("Greyhollow",)),
    ({"kind": "memory", "name": "Mem", "entries": [{"name": "Bell", "entry": "It tolls.", "keywords": ["bell"],
                                                    "weight": 5, "enabled": True}]}, "Agnai memory book", ("bell",)),
    ({"type": "risu", "data": [{"key": "bell, tower", "secondkey": "", "comment": "Bell", "content": "It tolls.",
                                "alwaysActive": False, "selective": False, "insertorder": 3,
                                "activationPercent": 40}]}, "RisuAI lorebook", ("bell", "tower")),
    ({"spec": "lorebook_v3", "data": make.character_book()}, "lorebook (V3)", ("teapot",)),
])
def test_other_lorebooks_convert_to_world_info(made, kind, keys):
    converted = books.convert(made, "Book")
    assert converted.kind == kind
    assert converted.book.entries[0].keys == keys


def test_a_novelai_entry_keeps_its_priority_as_order_and_its_disabled_flag():
    converted = books.convert(make.novelai_book(), "Book")
    first, second = converted.book.entries
    assert (first.order, first.enabled, second.enabled) == (400, True, False)
    assert any("NovelAI's context settings" in u for u in converted.unplaced)


def test_a_chat_reads_its_header_swipes_notes_and_dates():
    chat = chats.read_jsonl([json.loads(line) for line in make.mara_chat().splitlines()])
    assert (chat.user_name, chat.character_name, chat.note, chat.note_depth) == ("Wren", "Mara", "Keep it rainy.", 3)
    assert chat.messages[2].swipes == ["Sit by the fire.", "Tea?", "Take your boots off."]
    assert chat.messages[2].swipe_id == 1 and chat.messages[2].text == "Tea?"
    assert chat.messages[0].sent_ms == chats.date_ms("September 28, 2024 1:02am")
    assert chat.messages[4].sent_ms == 1727485500000 and chat.messages[5].sent_ms == 1727485560000
    assert any("integrity" in u for u in chat.unplaced)
    turns, left_out = chats.turns(chat)
    assert [t.action for t in turns] == ["", "I shake off the rain.", "Tea, please."]
    assert turns[1].reply == ["Sit by the fire.", "Tea?", "Take your boots off."] and turns[1].chosen == 1
    assert turns[1].note == "The storm grows."
    assert left_out == []


def test_a_group_chat_names_each_speaker_and_continues_between_replies():
    chat = chats.read_jsonl([json.loads(line) for line in make.group_chat().splitlines()])
    assert chat.kind == "SillyTavern group chat" and chat.speakers == ["Mara", "Edrin"]
    turns, _ = chats.turns(chat)
    assert [(t.action, t.reply[t.chosen]) for t in turns] == [("", "Mara: Welcome back."),
                                                              ("", "Edrin: About time."),
                                                              ("Hello both.", "Edrin: Sit.")]
    assert chats.speaker_of("Edrin: Sit.", chat.speakers) == ("Edrin", "Sit.")


def test_a_last_message_of_the_persons_with_no_reply_is_named_not_dropped_silently():
    chat = chats.read_jsonl([make.chat_header(), make.message("Mara", "Hi."),
                             make.message("Wren", "Are you there?", user=True)])
    _, left_out = chats.turns(chat)
    assert "Are you there?" in left_out[0] and "send it again" in left_out[0]


def test_a_kobold_save_reads_its_prompt_actions_memory_note_and_world_info():
    chat = chats.read_kobold(make.kobold_save())
    assert chat.opening == "The ferry docks at Greyhollow." and chat.memory == "Wren is a courier."
    assert [m.text for m in chat.messages] == ["The rain starts.", "A bell rings."]
    assert chat.note == "Keep it tense." and any("template" in u for u in chat.unplaced)
    book = books.from_kobold(chat.worldinfo, "World")
    assert book.book.entries[0].keys == ("bell", "tower")


def test_kobold_lite_chat_markers_split_into_turns():
    save = {"prompt": "", "memory": "", "actions": ["{{[INPUT]}}Hi{{[OUTPUT]}}Hello there.", "{{[INPUT]}}Bye"]}
    chat = chats.read_kobold(save)
    assert [(m.is_user, m.text) for m in chat.messages] == [(True, "Hi"), (False, "Hello there."), (True, "Bye")]


def test_dates_in_every_form_and_back():
    for text in ("September 28, 2024 1:02am", "2024-09-28T01:02:00Z", 1727485320000, "1727485320000",
                 "2024-9-28 @01h 02m 00s 000ms"):
        assert chats.date_ms(text) == 1727485320000, text
    assert chats.human_date(1727485320000) == "September 28, 2024 1:02am"
    assert chats.date_ms("the day after tomorrow") is None


def test_a_v3_png_card_is_written_with_both_chunks_and_read_back_preferring_ccv3():
    card = cards.v3(make.card_data())
    data = png.card_png(card, cards.v2(card), make.picture(), "Mara")
    texts = png.text_chunks(data, 10**7)
    assert set(texts) >= {"chara", "ccv3"}
    assert json.loads(png.decode_base64(texts["ccv3"], "x"))["spec"] == "chara_card_v3"
    assert json.loads(png.decode_base64(texts["chara"], "x"))["spec"] == "chara_card_v2"


def test_keywords_compare_without_case():
    data = make.card_png(make.v2(), keywords=("CHARA",))
    assert "chara" in png.text_chunks(data, 10**7)


def test_a_portrait_is_drawn_again_small_and_a_bomb_is_not_decoded():
    picture, problem = png.portrait(make.picture((2000, 1000)))
    assert problem is None and png.picture_type(picture) == "image/png"
    assert max(Image.open(io.BytesIO(picture)).size) == png.PORTRAIT_SIDE
    small = make.picture()
    ihdr = (50_000).to_bytes(4, "big") * 2 + small[24:29]  # 50,000 pixels square, the same depth and colour
    picture, problem = png.portrait(small[:8] + make.chunk(b"IHDR", ihdr) + small[33:])
    assert picture is None and "pixels" in problem
