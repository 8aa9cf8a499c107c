"""The recorder at a game master's stage boundaries (docs/voices.md, WP4 scenario 4), through the real fake server.

A game master's turn leaves its narration step's answer in the reply's
context report (``report["voices"]["narration"]``) and its rounds under the
reply; here the tests write what such a turn leaves, so the recorder's rule
is tested apart from the game master's turn itself.
"""

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse

from campaigns import lineage
from campaigns.models import Campaign, ContextSnapshot, Node, RecorderRun, Round, StateEvent
from campaigns.state import state_at
from storyteller.steps import recorder
from tests.campaigns.test_lineage import act, texts
from tests.storyteller.test_recorder import recordings
from tests.conftest import as_author

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HTTP_HX_REQUEST": "true"}
MARA = {"events": [{"type": "introduce", "subject": "Mara", "object": "character", "value": "an archivist"}]}


def gm_turn(campaign, action, narration, *, new_stage=False, said=()):
    """Commit a turn as the game master's pipeline leaves it: the reply, its narration step's answer, its rounds."""
    act(campaign, action, narration)
    node = lineage.path_of(campaign).nodes().get(depth=campaign.head_depth)
    ContextSnapshot.objects.update_or_create(node=node, defaults={
        "report": {"budget": {}, "sections": [], "voices": {"narration": {"addressed": [], "new_stage": new_stage}}},
        "model": "gm", "api": "ollama"})
    if said:
        Round.objects.create(node=node, number=1, kind="gm", outputs=[{"speaker": who, "text": text}
                                                                      for who, text in said])
    return node


def state_recordings(server):
    """The state recorder's requests alone (a game master's turn asks JSON of other voices too)."""
    return [body for body in recordings(server) if set(body["format"].get("properties", {})) == {"events"}]


def record(node):
    return async_to_sync(recorder.record)(node.pk)


def status_of(client, campaign):
    return client.get(reverse("worker_status", args=[campaign.pk]), **HTMX).content.decode()


@pytest.fixture
def staged(campaign):
    Campaign.objects.filter(pk=campaign.pk).update(game_master=True)
    campaign.refresh_from_db()
    return campaign


def test_replies_wait_unrecorded_until_a_new_stage_then_are_recorded_together(staged, narrator_server, client_of):
    as_author(staged)
    first = gm_turn(staged, "knock", "The door stays shut.")
    second = gm_turn(staged, "wait", "Footsteps inside.", said=[("mara", "Who is there?")])
    assert (record(first), record(second)) == ("waiting", "waiting")
    assert recordings(narrator_server) == [], "no model call before the stage ends"
    page = status_of(client_of, staged)
    assert 'data-waiting="2"' in page and "2 replies wait to be recorded until the game master begins a new stage" in page

    narrator_server.script_json(MARA)
    third = gm_turn(staged, "step in", "Mara opens; the archive begins.", new_stage=True)
    assert record(third) == "applied"
    [body] = recordings(narrator_server)
    prompt = body["messages"][-1]["content"]
    assert "The 3 turns to record, in order:" in prompt
    assert prompt.index("Player (do): knock") < prompt.index("Round 1, mara: Who is there?") < prompt.index(
        "Narrator: Mara opens")
    assert set(RecorderRun.objects.filter(node__in=[first, second, third]).values_list("status", flat=True)) == {
        "applied"}
    state = state_at(lineage.path_of(staged), staged)
    assert state.entity("mara") is not None
    assert StateEvent.objects.filter(node=third, status="applied").exists(), "the stage's events sit at its end"
    assert 'data-waiting' not in status_of(client_of, staged)


def test_a_failed_recording_at_the_boundary_keeps_them_waiting_and_writes_nothing_into_the_story(
        staged, narrator_server, client_of):
    as_author(staged)
    first = gm_turn(staged, "knock", "The door stays shut.")
    record(first)
    story = texts(staged)
    narrator_server.script_json("this is not JSON {", "this is not JSON {")  # asked once more, then it fails
    boundary = gm_turn(staged, "step in", "The archive begins.", new_stage=True)
    assert record(boundary) == "waiting"
    runs = dict(RecorderRun.objects.filter(node__in=[first, boundary]).values_list("node_id", "status"))
    assert runs == {first.pk: "waiting", boundary.pk: "waiting"}
    assert not StateEvent.objects.filter(node__campaign=staged).exists()
    assert texts(staged) == [*story, "step in", "The archive begins."], "no error in the story"
    page = status_of(client_of, staged)
    assert 'data-waiting="2"' in page and "the last try failed" in page and 'data-worker="failed"' not in page

    narrator_server.script_json(MARA)
    assert record(boundary) == "applied", "the next try records the whole stage"
    assert RecorderRun.objects.get(node=first).status == "applied"


def test_without_the_game_master_a_reply_is_recorded_at_once_as_before(campaign, narrator_server):
    node = gm_turn(campaign, "knock", "The door stays shut.")  # a report with voices, but the campaign has no GM
    narrator_server.script_json(MARA)
    assert record(node) == "applied"
    [body] = recordings(narrator_server)
    assert "The turn to record:" in body["messages"][-1]["content"]


def test_a_single_narrator_reply_in_a_game_master_campaign_is_recorded_at_once(staged, narrator_server):
    act(staged, "knock", "The door stays shut.")  # played before the switch: no voices in its report
    node = Node.objects.get(campaign=staged, depth=staged.head_depth)
    narrator_server.script_json(MARA)
    assert record(node) == "applied"


async def test_played_game_master_turns_wait_for_the_new_stage_their_narration_declares(owner, narrator_server):
    from asgiref.sync import sync_to_async

    from tests.storyteller.voices.test_played import game, gm, play, says

    campaign = await sync_to_async(game)(owner)
    narrator_server.script_gm(gm([("Mara", "she holds the key")]))
    narrator_server.script_characters(says("It is mine, child."))
    narrator_server.script("The kitchen falls quiet.")
    narrator_server.script_json({"addressed": [], "new_stage": False})
    first, _ = await play(campaign)
    await first.post_turn
    assert (await RecorderRun.objects.aget(node_id=first.node_id)).status == "waiting"
    assert state_recordings(narrator_server) == []

    narrator_server.script_gm(gm())
    narrator_server.script("Dawn comes; the household scatters.")
    narrator_server.script_json({"addressed": [], "new_stage": True}, MARA)
    second, _ = await play(campaign, "I wait for morning")
    await second.post_turn
    [body] = state_recordings(narrator_server)
    prompt = body["messages"][-1]["content"]
    assert "The 2 turns to record, in order:" in prompt
    assert "Round 1, mara: It is mine, child." in prompt and "Narrator: Dawn comes" in prompt
    statuses = {run.node_id: run.status async for run in RecorderRun.objects.filter(
        node_id__in=[first.node_id, second.node_id])}
    assert statuses == {first.node_id: "applied", second.node_id: "applied"}
