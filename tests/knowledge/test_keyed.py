"""The keyed scan: SillyTavern's activation logic, timers counted in turns, seeded rolls, reasons for every entry."""

import time

from knowledge import keyed, worldinfo


def _index(entries, depth=keyed.DEFAULT_SCAN_DEPTH):
    book = worldinfo.read({"entries": entries})
    return keyed.Index([keyed.Keyed(f"book:{e.uid}", "The Book", "canon", e) for e in book.entries], depth)


def _scan(index, *texts, turn=1, timers=None, seed="s"):
    messages = [keyed.Message(turn - i // 2, "you" if i % 2 == 0 else "the narrator", text)
                for i, text in enumerate(texts)]
    return keyed.scan(index, messages, turn, timers or {}, seed)


def _fired(scan):
    return [why["key"] for why in scan.fired]


def _why(scan, key):
    return next(held["why"] for held in scan.held if held["key"] == key)


def test_a_key_in_the_players_input_fires_its_entry_and_says_which_key_in_which_turn():
    index = _index({"1": {"key": ["dragon", "wyrm"], "content": "Dragons hoard."}, "2": {"key": ["elf"]}})
    scan = _scan(index, "A WYRM circles the tower.", turn=7)
    assert _fired(scan) == ["book:1"]
    assert scan.fired[0] | {"key": "book:1"} == {"key": "book:1", "how": "key", "key_text": "wyrm", "turn": 7,
                                                   "who": "you", "score": 1}
    assert scan.quiet == ["book:2"]


def test_scan_depth_counts_messages_newest_first_and_an_entry_may_reach_further():
    index = _index({"1": {"key": ["ferry"]}, "2": {"key": ["ferry"], "scanDepth": 3}})
    scan = _scan(index, "I wait.", "The rain.", "The ferry left.", turn=5)
    assert _fired(scan) == ["book:2"]
    assert scan.fired[0]["turn"] == 4 and scan.fired[0]["who"] == "you"


def test_case_and_whole_words_follow_the_entry():
    index = _index({"1": {"key": ["Rose"], "caseSensitive": True}, "2": {"key": ["cat"], "matchWholeWords": True},
                    "3": {"key": ["cat"]}})
    assert _fired(_scan(index, "a rose and a category")) == ["book:3"]
    assert _fired(_scan(index, "Rose's cat.")) == ["book:1", "book:2", "book:3"]


def test_regex_keys_are_javascript_style_with_their_flags():
    index = _index({"1": {"key": ["/dra(g|k)on/i"]}, "2": {"key": ["/^only$/"]}, "3": {"key": ["/[unclosed/"]}})
    scan = _scan(index, "The DRAKON wakes.")
    assert _fired(scan) == ["book:1"]
    assert any("is not a regular expression" in problem for problem in scan.problems)


def test_a_regex_that_runs_too_long_is_skipped_and_said_never_freezing_the_turn():
    index = _index({"1": {"key": ["/(a|aa)+$/"]}})
    started = time.perf_counter()
    scan = _scan(index, "a" * 5000 + "!")
    assert time.perf_counter() - started < 1
    assert _fired(scan) == []
    assert any("took longer than" in problem for problem in scan.problems)


def test_secondary_key_logic_and_any_not_all_not_any_and_all():
    entries = {str(logic): {"key": ["gate"], "keysecondary": ["north", "locked"], "selective": True,
                            "selectiveLogic": logic} for logic in range(4)}
    index = _index(entries)
    both = _fired(_scan(index, "the north gate is locked"))
    one = _fired(_scan(index, "the north gate"))
    none = _fired(_scan(index, "the gate"))
    assert both == ["book:0", "book:3"]  # and any, and all
    assert one == ["book:0", "book:1"]  # and any, not all
    assert none == ["book:1", "book:2"]  # not all, not any
    assert "secondary keys" in _why(_scan(index, "the gate"), "book:0")


def test_constant_entries_fire_without_keys_and_disabled_ones_never():
    index = _index({"1": {"constant": True, "content": "Always."}, "2": {"key": ["x"], "disable": True}})
    scan = _scan(index, "x")
    assert _fired(scan) == ["book:1"] and scan.fired[0]["how"] == "constant"
    assert _why(scan, "book:2") == "disabled in its book"


def test_sticky_then_cooldown_counted_in_turns_from_the_timers_given():
    index = _index({"1": {"key": ["bell"], "sticky": 2, "cooldown": 2}})
    timers, seen = {}, []
    for turn in range(1, 10):
        scan = _scan(index, "the bell" if turn in (1, 4, 6, 7) else "silence", turn=turn, timers=timers)
        seen.append((turn, scan.fired[0]["how"] if scan.fired else None))
        timers = scan.timers
    assert seen == [(1, "key"), (2, "sticky"), (3, "sticky"), (4, None), (5, None), (6, "key"), (7, "sticky"),
                    (8, "sticky"), (9, None)]


def test_the_same_timers_give_the_same_turn_whatever_came_before_elsewhere():
    index = _index({"1": {"key": ["bell"], "cooldown": 3}})
    cooling = _scan(index, "the bell", turn=6, timers={"book:1": 4})
    fresh = _scan(index, "the bell", turn=6, timers={})
    assert _fired(cooling) == [] and "from turn 8" in _why(cooling, "book:1")
    assert _fired(fresh) == ["book:1"]


def test_delay_waits_until_that_many_turns_were_played():
    index = _index({"1": {"key": ["bell"], "delay": 3}})
    assert "from turn 4" in _why(_scan(index, "bell", turn=3), "book:1")
    assert _fired(_scan(index, "bell", turn=4)) == ["book:1"]


def test_probability_is_seeded_so_the_same_place_rolls_the_same():
    index = _index({str(n): {"key": ["coin"], "probability": 50, "useProbability": True} for n in range(40)})
    first = _fired(_scan(index, "coin", seed="campaign:7:node:12"))
    again = _fired(_scan(index, "coin", seed="campaign:7:node:12"))
    other = _fired(_scan(index, "coin", seed="campaign:7:node:13"))
    assert first == again and first != other
    assert 5 < len(first) < 35
    missed = _scan(index, "coin", seed="campaign:7:node:12")
    assert all("chance failed (rolled" in held["why"] for held in missed.held)


def test_recursion_reads_fired_text_and_respects_the_three_flags():
    index = _index({
        "1": {"key": ["castle"], "content": "The castle's lord keeps a falcon."},
        "2": {"key": ["falcon"], "content": "Falcons hunt at dawn."},
        "3": {"key": ["dawn"], "excludeRecursion": True},
        "4": {"key": ["lord"], "delayUntilRecursion": True},
        "5": {"key": ["castle"], "preventRecursion": True, "content": "hawk"},
        "6": {"key": ["hawk"]},
    })
    scan = _scan(index, "We ride to the castle.")
    assert _fired(scan) == ["book:1", "book:2", "book:4", "book:5"]
    assert next(w for w in scan.fired if w["key"] == "book:2")["how"] == "recursion"
    assert "book:3" in scan.quiet and "book:6" in scan.quiet
    assert "recursion" in _why(_scan(index, "The lord sleeps."), "book:4")


def test_an_inclusion_group_keeps_one_by_override_else_by_seeded_weight():
    index = _index({"1": {"key": ["inn"], "group": "inn", "order": 5},
                    "2": {"key": ["inn"], "group": "inn", "order": 9, "groupOverride": True},
                    "3": {"key": ["inn"], "group": "tavern", "groupWeight": 1},
                    "4": {"key": ["inn"], "group": "tavern", "groupWeight": 1000}})
    scan = _scan(index, "the inn")
    assert "book:2" in _fired(scan) and "book:1" not in _fired(scan)
    assert "chose" in _why(scan, "book:1")
    assert len([key for key in _fired(scan) if key in ("book:3", "book:4")]) == 1
    assert _fired(_scan(index, "the inn", seed="a")) == _fired(_scan(index, "the inn", seed="a"))


def test_fit_prices_constants_first_and_reports_every_drop_with_its_cost():
    kept, dropped = keyed.fit([keyed.Priced("keyed-big", 60, False), keyed.Priced("constant", 50, True),
                               keyed.Priced("keyed-small", 30, False)], budget=90)
    assert kept == ["constant", "keyed-small"]
    assert dropped == [{"key": "keyed-big", "tokens": 60,
                        "reason": "a keyed entry: no room left in the lorebook budget (90 tokens, 50 already used)"}]
    kept, dropped = keyed.fit([keyed.Priced("constant", 120, True)], budget=90)
    assert kept == [] and dropped[0]["tokens"] == 120 and dropped[0]["reason"].startswith("a constant entry")


def test_values_of_the_wrong_type_are_read_as_sillytavern_holds_them_and_named_when_not():
    book = worldinfo.read({"entries": {"7": {"key": "a, b ,c", "probability": "40", "constant": "true",
                                             "order": "high", "sticky": -3}}})
    entry = book.entries[0]
    assert (entry.keys, entry.probability, entry.constant, entry.order, entry.sticky) == (("a", "b", "c"), 40,
                                                                                          True, 100, 0)
    assert any("order 'high' cannot be read; 100 was used" in p for p in book.problems)
    assert any("sticky -3 is outside" in p for p in book.problems)


def test_a_thousand_entries_filed_by_their_rarest_letters_still_fire_only_on_their_own_keys():
    # Keys sharing common letters ("lord ...") must not hide each other in the index; the speed is the bench's.
    words = [f"{a}{b}{c}" for a in "bcdfghjklm" for b in "aeiou" for c in "nrstlmpkdg"][:1000]
    entries = {str(n): {"key": [f"{word}ia", f"lord {word}"], "keysecondary": [f"x{n}"] if n % 3 == 0 else [],
                        "content": f"Entry {n}."} for n, word in enumerate(words)}
    index = _index(entries, depth=4)
    text = " ".join(f"word{n}" for n in range(300)) + f" {words[17]}ia and lord {words[400]}"
    scan = _scan(index, text, text, text, text)
    assert set(_fired(scan)) == {"book:17", "book:400"}  # neither has secondary keys (n % 3)
