"""Story time and world rules through the event pipeline (seed 002 digest WP2 scenarios that need the database).

The Lantern Keep with a forge behind a locked door and a tavern off the yard,
its clock starting on Friday 14 March 2031 at 08:00 in Lisbon, Mara's
weekday routine (the forge 09:00–17:00 working, the tavern 17:00–22:00
drinking), a debt variable, a lockpick check and the bell that tolls at
20:00. Turns are committed as the turn pipeline commits them: the story,
then its round of story time (``storytime.advance``), in one transaction.
"""

import copy
import json

import pytest
from django.db import transaction

from campaigns import lineage, story, storytime, worldfile
from campaigns.models import Campaign, StateEvent
from campaigns.state import apply_events, state_at
from campaigns.state.time import calendar, rulebook
from campaigns.state.world import world
from tests.campaigns.test_lineage import node_tokens, reply
from tests.campaigns.test_state import head_node
from tests.campaigns.test_world import document, ev

TZ = "Europe/Lisbon"
START = calendar.parse_instant("2031-03-14T08:00", now_ms=0, tz=TZ)
MINUTE, HOUR = 60_000, 3_600_000

LOCKPICK = {"key": "lockpick", "name": "Pick a lock", "use_text": "a lock in the way", "definition": {
    "dice": "2d6", "bands": [{"label": "fail", "outcome": "the lock holds", "min": 2, "max": 6},
                             {"label": "partial", "outcome": "it gives, slowly", "min": 7, "max": 9},
                             {"label": "success", "outcome": "it clicks open", "min": 10, "max": 12}]}}
BELL = {"id": "bell", "when": {"type": "time", "after": "2031-03-14T20:00"},
        "effects": [{"type": "add_fact", "value": "The bell in the Tower tolled at eight."}],
        "beat": "The bell tolls eight times across the Keep."}


def rules_document(**changes):
    doc = copy.deepcopy(document())
    doc["places"] += [{"name": "Forge", "description": "a smithy"}, {"name": "Tavern", "description": "a tavern"}]
    doc["exits"] += [{"from": "Yard", "to": "Forge", "label": "forge door", "state": "locked", "opener": "iron key",
                      "both_ways": True},
                     {"from": "Yard", "to": "Tavern", "travel_seconds": 40, "both_ways": True}]
    doc["starting_time"] = "2031-03-14T08:00"
    doc["clock"] = {"time_zone": TZ}
    doc["routines"] = [{"who": "Mara", "windows": [
        {"start": "09:00", "end": "17:00", "days": "mon-fri", "place": "Forge", "activity": "working"},
        {"start": "17:00", "end": "22:00", "place": "Tavern", "activity": "drinking"}]}]
    doc["variables"] = [{"name": "debt", "type": "number", "range": [0, 100], "default": 0,
                         "bands": [{"label": "light", "max": 40}, {"label": "crushing", "min": 80}]}]
    doc["dice"] = [LOCKPICK]
    doc["triggers"] = [BELL]
    doc.update(changes)
    return doc


@pytest.fixture
def keep(owner):
    campaign, findings = worldfile.create_campaign(owner, rules_document())
    assert [f for f in findings if f.severity == "error"] == []
    return campaign


def play(campaign, text="look around", answer=None):
    """Commit a turn as turns._commit does: the story, then its round of story time, in one transaction."""
    campaign.refresh_from_db()
    with transaction.atomic():
        node = story.commit_turn(campaign.pk, (campaign.head_branch_id, campaign.head_depth),
                                 story.PlayerAction(mode="do", text=text, tokens=node_tokens("player", "do", text)),
                                 reply(answer or f"reply to {text}"))
        storytime.advance(node)
    campaign.refresh_from_db()
    return node


def now(campaign):
    campaign.refresh_from_db()
    return state_at(lineage.path_of(campaign), campaign)


def record(campaign, *events):
    return apply_events(head_node(campaign), list(events), source="recorder", attempt=1)


def correct(campaign, owner, payload):
    return storytime.correct(campaign, owner, payload)


def skip(campaign, owner, **data):
    return storytime.skip(campaign, owner, data)


# --- the clock --------------------------------------------------------------------------------------------------


def test_a_world_starting_time_starts_the_clock_at_the_opening_and_a_turn_is_a_round_of_30_seconds(keep):
    state = now(keep)
    assert rulebook.now_of(state) == START and state.get("clock").depth == 0
    assert rulebook.clock_of(state).describe() == "Friday 14 March 2031, 08:00 in the morning"
    play(keep)
    assert rulebook.now_of(now(keep)) == START + 30_000
    [elapse] = StateEvent.objects.filter(campaign=keep, payload__type="elapse")
    assert (elapse.source, elapse.status) == ("engine", "applied")
    assert elapse.payload["data"]["log"] == {"type": "elapse", "turn": 1, "round": 0, "from": START,
                                             "to": START + 30_000, "seconds": 30}


def test_without_a_starting_time_the_clock_starts_at_the_campaigns_creation_to_the_minute(owner):
    doc = rules_document()
    del doc["starting_time"]
    campaign, _ = worldfile.create_campaign(owner, doc)
    created = int(campaign.created_at.timestamp() * 1000)
    assert rulebook.now_of(now(campaign)) == created - created % MINUTE


def test_the_recorder_says_how_long_a_turn_took_and_more_than_a_day_is_refused(keep):
    play(keep)
    [elapsed] = record(keep, ev("elapse", data={"seconds": 3600}))
    assert elapsed.status == "applied"
    assert rulebook.now_of(now(keep)) == START + HOUR, "the turn took an hour, not an hour and 30 seconds"
    play(keep)
    [refused] = record(keep, ev("elapse", data={"seconds": 86_401}))
    assert refused.status == "rejected" and "a round lasts at most one day" in refused.reason
    assert rulebook.now_of(now(keep)) == START + HOUR + 30_000


def test_a_round_is_as_long_as_the_journey_it_held(keep, owner):
    correct(keep, owner, ev("exit_change", "Corridor", "iron door", data={"state": "open"}))
    play(keep, "go to the vault")
    events = record(keep, ev("move", "Edrin", "Vault"))
    assert [(e.source, e.payload["type"], e.status) for e in events] == [
        ("recorder", "move", "applied"), ("recorder", "observe", "applied"), ("engine", "elapse", "applied")]
    state = now(keep)
    assert rulebook.now_of(state) == START + 50_000, "Hall → Corridor → Vault: 30 + 20 s"
    assert state.get("clock").data["notice"] == ("The round was lengthened from 30 seconds to 50 seconds: the "
                                                 "journey takes that long.")


def test_skips_need_a_reason_and_stay_within_max_skip_days(keep, owner):
    assert skip(keep, owner, reason="they rest", by_minutes=90).status == "applied"
    assert rulebook.now_of(now(keep)) == START + 90 * MINUTE
    [logged] = StateEvent.objects.filter(campaign=keep, payload__type="skip")
    assert logged.payload["data"]["log"]["reason"] == "they rest" and logged.source == "correction"
    no_reason = skip(keep, owner, reason="", by_minutes=5)
    assert no_reason.status == "rejected" and "a skip needs a reason" in no_reason.reason
    too_long = skip(keep, owner, reason="a long sleep", by_minutes=31 * 24 * 60)
    assert too_long.status == "rejected" and "clock.maxSkipDays (30 days)" in too_long.reason
    skip(keep, owner, reason="to the evening", until_time="22:00")
    skip(keep, owner, reason="they sleep", until_time="07:00", days_later=1)
    assert calendar.local(rulebook.now_of(now(keep)), TZ).isoformat()[:16] == "2031-03-15T07:00"


def test_a_real_clock_refuses_skips_never_goes_back_and_catches_up_at_a_turns_start(owner):
    doc = rules_document(clock={"time_zone": TZ, "mode": "real"})
    del doc["starting_time"]
    campaign, _ = worldfile.create_campaign(owner, doc)
    refused = skip(campaign, owner, reason="rest", by_minutes=10)
    assert refused.status == "rejected" and "real mode" in refused.reason
    before = rulebook.now_of(now(campaign))
    play(campaign)
    after = rulebook.now_of(now(campaign))
    assert after >= before, "a real clock never goes back"
    types = [e.payload["type"] for e in StateEvent.objects.filter(campaign=campaign, source="engine")]
    assert "elapse" not in types and ("resync" in types or "real" in types)
    switched = correct(campaign, owner, ev("clock_mode", data={"mode": "simulated"}))
    assert switched.status == "applied" and rulebook.clock_of(now(campaign)).mode == "simulated"
    skip(campaign, owner, reason="they sleep", by_minutes=60)
    back = correct(campaign, owner, ev("clock_mode", data={"mode": "real"}))
    assert back.status == "rejected" and "can never follow the wall clock again" in back.reason


def test_undo_shows_the_earlier_time_and_a_branch_keeps_its_own_clock(keep, owner):
    play(keep)
    play(keep)
    skip(keep, owner, reason="they wait", by_minutes=60)
    main = lineage.path_of(keep).head_branch_id
    assert rulebook.now_of(now(keep)) == START + 60_000 + HOUR
    story.undo(keep)
    assert rulebook.now_of(now(keep)) == START + 30_000, "undo: the time after the first turn"
    play(keep, "do something else")
    side = now(keep)
    assert rulebook.now_of(side) == START + 60_000
    story.switch_branch(keep, keep.branches.get(pk=main))
    assert rulebook.now_of(now(keep)) == START + 60_000 + HOUR, "the first line keeps its skip"


# --- agendas ----------------------------------------------------------------------------------------------------


def test_a_skip_moves_mara_by_her_routine_ignoring_the_locked_forge_door_with_no_model(keep, owner):
    correct(keep, owner, ev("move", "Edrin", "Yard"))
    skip(keep, owner, reason="a day's work", until_time="16:00")
    state = now(keep)
    assert state.location_of("mara") == "forge", "through a locked door: a routine ignores exits"
    assert state.get("condition:mara").data["activity"] == "working"
    assert state.get("agenda_cursor:mara").value == "0@2031-03-14"
    [caught] = StateEvent.objects.filter(campaign=keep, payload__type="catch_up")
    assert caught.source == "engine" and caught.payload["data"]["moves"][0]["place"] == "forge"
    assert state.get("catch_up").data["lines"] == ["Mara went to Forge (working)"]


def test_someone_with_the_protagonist_stays_and_the_narrator_hears_where_they_should_be(keep, owner):
    skip(keep, owner, reason="they talk", until_time="10:00")
    state = now(keep)
    assert state.location_of("mara") == "hall", "Mara is with Edrin"
    assert state.get("catch_up").data["lines"] == ["Mara should be at Forge (working)"]
    assert state.get("agenda_cursor:mara") is None, "she follows her routine once they part"


def test_routine_less_characters_off_stage_during_a_skip_are_queued_three_at_a_time(owner):
    doc = rules_document()
    doc["characters"] += [{"name": f"Guard {n}", "place": "Tower"} for n in range(1, 4)]
    doc["exits"].append({"from": "Tower", "to": "Yard", "label": "stair"})
    campaign, _ = worldfile.create_campaign(owner, doc)
    skip(campaign, owner, reason="the night passes", by_minutes=600)
    [caught] = StateEvent.objects.filter(campaign=campaign, payload__type="catch_up")
    assert caught.payload["data"]["queued"] == ["aldric", "guard-1", "guard-2"]
    assert caught.payload["data"]["waiting"] == ["guard-3"]
    assert {r.subject for r in now(campaign).of_kind("consolidation")} == {"aldric", "guard-1", "guard-2"}


def test_the_world_authors_queue_does_not_take_the_places_of_routine_less_characters(owner):
    doc = rules_document()
    doc["characters"] += [{"name": f"Guard {n}", "place": "Tower"} for n in range(1, 4)]
    doc["exits"].append({"from": "Tower", "to": "Yard", "label": "stair"})
    campaign, _ = worldfile.create_campaign(owner, doc)
    for n in range(1, 4):  # three things the world author created, waiting for their passages
        made = correct(campaign, owner, ev("consolidation", f"Guard {n}", value="created", data={"turn": 1}))
        assert made.status == "applied", made.reason
    skip(campaign, owner, reason="the night passes", by_minutes=600)
    [caught] = StateEvent.objects.filter(campaign=campaign, payload__type="catch_up")
    assert caught.payload["data"]["queued"] == ["aldric"], "the guards already wait for the world author"
    queue = {r.subject: r.data for r in now(campaign).of_kind("consolidation")}
    assert queue["guard-1"] == {"reason": "created", "turn": 1}, "the author's record is kept"
    skip(campaign, owner, reason="another night", by_minutes=600)
    assert {r.subject for r in now(campaign).of_kind("consolidation")} == {"aldric", "guard-1", "guard-2", "guard-3"}


def test_only_the_recorder_or_a_person_marks_an_engagement_kept(keep, owner):
    made = correct(keep, owner, ev("engagement", data={"id": "supper", "who": ["Mara", "Edrin"],
                                                       "at": "2031-03-14T19:00", "place": "Tavern",
                                                       "what": "supper at the tavern"}))
    assert made.status == "applied", made.reason
    skip(keep, owner, reason="the day passes", until_time="19:20")
    [pending] = rulebook.engagements_of(now(keep))
    assert pending.status == "pending" and pending.overdue(rulebook.now_of(now(keep)))
    engine = apply_events(head_node(keep), [ev("engagement_edit", data={"id": "supper", "status": "kept"})],
                          source="engine")
    assert engine[0].status == "rejected" and "code (engine) never decides" in engine[0].reason
    play(keep)
    record(keep, ev("engagement_edit", data={"id": "supper", "status": "kept"}))
    assert rulebook.engagements_of(now(keep))[0].status == "kept"


# --- variables --------------------------------------------------------------------------------------------------


def test_variable_changes_are_checked_one_by_one_and_a_default_is_never_stored(keep):
    play(keep)
    results = record(keep, ev("variable_change", "Mara", "debt", data={"to": "120"}),
                     ev("variable_change", "Mara", "debt", data={"to": "20"}),
                     ev("variable_change", "Mara", "debt", data={"by": 150}),
                     ev("variable_change", "Mara", "fame", data={"to": "3"}),
                     ev("variable_change", "iron key", "debt", data={"to": "3"}))
    assert [r.status for r in results] == ["rejected", "applied", "applied", "rejected", "rejected"]
    assert "120 is out of range 0–100 for debt" in results[0].reason
    assert results[2].payload["data"]["note"] == "clamped to 100 (the range is 0–100)"
    assert "unknown variable 'fame'" in results[3].reason and "'iron-key' is an item" in results[4].reason
    assert rulebook.variable_value(now(keep), "mara", "debt") == 100
    play(keep)
    [back] = record(keep, ev("variable_change", "Mara", "debt", data={"to": "0"}))
    assert back.status == "applied", back.reason
    assert now(keep).get("var:mara:debt") is None, "back at its default, nothing is stored"


def test_a_sixty_first_variable_is_refused(owner):
    doc = rules_document(variables=[{"name": f"v{n}", "type": "flag"} for n in range(60)])
    campaign, _ = worldfile.create_campaign(owner, doc)
    refused = correct(campaign, owner, ev("variable_define", data={"definition": {"name": "one_more",
                                                                                  "type": "flag"}}))
    assert refused.status == "rejected" and "at most 60 variables" in refused.reason


# --- dice -------------------------------------------------------------------------------------------------------


def test_a_roll_logs_its_dice_undo_removes_it_and_a_retry_draws_the_same(keep):
    play(keep, "pick the lock")
    [rolled] = record(keep, ev("roll", "Edrin", data={"check": "lockpick", "reason": "the iron door"}))
    assert rolled.status == "applied", rolled.reason
    result = rolled.payload["data"]["result"]
    assert len(result["dice"]) == 2 and result["total"] == sum(result["dice"]) and result["band"] in (
        "fail", "partial", "success")
    assert result["initiator"] == "agent" and result["turn"] == 1 and result["index"] == 1
    assert [r.data["dice"] for r in rulebook.rolls_of(now(keep))] == [result["dice"]]
    keep.refresh_from_db()
    with transaction.atomic():
        node = story.commit_retry(keep.pk, (keep.head_branch_id, keep.head_depth), reply("another telling"))
        storytime.advance(node)
    assert rulebook.rolls_of(now(keep)) == [], "the retried reply's roll is not on the new line"
    [again] = record(keep, ev("roll", "Edrin", data={"check": "lockpick", "reason": "the iron door"}))
    assert again.payload["data"]["result"]["dice"] == result["dice"], "a retry does not roll again"
    story.undo(keep)
    assert rulebook.rolls_of(now(keep)) == [], "undo removes it from the line"


def test_a_check_with_a_gap_is_refused_and_bad_notation_named(keep, owner):
    gap = {name: value for name, value in copy.deepcopy(LOCKPICK).items() if name != "key"}
    gap["definition"]["bands"] = [{"label": "fail", "outcome": "no", "min": 2, "max": 6},
                                  {"label": "win", "outcome": "yes", "min": 8, "max": 12}]
    refused = correct(keep, owner, ev("dice_check_define", "gappy", data=gap))
    assert refused.status == "rejected" and "7 falls in no band" in refused.reason
    notation = correct(keep, owner, ev("roll", data={"expression": "2d", "reason": "test"}))
    assert notation.status == "rejected" and "invalid dice notation '2d'" in notation.reason


# --- triggers ---------------------------------------------------------------------------------------------------


def test_the_bell_stays_dormant_then_fires_once_when_a_skip_passes_eight(keep, owner):
    skip(keep, owner, reason="the day passes", until_time="19:00")
    assert now(keep).get("trigger:bell").value == "dormant"
    skip(keep, owner, reason="the evening", until_time="21:00")
    state = now(keep)
    assert state.get("trigger:bell").value == "fired" and state.get("trigger:bell").data["fires"] == 1
    assert state.find_fact("The bell in the Tower tolled at eight.") is not None
    [checked] = [e for e in StateEvent.objects.filter(campaign=keep, payload__type="trigger_check")
                 if e.payload["data"]["report"]["fired"]]
    assert checked.source == "engine" and checked.payload["data"]["report"]["fired"] == ["bell"]
    assert [n.status for n in rulebook.notes_of(state)] == ["pending"]
    skip(keep, owner, reason="later", by_minutes=60)
    assert now(keep).get("trigger:bell").data["fires"] == 1, "it does not fire again while the condition holds"


def test_a_failing_effect_marks_the_trigger_failed_and_applies_nothing(owner):
    broken = {"id": "collapse", "when": {"type": "time", "after": "2031-03-14T09:00"},
              "effects": [{"type": "add_fact", "value": "Dust fills the Hall."},
                          {"type": "exit_change", "subject": "Hall", "object": "Moon", "data": {"state": "blocked"}}]}
    campaign, _ = worldfile.create_campaign(owner, rules_document(triggers=[broken]))
    skip(campaign, owner, reason="an hour", by_minutes=90)
    state = now(campaign)
    record_ = state.get("trigger:collapse")
    assert record_.value == "failed" and "effect 2 (exit_change)" in record_.data["failure"]
    assert "'Moon' is not a known place" in record_.data["failure"]
    assert state.find_fact("Dust fills the Hall.") is None, "no effect applies"


def test_beats_lapse_after_beat_turns_unless_addressed(keep, owner):
    skip(keep, owner, reason="to the evening", until_time="20:30")
    for _ in range(3):
        play(keep)
    assert [n.status for n in rulebook.notes_of(now(keep))] == ["lapsed"]


def test_the_recorder_addresses_a_pending_beat(keep, owner):
    skip(keep, owner, reason="to the evening", until_time="20:30")
    play(keep)
    [addressed] = record(keep, ev("beat_addressed", "bell"))
    assert addressed.status == "applied"
    assert [n.status for n in rulebook.notes_of(now(keep))] == ["done"]


def test_a_judged_condition_fires_once_the_judge_decides_it(owner):
    judged = {"id": "confession", "when": {"type": "judged", "text": "Mara has admitted what is in the vault"},
              "beat": "Mara's secret is out."}
    campaign, _ = worldfile.create_campaign(owner, rules_document(triggers=[judged]))
    node = play(campaign)
    apply_events(node, [ev("judgment", "confession", data={"holds": True})], source="judge")
    assert now(campaign).get("trigger:confession").value == "fired"


def test_a_world_trigger_names_characters_and_places_by_name_and_unknown_ones_are_refused(owner):
    where = {"id": "arrival", "when": {"type": "at", "who": "Aldric", "place": "Hall"}, "beat": "Aldric is back."}
    campaign, _ = worldfile.create_campaign(owner, rules_document(triggers=[where]))
    assert now(campaign).get("trigger:arrival").data["definition"]["when"] == {"type": "at", "who": "aldric",
                                                                               "place": "hall"}
    bad = rules_document(triggers=[{"id": "ghost", "when": {"type": "at", "who": "Ghost", "place": "Hall"},
                                    "beat": "boo"}])
    with pytest.raises(worldfile.WorldRefused) as refused:
        worldfile.create_campaign(owner, bad)
    assert "unknown character 'Ghost'" in str(refused.value)
    assert Campaign.objects.filter(title="Lantern Keep").count() == 1, "nothing was stored"


def test_a_recurring_trigger_fires_once_after_a_ten_day_skip(owner):
    nightly = {"id": "curfew", "when": {"type": "time", "every": "22:00"}, "max_fires": 50,
               "beat": "The curfew horn sounds."}
    campaign, _ = worldfile.create_campaign(owner, rules_document(triggers=[nightly]))
    skip(campaign, owner, reason="ten days of rain", by_minutes=10 * 24 * 60)
    assert now(campaign).get("trigger:curfew").data["fires"] == 1, "ten evenings passed; it fires once"
    skip(campaign, owner, reason="the next night", until_time="23:00")
    assert now(campaign).get("trigger:curfew").data["fires"] == 2


def test_a_branch_keeps_its_own_rolls_and_trigger_firings(keep, owner):
    play(keep)
    main = lineage.path_of(keep).head_branch_id
    correct(keep, owner, ev("roll", "Edrin", data={"expression": "1d20", "reason": "luck"}))
    skip(keep, owner, reason="to the night", until_time="21:00")
    assert now(keep).get("trigger:bell").value == "fired" and len(rulebook.rolls_of(now(keep))) == 1
    story.undo(keep)
    play(keep, "another way")
    side = now(keep)
    assert side.get("trigger:bell").value == "dormant" and rulebook.rolls_of(side) == []
    assert side.find_fact("The bell in the Tower tolled at eight.") is None
    story.switch_branch(keep, keep.branches.get(pk=main))
    assert now(keep).get("trigger:bell").value == "fired" and len(rulebook.rolls_of(now(keep))) == 1


def test_a_campaign_bundle_keeps_its_clock_settings_and_its_story_time(keep, owner):
    from storyteller import bundle

    play(keep)
    skip(keep, owner, reason="they wait", by_minutes=60)
    restored = bundle.import_bundle(owner, json.dumps(bundle.export_campaign(keep)).encode())
    assert (restored.time_zone, restored.clock_mode) == (TZ, "simulated")
    assert rulebook.now_of(now(restored)) == rulebook.now_of(now(keep)) == START + 30_000 + HOUR
    assert set(StateEvent.objects.filter(campaign=restored).values_list("source", flat=True)) >= {"engine"}


def test_a_trigger_nesting_conditions_too_deep_is_refused_with_what_to_change(keep, owner):
    deep = {"type": "at", "who": "Mara", "place": "Hall"}
    for _ in range(6):
        deep = {"not": deep}
    refused = correct(keep, owner, ev("trigger_define", data={"triggers": {"id": "knot", "when": deep, "beat": "x"}}))
    assert refused.status == "rejected" and "nest at most 4 all/any/not deep; write it flatter" in refused.reason
