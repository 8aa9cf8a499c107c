"""Off-stage selection and the away note (seed 002 离场行动; WP4 scenario 6, its pure part)."""

import pytest

from campaigns.state.time.agenda import Engagement, Intent
from campaigns.state.time.rules import Refused
from storyteller.voices import offstage

HOUR = 3_600_000
NOW = 1_900_000_000_000

POSITIONS = {"protagonist": "hall", "mara": "hall", "aldric": "yard", "brom": "forge", "lys": "tower",
             "tam": "quay"}


def due(engagements=(), intents=(), **extra):
    return offstage.due_items(positions=POSITIONS, protagonist_place="hall", engagements=engagements,
                              intents=intents, now_ms=NOW, **extra)


def test_three_away_with_due_engagements_per_turn_two_the_two_oldest_act_as_rounds_100_and_101_the_third_waits():
    engagements = [
        Engagement("smithing", ("brom",), NOW - 1 * HOUR, "forge", "shoe the grey mare"),
        Engagement("watch", ("aldric",), NOW - 3 * HOUR, "yard", "take the watch"),
        Engagement("lamp", ("lys",), NOW - 2 * HOUR, "tower", "light the lamp"),
    ]
    selection = offstage.select(due(engagements), per_turn=2, per_character=1)
    assert [(run.number, run.due.who, run.due.item) for run in selection.runs] == [
        (100, "aldric", "engagement:watch"), (101, "lys", "engagement:lamp")]
    assert [item.item for item in selection.waiting] == ["engagement:smithing"], "the third stays due"
    assert offstage.select(due(engagements), per_turn=0, per_character=1).runs == (), "0 turns it off"


def test_what_is_on_stage_not_yet_due_handled_or_someone_elses_to_play_is_not_off_stage():
    engagements = [
        Engagement("supper", ("mara",), NOW - HOUR, "hall", "serve supper"),  # Mara is with the player
        Engagement("pact", ("aldric", "mara"), NOW - HOUR, "", "meet Mara"),  # one participant is with the player
        Engagement("oath", ("aldric", "protagonist"), NOW - HOUR, "", "swear"),  # the player's own
        Engagement("later", ("brom",), NOW + HOUR, "", "not yet"),
        Engagement("kept", ("lys",), NOW - HOUR, "", "done", status="kept"),
        Engagement("done", ("tam",), NOW - HOUR, "", "handled before"),
        Engagement("crowd", ("tam",), NOW - 2 * HOUR, "", "the crowd gathers"),
    ]
    found = due(engagements, handled={"engagement:done"}, excluded={"tam"})
    assert found == []


def test_overdue_goals_count_and_only_participants_are_named_to_perceive_the_round():
    intents = [Intent("brom", "debt", plan="collect the debt from Tam", deadline=NOW - HOUR),
               Intent("lys", "song", plan="write the song", deadline=NOW + HOUR),
               Intent("aldric", "hunt", plan="hunt the boar"),  # no deadline: never overdue
               Intent("mara", "bread", plan="bake", deadline=NOW - HOUR)]  # with the player
    engagements = [Engagement("deal", ("aldric", "brom"), NOW - 2 * HOUR, "quay", "sell the pelts")]
    found = due(engagements, intents)
    assert [(d.item, d.who, d.participants) for d in found] == [
        ("engagement:deal", "aldric", ("aldric", "brom")), ("intent:brom:debt", "brom", ("brom",))]
    selection = offstage.select(found, per_turn=2, per_character=1)
    assert [run.due.who for run in selection.runs] == ["aldric", "brom"]


def test_each_character_acts_at_most_per_character_times_a_turn():
    engagements = [Engagement(f"e{n}", ("brom",), NOW - (5 - n) * HOUR, "", f"task {n}") for n in range(3)]
    engagements.append(Engagement("lamp", ("lys",), NOW, "", "light the lamp"))
    once = offstage.select(due(engagements), per_turn=2, per_character=1)
    assert [run.due.item for run in once.runs] == ["engagement:e0", "engagement:lamp"]
    twice = offstage.select(due(engagements), per_turn=2, per_character=2)
    assert [run.due.item for run in twice.runs] == ["engagement:e0", "engagement:e1"]


def test_an_account_in_the_third_person_and_the_past_tense_is_kept_as_it_is():
    account = offstage.check_account("Aldric walked the wall at dusk and \"I see nothing,\" he called down.")
    assert account.text == "Aldric walked the wall at dusk and \"I see nothing,\" he called down."
    assert account.note == ""
    assert offstage.check_account("Brom shod the grey mare and sent the boy to Mara's door.").text


@pytest.mark.parametrize("text, reason", [
    ("", "the account is empty"),
    ("I walked to the forge.", "third person"),
    ("You find Brom at the forge; he waved.", "third person"),
    ("Brom walks to the forge.", "past tense"),
    ("Brom will go to the forge at dawn.", "past tense"),
    ("Brom, at the forge, hammering.", "it has no verb in the past"),
    ("Brom worked late and secretly hid the letter.", "never thoughts or secrets"),
    ("Brom wondered whether Mara lied, then locked the door.", "never thoughts or secrets"),
])
def test_an_account_that_is_not_third_person_past_tense_and_outward_is_refused_with_the_reason(text, reason):
    with pytest.raises(Refused) as refused:
        offstage.check_account(text)
    assert reason in str(refused.value)


def test_a_long_account_is_trimmed_at_its_last_whole_sentence_within_300_characters():
    sentence = "Lys climbed the tower stair in the dark and trimmed the wick of the great lamp. "
    account = offstage.check_account(sentence * 5)
    assert len(account.text) <= 300 and account.text.endswith("lamp.")
    assert account.text.count("Lys climbed") == 3
    assert account.note == f"trimmed from {len((sentence * 5).strip())} to {len(account.text)} characters " \
                           "(an account is at most 300)"
    words = offstage.check_account("Lys climbed " + "and climbed " * 40)
    assert len(words.text) <= 300 and words.text.endswith("…"), "no sentence fits: cut at a word"
    assert ("Lys climbed " + "and climbed " * 40).startswith(words.text[:-1])


def test_the_away_note_holds_the_accounts_then_the_schedule_moves_and_at_most_eight_lines():
    note = offstage.away_note(["Aldric took the watch.", "Lys lit the lamp."], ["Brom went to the Forge (working)"])
    assert note.lines == ("Aldric took the watch.", "Lys lit the lamp.", "Brom went to the Forge (working)")
    assert note.data() == {"lines": list(note.lines), "left_out": 0}
    crowded = offstage.away_note(["Aldric took the watch."], [f"Villager {n} went home" for n in range(10)])
    assert len(crowded.lines) == 8 and crowded.left_out == 4
    assert crowded.lines[0] == "Aldric took the watch."
    assert crowded.lines[-1] == "…and 4 more off stage (the records keep every one)"
