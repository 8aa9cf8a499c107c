"""Story variables (seed 002 故事变量; WP2 scenario 10): definitions, changes item by item, views — pure."""

import pytest

from campaigns.state.time import variables
from campaigns.state.time.rules import Refused

DEBT = {"name": "debt", "type": "number", "applies_to": ["character"], "range": [0, 100], "default": 0,
        "bands": [{"label": "clear", "min": 0, "max": 0}, {"label": "owing", "min": 1, "max": 59},
                  {"label": "crushing", "min": 60, "max": 100}]}
KINDS = {"mara": "character", "edrin": "character", "protagonist": "character", "lamp": "item", "hall": "place"}
TEMPERAMENTS = {"mara": {"valence": 0.4, "arousal": -0.2}}


def kind_of(key):
    return KINDS.get(key)


@pytest.fixture
def defs():
    return variables.with_builtins(variables.load_definitions([
        DEBT,
        {"name": "wounded", "type": "flag", "visibility": "public"},
        {"name": "mood", "type": "choice", "options": ["calm", "angry"], "always": True},
        {"name": "secret_plan", "type": "text", "visibility": "narrator"},
        {"name": "alarm", "type": "flag", "applies_to": "world"},
    ]))


def apply(defs, values, *items):
    return variables.apply_changes(list(items), defs=defs, values=values, kind_of=kind_of, temperaments=TEMPERAMENTS)


def test_to_outside_the_range_is_refused_naming_it(defs):
    [(_, made, reason)] = apply(defs, {}, {"object": "mara", "name": "debt", "to": 120})
    assert made is None and reason == "120 is out of range 0–100 for debt"


def test_by_is_clamped_to_the_range(defs):
    values = {("mara", "debt"): 20}
    [(_, made, reason)] = apply(defs, values, {"object": "mara", "name": "debt", "by": 150})
    assert reason == "" and made.value == 100 and "clamped to 100" in made.note
    assert values == {("mara", "debt"): 100}
    assert made.write == {"slot": "var:mara:debt", "kind": "var", "subject": "mara", "value": "100",
                          "data": {"name": "debt", "value": 100}, "narrator_only": False}


def test_an_unknown_variable_is_refused(defs):
    [(_, made, reason)] = apply(defs, {}, {"object": "mara", "name": "fame", "to": 3})
    assert made is None and reason.startswith("unknown variable 'fame'; the variables are")


def test_a_variable_on_the_wrong_kind_of_object_is_refused(defs):
    [(_, _, reason)] = apply(defs, {}, {"object": "lamp", "name": "debt", "to": 5})
    assert reason == "debt applies to character, and 'lamp' is an item"
    [(_, _, reason)] = apply(defs, {}, {"object": "ghost", "name": "debt", "to": 5})
    assert reason == "unknown object 'ghost' for debt"


def test_a_batch_with_one_bad_change_applies_the_other_two(defs):
    values = {}
    outcomes = apply(defs, values, {"object": "mara", "name": "debt", "to": 30},
                     {"object": "mara", "name": "debt", "to": 300},
                     {"object": "mara", "name": "debt", "by": 15})
    assert [reason == "" for _, _, reason in outcomes] == [True, False, True]
    assert values == {("mara", "debt"): 45}  # the third saw the first


def test_setting_a_value_back_to_its_default_leaves_nothing_stored(defs):
    values = {("mara", "debt"): 20}
    [(_, made, _)] = apply(defs, values, {"object": "mara", "name": "debt", "to": 0})
    assert made.write == {"slot": "var:mara:debt", "kind": "var", "subject": "mara", "value": "0", "data": {},
                          "narrator_only": False, "retracted": True}
    assert values == {}
    # Nothing stored and nothing to store: no write at all.
    [(_, made, reason)] = apply(defs, values, {"object": "mara", "name": "debt", "by": -5})
    assert reason == "" and made.value == 0 and made.write is None


def test_a_61st_definition_is_refused():
    sixty = [{"name": f"v{i}", "type": "flag"} for i in range(60)]
    defs = variables.load_definitions(sixty)
    with pytest.raises(Refused, match="at most 60 variables"):
        variables.define(defs, {"name": "one_more", "type": "flag"})
    with pytest.raises(Refused, match="61 variables; a story has at most 60"):
        variables.load_definitions([*sixty, {"name": "one_more", "type": "flag"}])


def test_maras_valence_starts_at_her_baseline_and_never_shows_in_another_characters_view(defs):
    assert variables.BUILTINS["valence"].default_for("mara", TEMPERAMENTS) == 0.4
    values = {}
    [(_, made, _)] = apply(defs, values, {"object": "mara", "name": "valence", "by": 0.3})
    assert made.value == 0.7 and made.write["narrator_only"] is True
    own = variables.view(defs=defs, values=values, kind_of=kind_of, viewer="mara", present=["edrin"],
                         temperaments=TEMPERAMENTS)
    other = variables.view(defs=defs, values=values, kind_of=kind_of, viewer="edrin", present=["mara"],
                           temperaments=TEMPERAMENTS)
    assert any("valence 0.7" in line for line in own.lines)
    assert not any("valence" in line for line in other.lines)
    # Back to her baseline: nothing stored.
    [(_, made, _)] = apply(defs, values, {"object": "mara", "name": "valence", "baseline": True})
    assert made.value == 0.4 and values == {}


def test_the_emotions_are_built_in_for_characters_only(defs):
    [(_, _, reason)] = apply(defs, {}, {"object": "hall", "name": "arousal", "to": 0.5})
    assert "applies to character" in reason
    [(_, _, reason)] = apply(defs, {}, {"object": "mara", "name": "arousal", "to": 1.5})
    assert reason == "1.5 is out of range -1–1 for arousal"
    with pytest.raises(Refused, match="built in"):
        variables.parse_definition({"name": "valence", "type": "number", "range": [-1, 1]})


def test_flags_choices_and_text_check_their_values(defs):
    values = {}
    outcomes = apply(defs, values, {"object": "mara", "name": "wounded", "to": "maybe"},
                     {"object": "mara", "name": "mood", "to": "sad"},
                     {"object": "mara", "name": "mood", "by": 1},
                     {"object": "mara", "name": "wounded", "to": True},
                     {"object": "world", "name": "alarm", "to": True},
                     {"name": "alarm", "to": False},
                     {"object": "mara", "name": "debt", "to": 5, "by": 1})
    reasons = [reason for _, _, reason in outcomes]
    assert reasons[0] == "wounded is a flag: true or false, not 'maybe'"
    assert reasons[1] == "'sad' is not an option of mood: calm, angry"
    assert reasons[2] == "mood is a choice; only numbers change by an amount"
    assert reasons[3:6] == ["", "", ""]
    assert reasons[6] == "a change to debt gives exactly one of to, by or baseline"
    assert values == {("mara", "wounded"): True}


def test_a_definition_is_refused_with_every_reason():
    with pytest.raises(Refused) as refused:
        variables.parse_definition({"name": "Bad Name", "type": "number", "range": [10, 0], "visibility": "everyone",
                                    "applies_to": ["planet"]})
    reason = str(refused.value)
    assert all(part in reason for part in ("lower-case", "planet", "everyone", "min below max"))
    with pytest.raises(Refused, match="default 'x' is not one of the options"):
        variables.parse_definition({"name": "c", "type": "choice", "options": ["a", "b"], "default": "x"})


def test_the_narrator_sees_the_scene_first_at_most_14_lines_and_8_per_object():
    many = variables.with_builtins(variables.load_definitions(
        [{"name": f"v{i}", "type": "number", "range": [0, 10]} for i in range(10)]))
    kinds = {f"c{i}": "character" for i in range(20)}
    values = {(f"c{i}", f"v{j}"): 5 for i in range(20) for j in range(10)}
    seen = variables.view(defs=many, values=values, kind_of=kinds.get, scene=["c17", "c3"], name_of=str.upper)
    assert len(seen.lines) == 14 and seen.left_out == 6
    assert seen.lines[0].startswith("C17: ") and seen.lines[1].startswith("C3: ")
    assert seen.lines[0].count(",") == 7  # eight items


def test_only_values_off_their_default_or_marked_always_are_shown(defs):
    seen = variables.view(defs=defs, values={("mara", "debt"): 70}, kind_of=kind_of, scene=["mara", "edrin"],
                          name_of=lambda key: key.title(), temperaments=TEMPERAMENTS)
    assert seen.lines == ["Mara: debt 70 (crushing), mood calm", "Edrin: mood calm"]


def test_a_narrator_only_variable_is_never_in_a_characters_view(defs):
    values = {("mara", "secret_plan"): "poison the well"}
    own = variables.view(defs=defs, values=values, kind_of=kind_of, viewer="mara")
    narrator = variables.view(defs=defs, values=values, kind_of=kind_of, scene=["mara"])
    assert not any("poison" in line for line in own.lines)
    assert any("poison the well" in line for line in narrator.lines)


def test_a_definition_reads_back_from_its_record():
    definition = variables.parse_definition(DEBT)
    assert variables.parse_definition(definition.write()["data"]) == definition


def test_value_of_reads_the_stored_value_else_the_default(defs):
    values = {("mara", "debt"): 20}
    assert variables.value_of(defs, values, "mara", "debt") == 20
    assert variables.value_of(defs, values, "edrin", "debt") == 0
    assert variables.value_of(defs, values, "mara", "valence", TEMPERAMENTS) == 0.4
    assert variables.value_of(defs, values, "mara", "fame") is None


def test_a_change_naming_no_object_says_so(defs):
    [(_, _, reason)] = apply(defs, {}, {"name": "debt", "to": 5})
    assert reason == "a change to debt names no object (a character, item or place)"
