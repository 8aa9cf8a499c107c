"""Characters, places and items made in forms: each makes what it says through typed events, or nothing."""

import json

import pytest
from django.urls import reverse

from campaigns import lineage, worldfile
from campaigns.models import StateEvent, StateRecord
from campaigns.state import selection, state_at
from campaigns.state.world import lore, world
from tests.campaigns.test_world import document
from tests.conftest import as_author


@pytest.fixture
def keep(owner):
    """The Lantern Keep, with a lore entry of its own."""
    doc = document()
    doc["lore"] = [{"id": "keep-history", "title": "The Keep's history", "text": "Built by the first wardens."}]
    campaign, _ = worldfile.create_campaign(owner, doc)
    return as_author(campaign)  # the forms are the author's view


def now(campaign):
    campaign.refresh_from_db()
    return state_at(lineage.path_of(campaign), campaign)


def post(client, campaign, kind, data, key=""):
    url = reverse("entity_edit", args=[campaign.pk, kind, key]) if key else reverse("entity_new",
                                                                                      args=[campaign.pk, kind])
    return client.post(url, {f"{kind}-{name}": value for name, value in data.items()})


def said_by(page, field, words):
    """Return whether ``words`` are said by ``field``: after it, before the next field (in its rows' fieldset)."""
    start = page.index(f'data-field="{field}"')
    end = page.index("</fieldset>", start) if field in ("routine", "features", "exits") else \
        page.find('data-field="', start + 1)
    return words in page[start:end if end > 0 else None]


def written(campaign):
    return StateEvent.objects.filter(campaign=campaign).count(), StateRecord.objects.filter(campaign=campaign).count()


def corrections(campaign, before):
    """Return the person's events after event ``before`` (without what the characters then saw: ``observe``)."""
    events = StateEvent.objects.filter(campaign=campaign, pk__gt=before, source="correction").order_by("pk")
    return [event for event in events if event.payload["type"] != "observe"]


def last_event(campaign):
    return StateEvent.objects.filter(campaign=campaign).order_by("-pk").values_list("pk", flat=True).first()


WREN = {"name": "Wren", "aliases": "the ferrywoman, Ren", "description": "a ferrywoman with tar on her hands",
        "personality": "dry, patient, counts every coin twice", "brief": "She smuggles letters for the Watch.",
        "lore": "world:keep-history", "place": "Hall", "carries": "brass lantern\nfolded map",
        "routine_0_start": "06:00", "routine_0_end": "12:00", "routine_0_place": "Yard",
        "routine_0_activity": "feeding the hens"}


def test_a_character_from_the_form_is_introduced_placed_given_their_things_lore_and_day_by_one_correction(
        client_of, keep, owner):
    before = last_event(keep)
    response = post(client_of, keep, "character", WREN)
    assert response.status_code == 302
    assert response["Location"] == reverse("entity_edit", args=[keep.pk, "character", "wren"]) + "?saved=1"
    events = corrections(keep, before)
    assert [e.payload["type"] for e in events] == ["introduce", "entity", "move", "introduce", "introduce", "know",
                                                   "routine_set"]
    assert all(e.status == StateEvent.Status.APPLIED and e.author == owner for e in events)
    state = now(keep)
    wren = state.entity("wren")
    assert wren.data["aliases"] == ["the ferrywoman", "Ren"] and wren.data["description"] == WREN["description"]
    assert wren.data["personality"] == WREN["personality"] and wren.data["brief"] == WREN["brief"]
    assert state.location_of("wren") == "hall"
    assert sorted(world.item_of(state, key).name for key in world.holders(state)["wren"]) == ["brass lantern",
                                                                                               "folded map"]
    assert lore.known_lore(state, "wren") == {"world:keep-history"}
    assert state.get("routine:wren").data["windows"] == [{"start": "06:00", "end": "12:00", "place": "yard",
                                                          "activity": "feeding the hens"}]
    lines = {line.text: line.narrator_only for line in selection.select(state, "").lines}
    assert lines["Wren's nature: dry, patient, counts every coin twice"] is False
    assert lines["How to play Wren: She smuggles letters for the Watch."] is True, "the brief is the narrator's"
    page = client_of.get(response["Location"]).content.decode()
    assert "Saved. The narrator sees it from the next turn." in page
    assert 'value="06:00"' in page and "brass lantern\nfolded map" in page and "She smuggles letters" in page
    written = page.split('<textarea id="entity-json"')[1].split("</textarea>")[0].replace("&quot;", '"')
    assert '"personality": "dry, patient, counts every coin twice"' in written and '"name": "folded map"' in written
    assert '"activity": "feeding the hens"' in written


def test_editing_a_character_sends_only_what_changed_and_a_thing_taken_off_the_list_is_put_down_where_they_are(
        client_of, keep):
    assert post(client_of, keep, "character", WREN).status_code == 302
    before = last_event(keep)
    changed = {**WREN, "description": "a ferrywoman, soaked", "carries": "brass lantern", "lore": [],
               "routine_0_start": "", "routine_0_end": "", "routine_0_place": "", "routine_0_activity": ""}
    changed.pop("name")
    response = post(client_of, keep, "character", changed, key="wren")
    assert response.status_code == 302
    assert [e.payload["type"] for e in corrections(keep, before)] == ["entity", "set_holder", "unknow", "routine_set"]
    state = now(keep)
    assert state.entity("wren").data["description"] == "a ferrywoman, soaked"
    assert state.entity("wren").data["personality"] == WREN["personality"], "what was not changed stays"
    [map_key] = [r.subject for r in state.entities() if r.value == "folded map"]
    assert world.item_of(state, map_key).holder == "hall" and world.item_of(state, map_key).mode == "at"
    assert lore.known_lore(state, "wren") == set() and state.get("routine:wren") is None
    again = post(client_of, keep, "character", changed, key="wren")
    assert "Nothing to save: the form is as the world already is." in again.content.decode()


def test_a_place_from_the_form_has_its_features_and_a_locked_door_with_two_sides(client_of, keep):
    before = last_event(keep)
    response = post(client_of, keep, "place", {
        "name": "Boathouse", "description": "a leaning shed over black water",
        "feature_0_name": "slipway", "feature_0_text": "a slick stone slipway", "feature_0_notable": "on",
        "feature_1_name": "loose plank", "feature_1_text": "a plank that lifts", "feature_1_hidden": "on",
        "exit_0_to": "Yard", "exit_0_label": "boathouse door", "exit_0_state": "locked", "exit_0_opener": "iron key",
        "exit_0_minutes": "2", "exit_0_both_ways": "on"})
    assert response.status_code == 302
    assert [e.payload["type"] for e in corrections(keep, before)] == ["introduce", "feature", "feature",
                                                                      "exit_change"]
    state = now(keep)
    features = {r.data["name"]: r for r in world.features_at(state, "boathouse")}
    assert features["slipway"].data["notable"] and features["loose plank"].data["hidden"]
    [out] = world.exits_from(state, "boathouse")
    [back] = [e for e in world.exits_from(state, "yard") if e.to == "boathouse"]
    for side in (out, back):
        assert (side.label, side.state, side.opener, side.travel_seconds) == ("boathouse door", "locked", "iron-key",
                                                                              120)
    page = client_of.get(response["Location"]).content.decode()
    assert 'value="boathouse door"' in page and 'value="slipway"' in page


def test_editing_a_place_takes_a_feature_away_and_opens_its_door_on_both_sides(client_of, keep):
    place = {"name": "Boathouse", "feature_0_name": "slipway", "feature_1_name": "loose plank",
             "exit_0_to": "Yard", "exit_0_label": "boathouse door", "exit_0_state": "locked",
             "exit_0_opener": "iron key", "exit_0_both_ways": "on"}
    assert post(client_of, keep, "place", place).status_code == 302
    [out] = world.exits_from(now(keep), "boathouse")
    before = last_event(keep)
    edited = {**place, "feature_1_name": "", "exit_0_state": "open", "exit_0_slot": out.slot}
    edited.pop("name")
    assert post(client_of, keep, "place", edited, key="boathouse").status_code == 302
    assert [e.payload["type"] for e in corrections(keep, before)] == ["retract", "exit_change"]
    state = now(keep)
    assert [r.data["name"] for r in world.features_at(state, "boathouse")] == ["slipway"]
    assert {e.state for e in [*world.exits_from(state, "boathouse"), *[e for e in world.exits_from(state, "yard")
                                                                       if e.to == "boathouse"]]} == {"open"}
    one_way = {**edited, "exit_0_both_ways": ""}
    assert post(client_of, keep, "place", one_way, key="boathouse").status_code == 302
    state = now(keep)
    assert len(world.exits_from(state, "boathouse")) == 1, "the way out stays"
    assert not [e for e in world.exits_from(state, "yard") if e.to == "boathouse"], "the way back goes"


def test_a_second_item_of_a_name_is_its_own_and_the_save_goes_to_its_form(client_of, keep):
    response = post(client_of, keep, "item", {"name": "arrows", "holder": "Hall", "quantity": "3"})
    assert response.status_code == 302
    key = response["Location"].rstrip("/").split("?")[0].rstrip("/").split("/")[-1]
    state = now(keep)
    existing = {r.subject for r in state.entities() if r.value == "arrows"} - {key}
    assert len(existing) == 2 and world.item_of(state, key).holder == "hall", "a third stack, its own form"
    assert world.item_of(state, key).quantity == 3


def test_an_item_from_the_form_is_where_it_is_said_to_be_and_edited_it_moves(client_of, keep):
    before = last_event(keep)
    response = post(client_of, keep, "item", {"name": "tin whistle", "description": "dented", "holder": "Mara",
                                              "quantity": "2", "condition": "dented", "notable": "on"})
    assert response.status_code == 302
    [made] = corrections(keep, before)
    assert made.payload["type"] == "introduce" and made.payload["data"]["holder"] == "Mara"
    state = now(keep)
    whistle = world.item_of(state, "tin-whistle")
    assert (whistle.holder, whistle.mode, whistle.quantity, whistle.condition, whistle.notable) == (
        "mara", "carried", 2, "dented", True)
    before = last_event(keep)
    assert post(client_of, keep, "item", {"description": "dented", "holder": "chest", "quantity": "2",
                                          "condition": "polished", "notable": "on"}, key="tin-whistle").status_code == 302
    assert [e.payload["type"] for e in corrections(keep, before)] == ["item_edit", "set_holder"]
    whistle = world.item_of(now(keep), "tin-whistle")
    assert (whistle.holder, whistle.mode, whistle.condition) == ("chest", "in", "polished")


@pytest.mark.parametrize("kind,data,field,words", [
    ("character", {"name": "Mara"}, "name", "“Mara” is already a character in this world"),
    ("character", {"name": "Wren", "place": "Atlantis"}, "place", "There is no place called “Atlantis”"),
    ("character", {"name": "Wren", "place": "Chest"}, "place", "(“Chest” is an item)"),
    ("character", {"name": "Wren", "routine_0_start": "06:00", "routine_0_end": "07:00", "routine_0_place": "Moon"},
     "routine_0_place", "There is no place called “Moon”"),
    ("character", {"name": "Wren", "place": "Hall", "carries": "lamp", "routine_0_start": "25:00",
                   "routine_0_end": "07:00"}, "routine", "is refused: window 1: start:"),
    ("character", {"name": "Wren", "personality": "x" * 501}, "personality", "at most 500 characters"),
    ("place", {"name": "Boathouse", "exit_0_to": "Nowhere"}, "exit_0_to", "There is no place called “Nowhere”"),
    ("place", {"name": "Boathouse", "exit_0_to": "Yard", "exit_0_state": "locked", "exit_0_opener": "spoon"},
     "exit_0_opener", "There is no item called “spoon”"),
    ("item", {"name": "whistle"}, "holder", "Say where it is, or who holds it"),
    ("item", {"name": "whistle", "holder": "Hall", "container": "jar"}, "container", "Select a valid choice"),
    ("item", {"name": "whistle", "holder": "the moon"}, "holder", "called “the moon”"),
])
def test_what_the_world_refuses_is_said_by_its_field_and_nothing_is_written(client_of, keep, kind, data, field,
                                                                             words):
    counts = written(keep)
    response = post(client_of, keep, kind, data)
    assert response.status_code == 400
    page = response.content.decode()
    assert "Nothing was saved." in page and words in page
    assert said_by(page, field, words), f"{words!r} is said by {field}"
    assert written(keep) == counts, "nothing is written, not even a refused event (nor what was made before it)"


def test_another_persons_campaign_is_not_found_and_neither_is_a_kind_or_thing_that_does_not_exist(
        client, keep, outsider, client_of):
    client.force_login(outsider)
    counts = written(keep)
    assert client.get(reverse("entities", args=[keep.pk])).status_code == 404
    for url in (reverse("entity_new", args=[keep.pk, "character"]),
                reverse("entity_edit", args=[keep.pk, "character", "mara"])):
        assert client.get(url).status_code == 404
        assert client.post(url, {"character-name": "Wren", "character-description": "theirs"}).status_code == 404
    assert written(keep) == counts
    client.force_login(keep.owner)
    assert client.get(reverse("entity_new", args=[keep.pk, "dragon"])).status_code == 404
    assert client.get(reverse("entity_edit", args=[keep.pk, "place", "mara"])).status_code == 404
    assert client.put(reverse("entity_new", args=[keep.pk, "item"])).status_code == 405


def test_the_list_and_the_forms_escape_what_a_person_wrote(client_of, keep):
    response = post(client_of, keep, "character", {"name": "<script>alert(1)</script>", "description": "<b>bold</b>",
                                                   "place": "Hall", "personality": "<i>sly</i>"})
    assert response.status_code == 302
    listing = client_of.get(reverse("entities", args=[keep.pk])).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in listing and "&lt;b&gt;bold&lt;/b&gt;" in listing
    assert "<script>alert" not in listing and "<b>bold" not in listing
    form = client_of.get(response["Location"]).content.decode()
    assert "&lt;i&gt;sly&lt;/i&gt;" in form and "<i>sly" not in form and "<script>alert" not in form


def test_the_list_shows_who_is_where_and_links_every_thing_to_its_form(client_of, keep):
    page = client_of.get(reverse("entities", args=[keep.pk])).content.decode()
    assert reverse("entity_edit", args=[keep.pk, "character", "mara"]) in page and "at Hall" in page
    assert reverse("entity_edit", args=[keep.pk, "place", "vault"]) in page
    assert "iron key" in page and "in the chest, at Hall" in page
    for kind in ("character", "place", "item"):
        assert reverse("entity_new", args=[keep.pk, kind]) in page
    world_panel = client_of.get(reverse("world_panel", args=[keep.pk])).content.decode()
    assert reverse("entities", args=[keep.pk]) in world_panel


def test_a_world_file_gives_a_character_a_personality_and_a_brief_and_export_writes_them_back():
    doc = document()
    doc["characters"][1].update({"personality": "stern, fond of order", "brief": "Mara knows who took the key."})
    state = worldfile.check(doc, "Edrin, a young cartographer").state
    assert state.entity("mara").data["personality"] == "stern, fond of order"
    [mara] = [c for c in worldfile.export(state)["characters"] if c["id"] == "mara"]
    assert (mara["personality"], mara["brief"]) == ("stern, fond of order", "Mara knows who took the key.")
    assert worldfile.check(worldfile.export(state), "Edrin").state.entity("mara").data["brief"] == mara["brief"]


def test_only_a_character_has_a_personality_and_a_field_left_out_keeps_its_value(keep, owner):
    from campaigns.state import correct

    refused = correct(keep, owner, {"type": "entity", "subject": "Vault", "data": {"personality": "gloomy"}})
    assert refused.status == StateEvent.Status.REJECTED and "only a character has personality" in refused.reason
    correct(keep, owner, {"type": "entity", "subject": "Mara", "data": {"personality": "stern", "brief": "hides it"}})
    correct(keep, owner, {"type": "entity", "subject": "Mara", "value": "the steward, tired"})
    mara = now(keep).entity("mara").data
    assert (mara["description"], mara["personality"], mara["brief"]) == ("the steward, tired", "stern", "hides it")
    correct(keep, owner, {"type": "entity", "subject": "Mara", "data": {"brief": ""}})
    assert "brief" not in now(keep).entity("mara").data, "an empty field clears it"


def test_a_character_is_told_its_own_nature_but_never_the_game_masters_brief(keep, owner):
    from campaigns.state import correct
    from storyteller.voices import briefs

    correct(keep, owner, {"type": "entity", "subject": "Mara",
                          "data": {"personality": "stern, fond of order", "brief": "She took the key herself."}})
    text = briefs.compose(now(keep), "mara").text
    assert "Your nature: stern, fond of order" in text and "took the key" not in text


def test_what_a_place_has_beyond_the_forms_rows_is_kept_when_the_place_is_edited(owner, client_of):
    from campaigns import entityforms

    doc = document()
    [hall] = [p for p in doc["places"] if p["name"] == "Hall"]
    hall["features"] = [{"name": f"alcove {n}", "text": f"the alcove number {n}"} for n in range(9)]
    campaign, _ = worldfile.create_campaign(owner, doc)
    as_author(campaign)
    initial = entityforms.for_place(now(campaign), "hall")
    shown = {name[len("place-"):] if name.startswith("place-") else name: value for name, value in initial.items()}
    shown["description"] = "a vaulted hall, colder now"
    shown.pop("name")
    before = last_event(campaign)
    assert post(client_of, campaign, "place", {k: ("on" if v is True else v) for k, v in shown.items()
                                               if v not in (False, None)}, key="hall").status_code == 302
    assert [e.payload["type"] for e in corrections(campaign, before)] == ["entity"], "only what changed is sent"
    state = now(campaign)
    assert {e.to: e.travel_seconds for e in world.exits_from(state, "hall")} == {"corridor": 30, "yard": 60}
    assert state.entity("hall").data["description"] == "a vaulted hall, colder now"
    assert len(world.features_at(state, "hall")) == 9 and len(world.exits_from(state, "hall")) == 2


def test_what_the_engine_keeps_once_given_is_refused_in_words_when_a_form_would_take_it_away(client_of, keep):
    from campaigns import entityforms

    def edit(kind, key, **changes):
        initial = {**entityforms.INITIAL[kind](now(keep), key), **changes}
        initial.pop("name")
        return post(client_of, keep, kind, {k: ("on" if v is True else v) for k, v in initial.items()
                                            if v not in (False, None)}, key=key)

    assert edit("character", "mara", aliases="the steward").status_code == 302
    counts = written(keep)
    page = edit("character", "mara", aliases="")
    assert page.status_code == 400 and said_by(page.content.decode(), "aliases", "never all taken away")
    page = edit("item", "chest", container="").content.decode()
    assert said_by(page, "container", "Once a container, it stays one")
    assert written(keep) == counts


def json_post(client, campaign, kind, doc, key="", show=False):
    url = reverse("entity_edit", args=[campaign.pk, kind, key]) if key else reverse("entity_new",
                                                                                      args=[campaign.pk, kind])
    data = {f"{kind}-json": doc if isinstance(doc, str) else json.dumps(doc), f"{kind}-json_shown": "{}"}
    return client.post(url, {**data, **({"show": "1"} if show else {})})


WREN_JSON = {"characters": [{"name": "Wren", "personality": "dry", "place": "Hall",
                             "knowledge": {"lore": ["keep-history"]}}],
             "items": [{"name": "brass lantern", "holder": "Wren"}],
             "routines": [{"who": "Wren", "windows": [{"start": "06:00", "end": "09:00", "place": "Yard"}]}]}


def test_the_json_view_shown_in_the_form_fills_its_fields_and_saving_it_makes_the_same_character(client_of, keep):
    counts = written(keep)
    shown = json_post(client_of, keep, "character", WREN_JSON, show=True)
    page = shown.content.decode()
    assert shown.status_code == 200 and written(keep) == counts, "shown, not saved"
    assert "nothing is saved until you save" in shown.content.decode()
    assert 'name="character-name" value="Wren"' in page and 'name="character-place" value="Hall"' in page
    assert "checked" in page.split('data-field="lore"')[1].split("</div>")[0]
    assert ">\nbrass lantern</textarea>" in page and 'name="character-routine_0_place" value="Yard"' in page
    assert '&quot;personality&quot;: &quot;dry&quot;' in page, "the JSON view follows the form"
    assert json_post(client_of, keep, "character", WREN_JSON).status_code == 302
    state = now(keep)
    assert state.entity("wren").data["personality"] == "dry" and state.location_of("wren") == "hall"
    assert lore.known_lore(state, "wren") == {"world:keep-history"}
    assert state.get("routine:wren").data["windows"][0]["place"] == "yard"


def test_the_json_view_of_a_place_changes_its_way_in_place_rather_than_making_another(client_of, keep):
    page = client_of.get(reverse("entity_edit", args=[keep.pk, "place", "corridor"])).content.decode()
    text = page.split('<textarea id="entity-json"')[1].split(">", 1)[1].split("</textarea>")[0]
    doc = json.loads(text.replace("&quot;", '"').replace("&#x27;", "'").replace("&amp;", "&"))
    [door] = [way for way in doc["exits"] if way.get("label") == "iron door"]
    door["state"] = "open"
    before = last_event(keep)
    assert json_post(client_of, keep, "place", doc, key="corridor").status_code == 302
    assert [e.payload["type"] for e in corrections(keep, before)] == ["exit_change"]
    state = now(keep)
    assert [e.state for e in world.exits_from(state, "corridor") if e.label == "iron door"] == ["open"]
    assert len(world.exits_from(state, "corridor")) == 2


@pytest.mark.parametrize("text,words", [
    ("{not json", "it is not JSON"),
    (json.dumps({"characters": [{"name": "Wren", "wings": 2}]}), "characters[0] has wings, which the form has no"),
    (json.dumps({"characters": [{"name": "Wren"}], "dragons": []}), "it holds the sections characters, items, "
                                                                   "routines and nothing else"),
    (json.dumps({"characters": []}), "characters is a list of one entry"),
])
def test_json_the_form_cannot_read_is_refused_in_words_and_nothing_is_written(client_of, keep, text, words):
    counts = written(keep)
    response = json_post(client_of, keep, "character", text)
    page = response.content.decode().replace("&#x27;", "'")
    assert response.status_code == 400 and "The JSON cannot be read: " in page and words in page
    kept = response.content.decode().split('<textarea id="entity-json"')[1].split(">", 1)[1].split("</textarea>")[0]
    assert kept.replace("&quot;", '"') == text, "the JSON as written is kept to be corrected"
    assert written(keep) == counts


def test_in_the_players_view_the_pages_say_they_are_the_authors(client_of, keep):
    """The forms show the game master's briefs and hidden things: the player's view is refused, with the switch."""
    keep.author_view = False
    keep.save(update_fields=["author_view"])
    for url in (reverse("entities", args=[keep.pk]), reverse("entity_new", args=[keep.pk, "character"])):
        response = client_of.get(url)
        assert response.status_code == 403 and "author" in response.content.decode().lower()
