"""``world``: the world model at 1,000 places, 4,000 exits, 2,000 items and 200 characters (seed 002 WP1).

Also the generated world file (``world_document``) the voices group plays in.
"""

import time

from django.core.management.base import CommandError

from .measure import REPLIES, bench_user, figure, timed
from .state import commit_bench_turn, generate_state
from .turn import generate_story, summarise_by_hand


def run(sizes, repeat):
    """The world model (seed 002 WP1) at 1,000 places, 4,000 exits, 2,000 items and 200 characters: import, routes,
    a character's view, lint, a batch with a 20-operation item_changes, the state section, and a 2,000-turn build."""
    import random

    from campaigns import lineage, worldfile
    from campaigns.state import state_at
    from campaigns.state.world import lint, world

    rng = random.Random(2002)
    document = world_document(rng)
    imports, cpu = [], []
    for _ in range(3):
        started, started_cpu = time.perf_counter(), time.process_time()
        campaign, findings = worldfile.create_campaign(bench_user(), document)
        imports.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    size = f"{WORLD_PLACES:,} places, {WORLD_EXITS:,} exits, {WORLD_ITEMS:,} items"
    # CPU time beside wall time, as for "state": on a shared machine it is the figure others' load does not move.
    results = [figure("world import", size, imports, "median < 2 s"), figure("  (CPU time)", size, cpu, "")]
    now = state_at(lineage.path_of(campaign), campaign)
    pairs = [(f"room-{rng.randrange(WORLD_PLACES)}", f"room-{rng.randrange(WORLD_PLACES)}") for _ in range(repeat)]
    results.append(timed("route", size, lambda pair: world.route(now, *pair), pairs, "median < 1 ms"))
    known = [(f"room-{rng.randrange(KNOWN_PLACES)}", f"room-{rng.randrange(KNOWN_PLACES)}") for _ in range(repeat)]
    results.append(timed("known_route", f"{KNOWN_EXITS} known exits", lambda pair: world.known_route(
        now, "villager-0", *pair), known, "median < 1 ms"))
    people = [f"villager-{rng.randrange(WORLD_CHARACTERS)}" for _ in range(repeat)]
    results.append(timed("character_view", size, lambda who: world.character_view(now, who), people,
                         "median < 5 ms"))
    lints, cpu = [], []
    for _ in range(max(5, repeat // 5)):
        fresh = state_at(lineage.path_of(campaign), campaign)  # lint reads the exit graph and holders afresh
        started, started_cpu = time.perf_counter(), time.process_time()
        lint.lint(fresh)
        lints.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    results += [figure("world lint", size, lints, f"median < 100 ms ({len(findings)} findings)"),
                figure("  (CPU time)", size, cpu, "")]
    generate_state(entities=500, facts=5000, turns=200, campaign=campaign, scene="room-0")
    results += _measure_world_turn(campaign, size, repeat)
    results += _measure_world_build(document, repeat)
    return results


WORLD_PLACES, WORLD_EXITS, WORLD_ITEMS, WORLD_CHARACTERS = 1_000, 4_000, 2_000, 200
KNOWN_PLACES, KNOWN_EXITS = 150, 300  # villager-0 knows rooms 0-149 and the 300 exits among them


def world_document(rng):
    """A world file: rooms in a ring with random passages (4,000 exits, a tenth locked or blocked), villagers
    placed about, and items up to four deep in containers (a ring in a pouch in a box in a chest)."""
    rooms = [f"Room {n}" for n in range(WORLD_PLACES)]
    exits, pairs = [], set()

    def join(one, other, **extra):
        if one != other and (one, other) not in pairs:
            pairs.update({(one, other), (other, one)})
            exits.append({"from": rooms[one], "to": rooms[other], "travel_seconds": rng.randrange(10, 120),
                          "both_ways": True, **extra})

    for n in range(WORLD_PLACES):
        join(n, (n + 1) % WORLD_PLACES)
    # villager-0 knows rooms 0-149: a ring and chords among them make KNOWN_EXITS exits.
    while len(exits) < KNOWN_EXITS // 2:
        join(rng.randrange(KNOWN_PLACES), rng.randrange(KNOWN_PLACES))
    while len(exits) < WORLD_EXITS // 2:
        one, other = rng.randrange(WORLD_PLACES), rng.randrange(WORLD_PLACES)
        extra = {}
        if rng.random() < 0.05 and one >= KNOWN_PLACES:
            extra = {"state": "locked", "opener": "Thing 0"}
        elif rng.random() < 0.05 and one >= KNOWN_PLACES:
            extra = {"state": "blocked"}
        join(one, other, **extra)
    characters = [{"name": f"Villager {n}", "place": rooms[rng.randrange(WORLD_PLACES)]}
                  for n in range(WORLD_CHARACTERS)]
    characters[0]["place"] = rooms[0]
    characters[0]["knowledge"] = {"locations": rooms[:KNOWN_PLACES],
                                  "exits": [{"from": e["from"], "to": e["to"]} for e in exits
                                            if int(e["from"].split()[1]) < KNOWN_PLACES
                                            and int(e["to"].split()[1]) < KNOWN_PLACES]
                                  + [{"from": e["to"], "to": e["from"]} for e in exits
                                     if int(e["from"].split()[1]) < KNOWN_PLACES
                                     and int(e["to"].split()[1]) < KNOWN_PLACES]}
    characters.append({"name": "Edrin", "protagonist": True, "place": rooms[0]})
    # The first ten chains lie in room 0, where the benchmark's batch moves them about.
    # (The rest are spread over 400 rooms and the villagers, a few to a place.)
    items = item_chains(WORLD_ITEMS, lambda number: rooms[0] if number < 40 else rooms[number // 4 % 400 + 1]
                        if number % 3 else f"Villager {number // 4 % WORLD_CHARACTERS}")
    return {"format": "storyteller-world", "version": 1,
            "campaign": {"title": "World bench", "protagonist": "Edrin, a lamplighter", "opening": REPLIES[0]},
            "places": [{"name": room, "description": f"{room} of the bench"} for room in rooms],
            "exits": exits, "characters": characters, "items": items}


def item_chains(count, holder_of, hidden=lambda number: False):
    """Return ``count`` items "Thing N" in chains of four, each inside the one before (the outer three open
    containers); ``holder_of(N)`` holds the chain that starts at Thing N, ``hidden(N)`` hides its innermost."""
    items, number = [], 0
    while len(items) < count:
        chain = [f"Thing {number + depth}" for depth in range(4)]
        for depth, name in enumerate(chain):
            items.append({"name": name, "holder": holder_of(number) if depth == 0 else chain[depth - 1],
                          **({"container": "open"} if depth < 3 else {}), "notable": depth == 0 and number % 7 == 0,
                          **({"hidden": True} if depth == 3 and hidden(number) else {})})
        number += 4
    return items


def _world_batch(index):
    """Twenty item operations that leave the world as they found it, and ten other events, distinct per ``index``."""
    def ev(type, subject="", object="", value="", **extra):
        return {"type": type, "subject": subject, "object": object, "value": value, "narrator_only": False, **extra}

    operations = []
    for thing in range(10):  # Things 0-39 lie in room 0, four deep: take each and put it back where it was
        name, container = f"Thing {4 * (thing % 10) + 1 + thing % 3}", f"Thing {4 * (thing % 10) + thing % 3}"
        operations += [{"op": "take", "item": name}, {"op": "put", "item": name, "to": container}]
    there, back = ("Room 1", "Room 0") if index % 2 == 0 else ("Room 0", "Room 1")
    return [
        ev("item_changes", "Edrin", data={"ops": operations}),
        ev("move", "Villager 0", there),
        ev("set_condition", "Villager 0", "", f"tired {index}", data={"mood": "restless"}),
        ev("relationship", "Villager 0", "Edrin", f"owes him {index} coins", data={"trust": 0.2}),
        ev("add_fact", "Villager 0", "", f"Villager 0 counted {index} gulls."),
        ev("add_fact", "", "", f"The bell rang {index} times."),
        ev("know", "Villager 1", f"rumour {index}", data={"kind": "lore", "how": "told"}),
        ev("exit_change", "Room 0", "Room 1", data={"travel_seconds": 30 + index % 2}),
        ev("feature", "Room 0", "hearth", f"a hearth, fire {index}"),
        ev("open_thread", "", "", f"Who rang the bell {index} times?"),
        ev("arrive", "Villager 2", back),
    ]


def _measure_world_turn(campaign, size, repeat):
    from campaigns import lineage
    from campaigns.state import apply_events
    from storyteller.context import state as state_section

    text = "I ask Villager 3 about Thing 5 while Character 12 watches from Room 1."
    wall, cpu = [], []
    for index in range(repeat + 3):
        campaign.refresh_from_db()
        started, started_cpu = time.perf_counter(), time.process_time()
        state_section.section(campaign, lineage.path_of(campaign), text)
        if index >= 3:
            wall.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
    full = f"{size} + 500 entities, 5,000 facts"
    results = [figure("world select+render", full, wall, "median < 20 ms"), figure("  (CPU time)", full, cpu, "")]
    wall, cpu = [], []
    for index in range(repeat):
        node = commit_bench_turn(campaign, index)
        started, started_cpu = time.perf_counter(), time.process_time()
        events = apply_events(node, _world_batch(index), source="recorder", attempt=1)
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
        refused = [event.reason for event in events if event.status != "applied"]
        if refused:
            raise CommandError("the world benchmark's batch was rejected: " + "; ".join(refused))
    results += [figure("world apply 20 ops + 10", full, wall, "median < 10 ms"), figure("  (CPU time)", full, cpu, "")]
    return results


def _measure_world_build(document, repeat):
    """Context build at the head of a 2,000-turn story whose world is the benchmark's."""
    from campaigns import worldfile

    from campaigns import lineage
    from storyteller import context

    campaign, _ = worldfile.create_campaign(bench_user(), document, context_token_budget=8192,
                                            max_output_tokens=400)
    campaign = generate_story(2_000, campaign)
    summarise_by_hand(campaign)
    wall, cpu = [], []
    for index in range(repeat + 3):
        campaign.refresh_from_db()
        started, started_cpu = time.perf_counter(), time.process_time()
        context.build(campaign, lineage.path_of(campaign), context.Action(mode="do", text=f"look around {index}"))
        if index >= 3:
            wall.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
    size = f"2,000 turns, {WORLD_PLACES:,} places"
    return [figure("world context build", size, wall, "median < 30 ms at 2,000 turns"),
            figure("  (CPU time)", size, cpu, "")]
