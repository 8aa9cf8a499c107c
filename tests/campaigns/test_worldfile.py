"""World files in the database: a campaign started from one, the world following the story tree, refusals."""

import io
import json
import zipfile

import pytest

from campaigns import lineage, story, worldfile
from campaigns.models import Campaign, CanonRule, StateEvent, StateRecord
from campaigns.state import apply_events, state_at
from campaigns.state.world import world
from tests.campaigns.test_lineage import act
from tests.campaigns.test_state import head_node, record
from tests.campaigns.test_world import PROTAGONIST_LINE, document, ev, keep, op, ops


def state(campaign):
    campaign.refresh_from_db()
    return state_at(lineage.path_of(campaign), campaign)


@pytest.fixture
def keep_campaign(owner):
    campaign, findings = worldfile.create_campaign(owner, document())
    assert [(f.severity, f.check) for f in findings] == [("note", "door")]
    return campaign


def test_a_campaign_starts_from_a_world_file_with_its_world_at_the_opening(keep_campaign):
    campaign = keep_campaign
    assert (campaign.title, campaign.protagonist, campaign.head_depth) == ("Lantern Keep", PROTAGONIST_LINE, 0)
    assert list(CanonRule.objects.filter(campaign=campaign).values_list("text", flat=True)) == [
        "The Keep stands on a cliff above the sea."]
    assert set(StateEvent.objects.filter(campaign=campaign).values_list("source", flat=True)) == {"world"}
    assert set(StateRecord.objects.filter(campaign=campaign).values_list("depth", flat=True)) == {0}
    assert world.snapshot(state(campaign)) == world.snapshot(keep()), "the database holds what the check computed"
    assert state(campaign).get("exit:corridor:iron-door").provenance.startswith("world file at the opening")


def test_the_form_fields_win_over_the_files_campaign_section(owner):
    campaign, _ = worldfile.create_campaign(owner, document(), title="My Keep", protagonist="Edrin Vale, a thief")
    assert campaign.title == "My Keep" and campaign.opening.startswith("Rain lashes")
    now = state(campaign)
    assert now.name_of("protagonist") == "Edrin Vale" and now.resolve("Edrin") == "protagonist"
    assert now.location_of("protagonist") == "hall"


def test_a_world_imported_at_the_opening_is_the_same_on_every_line(keep_campaign):
    campaign = keep_campaign
    opening = world.snapshot(state(campaign))
    act(campaign, "wait", "The fire crackles.")
    main = head_node(campaign).branch
    story.undo(campaign)
    act(campaign, "listen", "The wind howls.")
    assert head_node(campaign).branch != main
    for line in (main, head_node(campaign).branch):
        story.switch_branch(campaign, line)
        assert world.snapshot(state(campaign)) == opening


def test_a_correction_at_the_opening_is_on_every_line(keep_campaign):
    campaign = keep_campaign
    act(campaign, "wait", "The fire crackles.")
    main = head_node(campaign).branch
    story.undo(campaign)
    act(campaign, "listen", "The wind howls.")
    side = head_node(campaign).branch
    opening = lineage.path_of(campaign).nodes().get(depth=0)
    apply_events(opening, [ev("exit_change", "Yard", "Tower", data={"state": "open"})], source="correction")
    for line in (main, side):
        story.switch_branch(campaign, line)
        assert world.find_exit(state(campaign), "yard", "Tower").state == "open"


def test_an_exit_unlocked_on_an_abandoned_branch_is_locked_on_the_main_line_until_you_return(keep_campaign):
    campaign = keep_campaign
    act(campaign, "go to the corridor", "You stand before the iron door.")
    record(campaign, ev("move", "Edrin", "Corridor"))
    act(campaign, "force the door", "The door gives.")
    apply_events(head_node(campaign), [ops("Edrin", op("unlock", exit="iron door", forced=True))],
                 source="correction")
    unlocked_line = head_node(campaign).branch
    assert world.find_exit(state(campaign), "corridor", "iron door").state == "open"
    story.undo(campaign)
    act(campaign, "knock instead", "Nobody answers.")
    assert world.find_exit(state(campaign), "corridor", "iron door").state == "locked"
    assert world.route(state(campaign), "corridor", "vault") is None
    story.switch_branch(campaign, unlocked_line)
    assert world.find_exit(state(campaign), "corridor", "iron door").state == "open"
    while story.undo(campaign):
        pass
    assert world.snapshot(state(campaign)) == world.snapshot(keep()), "undo to the opening: the world as imported"


@pytest.mark.parametrize("breakage,reason", [
    (lambda doc: doc["exits"].append({"from": "Hall", "to": "Moon"}), "exits[6].to (Hall → Moon): unknown place 'Moon'"),
    (lambda doc: doc["places"].append({"name": "Hall"}), "world_lint: 2 places are called 'Hall' (hall, hall-2)"),
])
def test_a_malformed_world_file_is_refused_with_its_reason_and_nothing_is_stored(owner, breakage, reason):
    doc = document()
    breakage(doc)
    with pytest.raises(worldfile.WorldRefused) as refused:
        worldfile.create_campaign(owner, doc)
    assert reason in refused.value.reasons
    assert "Nothing was stored" in str(refused.value)
    assert not Campaign.objects.exists() and not StateEvent.objects.exists() and not StateRecord.objects.exists()


def test_bad_json_and_a_file_over_ten_mebibytes_are_refused_before_anything_is_read():
    with pytest.raises(worldfile.WorldRefused) as bad:
        worldfile.read(b'{"places": [}')
    assert bad.value.reasons == ["the file is not valid JSON (there is a mistake at line 1, column 13)"]
    with pytest.raises(worldfile.WorldRefused) as big:
        worldfile.read(b" " * (worldfile.MAX_BYTES + 1))
    assert big.value.reasons == [f"the file is {worldfile.MAX_BYTES + 1:,} bytes; a world file may be at most "
                                 f"{worldfile.MAX_BYTES:,}"]


def test_a_zip_carries_the_world_in_several_files():
    doc = document()
    characters = doc.pop("characters")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("world.json", json.dumps(doc))
        for character in characters:
            archive.writestr(f"characters/{character['name']}.json", json.dumps(character))
        archive.writestr("dice.json", json.dumps([{"key": "climb", "name": "Climb", "definition": {"dice": "1d20", "bands": [
            {"label": "fall", "outcome": "you slip", "max": 10}, {"label": "climb", "outcome": "you are up", "min": 11}]}}]))
        archive.writestr("notes.txt", "ignored")
    read = worldfile.read(buffer.getvalue())
    assert sorted(c["name"] for c in read["characters"]) == ["Aldric", "Edrin", "Mara"]
    assert worldfile.check(read, PROTAGONIST_LINE).errors == []
    assert keep(read).get("dice_check:climb").value == "Climb"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("world.json", json.dumps(doc))
        archive.writestr("readme.json", json.dumps({"hello": 1}))
        archive.writestr("broken.json", "{")
    with pytest.raises(worldfile.WorldRefused) as refused:
        worldfile.read(buffer.getvalue())
    assert len(refused.value.reasons) == 2


def test_a_world_fact_that_contradicts_the_files_own_canon_is_refused(owner):
    doc = document()
    doc["facts"] = ["The Keep does not stand on a cliff above the sea."]
    with pytest.raises(worldfile.WorldRefused) as refused:
        worldfile.create_campaign(owner, doc)
    assert refused.value.reasons == ["facts[0] (The Keep does not stand on a cliff above…): contradicts campaign "
                                     "canon (Level 1): 'The Keep stands on a cliff above the sea.'"]
    assert not Campaign.objects.exists()
