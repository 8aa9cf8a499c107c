"""The story as a viewer may know it (campaigns.viewpoint), pure: the player's view holds what its character
knows and sees, the author's everything; and what a click does (campaigns.acting), as events and words."""

import pytest

from campaigns import acting, worldmap
from campaigns.state import PROTAGONIST
from campaigns.state.minds import beliefs
from campaigns.state.world import world
from campaigns.viewpoint import NotTheAuthor, Viewer, view
from tests.campaigns.test_world import document, keep

PLAYER, AUTHOR = Viewer(PROTAGONIST), Viewer(PROTAGONIST, author=True)


@pytest.fixture
def hall():
    return keep()


def test_here_shows_a_player_what_its_character_sees_and_the_author_what_is_hidden(hall):
    mine, everything = view(hall, PLAYER).here(), view(hall, AUTHOR).here()
    assert mine.name == "Hall" and [p.name for p in mine.people] == ["Mara"]
    assert mine.people[0].condition == "soaked from the rain" and mine.people[0].inner == ""
    assert everything.people[0].inner == "afraid of what is in the vault"
    assert {t.item.name for t in mine.things} == {"chest", "arrows"}, "Mara's arrows are in plain sight"
    assert "cloak" not in {t.item.name for t in mine.things} and mine.unseen == []
    assert {t.item.name for t in everything.unseen} >= {"cloak", "iron key", "box", "ring"}
    [chest] = [t for t in mine.things if t.item.name == "chest"]
    assert chest.reachable and not chest.carried
    [arrows] = [t for t in mine.things if t.item.name == "arrows"]
    assert not arrows.reachable, "what someone carries is not Edrin's to take"


def test_a_locked_way_offers_its_key_only_to_whoever_holds_it(hall):
    doc = document()
    doc["characters"][0]["place"] = "Corridor"
    [key] = [item for item in doc["items"] if item["name"] == "iron key"]
    key["holder"] = "Edrin"
    corridor = keep(doc)
    [door] = [w for w in view(corridor, PLAYER).here().ways if w.exit.label == "iron door"]
    assert (door.state, door.key_name) == ("locked", "iron key")
    key["holder"] = "Hall"
    [door] = [w for w in view(keep(doc), PLAYER).here().ways if w.exit.label == "iron door"]
    assert door.key == ""


def test_the_whole_state_and_anothers_beliefs_are_the_authors_view_only(hall):
    mine = view(hall, PLAYER, lambda: beliefs.derive([]))
    with pytest.raises(NotTheAuthor):
        mine.everything
    with pytest.raises(NotTheAuthor, match="mara"):
        mine.beliefs("mara")
    with pytest.raises(NotTheAuthor):
        mine.triggers()
    assert view(hall, AUTHOR).everything is hall


def test_a_player_knows_what_it_has_seen_or_been_told_and_no_more(hall):
    mine = view(hall, PLAYER)
    assert mine.knows("chest") and mine.knows("mara") and mine.knows("hall")
    assert not mine.knows("ring"), "shut in a box in the chest"
    assert not mine.knows("tower") and not mine.knows("aldric")
    assert mine.name_of("aldric") == "someone" and mine.name_of("tower") == "somewhere"
    names = {r.value for r in mine.entities()}
    assert {"Mara", "Hall", "chest"} <= names and not names & {"Aldric", "Tower", "ring", "cloak"}
    assert {r.value for r in view(hall, AUTHOR).entities()} >= {"Aldric", "Tower", "ring", "cloak"}


def test_a_player_sees_the_whereabouts_of_those_with_it_only(hall):
    mine = view(hall, PLAYER)
    assert mine.whereabouts() == [PROTAGONIST, "mara"]
    assert mine.where_is("aldric") == "" and view(hall, AUTHOR).where_is("aldric") == "yard"


def test_the_players_map_holds_the_places_it_knows_and_a_way_told_of_without_its_state(hall):
    drawn = view(hall, PLAYER).map()
    assert {box.key for box in drawn.boxes} == {"hall", "corridor", "yard"}
    every = view(hall, AUTHOR).map()
    assert {box.key for box in every.boxes} == {"hall", "corridor", "yard", "vault", "tower"}
    [both] = [a for a in every.arrows if "exit:hall:corridor" in a.slots]
    assert both.both_ways and set(both.slots) == {"exit:hall:corridor", "exit:corridor:hall"}
    [boxed] = [b for b in every.boxes if b.key == "corridor"]
    assert boxed.seconds == 30 and boxed.reachable
    exits = world.exits_from(hall, "corridor")
    states = worldmap.exit_states({"exit": {"corridor:iron-door": "told", "corridor:hall": "observed"}}, exits,
                                  ("observed", "world"))
    assert states["exit:corridor:iron-door"] == "unseen", "told of a door is not knowing it is locked"
    assert states["exit:corridor:hall"] == "open"


def test_the_authors_map_draws_every_way_as_it_is_and_offers_travel_only_where_the_character_could_go():
    doc = document()
    doc["places"].append({"name": "Garden", "description": "a walled garden"})
    doc["exits"].append({"from": "Yard", "to": "Garden", "travel_seconds": 20, "both_ways": True})
    every = view(keep(doc), AUTHOR).map()
    states = {arrow.slots[0]: arrow.state for arrow in every.arrows}
    assert states["exit:corridor:iron-door"] == "locked" and states["exit:yard:tower"] == "blocked", \
        "the author sees each way's state, though Edrin has not seen it"
    assert "unseen" not in states.values() and states["exit:yard:garden"] == "open"
    assert {box.key: box.seconds for box in every.boxes if box.reachable} == {"corridor": 30, "yard": 60}, \
        "the garden is open but Edrin knows no way there: a click would be refused, so it is no link"


def test_a_click_is_a_typed_event_and_a_sentence_of_the_players(hall):
    go = acting.act(hall, "go", exit="exit:hall:corridor")
    assert go.events == ({"type": "move", "subject": PROTAGONIST, "object": "corridor"},)
    assert go.text == "Go to Corridor (30 seconds)."
    take = acting.act(hall, "open", item="chest")
    assert take.events[0]["type"] == "item_changes" and take.events[0]["data"]["ops"][0]["op"] == "open"
    assert take.text == "Open the chest."
    give = acting.act(hall, "give", item="chest", to="mara")
    assert give.text == "Give the chest to Mara." and give.events[0]["data"]["ops"][0]["to"] == "mara"


def test_travel_follows_the_open_ways_the_player_knows_and_says_how_long(hall):
    doc = document()
    doc["characters"][0]["knowledge"] = {"locations": ["Vault", "Yard"]}
    state = keep(doc)
    with pytest.raises(acting.Refused, match="No open way you know of leads from Hall to Vault"):
        acting.act(state, "travel", place="vault")
    assert acting.act(state, "travel", place="yard").text == "Go to Yard (1 minute)."
    with pytest.raises(acting.Refused, match="at Hall already"):
        acting.act(state, "travel", place="hall")


def test_a_click_on_what_is_gone_or_elsewhere_is_refused_in_a_players_words(hall):
    with pytest.raises(acting.Refused, match="not there any more"):
        acting.act(hall, "take", item="lantern")
    with pytest.raises(acting.Refused, match="leaves Corridor, and you are not there"):
        acting.act(hall, "go", exit="exit:corridor:iron-door")
    with pytest.raises(acting.Refused, match="Choose who to give it to"):
        acting.act(hall, "give", item="chest")
    with pytest.raises(acting.Refused):
        acting.act(hall, "fly")
