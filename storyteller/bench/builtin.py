"""The built-in narrator in its own process, against in-process, in one run: ``manage.py bench --only builtin``.

For a 60-token reply to the demo campaign's first turn (greedy, so both ways
write the same tokens): the first word and the whole reply, cold (a fresh
process: the interpreter, llama.cpp and the model file loaded first) and
warm, through the child process the app uses, and with the same generation
code called in-process. The app's processes never load llama.cpp, so the
in-process variant runs in a throwaway subprocess of the bench. Then the
boundary's cost per reply: from sending the request to reading its end, less
the child's own time for it (the pipe, JSON both ways, and the hand-over to
the asking event loop); and the first word of a turn that starts while a
recording holds the model (the recording is interrupted between tokens).
"""

import asyncio
import json
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command

from storyteller.llm import BuiltinNarrator, ChatOptions, priority, supervisor

REPLY_TOKENS = 60
COLD_RUNS = 3

# The same generation code the child runs (llm.builtin_child._Model), called in this subprocess without a pipe.
IN_PROCESS = """
import json, sys, threading, time
from storyteller.llm import builtin_child
from storyteller.llm.base import ChatOptions
job = json.load(sys.stdin)
model = builtin_child._Model.load()
runs = []
for _ in range(job["runs"]):
    started, first = time.time(), []
    model.stream(job["messages"], ChatOptions(**job["options"]), threading.Event(),
                 lambda text: first or first.append(time.time()))
    runs.append({"started": started, "first": first[0], "done": time.time()})
print(json.dumps(runs))
"""

# A recorder-sized answer for the turn to interrupt.
RECORDING = [
    {"role": "system", "content": "You write long, detailed stories."},
    {"role": "user", "content": "Tell the whole story of the lighthouse keeper, in as much detail as you can."},
]
RECORDING_SCHEMA = {"type": "object", "properties": {"story": {"type": "string"}}, "required": ["story"]}


def bench(sizes, repeat):
    """Return the rows: first word and whole reply, child and in-process, cold and warm; the boundary; a turn over
    a recording."""
    from asgiref.sync import async_to_sync

    from storyteller.management.commands.bench import _row

    messages = _demo_messages()
    options = ChatOptions(num_predict=REPLY_TOKENS, temperature=0.0, seed=1)
    warm_runs = max(3, min(repeat, 20))
    child = async_to_sync(_child_runs)(messages, options, warm_runs)
    alone = _in_process_runs(messages, options, warm_runs)
    over = async_to_sync(_over_a_recording)(messages, options, max(3, min(repeat, 5)))
    reply = f"{REPLY_TOKENS}-token reply"
    return [
        _row("builtin cold: first", reply, child["cold_first"], "child; first word < 10 s on an idle 2-core machine"),
        _row("  in-process", reply, alone["cold_first"], "the same code without the pipe"),
        _row("builtin cold: whole", reply, child["cold_whole"], "child"),
        _row("  in-process", reply, alone["cold_whole"], ""),
        _row("builtin warm: first", reply, child["warm_first"], "child; first word < 3 s"),
        _row("  in-process", reply, alone["warm_first"], ""),
        _row("builtin warm: whole", reply, child["warm_whole"], "child"),
        _row("  in-process", reply, alone["warm_whole"], ""),
        _row("builtin boundary", reply, child["boundary"], "per reply beyond generation: < 5 ms"),
        _row("builtin over recording", "first word", over, "a turn sent while a recording writes: < 3 s"),
    ]


def _demo_messages():
    """Return the prompt of the demo campaign's first turn, as the context builder makes it."""
    from campaigns import lineage
    from campaigns.models import Campaign
    from storyteller import context

    call_command("seed_demo", verbosity=0)
    campaign = Campaign.objects.order_by("-pk").first()
    built = context.build(campaign, lineage.path_of(campaign), context.Action(mode="do", text="ask the fisherman "
                                                                                            "about the lantern"))
    return built.messages


async def _child_runs(messages, options, warm_runs):
    found = {"cold_first": [], "cold_whole": [], "warm_first": [], "warm_whole": [], "boundary": []}
    for run in range(COLD_RUNS + warm_runs):
        cold = run < COLD_RUNS
        if cold:
            supervisor.stop()
        started = time.perf_counter()
        call = await supervisor.call("chat", messages=messages, options=_plain(options))
        first = None
        while True:
            message = await call.next()
            if "text" in message and first is None:
                first = time.perf_counter()
            if "done" in message:
                break
        done = time.perf_counter()
        kind = "cold" if cold else "warm"
        found[f"{kind}_first"].append(first - started)
        found[f"{kind}_whole"].append(done - started)
        if not cold:
            found["boundary"].append(call.boundary_ms(message) / 1000)
    return found


def _in_process_runs(messages, options, warm_runs):
    found = {"cold_first": [], "cold_whole": [], "warm_first": [], "warm_whole": []}
    job = json.dumps({"messages": messages, "options": _plain(options), "runs": 1 + warm_runs})
    for cold_run in range(COLD_RUNS):
        launched = time.time()
        output = subprocess.run([sys.executable, "-c", IN_PROCESS], input=job, capture_output=True, text=True,
                                cwd=settings.BASE_DIR, check=True).stdout
        runs = json.loads(output)
        found["cold_first"].append(runs[0]["first"] - launched)
        found["cold_whole"].append(runs[0]["done"] - launched)
        if cold_run == 0:
            found["warm_first"] += [run["first"] - run["started"] for run in runs[1:]]
            found["warm_whole"] += [run["done"] - run["started"] for run in runs[1:]]
    return found


async def _over_a_recording(messages, options, runs):
    narrator = BuiltinNarrator()
    found = []
    for _ in range(runs):
        async def recording():
            with priority.background("the recording"):
                return await priority.call(lambda: narrator.complete_json(
                    RECORDING, RECORDING_SCHEMA, ChatOptions(num_predict=300, temperature=0.0, seed=1)))

        work = asyncio.create_task(recording())
        while not supervisor.generating():
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.5)  # well into it
        started = time.perf_counter()
        async with priority.turn():
            stream = narrator.stream_chat(messages, options)
            await anext(stream)
            found.append(time.perf_counter() - started)
            await stream.aclose()
        await work  # asked again after the turn, it finishes
    return found


def _plain(options):
    import dataclasses

    return dataclasses.asdict(options)
