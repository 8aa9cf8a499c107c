"""A character's brief (seed 002 角色简报; WP4 scenario 3, its world part): what Mara may know, and canaries for
everything she may not."""

from campaigns.state.world import lore
from storyteller.voices import briefs
from tests.campaigns.test_world import apply, applied, document, ev, keep

CANARIES = {
    "hidden item": "cloak",
    "shut away": "ring",  # in the closed box in the closed chest
    "another place's contents": "gold ingot",
    "another's inner life": "dreads the tax collector",
    "another's mood": "sullen",
    "another's relationship": "owes Aldric",
    "another place's people": "Aldric",
    "an unknown lore entry": "vault-curse",
}


def mara_world():
    doc = document()
    doc["items"].append({"name": "gold ingot", "holder": "Vault"})
    doc["characters"].append({"name": "Tobin", "description": "a carter", "place": "Hall", "condition": {
        "public": "dripping wet", "inner": "dreads the tax collector", "activity": "unloading", "mood": "sullen"},
        "relationships": [{"to": "Aldric", "label": "debtor", "summary": "owes Aldric"}]})
    doc["lore"] = [{"id": "keep-history", "title": "The founding of the Keep", "text": "lamplighters"},
                   {"id": "vault-curse", "title": "The vault's curse", "text": "the sea"}]
    doc["characters"][1]["knowledge"]["lore"] = ["keep-history"]
    return keep(doc)


def test_maras_brief_holds_her_place_those_there_her_own_view_of_them_and_what_she_knows_of():
    state = mara_world()
    given = briefs.Given(now="Friday 14 March 2031, 08:00 in the morning",
                         lore=tuple(lore.titles(lore.world_lore(state), lore.known_lore(state, "mara"))),
                         agenda=("Now: tending the fire at Hall", "Plans (not orders): find the vault key"),
                         memories=tuple(f"memory {n}" for n in range(15)), associated=("an old song", "b", "c"))
    brief = briefs.compose(state, "mara", given)
    text = brief.text
    assert "You are Mara, the Keep's steward." in text
    assert "Inside: afraid of what is in the vault" in text, "her own inner state is hers"
    assert "Now: Friday 14 March 2031, 08:00 in the morning" in text
    assert "You are at Hall: a vaulted hall with a smoking hearth" in text
    assert "Feature: hearth — a wide hearth, still warm" in text and "Exit: Hall → Corridor" in text
    assert "You see: chest" in text
    assert "With you: Edrin" in text and "With you: Tobin (dripping wet; unloading)" in text
    assert "Edrin: aunt; familiarity 0.9, trust 0.6, closeness 0.7; fond of him, worried" in text
    assert "Places you know of: Corridor, Hall, Vault, Yard" in text, "names only"
    assert "- The founding of the Keep" in text and "lamplighters" not in text, "lore titles only"
    assert "Plans (not orders): find the vault key" in text
    assert "- memory 11" in text and "- memory 12" not in text and brief.left_out["memories"] == 3
    assert "- an old song" in text and "- c" not in text, "at most 2 associated"
    assert brief.data()["text"] == text


def test_no_brief_ever_holds_a_canary_of_what_its_character_may_not_know():
    brief = briefs.compose(mara_world(), "mara").text
    for kind, canary in CANARIES.items():
        assert canary not in brief, f"{kind} leaked into Mara's brief: {canary!r}"


def test_a_brief_lists_at_most_twelve_features_and_exits_and_says_how_many_were_left_out():
    state = keep()
    for n in range(20):
        applied(apply(state, ev("feature", "Hall", f"niche {n}", f"a niche numbered {n}"), source="correction")[0])
    brief = briefs.compose(state, "mara")
    assert sum(1 for line in brief.text.splitlines() if line.startswith("Feature: ")) == 12
    assert brief.left_out["features"] == 10


def test_what_another_place_holds_stays_out_even_when_she_knows_the_place():
    state = mara_world()
    text = briefs.compose(state, "mara").text
    assert "Vault" in text and "gold ingot" not in text
    aldric = briefs.compose(state, "aldric").text
    assert "You are at Yard" in aldric and "With you" not in aldric and "Tobin" not in aldric
    assert "afraid of what is in the vault" not in aldric
