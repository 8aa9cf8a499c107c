"""Adding what a person brought to a campaign of theirs: joined in one transaction, the characters at the opening, a chat a
line of its own, and a round trip through the export."""

import json

import pytest

from campaigns import lineage
from campaigns.models import Branch, CharacterCard, Node
from campaigns.state import state_at
from knowledge.models import LoreEntry, Source
from storyteller.tavern import exporting, files, importing
from storyteller.tavern import plan as plans

from . import make

LIMIT = 8 * 1024 * 1024


def _plan(*named, persona="Wren", existing=()):
    return plans.make([files.read(name, data, LIMIT) for name, data in named], persona, existing=existing)


@pytest.mark.django_db
def test_a_card_with_its_book_and_chat_added_to_a_campaign(owner, campaign):
    plan = _plan(("mara.png", make.card_png(make.v2(character_book=make.character_book()))),
                 ("mara.jsonl", make.mara_chat()))
    written = importing.add(owner, campaign, plan)
    assert written.characters == [{"key": "mara", "name": "Mara"}]
    assert [(e["keys"], e["constant"]) for e in written.entries] == [(["teapot"], False), (["cellar"], True)]
    campaign.refresh_from_db()
    now = state_at(lineage.path_of(campaign), campaign)
    assert now.entity("mara").data["description"].startswith("Mara is the abbey's cook.")
    card = CharacterCard.objects.get(campaign=campaign)
    assert card.portrait.startswith(b"\x89PNG") and card.creator_notes.startswith("Made for rainy evenings.")
    source = Source.objects.get(campaign=campaign, keyed=True)
    assert source.lorebook and source.lore_scope == "listed" and source.passages.count() == 0
    assert sorted(LoreEntry.objects.filter(source=source).values_list("key", flat=True)) == [
        f"{source.lore_book}:0", f"{source.lore_book}:1"]
    known = now.entity("mara")
    assert known is not None
    path = lineage.path_of(campaign)
    texts = [(n.depth, n.role, n.mode, n.text) for n in path.nodes()]
    assert texts[1:] == [(1, "player", "continue", ""), (2, "narrator", "", "*Mara looks up.* You're late."),
                         (3, "player", "do", "I shake off the rain."), (4, "narrator", "", "Tea?"),
                         (5, "player", "do", "Tea, please."), (6, "narrator", "", "She pours.")]
    assert Node.objects.get(campaign=campaign, pk=path.nodes().get(depth=4).pk).note == "The storm grows."
    siblings = lineage.version_groups(campaign.pk, list(path.nodes()))
    assert [Node.objects.get(pk=pk).text for pk in siblings[path.nodes().get(depth=4).pk]] == [
        "Sit by the fire.", "Tea?", "Take your boots off."]


@pytest.mark.django_db
def test_a_book_of_the_same_name_gets_a_key_of_its_own_and_the_same_book_again_is_not_added(owner, campaign):
    importing.add(owner, campaign, _plan(("abbey.json", json.dumps(make.world_info()).encode())))
    other = make.world_info()
    other["entries"]["0"]["content"] = "Another abbey's dragons."
    importing.add(owner, campaign, _plan(("abbey.json", json.dumps(other).encode())))
    assert sorted(Source.objects.filter(campaign=campaign, keyed=True).values_list("lore_book", flat=True)) == [
        "abbey", "abbey-2"]
    assert LoreEntry.objects.filter(source__campaign=campaign, key__startswith="abbey-2:").count() == 2

    again = plans.make([files.read("copy.json", json.dumps(make.world_info()).encode(), LIMIT)], "Wren",
                       existing=importing.existing_names(campaign), existing_books=importing.existing_books(campaign))
    assert again.books == [] and not again.usable
    assert again.notes[-1] == ("copy.json", "the campaign has this lorebook already (“abbey”), entry for entry, so "
                                            "it is not added again")


@pytest.mark.django_db(transaction=True)
def test_an_addition_that_fails_at_its_last_step_leaves_nothing_it_wrote_first(owner, campaign):
    named = [("mara.png", make.card_png(make.v2(character_book=make.character_book()))),
             ("abbey.json", json.dumps(make.world_info()).encode()), ("mara.jsonl", make.mara_chat())]
    importing.add(owner, campaign, _plan(*named))

    def counts():
        campaign.refresh_from_db()
        return (Branch.objects.filter(campaign=campaign).count(), Node.objects.filter(campaign=campaign).count(),
                Source.objects.filter(campaign=campaign).count(), LoreEntry.objects.filter(source__campaign=campaign)
                .count(), CharacterCard.objects.filter(campaign=campaign).count(), campaign.head_branch_id)

    before = counts()
    again = _plan(*named)  # not told who is there already: Mara's introduction is refused in the last step
    with pytest.raises(importing.ImportRefused, match="could not be added.*Nothing was imported"):
        importing.add(owner, campaign, again)
    assert counts() == before


@pytest.mark.django_db
def test_a_character_already_in_the_campaign_is_not_added_again(owner, campaign):
    importing.add(owner, campaign, _plan(("mara.json", json.dumps(make.v2()).encode())))
    again = _plan(("mara.json", json.dumps(make.v2()).encode()), existing=importing.existing_names(campaign))
    assert again.characters == [] and "already has a character called Mara" in again.notes[-1][1]


@pytest.mark.django_db
def test_the_export_writes_back_what_came_in_and_unknown_extensions_unchanged(owner, campaign):
    importing.add(owner, campaign, _plan(("mara.png", make.card_png(make.v3(character_book=make.character_book()))),
                                         ("mara.jsonl", make.mara_chat())))
    campaign.refresh_from_db()
    out = {item.path: item.data for item in exporting.export(campaign)}
    assert set(out) == {"characters/mara.json", "characters/mara.png", "lorebooks/maras-book.json",
                        "chats/the-silver-key.jsonl"}
    card = json.loads(out["characters/mara.json"])
    assert card["spec"] == "chara_card_v3" and card["data"]["extensions"]["someones_tool"] == {"keep": ["this", 1]}
    assert card["data"]["description"].startswith("{{char}} is the abbey's cook.")
    book = card["data"]["character_book"]
    assert book["entries"][0]["extensions"]["unknown_tool_key"] == {"deep": [1, 2]}
    lines = [json.loads(line) for line in out["chats/the-silver-key.jsonl"].decode().splitlines()]
    assert lines[0]["user_name"] == "Wren" and lines[0]["character_name"] == "Mara"
    assert [line["mes"] for line in lines[1:]] == ["*Mara looks up.* You're late.", "I shake off the rain.", "Tea?",
                                                   "The storm grows.", "Tea, please.", "She pours."]
    assert lines[3]["swipes"] == ["Sit by the fire.", "Tea?", "Take your boots off."] and lines[3]["swipe_id"] == 1
    assert lines[4]["is_system"] is True
    # And back again: the same characters, book and line.
    reread = _plan(("mara.png", out["characters/mara.png"]), ("chat.jsonl", out["chats/the-silver-key.jsonl"]))
    assert [c.name for c in reread.characters] == ["Mara"]
    assert [e.keys for e in reread.books[0].entries] == [("teapot",), ("cellar",)]
    assert [t.reply for t in reread.lines[0].turns] == [t.reply for t in _plan(("c.jsonl", make.mara_chat())).lines[0].turns]


@pytest.mark.django_db
def test_the_player_knows_the_characters_brought_in_so_the_cast_shows_them(owner, campaign, client_of):
    from django.urls import reverse

    importing.add(owner, campaign, _plan(("mara.png", make.card_png(make.v2()))))
    campaign.refresh_from_db()
    now = state_at(lineage.path_of(campaign), campaign)
    from campaigns.voice_views import known_characters

    assert [c["name"] for c in known_characters(now)] == ["Mara"]
    panel = client_of.get(reverse("cast_panel", args=[campaign.pk]), HTTP_HX_REQUEST="true").content.decode()
    assert 'data-cast="mara"' in panel and "Made for rainy evenings." in panel and "&lt;script&gt;" in panel


@pytest.mark.django_db
def test_a_cards_greetings_are_not_added_to_a_campaign_that_has_its_opening(owner, campaign):
    plan = _plan(("mara.json", json.dumps(make.v2()).encode()))
    assert plan.greetings == [] and "3 greeting(s) are kept with the card" in plan.notes[-1][1]
    importing.add(owner, campaign, plan)
    campaign.refresh_from_db()
    assert campaign.head_depth == 0 and Node.objects.filter(campaign=campaign).count() == 1


@pytest.mark.django_db
def test_a_card_with_the_players_characters_name_is_not_added(owner, campaign):
    plan = _plan(("aldric.json", json.dumps(make.v2(name="Aldric")).encode()),
                 existing=importing.existing_names(campaign))
    assert plan.characters == [] and "already has a character called Aldric" in " ".join(w for _, w in plan.notes)
