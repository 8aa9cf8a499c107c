"""The built-in narrator plays a whole game-master turn: no model server, every voice's JSON from its grammar."""

import pytest
from asgiref.sync import sync_to_async

from campaigns.models import Node, Round
from storyteller.steps import postturn
from tests.storyteller.voices.test_played import game, play

pytestmark = pytest.mark.django_db(transaction=True)


async def test_the_builtin_narrator_plays_a_game_master_turn_with_its_voices(owner, settings):
    settings.STORYTELLER_LLM_URL = "http://127.0.0.1:9"  # nothing answers: the built-in narrator takes over
    settings.STORYTELLER_LLM_URL_CONFIGURED = False
    campaign = await sync_to_async(game)(owner, max_rounds=1, max_characters=2, max_output_tokens=40)
    result, streamed = await play(campaign, "I ask Mara and Aldric who has the iron key")
    await postturn.settle()
    [one] = [r async for r in Round.objects.filter(node_id=result.node_id)]
    node = await Node.objects.select_related("snapshot").aget(pk=result.node_id)
    assert streamed.strip() and node.text.endswith(streamed.strip())
    assert node.snapshot.model.startswith("builtin") or "smollm" in node.snapshot.model.lower()
    step = node.snapshot.report["voices"]["rounds"][0]
    assert set(step["answer"]) == {"resolve_round", "activate_characters", "expand_world", "rolls", "narrate"}
    # Whoever the small model named was activated or refused with the reason; each activated one spoke in turn.
    assert [o["speaker"] for o in one.outputs if o["speaker"] != "gm"] == [a["who"] for a in one.activated]
    assert set(one.briefs) == {a["who"] for a in one.activated}
    assert one.outputs[-1]["speaker"] == "gm" and one.outputs[-1]["text"] == streamed.strip()
