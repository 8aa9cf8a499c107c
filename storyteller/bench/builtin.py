"""The built-in narrator in its own process, against in-process, in one run: ``manage.py bench --only builtin``.

For a 60-token reply (greedy, so both ways write the same tokens) to the
demo campaign's first turns, as the context builder makes them: the first
word and the whole reply, cold (a fresh process: the interpreter, llama.cpp
and the model file loaded, then the whole prompt read) and warm (the model
loaded and the previous turn's prompt in its cache, so only what differs at
the prompt's end is read: the next turn), through the child process the app
uses, and with the same generation code called in-process. The app's
processes never load llama.cpp, so the in-process variant runs in a
throwaway subprocess of the bench. Then the boundary's cost per reply: from
sending the request to reading its end, less the child's own time for it
(the pipe, JSON both ways, the hand-over to the asking event loop); tokens a
second with ggml's extra buffer types off and on; and the first word of a
turn sent while the recording of the turn before holds the model (it is
interrupted between tokens, and asked again after).
"""

import asyncio
import dataclasses
import json
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command

from storyteller.llm import BuiltinNarrator, ChatOptions, priority, supervisor

from .measure import figure

REPLY_TOKENS = 60
COLD_RUNS = 3
ACTIONS = ("ask the fisherman about the lantern", "walk up the hill to the cottage")

# The same generation code the child runs (llm.builtin_child._Model), called in this subprocess without a pipe.
IN_PROCESS = """
import json, sys, threading, time
from storyteller.llm import builtin_child
from storyteller.llm.base import ChatOptions
job = json.load(sys.stdin)
model = builtin_child._Model.load(extra_buffers=job["extra_buffers"])
runs = []
for run in range(job["runs"]):
    started, first = time.time(), []
    usage = model.stream(job["prompts"][run % 2], ChatOptions(**job["options"]), threading.Event(),
                         lambda text: first or first.append(time.time()))
    runs.append({"started": started, "first": first[0], "done": time.time(), "tokens": usage["eval_count"]})
print(json.dumps(runs))
"""

# What the recorder asks after a reply: the narration's own prompt continued (ARCHITECTURE "Model calls").
RECORDING = "Record, as JSON, what the reply above changed in the story."
RECORDING_SCHEMA = {"type": "object", "properties": {"changes": {"type": "array", "items": {"type": "string"}}},
                    "required": ["changes"]}


def run(sizes, repeat):
    """Return the rows (see the module docstring)."""
    from asgiref.sync import async_to_sync

    prompts = _demo_prompts()
    options = ChatOptions(num_predict=REPLY_TOKENS, temperature=0.0, seed=1)
    warm_runs = max(4, min(repeat, 20))
    child = async_to_sync(_child_runs)(prompts, options, warm_runs)
    alone = _in_process_runs(prompts, options, warm_runs)
    extra = _in_process_runs(prompts, options, warm_runs, extra_buffers=True, cold_runs=1)
    over = async_to_sync(_over_a_recording)(prompts, options, max(3, min(repeat, 5)))
    reply = f"{REPLY_TOKENS} tokens"
    return [
        figure("builtin cold: first", reply, child["cold_first"], "child; < 10 s on an idle 2-core machine"),
        figure("  in-process", reply, alone["cold_first"], "the same code, no pipe"),
        figure("builtin cold: whole", reply, child["cold_whole"], "child"),
        figure("  in-process", reply, alone["cold_whole"], ""),
        figure("builtin warm: first", reply, child["warm_first"], "child, the next turn; < 3 s"),
        figure("  in-process", reply, alone["warm_first"], ""),
        figure("builtin warm: whole", reply, child["warm_whole"], "child"),
        figure("  in-process", reply, alone["warm_whole"], ""),
        figure("builtin boundary", reply, child["boundary"], "per reply, beyond generation: < 5 ms"),
        figure("token, extra off", reply, alone["token"], "ms a token after the first (as the child runs)"),
        figure("  extra on", reply, extra["token"], "ggml's extra buffer types on"),
        figure("  prompt, extra off", f"{alone['prompt_tokens']} tokens", alone["prompt"], "reading it whole, cold"),
        figure("  prompt, extra on", f"{alone['prompt_tokens']} tokens", extra["prompt"], ""),
        figure("builtin over recording", "first word", over, "a turn sent while a recording writes: < 3 s"),
    ]


def _demo_prompts():
    """Return the prompts of the demo campaign's first turn for each of ACTIONS, as the context builder makes them."""
    from campaigns import lineage
    from campaigns.models import Campaign
    from storyteller import context

    call_command("seed_demo", verbosity=0)
    campaign = Campaign.objects.order_by("-pk").first()
    path = lineage.path_of(campaign)
    return [context.build(campaign, path, context.Action(mode="do", text=action)).messages for action in ACTIONS]


async def _child_runs(prompts, options, warm_runs):
    found = {"cold_first": [], "cold_whole": [], "warm_first": [], "warm_whole": [], "boundary": []}
    for run in range(COLD_RUNS + warm_runs):
        cold = run < COLD_RUNS
        if cold:
            supervisor.stop()
        started = time.perf_counter()
        call = await supervisor.call("chat", messages=prompts[0 if cold else run % 2], options=_plain(options))
        first = None
        while True:
            message = await call.next()
            if "text" in message and first is None:
                first = time.perf_counter()
            if "done" in message:
                break
        kind = "cold" if cold else "warm"
        found[f"{kind}_first"].append(first - started)
        found[f"{kind}_whole"].append(time.perf_counter() - started)
        if not cold and run > COLD_RUNS:  # the first warm run reads the other prompt's tail after a cold one
            found["boundary"].append(call.boundary_ms(message) / 1000)
    return found


def _in_process_runs(prompts, options, warm_runs, extra_buffers=False, cold_runs=COLD_RUNS):
    found = {"cold_first": [], "cold_whole": [], "warm_first": [], "warm_whole": [], "token": [], "prompt": []}
    job = json.dumps({"prompts": prompts, "options": _plain(options), "runs": 1 + warm_runs,
                      "extra_buffers": extra_buffers})
    for cold_run in range(cold_runs):
        launched = time.time()
        output = subprocess.run([sys.executable, "-c", IN_PROCESS], input=job, capture_output=True, text=True,
                                cwd=settings.BASE_DIR, check=True).stdout
        runs = json.loads(output)
        found["cold_first"].append(runs[0]["first"] - launched)
        found["cold_whole"].append(runs[0]["done"] - launched)
        found["prompt"].append(runs[0]["first"] - runs[0]["started"])
        if cold_run == 0:
            found["warm_first"] += [run["first"] - run["started"] for run in runs[1:]]
            found["warm_whole"] += [run["done"] - run["started"] for run in runs[1:]]
            found["token"] += [(run["done"] - run["first"]) / max(run["tokens"] - 1, 1) for run in runs[1:]]
    found["prompt_tokens"] = _prompt_tokens(prompts[0])
    return found


def _prompt_tokens(messages):
    from storyteller import tokens

    return f"~{sum(tokens.count(message['content']) for message in messages):,}"


async def _over_a_recording(prompts, options, runs):
    narrator = BuiltinNarrator()
    reply = "".join([chunk.text async for chunk in narrator.stream_chat(prompts[0], options)])
    recording = prompts[0] + [{"role": "assistant", "content": reply}, {"role": "user", "content": RECORDING}]
    found = []
    for _ in range(runs):
        async def record():
            with priority.background("the recording"):
                return await priority.call(lambda: narrator.complete_json(
                    recording, RECORDING_SCHEMA, ChatOptions(num_predict=300, temperature=0.0, seed=1)))

        work = asyncio.create_task(record())
        while not supervisor.generating():
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.5)  # well into it
        started = time.perf_counter()
        async with priority.turn():
            stream = narrator.stream_chat(prompts[1], options)
            await anext(stream)
            found.append(time.perf_counter() - started)
            await stream.aclose()
        await work  # asked again after the turn, it finishes
        async for _chunk in narrator.stream_chat(prompts[0], options):  # the next round starts from turn 1's cache
            pass
    return found


def _plain(options):
    return dataclasses.asdict(options)
