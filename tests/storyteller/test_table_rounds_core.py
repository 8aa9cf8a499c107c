"""A table's round, pure (storyteller/voices/table.py): when it plays, its input, the split by stage, presence."""

from storyteller.voices import table
from storyteller.voices.table import Seated, Sent

MARA = Seated("mara", "Mara", "bea", present=True, place="kitchen", place_name="Kitchen")
TOM = Seated("tom", "Tom", "cal", present=True, place="kitchen", place_name="Kitchen")
IDA = Seated("ida", "Ida", "dot", present=True, place="cellar", place_name="the Cellar")


def test_the_round_waits_until_every_present_player_has_sent():
    decision = table.decide([MARA, TOM, IDA], {"mara", "ida"})
    assert not decision.play and decision.waiting == ("tom",)
    assert table.decide([MARA, TOM, IDA], {"mara", "ida", "tom"}) == table.Decision(True, table.EVERYONE)


def test_an_absent_player_is_not_waited_for_and_nothing_sent_never_plays_by_itself():
    away = Seated("tom", "Tom", "cal", present=False, place="kitchen")
    assert table.decide([MARA, away], {"mara"}).play
    assert not table.decide([MARA, away], set()).play
    assert not table.decide([], set()).play
    gone = Seated("mara", "Mara", "bea", present=False, place="kitchen")
    assert not table.decide([gone, away], {"mara"}).play  # everyone left: it waits for someone to come back


def test_the_owner_says_go_and_the_timer_plays_what_was_sent():
    assert table.decide([MARA, TOM], set(), go=True).why == table.GO
    assert table.decide([MARA, TOM], {"mara"}, timer_due=True) == table.Decision(True, table.TIMER, ("tom",))
    assert not table.decide([MARA, TOM], set(), timer_due=True).play


def test_the_model_never_speaks_for_a_player_who_is_here_or_has_sent():
    away = Seated("tom", "Tom", "cal", present=False)
    gone_but_sent = Seated("ida", "Ida", "dot", present=False)
    assert table.voiced_by_people([MARA, away, gone_but_sent], {"ida"}) == {"mara", "ida"}


def test_the_input_keeps_each_action_as_sent_under_its_character():
    sent = [Sent("tom", "  I say: \"<b>Hello</b>\"  "), Sent("mara", "I open the door.")]
    together = table.compose(sent, [MARA, TOM], table.stages([MARA, TOM]))
    assert together == 'Mara: I open the door.\nTom:   I say: "<b>Hello</b>"  '
    assert table.direction(table.stages([MARA, TOM])) == ""


def test_apart_the_input_goes_by_place_and_the_narrator_is_asked_for_one_part_each():
    stages = table.stages([MARA, IDA, TOM])
    assert [(s.place, s.present) for s in stages] == [("kitchen", ("mara", "tom")), ("cellar", ("ida",))]
    text = table.compose([Sent("ida", "I light the lamp."), Sent("mara", "I wait.")], [MARA, IDA, TOM], stages)
    assert text == "At Kitchen:\nMara: I wait.\n\nAt the Cellar:\nIda: I light the lamp."
    assert "[At Kitchen] then [At the Cellar]" in table.direction(stages)


def test_the_narration_splits_at_its_stage_lines_and_stray_text_goes_to_no_one():
    stages = table.stages([MARA, IDA, TOM])
    narration = ("Night falls.\n[At Kitchen]\nThe kettle sings.\n\n[At The Cellar]\nA CANARY-7 glints.\n"
                 "[At Nowhere]\nA lie.")
    parts = table.split(narration, stages, lines="Aldric: “Hm.”", lines_at="kitchen")
    assert [(p.place, p.present, p.text) for p in parts] == [
        ("kitchen", ("mara", "tom"), "Aldric: “Hm.”"),
        ("", (), "Night falls."),
        ("kitchen", ("mara", "tom"), "The kettle sings."),
        ("cellar", ("ida",), "A CANARY-7 glints."),
        ("", (), "A lie."),
    ]


def test_a_narration_without_stage_lines_reaches_no_one_when_apart_and_everyone_when_together():
    apart = table.split("Everything at once, CANARY.", table.stages([MARA, IDA]))
    assert [(p.present, p.text) for p in apart] == [((), "Everything at once, CANARY.")]
    together = table.split("All here.", table.stages([MARA, TOM]), lines="Aldric: hi", lines_at="hall")
    assert [(p.present, p.text) for p in together] == [((), "Aldric: hi"), (("mara", "tom"), "All here.")]


def test_a_player_sees_who_sent_but_reads_only_their_own_places_actions():
    sent = {"tom": Sent("tom", "I hide the key."), "ida": Sent("ida", "CANARY in the cellar")}
    mara = table.presence_for("mara", [MARA, TOM, IDA], sent, typing={"ida"})
    assert [(s.character, s.sent, s.text, s.typing) for s in mara] == [
        ("Mara", False, "", False), ("Tom", True, "I hide the key.", False), ("", True, "", True)]
    owner = table.presence_for(None, [MARA, TOM, IDA], sent)
    assert [s.text for s in owner] == ["", "I hide the key.", "CANARY in the cellar"]
    ida = table.presence_for("ida", [MARA, TOM, IDA], sent)
    assert [(s.character, s.text, s.own) for s in ida] == [("", "", False), ("", "", False),
                                                             ("Ida", "CANARY in the cellar", True)]
