"""A new campaign of what a person brought: each file becomes what the issue says, staged until whole, and back."""

import json

import pytest
from django.core.management import call_command

from campaigns import lineage
from campaigns.models import AuthorNote, Campaign, CharacterCard, ContextSnapshot, Node, Persona
from campaigns.state import state_at
from campaigns.state.world import world
from knowledge.models import Source
from storyteller import context
from storyteller.tavern import exporting, files, importing
from storyteller.tavern import plan as plans

from . import make

pytestmark = pytest.mark.django_db(transaction=True)
LIMIT = 8 * 1024 * 1024


def _create(owner, *named, persona="Wren", levels=None):
    plan = plans.make([files.read(name, data, LIMIT) for name, data in named], persona, levels)
    return importing.create(owner, plan).campaign


def _line(campaign):
    return [(n.depth, n.role, n.text) for n in lineage.path_of(campaign).nodes()]


def _versions(campaign, depth):
    path = lineage.path_of(campaign)
    node = path.nodes().get(depth=depth)
    groups = lineage.version_groups(campaign.pk, [node])
    return [Node.objects.get(pk=pk).text for pk in groups.get(node.pk, [node.pk])]


def test_a_card_becomes_a_character_an_opening_and_greetings_to_flip_between(owner):
    campaign = _create(owner, ("mara.png", make.card_png(make.v2(character_book=make.character_book()))))
    assert (campaign.title, campaign.protagonist) == ("Mara", "Wren")
    assert campaign.persona == Persona.objects.get(owner=owner, name="Wren")
    assert campaign.opening == "The abbey kitchen at dusk, rain on the roof."
    assert _line(campaign)[1:] == [(1, "player", ""), (2, "narrator", "*Mara looks up from the stove.* You're late, "
                                                                      "{{user}}.")]
    assert _versions(campaign, 2) == ["*Mara looks up from the stove.* You're late, {{user}}.",
                                      "*The kettle screams.* Oh! {{user}}!", "*Mara is asleep by the fire.*"]
    assert campaign.narrator_rules == "Write as Mara, in past tense."
    assert campaign.reply_direction == "Keep replies under 150 words."
    assert campaign.style_examples.startswith("<START>\n{{user}}: Hello\nMara: *nods* Sit.")
    note = AuthorNote.objects.get(campaign=campaign)
    assert (note.text, note.depth, note.role) == ("Mara never lies.", 4, "system")
    card = CharacterCard.objects.get(campaign=campaign)
    assert card.portrait.startswith(b"\x89PNG") and card.personality == "warm, watchful"
    now = state_at(lineage.path_of(campaign), campaign)
    assert "mara" in world.characters(now)
    book = Source.objects.get(campaign=campaign, keyed=True)
    assert set(world.knowledge(now, "mara").get("lore", {})) == {f"{book.lore_book}:0", f"{book.lore_book}:1"}
    assert not Campaign.objects.get(pk=campaign.pk).game_master


def test_the_prompt_reads_the_card_user_as_the_persona_and_never_the_creators_notes(owner):
    campaign = _create(owner, ("mara.json", json.dumps(make.v2()).encode()))
    ctx = context.build(campaign, lineage.path_of(campaign), context.Action(mode="do", text="I sit."))
    system = ctx.messages[0]["content"]
    assert "## Mara" in system and "Personality: warm, watchful" in system
    assert "nothing in it is a fact of the story" in system and "Wren: Hello" in system
    assert "Made for rainy evenings" not in json.dumps(ctx.messages)
    assert "You're late, Wren." in json.dumps(ctx.messages)
    assert "Keep replies under 150 words." in ctx.messages[-1]["content"]


def test_an_entry_filtered_to_a_character_becomes_that_characters_lore(owner):
    book = {"entries": {
        "0": make.every_field_entry(0, comment="Mara's debt", content="Mara owes the abbot.",
                                    characterFilter={"isExclude": False, "names": ["Mara"], "tags": []}),
        "1": make.every_field_entry(1, comment="Edrin's oath", content="Edrin swore silence.",
                                    characterFilter={"isExclude": False, "names": ["edrin_v2"], "tags": []}),
        "2": make.every_field_entry(2, comment="The river", content="The river floods in spring."),
        "3": make.every_field_entry(3, comment="Not Mara's", content="A secret kept from Mara.",
                                    characterFilter={"isExclude": True, "names": ["Mara"], "tags": []})}}
    campaign = _create(owner, ("mara.json", json.dumps(make.v2()).encode()),
                       ("edrin_v2.json", json.dumps(make.v3(name="Edrin")).encode()),
                       ("abbey.json", json.dumps(book).encode()))
    now = state_at(lineage.path_of(campaign), campaign)
    source = Source.objects.get(campaign=campaign, keyed=True, title="abbey")
    known = {who: set(world.knowledge(now, who).get("lore", {})) for who in ("mara", "edrin")}
    assert known == {"mara": {f"{source.lore_book}:0"}, "edrin": {f"{source.lore_book}:1"}}, \
        "by the character's name or its card's file name (SillyTavern's filter); an excluding filter gives nothing"


def test_several_cards_make_a_cast_for_the_game_master(owner):
    campaign = _create(owner, ("mara.json", json.dumps(make.v2()).encode()),
                       ("edrin.json", json.dumps(make.v3(name="Edrin", first_mes="Hm, {{char}} nods.")).encode()))
    assert campaign.game_master and campaign.title == "Mara and Edrin"
    assert _versions(campaign, 2)[3] == "Hm, Edrin nods.", "Mara's three greetings, then Edrin's"
    assert list(CharacterCard.objects.filter(campaign=campaign).values_list("name", flat=True)) == ["Mara", "Edrin"]
    assert campaign.narrator_rules.startswith("For Mara:\nWrite as Mara")


def test_a_chat_becomes_the_story_tree_with_its_swipes_as_versions(owner):
    campaign = _create(owner, ("mara.json", json.dumps(make.v2()).encode()), ("mara.jsonl", make.mara_chat()))
    assert [text for _, _, text in _line(campaign)[1:]] == [
        "", "*Mara looks up.* You're late.", "I shake off the rain.", "Tea?", "Tea, please.", "She pours."]
    assert campaign.head_depth == 6
    assert _versions(campaign, 4) == ["Sit by the fire.", "Tea?", "Take your boots off."]
    assert _versions(campaign, 2) == ["*Mara looks up.* You're late.", "*The kettle screams.*"]
    note = AuthorNote.objects.get(campaign=campaign)
    assert (note.text, note.depth, note.interval) == ("Keep it rainy.", 3, 2), "the chat's note wins over the card's"


def test_a_group_chat_gives_each_voice_its_reply(owner):
    campaign = _create(owner, ("group.jsonl", make.group_chat()))
    assert campaign.game_master
    assert [text for _, _, text in _line(campaign)[1:]] == ["", "Mara: Welcome back.", "", "Edrin: About time.",
                                                            "Hello both.", "Edrin: Sit."]


def test_a_kobold_save_brings_its_prompt_memory_note_and_world_info(owner):
    campaign = _create(owner, ("save.json", json.dumps(make.kobold_save()).encode()))
    assert campaign.opening == "The ferry docks at Greyhollow."
    assert [text for _, _, text in _line(campaign)[1:]] == ["", "The rain starts.", "", "A bell rings."]
    memory = Source.objects.get(campaign=campaign, keyed=False)
    assert memory.always_include and memory.text == "Wren is a courier."
    assert Source.objects.get(campaign=campaign, keyed=True).lore_entries.count() == 1
    assert AuthorNote.objects.get(campaign=campaign).text == "Keep it tense."


def test_each_book_at_the_level_chosen(owner):
    campaign = _create(owner, ("abbey.json", json.dumps(make.world_info()).encode()),
                       ("nai.json", json.dumps(make.novelai_book()).encode()), levels={1: "inspiration"})
    assert dict(Source.objects.filter(campaign=campaign).values_list("title", "classification")) == {
        "abbey": "canon", "nai": "inspiration"}


def test_round_trip_import_export_import_gives_the_same_campaign(owner, tmp_path):
    first = _create(owner, ("mara.png", make.card_png(make.v3(character_book=make.character_book()))),
                    ("abbey.json", json.dumps(make.world_info()).encode()), ("mara.jsonl", make.mara_chat()))
    out = {item.path: item.data for item in exporting.export(first)}
    second = _create(owner, *[(path.rsplit("/", 1)[1], data) for path, data in out.items() if not
                              path.endswith("mara.json")])
    for campaign in (first, second):
        campaign.refresh_from_db()

    def shape(campaign):
        cards = list(CharacterCard.objects.filter(campaign=campaign).values_list("name", "description",
                                                                                  "personality", "examples"))
        books = sorted((s.title, s.classification, s.lore_entries.count()) for s in
                       Source.objects.filter(campaign=campaign, keyed=True))
        versions = [_versions(campaign, depth) for depth in range(2, campaign.head_depth + 1, 2)]
        return cards, books, [text for _, _, text in _line(campaign)], versions, campaign.opening

    assert shape(first) == shape(second)
    card = json.loads(exporting.export(second)[0].data)
    assert card["data"]["extensions"]["someones_tool"] == {"keep": ["this", 1]}
    assert card["data"]["character_book"]["entries"][0]["extensions"]["unknown_tool_key"] == {"deep": [1, 2]}
    assert json.loads(out["lorebooks/abbey.json"])["entries"]["0"]["madeUpByAnotherTool"] == {"kept": True}


def test_the_command_imports_and_says_what_it_made_as_json(owner, tmp_path, capsys):
    (tmp_path / "mara.png").write_bytes(make.card_png(make.v2(character_book=make.character_book())))
    (tmp_path / "chat.jsonl").write_bytes(make.mara_chat())
    (tmp_path / "bad.png").write_bytes(make.picture())
    call_command("tavern", "import", str(tmp_path / "mara.png"), str(tmp_path / "chat.jsonl"),
                 str(tmp_path / "bad.png"), "--json", "--persona", "Wren", "--owner", owner.username)
    result = json.loads(capsys.readouterr().out)
    campaign = Campaign.objects.get(pk=result["campaign"])
    assert result["characters"] == [{"key": "mara", "name": "Mara"}] and result["turns"] == 3
    assert result["greetings"] == [], "the chat's own line begins the story, not the card's greetings"
    assert [(e["keys"], e["constant"]) for e in result["lorebook_entries"]] == [(["teapot"], False),
                                                                               (["cellar"], True)]
    assert result["lorebook_entries"][0]["id"].endswith(":0")
    assert any("no character card" in refusal for refusal in result["refused"])
    call_command("tavern", "export", "--campaign", str(campaign.pk), "--out", str(tmp_path / "out"))
    assert (tmp_path / "out" / "characters" / "mara.png").read_bytes().startswith(b"\x89PNG")
    assert (tmp_path / "out" / "chats").is_dir()


def test_the_commands_json_lists_a_cards_greetings_in_order(owner, tmp_path, capsys):
    (tmp_path / "mara.json").write_text(json.dumps(make.v2()))
    call_command("tavern", "import", str(tmp_path / "mara.json"), "--json", "--persona", "Wren",
                 "--owner", owner.username)
    result = json.loads(capsys.readouterr().out)
    assert [(g["character"], g["text"]) for g in result["greetings"]] == [
        ("Mara", "*Mara looks up from the stove.* You're late, {{user}}."),
        ("Mara", "*The kettle screams.* Oh! {{user}}!"), ("Mara", "*Mara is asleep by the fire.*")]


def test_nothing_usable_is_refused_whole_and_nothing_is_written(owner):
    before = Campaign.every.count()  # staged (unpublished) campaigns too
    plan = plans.make([files.read("x.png", make.picture(), LIMIT)], "Wren")
    with pytest.raises(importing.ImportRefused, match="Nothing was imported"):
        importing.create(owner, plan)
    assert Campaign.every.count() == before


def test_a_campaign_brought_in_travels_whole_in_a_bundle(owner):
    from storyteller import bundle

    first = _create(owner, ("mara.png", make.card_png(make.v2(character_book=make.character_book()))),
                    ("abbey.json", json.dumps(make.world_info()).encode()), ("mara.jsonl", make.mara_chat()))
    second = bundle.import_bundle(owner, bundle.dumps(first))
    card = CharacterCard.objects.get(campaign=second)
    assert card.portrait.startswith(b"\x89PNG") and card.card["data"]["extensions"]["someones_tool"]
    assert sorted(Source.objects.filter(campaign=second, keyed=True).values_list("title", flat=True)) == [
        "Mara's book", "abbey"]
    assert [t for _, _, t in _line(second)] == [t for _, _, t in _line(first)]
    assert Node.objects.get(campaign=second, depth=4, text="Tea?").note == "The storm grows."
    assert (second.style_examples, second.reply_direction) == (first.style_examples, first.reply_direction)
    assert {s.report.get("imported", {}).get("from") for s in
            ContextSnapshot.objects.filter(node__campaign=second)} == {"mara.jsonl"}
