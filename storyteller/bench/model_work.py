"""``model-work``: every request a turn makes of the model server, and what servers with prompt caches read (issue 27).

Plays stories through the real pipeline (``turns.play_turn``, then every
post-turn step) against the fake server: the checkpoint group's prefix-reuse
story with each layout of the steps' requests (their own prompts, as before
issue 27, and continuing the narration's), the same layout in a world with
three characters about the player (a longer dynamic tail: the state's lines),
and a game master's story with those three. Every chat request and its
answer, in the order the server received them, is then served again by
``llm.caching.Slots``: one prompt cache, four (llama.cpp's choice of slot),
and one per kind of request. Per turn it reports the requests by kind, the
characters and tokens sent (cl100k, messages laid out as a chat template lays
them), the turn's own new tokens (the player's input with the tail around it,
the reply, each step's instructions beyond the narration's prompt, each
answer) and what each server reads.

A turn's "evaluated" tokens are the prompt tokens a server reads plus the
tokens written (the reply and the answers): what a model spends on the turn.
Turns 5 onwards are counted (the first read a cold cache), and a turn that
writes a checkpoint summary, or whose narration starts from a new one, is a
rotation: reported apart, since its summary's prompt is its own and the next
prompt changes after the stable prefix anyway.
"""

import statistics
import time

from django.conf import settings

from .measure import ACTIONS, REPLIES, bench_user, figure

TURNS = 200
GM_TURNS = 40
FROM_TURN = 5  # the first turns read a cold cache
# A new campaign's budget (min(window, 8192)) for the story in a world; the prefix-reuse story's is 4,096, as the
# checkpoint group's row has it.
BUDGET = 8192
PLAIN_BUDGET = 4096
RATIO_TARGET = 1.3
REUSE_TARGET = 0.9

WORLD = {
    "format": "storyteller-world", "version": 1,
    "campaign": {"title": "Model work", "genre": "mystery", "protagonist": "Edrin, a young cartographer",
                 "opening": REPLIES[0]},
    "places": [{"name": "Kitchen", "description": "a warm kitchen with a black stove"},
               {"name": "Hall", "description": "the front hall"}],
    "exits": [{"from": "Kitchen", "to": "Hall", "travel_seconds": 10, "both_ways": True}],
    "characters": [{"name": "Edrin", "protagonist": True, "place": "Kitchen"},
                   {"name": "Mara", "description": "the housekeeper", "place": "Kitchen"},
                   {"name": "Aldric", "description": "a hunter", "place": "Kitchen"},
                   {"name": "Wren", "description": "a lamplighter", "place": "Kitchen"}],
    "items": [{"name": "teapot", "holder": "Kitchen", "container": "open", "notable": True},
              {"name": "iron key", "holder": "Mara"}],
}


def run(sizes, repeat):
    """Play the prefix-reuse story with each layout of the steps' requests, a story in a world with three
    characters about, and a game master's with those three; return the figures."""
    rows = []
    for layout in ("own", "narration"):
        rows += _figures(f"model work, {layout}", _play(layout, TURNS), game_master=False)
    rows += _figures("model work, world", _play("narration", TURNS, world=True), game_master=False)
    rows += _figures("model work, GM", _play("narration", GM_TURNS, world=True, game_master=True), game_master=True)
    return rows


class _Answers:
    """The fake server's answers to what is not scripted: a recording of one scene line and a memory of one
    sentence, as a model would give; everything else its smallest answer (minds: nothing perceived)."""

    def reply(self, messages, schema):
        properties = (schema or {}).get("properties", {})
        if "events" in properties and "perceptions" not in properties:
            return {"events": [{"type": "scene", "subject": "", "object": "", "value": "Edrin is in the kitchen, "
                                "asking after the lantern.", "narrator_only": False}]}
        if "memory" in properties:
            return {"memory": "Edrin asked about the lantern in the kitchen while Mara watched."}
        return None

    def embed(self, text):
        from storyteller.llm.scripted import vector_for

        return vector_for(text)


def _play(layout, turns, *, world=False, game_master=False):
    """Play ``turns`` turns with the steps' ``layout``; return, per turn, its exchanges, its snapshot's facts and its
    time. The story is the checkpoint group's prefix-reuse story (no world, a 4,096-token window) or, with
    ``world``, one in the Kitchen with three characters about (a new campaign's 8,192-token window)."""
    from asgiref.sync import async_to_sync

    from campaigns import story, worldfile
    from campaigns.models import Campaign
    from storyteller.llm.fake_server import FakeModelServer

    if world:
        campaign, _ = worldfile.create_campaign(bench_user(), WORLD, game_master=game_master,
                                                context_token_budget=BUDGET, max_output_tokens=300,
                                                title=f"Model work ({layout})")
    else:
        campaign = story.start_campaign(Campaign.objects.create(
            owner=bench_user(), title=f"Model work ({layout})", protagonist="Edrin", opening=REPLIES[0],
            context_token_budget=PLAIN_BUDGET, max_output_tokens=300))
    played = []
    with FakeModelServer(stubs=_Answers()) as server:
        overrides = {"STORYTELLER_LLM_URL": server.url, "STORYTELLER_LLM_URL_CONFIGURED": True,
                     "STORYTELLER_LLM_API": "ollama", "STORYTELLER_STEP_PROMPTS": layout}
        saved = {name: getattr(settings, name, None) for name in overrides}
        for name, value in overrides.items():
            setattr(settings, name, value)
        try:
            for turn in range(turns):
                server.script(f"{REPLIES[turn % 4]} ({turn})")
                start = len(server.exchanges)
                started = time.perf_counter()
                node_id = async_to_sync(_turn)(campaign.pk, ACTIONS[turn % 4])
                played.append((list(server.exchanges[start:]), _facts(node_id), time.perf_counter() - started))
        finally:
            for name, value in saved.items():
                setattr(settings, name, value)
    return played


async def _turn(campaign_id, text):
    from storyteller import turns
    from storyteller.context import Action

    async def relay(_):
        pass

    result = await turns.play_turn(campaign_id, Action(mode="do", text=text), relay)
    await result.post_turn
    return result.node_id


def _facts(node_id):
    from campaigns.models import ContextSnapshot

    report = ContextSnapshot.objects.get(node_id=node_id).report
    return {"tail_start": report["prompt"]["tail_start"], "checkpoint": (report.get("checkpoint") or {}).get("id")}


def kind_of(body):
    """Return the kind of a chat request, from what its schema asks for."""
    schema = body.get("format") if isinstance(body.get("format"), dict) else None
    if schema is None:
        return "narration"
    properties = schema.get("properties", {})
    for key, kind in (("perceptions", "minds"), ("events", "recorder"), ("judgments", "judge"), ("memory", "memory"),
                      ("summary", "summary"), ("activate_characters", "game master"), ("speech", "character"),
                      ("new_stage", "narration step"), ("account", "off stage")):
        if key in properties:
            return kind
    return "other"


def _limits():
    """Return the answer limit of each step that continues the narration."""
    from storyteller.steps import judge, memories, minds, recorder

    return {"recorder": recorder.MAX_TOKENS, "minds": minds.MAX_TOKENS, "judge": judge.MAX_TOKENS,
            "memory": memories.MAX_TOKENS}


def _edge(turns):
    """Say how often a step met the window's edge: answered in less than its limit, or sent its own prompt."""
    shortened = [limit for t in turns for limit in t["shortened"]]
    alone = sum(t["alone"] for t in turns)
    said = f"{len(shortened)} step requests answered in less than their limit"
    if shortened:
        said += f" (the least {min(shortened):,})"
    return said + f", {alone} on their own prompt"


def _count(text):
    from storyteller import tokens

    return tokens.count(text)


def _turns(played):
    """Serve every request again on each kind of server; return one dict of figures per turn."""
    from storyteller.llm import caching

    servers = {"one slot": caching.Slots(1), "four slots": caching.Slots(4),
               "slot per kind": caching.Slots(by_kind=True)}
    figures, checkpoint, limits = [], None, _limits()
    for number, (exchanges, facts, seconds) in enumerate(played, 1):
        kinds, read, narration, reuse = {}, dict.fromkeys(servers, 0), None, {}
        by_kind = {name: {} for name in servers}  # what each kind of request made each server read
        sent_chars = sent_tokens = new = written = 0
        shortened, alone = [], 0  # steps answering in less than their limit near the window's edge; on their own
        for body, answer in exchanges:
            messages, kind = body["messages"], kind_of(body)
            kinds[kind] = kinds.get(kind, 0) + 1
            if kind in limits:
                limit = (body.get("options") or {}).get("num_predict", limits[kind])
                if limit < limits[kind]:
                    shortened.append(limit)
                alone += narration is not None and messages[0] != narration[0][0]
            prompt = caching.prompt_tokens(messages, _count)
            sent_chars += sum(len(m.get("content") or "") for m in messages)
            sent_tokens += prompt
            written += _count(answer)
            if kind == "narration" and narration is None:
                narration = (messages, answer)
                new += caching.prompt_tokens(messages[facts["tail_start"]:], _count)  # the tail, the answer's head
            else:
                # What the request adds to the narration's prompt and reply (all of it, when it continues neither).
                new += prompt - (caching.shared(narration, messages, _count) if narration else 0)
            for name, slots in servers.items():
                served = slots.serve(kind, messages, answer, _count)
                read[name] += served.read
                by_kind[name][kind] = by_kind[name].get(kind, 0) + served.read
                if kind == "narration" and name not in reuse:
                    reuse[name] = served.reused / served.prompt
        rotation = "summary" in kinds or (number > 1 and facts["checkpoint"] != checkpoint)
        checkpoint = facts["checkpoint"]
        figures.append({"turn": number, "kinds": kinds, "chars": sent_chars, "tokens": sent_tokens, "new": new,
                        "written": written, "read": read, "read_by_kind": by_kind, "reuse": reuse,
                        "rotation": rotation, "seconds": seconds, "shortened": shortened, "alone": alone})
    return figures


def _figures(name, played, *, game_master):
    per_turn = _turns(played)
    counted = [t for t in per_turn if t["turn"] >= FROM_TURN]
    plain = [t for t in counted if not t["rotation"]]
    rotations = [t for t in counted if t["rotation"]]
    size = f"{len(per_turn)} turns"
    seconds = [t["seconds"] for t in counted]

    def mean(values):
        return statistics.fmean(values) if values else 0.0

    def ratio(turn, server):
        return (turn["read"][server] + turn["written"]) / (turn["new"] + turn["written"])

    kinds = sorted({kind for t in counted for kind in t["kinds"]})
    requests = ", ".join(f"{kind} {mean([t['kinds'].get(kind, 0) for t in counted]):.2f}" for kind in kinds)
    rows = [figure(name, size, seconds,
                   f"per turn (from turn {FROM_TURN}): {mean([sum(t['kinds'].values()) for t in counted]):.2f} "
                   f"requests ({requests}); {mean([t['chars'] for t in counted]):,.0f} characters, "
                   f"{mean([t['tokens'] for t in counted]):,.0f} tokens sent; {mean([t['new'] for t in counted]):,.0f}"
                   f" new, {mean([t['written'] for t in counted]):,.0f} written; {_edge(counted)}")]
    servers = ("one slot", "four slots", "slot per kind")
    for server in servers:
        ratios = [ratio(t, server) for t in plain]
        rotated = [ratio(t, server) for t in rotations]
        narrator = [t["reuse"][server] for t in counted if server in t["reuse"]]
        note = (f"reads {mean([t['read'][server] for t in plain]):,.0f} tokens a turn "
                f"({mean([t['read'][server] for t in plain]) / max(1, mean([t['tokens'] for t in plain])):.0%} of "
                f"what is sent); evaluated / new median {statistics.median(ratios):.2f}, max {max(ratios):.2f}")
        if rotated:
            note += f"; {len(rotated)} rotations apart: median {statistics.median(rotated):.2f}"
        if narrator:
            note += f"; the narrator's prompt reused: median {statistics.median(narrator):.1%}"
        note += "; read by kind: " + ", ".join(
            f"{kind} {mean([t['read_by_kind'][server].get(kind, 0) for t in plain]):,.0f}" for kind in kinds)
        if server == "one slot" and not game_master:
            note += f" (targets: ratio <= {RATIO_TARGET}, reuse >= {REUSE_TARGET:.0%})"
        row = figure(f"  {server}", size, seconds, note)
        row.update({"ratio_median": statistics.median(ratios), "ratio_max": max(ratios),
                    "rotation_ratio_median": statistics.median(rotated) if rotated else None,
                    "narrator_reuse_median": statistics.median(narrator) if narrator else None})
        rows.append(row)
    rows[0]["per_turn"] = per_turn
    return rows
