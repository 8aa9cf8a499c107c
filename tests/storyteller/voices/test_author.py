"""The world author (seed 002 扩展世界; WP4 scenario 5) against the real fake model server.

The Lantern Keep, with Tobin the harbour master in the Yard and Mara also
called "the steward". The author's answers are scripted JSON; every check
runs through the typed events and world_lint on a copy of the state, and
only a kept proposal is written.
"""

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from campaigns import lineage, worldfile
from campaigns.models import Campaign, Node, StateEvent
from campaigns.state import state_at
from campaigns.state.world import authoring, lint, world
from campaigns.state.world.authoring import Request
from storyteller.voices import author
from tests.campaigns.test_lineage import act
from tests.campaigns.test_world import document
from tests.conftest import as_author

pytestmark = pytest.mark.django_db(transaction=True)


def lantern():
    doc = document()
    doc["characters"].append({"name": "Tobin", "description": "the harbour master, keeper of the tide ledger",
                              "place": "Yard"})
    next(c for c in doc["characters"] if c["name"] == "Mara")["aliases"] = ["the steward"]
    return doc


@pytest.fixture
async def keep(owner):
    campaign, _ = await sync_to_async(worldfile.create_campaign)(owner, lantern())
    return campaign


def edit(decision="create", characters=(), places=(), items=(), reuse="", reason=""):
    return {"decision": decision, "reuse": reuse, "reason": reason, "characters": list(characters),
            "places": list(places), "items": list(items)}


def person(name, place="Hall", description="a traveller", aliases=(), relationships=()):
    return {"name": name, "aliases": list(aliases), "description": description, "place": place,
            "relationships": list(relationships)}


def place(name, exits=(), description="a new place", features=()):
    return {"name": name, "aliases": [], "description": description, "features": list(features),
            "exits": list(exits)}


def thing(name, holder):
    return {"name": name, "aliases": [], "description": "", "holder": holder}


def chats(server):
    return [r for r in server.requests if r.path == "/api/chat"]


async def head_state(campaign):
    def read():
        fresh = Campaign.objects.get(pk=campaign.pk)
        return state_at(lineage.path_of(fresh), fresh)
    return await database_sync_to_async(read)()


async def commit_at_head(campaign, proposal):
    def write():
        fresh = Campaign.objects.get(pk=campaign.pk)
        node = Node.objects.get(campaign=fresh, branch_id=fresh.head_branch_id, depth=fresh.head_depth)
        return author.commit(node, proposal)
    return await database_sync_to_async(write)()


async def test_introducing_the_harbour_master_when_one_exists_is_refused_naming_him_without_asking_the_model(
        keep, narrator_server):
    proposal = await author.propose(keep.pk, Request("introduction", "the harbour master"))
    assert proposal.status == "refused"
    assert proposal.reason == ("Tobin already serves as 'the harbour master' (Tobin: the harbour master, keeper of "
                               "the tide ledger); reuse Tobin instead of creating someone or something new")
    assert chats(narrator_server) == [], "the model is not asked when an existing character serves"


async def test_a_request_below_the_threshold_or_with_the_author_off_is_refused_with_the_reason(keep, narrator_server):
    refused = await author.propose(keep.pk, Request("atmosphere", "gulls crying"))
    assert refused.status == "refused" and "atmosphere, passers-by, crowds" in refused.reason
    await Campaign.objects.filter(pk=keep.pk).aupdate(authoring_enabled=False)
    off = await author.propose(keep.pk, Request("arrival", "a courier from the capital"))
    assert off.reason.startswith("the world author is off in this campaign (authoring_enabled)")
    assert chats(narrator_server) == []


async def test_a_new_character_is_checked_placed_related_and_queued_and_written_only_when_committed(
        keep, narrator_server):
    narrator_server.script_json(edit(characters=[person(
        "Ilsa", description="a courier from the capital", relationships=[
            {"to": "Mara", "label": "cousin", "summary": "owes her a letter"}])]))
    proposal = await author.propose(keep.pk, Request("arrival", "a courier from the capital"))
    assert proposal.status == "created", proposal.reason
    assert proposal.created == ["ilsa"] and proposal.turn == 1
    assert proposal.state.location_of("ilsa") == "hall", "the rest of the turn goes on from the edited copy"
    [request] = chats(narrator_server)
    prompt = request.body["messages"][-1]["content"]
    assert "Request (arrival): a courier from the capital" in prompt and "- Tobin — character —" in prompt
    assert (await head_state(keep)).entity("ilsa") is None, "nothing is written before the commit"

    stored = await commit_at_head(keep, proposal)
    assert {event.status for event in stored} == {StateEvent.Status.APPLIED}
    assert {event.source for event in stored} == {"world"}
    now = await head_state(keep)
    assert now.location_of("ilsa") == "hall"
    assert now.get("relationship:ilsa:mara").data["label"] == "cousin"
    assert now.get("relationship:mara:ilsa").data["label"] == world.ACQUAINTANCE, "met in the hall"
    assert [q.key for q in authoring.queue(now)] == ["ilsa"] and authoring.created_in(now, 1) == 1
    assert not [f for f in lint.lint(now) if f.severity == "error"]


async def test_a_third_creation_in_one_turn_is_refused(keep, narrator_server):
    narrator_server.script_json(edit(characters=[person("Ilsa")], items=[thing("sealed letter", "Ilsa")]))
    first = await author.propose(keep.pk, Request("arrival", "a courier with a letter"))
    assert first.status == "created" and len(first.created) == 2
    await commit_at_head(keep, first)
    third = await author.propose(keep.pk, Request("arrival", "a second courier"))
    assert third.status == "refused"
    assert third.reason == ("the world author has created 2 of at most 2 things this turn (authoring_per_turn); "
                            "use what exists until the next turn")
    assert len(chats(narrator_server)) == 1

    narrator_server.script_json(edit(characters=[person("Ivo"), person("Jun")], items=[thing("lamp", "Hall")]))
    state = await head_state(keep)
    limits = author.limits_of(await Campaign.objects.aget(pk=keep.pk))
    narrator = await author.llm.anarrator_for(None)
    fresh = await author.ask(narrator, state, Request("arrival", "three strangers"), limits=limits, turn=2)
    assert fresh.status == "refused"
    assert fresh.reason == ("the world author may create at most 2 things a turn (authoring_per_turn); 0 made "
                            "already, and this edit makes 3")


async def test_a_name_or_alias_that_is_already_someones_is_refused(keep, narrator_server):
    narrator_server.script_json(edit(characters=[person("Bryn", aliases=["the steward"])]))
    proposal = await author.propose(keep.pk, Request("arrival", "a new cook"))
    assert proposal.status == "refused"
    assert proposal.reason == ("characters[1]: 'the steward' is already Mara (a character); reuse Mara or choose "
                               "another name")


async def test_an_unconnected_new_place_is_a_lint_error_and_the_edit_cannot_finish(keep, narrator_server):
    narrator_server.script_json(edit(places=[place("Boathouse")]))
    proposal = await author.propose(keep.pk, Request("scene_change", "the boathouse below the cliff"))
    assert proposal.status == "refused"
    assert proposal.reason == "world_lint: Boathouse is joined to no other place: it cannot be entered or left"
    assert proposal.events == []
    assert (await head_state(keep)).entity("boathouse") is None


async def test_a_new_character_with_no_place_or_an_exit_to_nowhere_is_refused_with_every_reason(keep, narrator_server):
    narrator_server.script_json(edit(characters=[person("Ilsa", place="")],
                                     places=[place("Boathouse", exits=[{"to": "Atlantis", "label": "",
                                                                        "travel_seconds": 0, "both_ways": True}])]))
    proposal = await author.propose(keep.pk, Request("arrival", "a courier by boat"))
    assert proposal.status == "refused"
    assert "places[1].exits[1]: no exit 'Atlantis' leaves Boathouse, and 'Atlantis' is not a known place" \
           in proposal.reason
    assert "world_lint: Ilsa has no place" in proposal.reason


async def test_the_author_may_refuse_or_reuse_and_that_is_a_normal_answer(keep, narrator_server):
    narrator_server.script_json(edit("refuse", reason="a crowd needs no names"),
                                edit("reuse", reuse="Aldric", reason="the hunter knows the woods"))
    refused = await author.propose(keep.pk, Request("arrival", "the crowd at the gate"))
    assert (refused.status, refused.reason) == ("refused", "the world author declined: a crowd needs no names")
    reused = await author.propose(keep.pk, Request("introduction", "a guide through the woods"))
    assert (reused.status, reused.reuse) == ("reused", "Aldric")


async def test_a_model_that_fails_leaves_the_world_as_it_was(keep, narrator_server):
    narrator_server.fail_request("/api/chat", 500, "model runner crashed")
    proposal = await author.propose(keep.pk, Request("arrival", "a courier"))
    assert proposal.status == "failed" and proposal.events == []


async def test_the_authors_model_call_holds_nobody_elses_database_work(keep, narrator_server):
    narrator_server.stall(1.5, path="/api/chat")
    call = asyncio.ensure_future(author.propose(keep.pk, Request("arrival", "a courier")))
    deadline = time.perf_counter() + 5
    while not chats(narrator_server):
        assert time.perf_counter() < deadline
        await asyncio.sleep(0.01)
    started = time.perf_counter()
    assert await database_sync_to_async(Campaign.objects.count)() == 1
    assert time.perf_counter() - started < 0.5, "the database thread answers while the author waits for the model"
    assert not call.done()
    await call


# --- consolidation ------------------------------------------------------------------------------------------------


async def _boathouse_and_ilsa(keep, server):
    server.script_json(edit(characters=[person("Ilsa", place="Boathouse", relationships=[
        {"to": "Aldric", "label": "rival", "summary": "cheated him at dice"}])],
        places=[place("Boathouse", exits=[{"to": "Yard", "label": "", "travel_seconds": 40, "both_ways": True}])]))
    proposal = await author.propose(keep.pk, Request("scene_change", "a boathouse where a smuggler waits"))
    assert proposal.status == "created", proposal.reason
    assert "Ilsa → Aldric has no relationship back" in " ".join(proposal.findings)
    await commit_at_head(keep, proposal)


async def play_turns(campaign, count):
    def play():
        fresh = Campaign.objects.get(pk=campaign.pk)
        for n in range(count):
            act(fresh, f"wait {n}")
        return Node.objects.get(campaign=fresh, branch_id=fresh.head_branch_id, depth=fresh.head_depth)
    return await database_sync_to_async(play)()


async def test_consolidation_runs_after_four_turns_completes_exits_and_relationships_and_empties_the_queue(
        keep, narrator_server):
    await _boathouse_and_ilsa(keep, narrator_server)
    early = await play_turns(keep, 3)
    assert (await author.consolidate(keep.pk, early.pk)).status == "not due"
    node = await play_turns(keep, 2)  # turn 5: the things made in turn 1 have waited four turns
    narrator_server.script_json({"exits": [{"from": "Boathouse", "to": "Hall", "label": "sea stair",
                                            "both_ways": True}],
                                 "relationships": [{"from": "Aldric", "to": "Ilsa", "label": "rival",
                                                    "summary": "wants his money back"}]})
    done = await author.consolidate(keep.pk, node.pk)
    assert done.status == "applied", done.reason
    prompt = chats(narrator_server)[-1].body["messages"][-1]["content"]
    assert "- Ilsa (character, added in turn 1)" in prompt and "missing: Ilsa → Aldric has no relationship back" \
           in prompt
    now = await head_state(keep)
    assert authoring.queue(now) == []
    assert now.get("relationship:aldric:ilsa").value == "wants his money back"
    assert world.route(now, "boathouse", "hall") is not None
    assert not [f for f in lint.lint(now) if "Ilsa" in f.text]


async def test_consolidation_cannot_create_and_keeps_its_queue_on_any_failure(keep, narrator_server):
    await _boathouse_and_ilsa(keep, narrator_server)
    node = await play_turns(keep, 5)
    narrator_server.script_json({"exits": [], "relationships": [
        {"from": "Ghost", "to": "Ilsa", "label": "", "summary": "haunts her"}]})
    created = await author.consolidate(keep.pk, node.pk)
    assert created.status == "failed"
    assert "relationships[1]: 'Ghost' does not exist, and consolidation creates nothing" in created.reason
    narrator_server.fail_request("/api/chat", 500, "model runner crashed")
    crashed = await author.consolidate(keep.pk, node.pk)
    assert crashed.status == "failed" and crashed.reason.endswith("The queue is kept for the next try.")
    now = await head_state(keep)
    assert [q.key for q in authoring.queue(now)] == ["boathouse", "ilsa"]
    assert now.get("relationship:aldric:ilsa") is None


async def test_consolidation_is_due_when_enough_new_things_wait(keep, narrator_server):
    await Campaign.objects.filter(pk=keep.pk).aupdate(authoring_consolidate_after=2)
    await _boathouse_and_ilsa(keep, narrator_server)
    node = await play_turns(keep, 1)
    narrator_server.script_json({"exits": [], "relationships": []})
    assert (await author.consolidate(keep.pk, node.pk)).status == "applied"
    assert authoring.queue(await head_state(keep)) == []


async def test_the_world_panel_shows_what_waits_for_the_author(keep, narrator_server, client, owner):
    await sync_to_async(as_author)(keep)
    from django.urls import reverse

    await _boathouse_and_ilsa(keep, narrator_server)
    await sync_to_async(client.force_login)(owner)
    panel = (await sync_to_async(client.get)(reverse("world_panel", args=[keep.pk]),
                                             HTTP_HX_REQUEST="true")).content.decode()
    assert 'id="world-queue"' in panel and "Waiting for the world author: 2" in panel
    assert "Ilsa <span class=\"muted\">— created, turn 1</span>" in panel


# --- consolidation as a post-turn step ------------------------------------------------------------------------------


async def play_through(campaign, count):
    """Play ``count`` turns through the pipeline, each with its post-turn work done; return the last reply's id."""
    from storyteller import turns
    from storyteller.context import Action

    async def relay(_):
        pass

    result = None
    for n in range(count):
        result = await turns.play_turn(campaign.pk, Action(mode="do", text=f"wait {n}"), relay)
        await result.post_turn
    return result.node_id


async def test_consolidation_runs_as_a_post_turn_step_after_four_turns_of_play(keep, narrator_server):
    from campaigns.models import ConsolidationRun

    await _boathouse_and_ilsa(keep, narrator_server)
    early = await play_through(keep, 4)
    assert (await ConsolidationRun.objects.aget(node_id=early)).status == "not_due"
    narrator_server.script_json({"events": []}, {"exits": [], "relationships": [
        {"from": "Aldric", "to": "Ilsa", "label": "rival", "summary": "wants his money back"}]})
    node = await play_through(keep, 1)  # turn 5: what was made in turn 1 has waited four turns
    run = await ConsolidationRun.objects.aget(node_id=node)
    assert (run.status, run.error) == ("applied", "")
    now = await head_state(keep)
    assert authoring.queue(now) == []
    assert now.get("relationship:aldric:ilsa").value == "wants his money back"


async def test_with_nothing_the_author_made_the_step_records_that_nothing_waits(keep, narrator_server):
    from campaigns.models import ConsolidationRun

    node = await play_through(keep, 1)
    run = await ConsolidationRun.objects.aget(node_id=node)
    assert (run.status, run.note) == ("not_due", "nothing the author created waits")


async def test_a_failed_consolidation_step_keeps_the_queue_and_says_why_on_the_play_page(keep, narrator_server, client,
                                                                                         owner):
    await sync_to_async(as_author)(keep)
    from django.urls import reverse

    from campaigns.models import ConsolidationRun

    await _boathouse_and_ilsa(keep, narrator_server)
    await play_through(keep, 4)
    narrator_server.script_json({"events": []}, "not JSON {", "not JSON {")  # the author's answer, asked once more
    node = await play_through(keep, 1)
    run = await ConsolidationRun.objects.aget(node_id=node)
    assert run.status == "failed" and "not JSON" in run.error and run.error.endswith("The queue is kept for the next try.")
    assert [q.key for q in authoring.queue(await head_state(keep))] == ["boathouse", "ilsa"]
    await sync_to_async(client.force_login)(owner)
    page = (await sync_to_async(client.get)(reverse("worker_status", args=[keep.pk]), HTTP_HX_REQUEST="true")
            ).content.decode()
    assert 'data-worker="failed"' in page and "Consolidation step for turn 5 failed" in page
