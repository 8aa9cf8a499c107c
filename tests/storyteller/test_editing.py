"""Edit any message: a new version, never an overwrite; an earlier one is a branch; derived data follows the line."""

import pytest
from asgiref.sync import sync_to_async

from campaigns import lineage, story
from campaigns.models import Campaign, Node, RecorderRun
from campaigns.state import state_at
from storyteller import editing
from storyteller.steps import postturn
from tests.campaigns.test_lineage import act
from tests.storyteller.test_consumers import connect, frames_until_end, outcome_of
from tests.storyteller.test_recorder import WORLD, play, recordings

pytestmark = pytest.mark.django_db(transaction=True)

TO_THE_CELLAR = {"events": [{"type": "move", "subject": "Mara", "object": "Cellar", "value": "", "narrator_only": False},
                            {"type": "introduce", "subject": "Cellar", "object": "place", "value": "",
                             "narrator_only": False}]}
TO_THE_CELLAR["events"].reverse()  # the place first, then Mara goes there


@sync_to_async
def state_of(campaign, branch_id, depth):
    return state_at(lineage.path_at(campaign.pk, branch_id, depth), campaign)


@sync_to_async
def line(campaign):
    campaign = Campaign.objects.get(pk=campaign.pk)
    return list(lineage.path_of(campaign).nodes().values_list("text", flat=True))


async def test_an_edited_reply_is_recorded_again_and_each_version_keeps_its_own_state(campaign, narrator_server):
    narrator_server.script("Mara waits in the Crooked Lantern Tavern.", "Mara hurries down to the cellar.")
    narrator_server.script_json(WORLD, TO_THE_CELLAR)
    await play(campaign, "enter the tavern")
    moved = await play(campaign, "follow Mara")
    old = await Node.objects.aget(pk=moved.node_id)
    assert (await state_of(campaign, old.branch_id, old.depth)).location_of("mara") == "cellar"

    narrator_server.script_json({"events": []})
    campaign = await Campaign.objects.aget(pk=campaign.pk)
    edited = await sync_to_async(editing.edit_reply)(campaign.pk, old.pk, "Mara stays by the fire, watching the door.")
    await postturn.schedule(campaign.pk, edited.pk)

    assert edited.depth == old.depth and edited.branch_id != old.branch_id
    assert (await Node.objects.aget(pk=old.pk)).text == "Mara hurries down to the cellar.", "never an overwrite"
    assert "Narrator: Mara stays by the fire" in recordings(narrator_server)[-1]["messages"][-1]["content"]
    assert (await RecorderRun.objects.aget(node_id=edited.pk)).status == "applied"
    new_state = await state_of(campaign, edited.branch_id, edited.depth)
    old_state = await state_of(campaign, old.branch_id, old.depth)
    assert new_state.location_of("mara") == "crooked-lantern-tavern", "the old version's move never reached it"
    assert old_state.location_of("mara") == "cellar", "the old version keeps its own"
    assert (await line(campaign))[-1] == "Mara stays by the fire, watching the door."

    campaign = await Campaign.objects.aget(pk=campaign.pk)
    await sync_to_async(story.show_version)(campaign, old)
    assert (await line(campaign))[-1] == "Mara hurries down to the cellar.", "flipped back"


async def test_editing_an_earlier_reply_is_a_branch_from_there(campaign, narrator_server):
    await sync_to_async(act)(campaign, "open the gate", "The gate creaks open.")
    await sync_to_async(act)(campaign, "enter", "The chapel is dark.")
    await sync_to_async(act)(campaign, "light a candle", "The candle flares.")
    first = await Node.objects.aget(depth=2)
    campaign = await Campaign.objects.aget(pk=campaign.pk)
    assert editing.later_turns(campaign, first) == 2
    await sync_to_async(editing.edit_reply)(campaign.pk, first.pk, "The gate is stuck fast.")
    campaign = await Campaign.objects.aget(pk=campaign.pk)
    assert campaign.head_depth == 2
    assert (await line(campaign))[1:] == ["open the gate", "The gate is stuck fast."]
    assert await Node.objects.filter(text="The candle flares.").aexists(), "the later turns stay on their branch"
    edited = await Node.objects.select_related("snapshot").aget(text="The gate is stuck fast.")
    assert edited.snapshot.report["edited"]["from"] == first.pk
    await postturn.settle()


@pytest.mark.parametrize("text, says", [("   ", "needs some text"), ("x" * 100_001, "100,001 characters"),
                                        ("The gate creaks open.", "unchanged")])
async def test_a_bad_edit_is_refused_in_words_and_changes_nothing(campaign, text, says):
    await sync_to_async(act)(campaign, "open the gate", "The gate creaks open.")
    reply = await Node.objects.aget(depth=2)
    with pytest.raises(editing.EditRefused) as refused:
        await sync_to_async(editing.edit_reply)(campaign.pk, reply.pk, text)
    assert says in str(refused.value)
    assert await Node.objects.acount() == 3


async def test_a_message_off_the_line_cannot_be_edited(campaign):
    await sync_to_async(act)(campaign, "open the gate", "The gate creaks open.")
    reply = await Node.objects.aget(depth=2)
    campaign = await Campaign.objects.aget(pk=campaign.pk)
    await sync_to_async(story.undo)(campaign)
    with pytest.raises(editing.EditRefused) as refused:
        await sync_to_async(editing.edit_reply)(campaign.pk, reply.pk, "Other.")
    assert "no longer on this line" in str(refused.value)


async def test_an_edited_earlier_action_is_answered_on_a_branch_and_the_old_line_flips_back(
        campaign, owner, narrator_server):
    await sync_to_async(act)(campaign, "open the gate", "The gate creaks open.")
    await sync_to_async(act)(campaign, "enter", "The chapel is dark.")
    action = await Node.objects.aget(depth=1)
    later = [pk async for pk in Node.objects.filter(depth__gte=1).values_list("pk", flat=True)]
    narrator_server.script("The gate will not move.")
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"action": "edit", "node": str(action.pk), "mode": "do",
                                     "text": "push the gate", "direction": ""})
    frames = await frames_until_end(communicator)
    assert all(f'id="node-{pk}" hx-swap-oob="delete"' in frames[0] for pk in later), "the old line leaves the page"
    assert outcome_of(frames[-1]) == "committed"
    body = [b for b in narrator_server.bodies("/api/chat") if "format" not in b][-1]
    assert body["messages"][-1]["content"] == "The player's character acts: push the gate"
    assert "The chapel is dark." not in str(body["messages"]), "the narrator reads the line before the edit only"
    assert await line(campaign) == [campaign.opening, "push the gate", "The gate will not move."]
    edited = await Node.objects.aget(text="push the gate")
    versions = await sync_to_async(lineage.versions)(campaign.pk, [edited])
    assert versions[edited.pk].count == 2 and versions[edited.pk].previous == action.pk
    assert 'aria-label="Versions of this action"' in frames[-1]
    await communicator.disconnect()
    await postturn.settle()

    campaign = await Campaign.objects.aget(pk=campaign.pk)
    await sync_to_async(story.show_version)(campaign, action)
    assert (await line(campaign))[-1] == "The chapel is dark.", "flipping back brings the whole old line"


async def test_an_edit_that_fails_has_the_page_read_the_story_again(campaign, owner, narrator_server):
    await sync_to_async(act)(campaign, "open the gate", "The gate creaks open.")
    action = await Node.objects.aget(depth=1)
    narrator_server.not_found()
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"action": "edit", "node": str(action.pk), "mode": "do", "text": "push"})
    frames = await frames_until_end(communicator)
    assert outcome_of(frames[-1]) == "failed" and 'id="story-refresh"' in frames[-1]
    assert await Node.objects.acount() == 3
    await communicator.disconnect()


async def test_an_edit_naming_no_node_is_refused(campaign, owner, narrator_server):
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"action": "edit", "node": "x", "mode": "do", "text": "push"})
    frames = await frames_until_end(communicator)
    assert outcome_of(frames[-1]) == "refused" and "does not know that request" in frames[-1]
    await communicator.disconnect()


async def test_an_edited_reply_over_the_socket_is_saved_and_the_page_reads_the_story_again(
        campaign, owner, narrator_server):
    await sync_to_async(act)(campaign, "open the gate", "The gate creaks open.")
    reply = await Node.objects.aget(depth=2)
    communicator, _ = await connect(campaign, owner)
    await communicator.send_json_to({"action": "edit-reply", "node": str(reply.pk), "text": "The gate is <b>shut</b>."})
    frames = await frames_until_end(communicator)
    assert outcome_of(frames[-1]) == "committed" and 'id="story-refresh"' in frames[-1]
    assert "Saved as a new version" in frames[-1]
    assert (await line(campaign))[-1] == "The gate is <b>shut</b>.", "stored as written; escaped where shown"
    await communicator.send_json_to({"action": "edit-reply", "node": str(reply.pk), "text": "Again."})
    frames = await frames_until_end(communicator)
    assert outcome_of(frames[-1]) == "refused" and "no longer on this line" in frames[-1]
    await communicator.disconnect()
    await postturn.settle()
