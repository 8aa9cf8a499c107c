"""The turn's bounds (seed 002 回合结构; WP4 scenario 1), pure: no database, no model."""

import pytest

from campaigns.state.time.rules import Refused
from storyteller.voices import rounds
from storyteller.voices.limits import Limits, limits_of

PEOPLE = {"mara": "Mara", "aldric": "Aldric", "tobin": "Tobin", "lys": "Lys", "wren": "Wren", "osk": "Osk",
          "brom": "Brom", "protagonist": "Edrin"}


def resolve(name):
    return next((key for key, shown in PEOPLE.items() if shown.lower() == name.lower() or key == name.lower()), None)


def activate(requested, present=("mara", "aldric", "tobin", "lys", "wren", "osk"), cap=4):
    return rounds.activate([(name, f"{name} reacts") for name in requested], present=set(present), resolve=resolve,
                           name_of=PEOPLE.get, max_characters=cap)


def test_the_game_master_asks_for_six_characters_and_four_act_the_rest_refused_with_the_reason():
    activation = activate(["Mara", "Aldric", "Tobin", "Lys", "Wren", "Osk"])
    assert activation.acting == ("mara", "aldric", "tobin", "lys")
    assert activation.why["tobin"] == "Tobin reacts"
    assert [name for name, _ in activation.refused] == ["Wren", "Osk"]
    for _, reason in activation.refused:
        assert reason == ("at most 4 characters act in one round (max_characters); Mara, Aldric, Tobin, Lys were "
                          "activated first")


def test_the_cap_is_the_campaigns_setting():
    assert activate(["Mara", "Aldric"], cap=1).acting == ("mara",)


def test_nobody_the_player_nobody_away_and_nobody_twice_are_refused_each_with_its_own_reason():
    activation = activate(["Ghost", "Edrin", "Brom", "Mara", "mara", "Aldric"])
    assert activation.acting == ("mara", "aldric")
    reasons = dict(activation.refused)
    assert reasons["Ghost"] == "nobody in the story is called 'Ghost'"
    assert reasons["Edrin"].startswith("the player's character never acts on its own")
    assert reasons["Brom"] == "Brom is not with the player: characters elsewhere act off stage, after the turn"
    assert reasons["mara"] == "Mara is already activated in this round"


def test_a_fourth_round_is_refused_and_a_round_of_the_players_move_alone_counts():
    done = []
    first = rounds.plan_round(done, None, max_rounds=3)  # the player's move alone: no activate_characters
    assert first.number == 1 and first.player_only
    done.append(first)
    done.append(rounds.plan_round(done, activate(["Mara"]), max_rounds=3))
    done.append(rounds.plan_round(done, activate([]), max_rounds=3))
    assert [r.number for r in done] == [1, 2, 3] and done[1].activated == ("mara",)
    with pytest.raises(Refused) as refused:
        rounds.plan_round(done, activate(["Aldric"]), max_rounds=3)
    assert str(refused.value) == ("this turn has played its 3 rounds (2 of them the player's move alone, which "
                                  "counts too); at most 3 rounds follow one player message (max_rounds): narrate "
                                  "the outcome now")


def test_off_stage_rounds_are_numbered_from_100_and_do_not_count_toward_the_limit():
    done = [rounds.Planned(1, rounds.GM), rounds.Planned(rounds.offstage_number([]), rounds.OFFSTAGE, ("aldric",))]
    assert done[1].number == 100
    done.append(rounds.Planned(rounds.offstage_number(done), rounds.OFFSTAGE, ("brom",)))
    assert done[2].number == 101
    assert rounds.plan_round(done, None, max_rounds=2).number == 2


def test_limits_read_a_campaigns_fields_with_the_seeds_defaults():
    assert Limits() == Limits(max_rounds=3, max_characters=4, offstage_per_turn=2, offstage_per_character=1,
                              offstage_summary=True, authoring_enabled=True, authoring_per_turn=2,
                              authoring_consolidate_after=5)
    campaign = type("Campaign", (), {**Limits().__dict__, "max_rounds": 2})()
    assert limits_of(campaign).max_rounds == 2
