"""The long-run harness (seed 004 §C.5): played through the real turn path against the real fake model server."""

import json

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from campaigns import lineage
from campaigns.models import Campaign, Node
from storyteller.diagnostics import long_run
from storyteller.diagnostics.isolation import Check
from storyteller.diagnostics.stubs import DiagnosticStubs
from storyteller.llm.fake_server import FakeModelServer
from tests.campaigns.test_lineage import act

pytestmark = pytest.mark.django_db(transaction=True)

RECOVERED = "recovered_through_memory_independent"


@pytest.fixture
def runs(settings, tmp_path):
    """Keep the runs' files in the test's own folder."""
    settings.DATA_DIR = tmp_path
    return tmp_path / "long_runs"


@pytest.fixture
def stub_server(settings):
    """The fake model server answering with the deterministic stubs of seed 004 §C.4, told the planted fact."""
    with FakeModelServer(stubs=DiagnosticStubs(facts=[long_run.planted_fact()])) as server:
        settings.STORYTELLER_LLM_URL = server.url
        settings.STORYTELLER_LLM_URL_CONFIGURED = True
        settings.STORYTELLER_LLM_API = "ollama"
        yield server


def the_run():
    [path] = long_run.runs_dir().glob("campaign-*.json")
    return json.loads(path.read_text(encoding="utf-8"))


def player_depths(campaign_id):
    campaign = Campaign.objects.get(pk=campaign_id)
    return list(lineage.path_of(campaign).nodes().filter(role=Node.Role.PLAYER).values_list("depth", "text"))


def test_a_stopped_run_resumes_from_its_last_committed_turn_without_playing_a_turn_twice(owner, narrator_server, runs):
    call_command("long_run", turns=8, owner="reader", stop_after=3)
    stopped = the_run()
    assert stopped["status"] == "stopped" and [e["turn"] for e in stopped["timeline"]] == [1, 2, 3]
    call_command("long_run", resume=True, stop_after=2)
    call_command("long_run", resume=True, campaign=stopped["campaign"])
    run = the_run()
    assert run["status"] == "complete" and run["process_starts"] == 3 and run["verdict"] is None
    assert [e["turn"] for e in run["timeline"]] == list(range(1, 9))
    played = player_depths(run["campaign"])
    assert [depth for depth, _ in played] == [1, 3, 5, 7, 9, 11, 13, 15]
    assert [text for _, text in played] == [e["action"] for e in run["timeline"]]
    assert Node.objects.filter(campaign_id=run["campaign"]).count() == 17  # the opening and 8 turns, once each


def test_a_turn_committed_by_a_process_that_died_before_writing_it_down_is_read_back_not_replayed(
        owner, narrator_server, runs):
    call_command("long_run", turns=6, owner="reader", stop_after=4)
    run = the_run()
    # The process died after turn 4's commit, before its entry reached the file.
    run["timeline"] = run["timeline"][:3]
    long_run.report_path(run["campaign"]).write_text(json.dumps(run), encoding="utf-8")
    call_command("long_run", resume=True)
    run = the_run()
    assert [e["turn"] for e in run["timeline"]] == [1, 2, 3, 4, 5, 6]
    assert run["timeline"][3]["seconds"] is None and run["timeline"][3]["node"]
    assert len(player_depths(run["campaign"])) == 6


def test_a_model_server_failure_stops_the_run_clearly_and_resume_finishes_it(owner, narrator_server, runs):
    call_command("long_run", turns=5, owner="reader", stop_after=2)
    narrator_server.fail_mid_stream(after_chunks=1, persistent=True)
    with pytest.raises(CommandError, match="Turn 3 failed: .* keeps its 2 committed turns; .*--resume"):
        call_command("long_run", resume=True)
    run = the_run()
    assert run["status"] == "interrupted" and len(run["timeline"]) == 2
    assert len(player_depths(run["campaign"])) == 2  # the failed turn left nothing behind
    narrator_server.clear_failures()
    call_command("long_run", resume=True)
    assert [e["turn"] for e in the_run()["timeline"]] == [1, 2, 3, 4, 5]


def test_a_campaign_played_outside_the_harness_is_not_resumed(owner, narrator_server, runs):
    call_command("long_run", turns=6, owner="reader", stop_after=2)
    act(Campaign.objects.get(pk=the_run()["campaign"]), "I wander off the script.")
    with pytest.raises(CommandError, match="played outside the harness"):
        call_command("long_run", resume=True)


def test_a_run_that_cannot_start_or_go_on_says_what_to_change_and_creates_nothing(owner, runs):
    with pytest.raises(CommandError, match="No unfinished long run"):
        call_command("long_run", resume=True)
    with pytest.raises(CommandError, match="Campaign 999 has no long run"):
        call_command("long_run", resume=True, campaign=999)
    with pytest.raises(CommandError, match="--turns must be at least 3 with --independent-fact"):
        call_command("long_run", turns=2, independent_fact=True, owner="reader")
    with pytest.raises(CommandError, match="There is no user 'nobody'; leave --owner out"):
        call_command("long_run", turns=5, owner="nobody")
    assert not Campaign.objects.exists() and not runs.exists()


def test_the_verdict_is_the_first_precondition_that_fails_or_is_unknown_then_the_stage():
    holds = {name: True for name in long_run.PRECONDITIONS}
    assert long_run.verdict(holds, "injected") == "recovered_through_memory_independent"
    assert long_run.verdict(holds, "created_but_evicted") == "not_recovered:evicted"
    assert long_run.verdict(holds, "not_created") == "not_recovered:not_created"
    assert long_run.verdict(holds, "ranked_but_not_selected") == "not_recovered:not_injected"
    failing = holds | {"absent_from_summary": False, "absent_from_later_narration": False}
    assert long_run.verdict(failing, "injected") == "precondition_failed:absent_from_summary"
    unknown = holds | {"planted_turn_outside_history": None, "absent_from_state": False}
    assert long_run.verdict(unknown, "injected") == "precondition_unknown:planted_turn_outside_history"


def test_the_chart_draws_kept_and_forgotten_memories_against_capacity():
    def entry(turn, active, forgotten, evicted):
        return {"turn": turn, "bank": {"active": active, "forgotten": forgotten, "evicted": evicted}}

    run = {"settings": {"memory_bank_capacity": 4},
           "timeline": [entry(1, 2, 0, 0), entry(2, 4, 0, 0), entry(3, 4, 2, 2), entry(4, 3, 3, 1)]}
    chart = long_run.chart(run, width=400, height=100)
    assert chart["top"] == 6  # kept plus forgotten passes the capacity
    assert chart["kept"] == "0,100 100.0,66.7 200.0,33.3 300.0,33.3 400.0,50.0"
    assert chart["forgotten"].endswith("300.0,66.7 400.0,50.0")
    assert chart["evictions"] == [{"x": 300.0, "turn": 3, "count": 2}, {"x": 400.0, "turn": 4, "count": 1}]
    assert chart["capacity_y"] == 33.3


def test_the_report_page_is_the_owners_escaped_and_404_for_anyone_else(client, owner, outsider, narrator_server,
                                                                        runs):
    call_command("long_run", turns=4, owner="reader", stop_after=2)
    run = the_run()
    run["timeline"][0]["action"] = "<script>alert(1)</script>"
    long_run.report_path(run["campaign"]).write_text(json.dumps(run), encoding="utf-8")
    url = reverse("long_run_report", args=[run["campaign"]])

    assert client.get(url).status_code == 302  # signed out: to the sign-in page
    client.force_login(outsider)
    assert client.get(url).status_code == 404
    client.force_login(owner)
    page = client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    assert 'id="bank-chart"' in html and "<polyline" in html and 'id="turn-2"' in html
    assert client.post(url).status_code == 405
    assert f'href="{url}"' in client.get(reverse("play", args=[run["campaign"]])).content.decode()


def test_a_campaign_without_a_run_has_no_report_and_no_link_to_one(client, owner, campaign, runs):
    client.force_login(owner)
    url = reverse("long_run_report", args=[campaign.pk])
    assert client.get(url).status_code == 404
    assert url not in client.get(reverse("play", args=[campaign.pk])).content.decode()


def test_a_hundred_turns_against_the_stubs_recover_the_fact_through_memory_alone(client, owner, outsider, runs):
    call_command("long_run", turns=100, independent_fact=True, stubs=True, owner="reader")
    run = the_run()
    assert run["verdict"] == RECOVERED and run["status"] == "complete"
    assert run["first_failures"] == {name: None for name in long_run.TRACKED}
    assert run["preconditions"] == {name: True for name in long_run.PRECONDITIONS}
    assert [entry["turn"] for entry in run["timeline"]] == list(range(1, 102))
    created = run["diagnosis"]["stages"]["created"]
    assert created["source_start"] <= run["fact"]["depth"] <= created["source_end"]
    recall = run["timeline"][-1]
    assert recall["action"] == long_run.RECALL and not recall["plant_in_history"] and recall["fact_memory_used"]
    assert recall["summary_through"] is not None  # the story before the window was compacted, without the fact
    assert run["diagnosis"]["stages"]["ranked"]["replica_matches_stored_selection"]

    url = reverse("long_run_report", args=[run["campaign"]])
    client.force_login(outsider)
    assert client.get(url).status_code == 404
    client.force_login(owner)
    html = client.get(url).content.decode()
    assert f"<strong>{RECOVERED}</strong>" in html
    for stage in long_run.STAGES:
        assert f'id="stage-{stage}" data-passed="yes"' in html
    assert 'id="ranking"' in html and 'id="shown"' in html and 'id="turn-101"' in html
    assert "tavern&#x27;s top shelf" in html  # the summariser's memory text, escaped
    assert reverse("inspector", args=[run["campaign"], run["recall"]["node"]]) in html


def test_a_run_interrupted_half_way_and_resumed_measures_what_an_uninterrupted_run_does(stub_server, owner, runs):
    call_command("long_run", turns=24, independent_fact=True, owner="reader", stop_after=12)
    interrupted = the_run()
    assert interrupted["status"] == "stopped" and interrupted["verdict"] is None
    call_command("long_run", resume=True)
    resumed = long_run.load(interrupted["campaign"])
    assert resumed["verdict"] == RECOVERED and resumed["process_starts"] == 2
    assert [depth for depth, _ in player_depths(resumed["campaign"])] == [2 * turn - 1 for turn in range(1, 26)]

    stub_server.stubs = DiagnosticStubs(facts=[long_run.planted_fact()])  # the narrator starts its script again
    call_command("long_run", turns=24, independent_fact=True, owner="reader")
    straight = long_run.load(interrupted["campaign"] + 1)

    def measured(run):
        keep = ("turn", "depth", "action", "history_floor", "summary_through", "checks", "plant_in_history",
                "fact_memory_used")
        return [{key: entry[key] for key in keep} | {"bank": entry["bank"]["active"]} for entry in run["timeline"]]

    assert measured(resumed) == measured(straight)
    assert resumed["first_failures"] == straight["first_failures"]
    assert resumed["preconditions"] == straight["preconditions"] and straight["verdict"] == RECOVERED
    ranked = [run["diagnosis"]["stages"]["ranked"] for run in (resumed, straight)]
    assert [(r["rank"], r["of"], r["final_score"]) for r in ranked][0] == [(r["rank"], r["of"], r["final_score"])
                                                                          for r in ranked][1]


def test_a_fact_restated_by_the_narrator_and_recorded_in_state_is_caught_at_its_turn_and_never_recovered(
        stub_server, owner, runs):
    call_command("long_run", turns=10, independent_fact=True, owner="reader", stop_after=6)
    # Turn 7 (depth 14, past the plant's block): the narrator brings the sundial up, and the recorder keeps it.
    stub_server.script("The travellers pass the tavern, where Mara's amber sundial still sits on the top shelf.")
    stub_server.script_json({"events": [{"type": "add_fact", "subject": "", "object": "", "narrator_only": False,
                                         "value": "Mara keeps an amber sundial in the tavern."}]})
    call_command("long_run", resume=True, stop_after=1)
    call_command("long_run", resume=True)
    run = the_run()
    assert run["first_failures"] == {"absent_from_state": 7, "absent_from_summary": None,
                                     "absent_from_later_narration": 7}
    assert [e["checks"]["absent_from_later_narration"] for e in run["timeline"][5:8]] == [True, False, True]
    assert not run["timeline"][9]["checks"]["absent_from_state"]  # still in the state three turns on
    assert run["preconditions"]["absent_from_state"] is False
    assert run["preconditions"]["absent_from_later_narration"] is False
    assert run["verdict"].startswith("precondition_failed:") and run["verdict"] != RECOVERED


def test_each_precondition_holds_only_if_it_held_on_every_turn_and_at_recall():
    clean = {name: Check(True, "") for name in ("state_document", "state_snapshots", "later_narration", "summary",
                                               "knowledge", "recent_history", "state_section")}
    never = {name: None for name in long_run.TRACKED}
    assert long_run.preconditions_held(never, clean) == {name: True for name in long_run.PRECONDITIONS}
    # A summary that carried the fact at turn 9 and rotated out by the recall still fails the run.
    assert long_run.preconditions_held(never | {"absent_from_summary": 9}, clean)["absent_from_summary"] is False
    assert long_run.preconditions_held(never, clean | {"state_section": Check(False, "")})["absent_from_state"] is False
    unjudged = {name: check for name, check in clean.items() if name != "knowledge"}
    assert long_run.preconditions_held(never, unjudged)["absent_from_knowledge"] is None


def test_the_harness_player_names_the_fact_only_when_planting_it_and_asking_for_it():
    fact = long_run.planted_fact()
    run = {"turns": 300, "fact": {"text": fact.text, "turn": long_run.PLANT_TURN, "recall": long_run.RECALL}}
    naming = [turn for turn in range(1, 302) if fact.leaks(long_run.action_for(run, turn).text)]
    assert naming == [long_run.PLANT_TURN, 301]
    assert fact.carries(long_run.action_for(run, long_run.PLANT_TURN).text)


def test_past_a_small_capacity_and_top_k_the_chart_shows_the_evictions_and_the_early_memory_survives(
        client, owner, stub_server, runs):
    call_command("long_run", turns=30, independent_fact=True, owner="reader", capacity=4, top_k=3, stop_after=15)
    call_command("long_run", resume=True)  # the run's capacity holds after a resume too
    run = the_run()
    assert run["settings"]["memory_bank_capacity"] == 4
    assert max(entry["bank"]["active"] for entry in run["timeline"]) == 4
    evicting = [entry["turn"] for entry in run["timeline"] if entry["bank"]["evicted"]]
    assert evicting and sum(entry["bank"]["evicted"] for entry in run["timeline"]) == run["timeline"][-1]["bank"][
        "forgotten"]
    assert run["verdict"] == RECOVERED  # coverage-aware eviction keeps the earliest memory
    assert run["diagnosis"]["stages"]["retained"]["memory_bank_capacity"] == 4
    assert run["diagnosis"]["stages"]["ranked"]["top_k_cutoff"] == 3
    assert {len(entry["memories_used"]) for entry in run["timeline"]} <= {0, 1, 2, 3}

    client.force_login(owner)
    html = client.get(reverse("long_run_report", args=[run["campaign"]])).content.decode()
    assert f"<title>turn {evicting[0]}: 1 evicted</title>" in html
    assert f"turns whose post-turn pass evicted ({len(evicting)} in all)" in html
