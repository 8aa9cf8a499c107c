"""World triggers (seed 002 世界触发器; WP2 scenario 12): edges, caps, cooldown, chance, failure, secrecy — pure.

The world is a plain fake answering the four questions triggers ask; the
story State answers them at integration.
"""

from dataclasses import dataclass, field

import pytest

from campaigns.state.time import calendar, triggers
from campaigns.state.time.rules import Refused
from campaigns.state.time.triggers import Context, Note, References, Status

LISBON = "Europe/Lisbon"
HOUR = 3_600_000
SEED = (7, 42)


def ms(text):
    return calendar.parse_instant(text, now_ms=0, tz=LISBON)


@dataclass
class FakeWorld:
    locations: dict = field(default_factory=dict)
    holders: dict = field(default_factory=dict)
    places: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)

    def location_of(self, who):
        return self.locations.get(who, "")

    def holder_of(self, item):
        return self.holders.get(item, "")

    def place_of(self, item):
        return self.places.get(item, "")

    def variable(self, obj, name):
        return self.values.get((obj, name))


class Line:
    """One line of story: trigger records, checked after each step, their writes folded back in."""

    def __init__(self, *definitions, world=None, start="2031-03-14T08:00", cap=triggers.PER_CHECK):
        self.world = world or FakeWorld()
        self.now = ms(start)
        self.cap = cap
        loaded = triggers.load_triggers(list(definitions), tz=LISBON, now_ms=self.now)
        self.records = {t.id: triggers.record(t, Status())["data"] for t in loaded}
        self.notes = {}
        self.fired = []

    def status(self, ident):
        return self.records[ident]["status"], self.records[ident]["fires"]

    def entries(self):
        return [triggers.from_record(data) for data in self.records.values()]

    def step(self, *, to=None, by=0, dry_run=lambda effects: ([{"slot": "effect", "kind": "effect"}], ""),
             seed=SEED, judgments=None, turn=1):
        since = self.now
        self.now = ms(to) if to else self.now + by
        ctx = Context(self.world, self.now, since, tz=LISBON, judgments=judgments or {})
        result = triggers.check(self.entries(), ctx, seed=seed, cap=self.cap)
        self.fired = [firing.trigger.id for firing in result.firings]
        self.deferred = result.deferred
        writes = triggers.settle(result, dry_run, turn=turn)
        for write in writes:
            if write["kind"] == "trigger":
                self.records[write["subject"]] = write["data"]
            elif write["kind"] == "trigger_note":
                self.notes[write["slot"]] = Note.from_record(write["data"])
        return [write for write in writes if write["kind"] not in ("trigger", "trigger_note")]


BELL = {"id": "bell", "when": {"type": "time", "after": "14 March 2031 at 20:00"}, "beat": "The bell tolls."}


def test_the_bell_stays_dormant_fires_once_when_a_skip_passes_20_00_and_not_again_while_it_holds():
    line = Line(BELL)
    line.step(to="2031-03-14T19:00")
    assert line.fired == [] and line.status("bell") == ("dormant", 0)
    line.step(to="2031-03-14T21:30")
    assert line.fired == ["bell"] and line.status("bell") == ("fired", 1)
    for _ in range(3):
        line.step(by=HOUR)
        assert line.fired == []


def flag(value=True):
    return {"type": "variable", "object": "world", "name": "alarm", "op": "==", "value": value}


def test_max_fires_3_with_a_1_hour_cooldown_fires_again_only_on_a_new_edge_after_the_cooldown():
    world = FakeWorld()
    line = Line({"id": "siren", "when": flag(), "max_fires": 3, "cooldown_seconds": 3600, "beat": "A siren."},
                world=world)
    world.values[("world", "alarm")] = True
    line.step(by=60_000)
    assert line.fired == ["siren"]
    world.values[("world", "alarm")] = False
    line.step(by=10 * 60_000)
    world.values[("world", "alarm")] = True
    line.step(by=10 * 60_000)  # a new edge, but 20 minutes after firing: cooling down, and the edge is used up
    assert line.fired == [] and line.status("siren") == ("fired", 1)
    line.step(by=2 * HOUR)  # still true after the cooldown: no new edge
    assert line.fired == []
    world.values[("world", "alarm")] = False
    line.step(by=60_000)
    world.values[("world", "alarm")] = True
    line.step(by=60_000)
    assert line.fired == ["siren"] and line.status("siren") == ("fired", 2)
    for _ in range(3):
        world.values[("world", "alarm")] = False
        line.step(by=60_000)
        world.values[("world", "alarm")] = True
        line.step(by=2 * HOUR)
    assert line.status("siren") == ("fired", 3)  # and never more


def test_past_its_expiry_a_trigger_becomes_expired_and_never_fires():
    world = FakeWorld()
    line = Line({"id": "ferry", "when": flag(), "expires": "2031-03-14T12:00", "beat": "The ferry leaves."},
                world=world)
    line.step(to="2031-03-14T11:00")
    assert line.status("ferry") == ("dormant", 0)
    world.values[("world", "alarm")] = True
    line.step(to="2031-03-14T12:30")
    assert line.fired == [] and line.status("ferry") == ("expired", 0)


def test_a_seeded_half_chance_gives_the_same_result_on_every_replay():
    outcomes = []
    for node in range(40):
        results = set()
        for _ in range(3):  # replays of the same node
            line = Line({"id": "omen", "when": BELL["when"], "probability": 0.5, "beat": "An omen."})
            line.step(to="2031-03-14T21:00", seed=(7, node))
            results.add(line.fired == ["omen"])
        assert len(results) == 1
        outcomes.append(results.pop())
    assert 10 < sum(outcomes) < 30  # both happen: it is a chance, not a constant


def test_a_lost_draw_uses_up_the_edge():
    omen = {"id": "omen", "when": BELL["when"], "probability": 0.5, "beat": "An omen."}
    for lost in range(100):
        line = Line(omen)
        line.step(to="2031-03-14T21:00", seed=(7, lost))
        if not line.fired:
            break
    for node in range(20):  # the condition still holds: no new edge, so no second draw, whatever the seed
        line.step(by=HOUR, seed=(7, node))
        assert line.fired == []
    assert line.status("omen") == ("dormant", 0)


def test_with_a_cap_of_2_three_true_triggers_fire_the_two_highest_now_and_the_third_next_check():
    defs = [{"id": name, "when": BELL["when"], "priority": priority, "beat": name}
            for name, priority in (("low", 1), ("high", 9), ("mid", 5))]
    line = Line(*defs, cap=2)
    line.step(to="2031-03-14T21:00")
    assert line.fired == ["high", "mid"] and line.deferred == ["low"]
    line.step(by=60_000)
    assert line.fired == ["low"]
    line.step(by=60_000)
    assert line.fired == []


def test_an_effect_naming_an_unknown_exit_marks_the_trigger_failed_and_applies_nothing():
    def dry_run(effects):
        writes = []
        for effect in effects:
            if effect.get("exit") not in {"hall-vault"}:
                return [], f"unknown exit {effect.get('exit')!r}"
            writes.append({"slot": f"exit:{effect['exit']}", "kind": "exit", "subject": effect["exit"]})
        return writes, ""

    line = Line({"id": "quake", "when": BELL["when"], "beat": "The ground shakes.", "effects": [
        {"type": "exit_change", "exit": "hall-vault", "state": "blocked"},
        {"type": "exit_change", "exit": "hall-nowhere", "state": "blocked"}]})
    applied = line.step(to="2031-03-14T21:00", dry_run=dry_run)
    assert line.fired == ["quake"] and applied == []  # the first effect was fine, but none apply
    assert line.records["quake"]["status"] == "failed"
    assert line.records["quake"]["failure"] == "unknown exit 'hall-nowhere'"
    assert line.records["quake"]["fires"] == 0 and line.notes == {}  # no beat either
    line.step(by=HOUR)
    assert line.fired == []  # a failed trigger waits for a person


def test_effects_that_all_pass_are_written_with_the_trigger_and_its_notes():
    trigger = {"id": "quake", "when": BELL["when"], "beat": "The ground shakes.",
               "cue": {"audience": {"place": "hall"}, "text": "Dust falls from the ceiling."},
               "effects": [{"type": "exit_change", "exit": "hall-vault", "state": "blocked"}]}
    line = Line(trigger)
    since, line.now = line.now, ms("2031-03-14T21:00")
    result = triggers.check(line.entries(), Context(FakeWorld(), line.now, since, tz=LISBON), seed=SEED)
    writes = triggers.settle(result, lambda effects: ([{"slot": "exit:hall-vault", "kind": "exit"}], ""), turn=4)
    assert [w["slot"] for w in writes] == ["exit:hall-vault", "trigger:quake", "trigger_note:quake:1:beat",
                                           "trigger_note:quake:1:cue"]
    assert writes[2]["data"]["turn"] == 4 and writes[3]["data"]["audience"] == {"place": "hall"}


CANARY = "CANARY-the-well-is-poisoned"


def test_an_unannounced_triggers_text_never_reaches_any_view_over_20_turns():
    world = FakeWorld(locations={"mara": "hall"})
    line = Line({"id": "secret", "when": flag(), "beat": CANARY, "cue": {"audience": "everyone", "text": CANARY},
                 "effects": [{"type": "variable_change", "name": "alarm", "to": CANARY}]},
                {"id": "public", "when": BELL["when"], "beat": "The bell tolls.",
                 "announce": {"audience": "everyone", "text": "The bell will toll at eight.", "at": "20:00"}},
                world=world)
    seen = []
    for turn in range(1, 21):
        line.step(by=HOUR, turn=turn)
        entries, notes = line.entries(), list(line.notes.values())
        seen += triggers.narrator_lines(entries, notes, now_ms=line.now, tz=LISBON)
        seen += triggers.announcements_for("mara", entries, world=world, now_ms=line.now, tz=LISBON)
        seen += [note.text for note in triggers.cues_for("mara", notes, world=world)]
    text = "\n".join(seen)
    assert "The bell will toll at eight." in text and "The bell tolls." in text  # the views did show things
    assert CANARY not in text and "secret" not in text
    assert triggers.record(*triggers.from_record(line.records["secret"]))["narrator_only"] is True


def test_an_announced_trigger_shows_the_narrator_its_audience_and_its_audience_the_time_left():
    world = FakeWorld(locations={"mara": "hall", "edrin": "cellar"})
    line = Line({"id": "fair", "when": BELL["when"], "beat": "The fair opens.",
                 "announce": {"audience": {"place": "hall"}, "text": "The fair opens tonight.",
                              "at": "14 March 2031 at 20:00"}}, world=world)
    entries = line.entries()
    [narrator] = triggers.narrator_lines(entries, [], now_ms=line.now, tz=LISBON, name_of=lambda key: key.title())
    assert narrator.startswith("Announced to those at Hall: The fair opens tonight.")
    assert narrator.endswith("(Friday 14 March 2031, 20:00 in the evening, in 12 hours)")
    assert triggers.announcements_for("mara", entries, world=world, now_ms=line.now, tz=LISBON)
    assert triggers.announcements_for("edrin", entries, world=world, now_ms=line.now, tz=LISBON) == []


def test_a_character_sees_the_nearest_three_announcements():
    defs = [{"id": f"t{hour}", "when": BELL["when"], "beat": "b",
             "announce": {"audience": ["mara"], "text": f"at {hour}", "at": f"14 March 2031 at {hour}:00"}}
            for hour in (23, 11, 15, 9, 20)]
    line = Line(*defs)
    seen = triggers.announcements_for("mara", line.entries(), world=FakeWorld(), now_ms=line.now, tz=LISBON)
    assert [text.split(" (")[0] for text in seen] == ["at 9", "at 11", "at 15"]


def test_a_beat_stays_pending_until_addressed_or_lapses_after_beat_turns():
    line = Line(BELL, {"id": "gong", "when": BELL["when"], "beat": "A gong sounds."})
    line.step(to="2031-03-14T21:00", turn=2)
    bell, gong = line.notes["trigger_note:bell:1:beat"], line.notes["trigger_note:gong:1:beat"]
    assert bell.status == gong.status == "pending"
    assert triggers.address(bell)["data"]["status"] == "done"
    assert triggers.lapse([gong], turn=2 + triggers.BEAT_TURNS - 1) == []
    [lapsed] = triggers.lapse([gong], turn=2 + triggers.BEAT_TURNS)
    assert lapsed["data"]["status"] == "lapsed"
    with pytest.raises(Refused, match="already done"):
        triggers.address(Note.from_record(triggers.address(bell)["data"]))


def test_after_a_10_day_skip_a_recurring_trigger_fires_once():
    line = Line({"id": "vespers", "when": {"type": "time", "every": "20:00"}, "max_fires": 100, "beat": "Vespers."})
    line.step(by=10 * 24 * HOUR)
    assert line.fired == ["vespers"] and line.status("vespers") == ("fired", 1)
    line.step(to="2031-03-24T19:00")  # 10 days on, 08:00 -> 19:00: no 20:00 passed
    assert line.fired == []
    line.step(to="2031-03-24T20:30")
    assert line.fired == ["vespers"]
    line.step(to="2031-04-03T20:30")  # another long skip is another single firing, not a missed edge
    assert line.fired == ["vespers"] and line.status("vespers") == ("fired", 3)


def test_place_and_item_conditions_read_the_world():
    world = FakeWorld(locations={"mara": "cellar"}, holders={"ring": "box", "box": "chest", "chest": "mara"},
                      places={"ring": "cellar"})
    line = Line({"id": "found", "when": {"all": [{"type": "at", "who": "mara", "place": "vault"},
                                                  {"type": "holds", "who": "mara", "item": "ring"},
                                                  {"type": "item_at", "item": "ring", "place": "vault"}]},
                 "beat": "The vault hums."}, world=world)
    line.step(by=60_000)
    assert line.fired == []
    world.locations["mara"] = "vault"
    world.places["ring"] = "vault"
    line.step(by=60_000)
    assert line.fired == ["found"]  # she holds the ring through a box in a chest


def test_a_trigger_can_wait_for_another_to_fire_and_sees_it_at_the_next_check():
    line = Line(BELL, {"id": "after-bell", "when": {"type": "trigger", "id": "bell", "status": "fired"},
                       "beat": "Silence after the bell."})
    line.step(to="2031-03-14T21:00")
    assert line.fired == ["bell"]
    line.step(by=60_000)
    assert line.fired == ["after-bell"]


def test_a_judged_condition_fires_on_the_judges_true():
    line = Line({"id": "trust", "when": {"type": "judged", "text": "Mara trusts the protagonist"},
                 "beat": "Mara tells the truth."})
    assert triggers.questions(line.entries()) == [("trust", "Mara trusts the protagonist")]
    line.step(by=60_000, judgments={"trust": False})
    assert line.fired == []
    line.step(by=60_000, judgments={"trust": True})
    assert line.fired == ["trust"] and triggers.questions(line.entries()) == []
    assert triggers.judgment("trust", True, turn=3)["slot"] == "judgment:trust"


def test_event_tag_conditions_are_refused_until_character_minds_exist():
    with pytest.raises(Refused, match="event_tag conditions need recorded events with tags"):
        triggers.load_trigger({"id": "t", "when": {"type": "event_tag", "tag": "betrayal"}, "beat": "b"})


def test_a_trigger_is_refused_with_every_reason_and_references_are_checked():
    refs = References(characters={"mara"}, places={"hall"}, items={"ring"}, variables={"alarm"}, triggers={"bell"},
                      event_types={"exit_change"})
    with pytest.raises(Refused) as refused:
        triggers.load_trigger({"id": "t", "when": {"all": [{"type": "at", "who": "ghost", "place": "hall"},
                                                            {"type": "trigger", "id": "nope"},
                                                            {"type": "weather"}]},
                               "effects": [{"type": "explode"}], "probability": 2, "max_fires": 0}, refs=refs)
    reason = str(refused.value)
    for part in ("unknown character 'ghost'", "unknown trigger 'nope'", "unknown condition type 'weather'",
                 "unknown event type 'explode'", "probability is 2", "max_fires is 0"):
        assert part in reason
    # Triggers of the same edit may refer to each other.
    both = triggers.load_triggers([{"id": "a", "when": {"type": "trigger", "id": "b"}, "beat": "a"},
                                   {"id": "b", "when": {"type": "trigger", "id": "a"}, "beat": "b"}], refs=refs)
    assert [t.id for t in both] == ["a", "b"]
    with pytest.raises(Refused, match="used twice"):
        triggers.load_triggers([BELL, BELL])


def test_a_trigger_that_does_nothing_is_refused():
    with pytest.raises(Refused, match="does something"):
        triggers.load_trigger({"id": "t", "when": BELL["when"]})


def test_a_stored_trigger_reads_back_the_same():
    trigger = triggers.load_trigger(BELL, tz=LISBON, now_ms=ms("2031-03-14T08:00"))
    assert trigger.definition["when"]["after"] == ms("2031-03-14T20:00")  # words became an instant
    back, status = triggers.from_record(triggers.record(trigger, Status())["data"])
    assert back == trigger and status == Status()


def test_a_trigger_left_waiting_by_the_cap_stops_waiting_when_its_condition_ends():
    world = FakeWorld(values={("world", "alarm"): True})
    line = Line({"id": "a", "when": flag(), "priority": 2, "beat": "a"}, {"id": "b", "when": flag(), "beat": "b"},
                world=world, cap=1)
    line.step(by=60_000)
    assert line.fired == ["a"] and line.records["b"]["deferred"] is True
    world.values[("world", "alarm")] = False
    line.step(by=60_000)
    assert line.records["b"]["deferred"] is False
    world.values[("world", "alarm")] = True
    line.step(by=60_000)
    assert line.fired == ["b"]  # a new edge, fired as any other


def test_a_stored_trigger_naming_a_festival_reads_back_and_matches_on_the_festival():
    cal = calendar.load_calendar({"festivals": [{"name": "Harvest Fair", "rule": "the last Friday of October"}]})
    fair = triggers.load_trigger({"id": "lanterns", "when": {"type": "time", "every": "20:00", "on": ["Harvest Fair"]},
                                  "max_fires": 10, "beat": "Lanterns rise."}, tz=LISBON, cal=cal)
    back, status = triggers.from_record(triggers.record(fair, Status())["data"])
    on_the_day = Context(FakeWorld(), ms("2031-10-31T20:30"), ms("2031-10-31T19:00"), tz=LISBON, cal=cal)
    the_day_before = Context(FakeWorld(), ms("2031-10-30T20:30"), ms("2031-10-30T19:00"), tz=LISBON, cal=cal)
    assert [f.trigger.id for f in triggers.check([(back, status)], on_the_day, seed=SEED).firings] == ["lanterns"]
    assert triggers.check([(back, status)], the_day_before, seed=SEED).firings == []
    with pytest.raises(Refused, match="cannot read 'Harvest Fair'"):
        triggers.load_trigger({"id": "x", "when": {"type": "time", "every": "20:00", "on": ["Harvest Fair"]},
                               "beat": "b"}, tz=LISBON)  # without the calendar the name is unknown
