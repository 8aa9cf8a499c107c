"""``recording``: the built-in narrator plays and records the demo's first twenty turns (slow: only when named)."""

import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from .measure import figure


# Twenty turns of the demo campaign a new player might send, in order.
DEMO_ACTIONS = [
    "ask the fisherman about the lantern", "walk up the hill to the cottage", "knock on the cottage door",
    "search Mara's desk", "read the lamp-oil ledger", "take the brass key from the drawer", "light a candle",
    "go back down to the harbour", "ask the fisherman who climbed the headland", "climb the headland path",
    "look at the dark lantern", "open the lantern's door", "call out for Mara", "pick up the brass button in the mud",
    "show the button to the harbour master", "ask the harbour master where his men were", "go to the inn",
    "ask the innkeeper for a room", "sleep until dawn", "return to the headland at dawn",
]


def run(sizes, repeat):
    """The built-in narrator plays the demo campaign's first twenty turns, and records each (the recorder alone).

    Slow (tens of seconds a turn on two cores), so it runs only when named:
    ``--only recording``. Each turn either records or is skipped with one
    line in plain words; a line with a JSON decoder's message fails the run.
    """
    from asgiref.sync import async_to_sync

    overrides = {  # nothing answers on the discard port: the built-in narrator takes over, as on a fresh machine
        "STORYTELLER_LLM_URL": "http://127.0.0.1:9",
        "STORYTELLER_LLM_URL_CONFIGURED": False,
    }
    saved = {name: getattr(settings, name) for name in overrides}
    for name, value in overrides.items():
        setattr(settings, name, value)
    try:
        outcomes = async_to_sync(_record_demo_turns)()
    finally:
        for name, value in saved.items():
            setattr(settings, name, value)
    recorded = [o for o in outcomes if o["status"] == "applied"]
    skipped = [o for o in outcomes if o["status"] != "applied"]
    for outcome in outcomes:
        print(f"  turn {outcome['turn']:>2}: {outcome['status']:<8} {outcome['seconds']:6.1f} s  "
              f"{outcome['applied']} events applied, {outcome['rejected']} rejected  {outcome['error']}")
    raw = [o for o in skipped if any(word in o["error"] for word in ("Unterminated", "Expecting", "at character"))]
    if raw:
        raise CommandError(f"a skipped recording shows the decoder's message: {raw[0]['error']}")
    target = f"each records or is skipped in one line: {len(recorded)} recorded, {len(skipped)} skipped"
    return [
        figure("builtin recording", f"{len(outcomes)} demo turns", [o["seconds"] for o in outcomes], target),
        figure("  (reply)", f"{len(outcomes)} demo turns", [o["reply_seconds"] for o in outcomes], ""),
    ]


async def _record_demo_turns():
    from channels.db import database_sync_to_async

    from campaigns.models import Campaign, RecorderRun, StateEvent
    from storyteller import turns
    from storyteller.steps import postturn, recorder
    from storyteller.context import Action

    await database_sync_to_async(call_command)("seed_demo", verbosity=0)
    campaign = await Campaign.objects.order_by("-pk").afirst()
    recording = postturn.STEPS[0]
    assert recording.run is recorder.record
    outcomes = []

    async def quiet(_):
        pass

    saved = postturn.STEPS
    postturn.STEPS = [recording]  # the memory and summary steps are not what is measured here
    try:
        for turn, action in enumerate(DEMO_ACTIONS, start=1):
            started = time.perf_counter()
            result = await turns.play_turn(campaign.pk, Action(mode="do", text=action), quiet)
            played = time.perf_counter()
            await result.post_turn
            run = await RecorderRun.objects.aget(node_id=result.node_id)
            events = [status async for status in StateEvent.objects.filter(node_id=result.node_id)
                      .values_list("status", flat=True)]
            outcomes.append({
                "turn": turn, "status": run.status, "error": run.error,
                "seconds": time.perf_counter() - played, "reply_seconds": played - started,
                "applied": events.count("applied"), "rejected": len(events) - events.count("applied"),
            })
    finally:
        postturn.STEPS = saved
    return outcomes
