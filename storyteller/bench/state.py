"""``state``: state selection and rendering at 500 entities and 5,000 facts, and applying a recorder batch of 20 events.

Also the generated state (``generate_state``), a committed bench turn and a
recorder batch of every type, which the rules, world and minds groups use.
"""

import time

from django.core.management.base import CommandError

from .measure import ACTIONS, REPLIES, figure


def run(sizes, repeat):
    """State selection and rendering with 500 entities and 5,000 facts; applying a recorder batch of 20 events."""
    from campaigns import lineage
    from campaigns.state import apply_events
    from storyteller.context import state as state_section

    campaign = generate_state(entities=500, facts=5000, turns=200)
    size = "500 entities, 5,000 facts"
    text = "I ask Character 7 about Item 3 while Character 12 watches from Place 2."
    wall, cpu = [], []
    for index in range(repeat + 3):
        campaign.refresh_from_db()
        started, started_cpu = time.perf_counter(), time.process_time()
        state_section.section(campaign, lineage.path_of(campaign), text)
        if index >= 3:  # the first reads warm SQLite's page cache
            wall.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
    # CPU time beside wall time: SQLite runs in this process, so on a shared
    # machine the CPU figure is the one other people's load does not move.
    results = [figure("state select+render", size, wall, "median < 20 ms"), figure("  (CPU time)", size, cpu, "")]
    wall, cpu = [], []
    for index in range(repeat):
        node = commit_bench_turn(campaign, index)
        started, started_cpu = time.perf_counter(), time.process_time()
        events = apply_events(node, recorder_batch(index), source="recorder", attempt=1)
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
        if index == 0 and any(event.status != "applied" for event in events):
            raise CommandError("the benchmark's recorder batch was rejected: "
                               + "; ".join(event.reason for event in events if event.reason))
    results += [figure("state apply 20 events", size, wall, "median < 5 ms"), figure("  (CPU time)", size, cpu, "")]
    return results


def generate_state(entities, facts, turns, campaign=None, scene=None):
    """Create a campaign whose state, spread over ``turns`` recorded turns, holds ``entities`` and ``facts``.

    A tenth of the facts are later retracted and a side branch carries
    facts of its own, so the fold has superseded and abandoned rows to skip.
    Given a ``campaign`` (a world just imported), its story grows instead,
    and the scene is at ``scene``.
    """
    from django.contrib.auth import get_user_model

    from campaigns import story
    from campaigns.models import Branch, Campaign, Node, StateEvent, StateRecord
    from campaigns.state.reading import fact_slot

    user, _ = get_user_model().objects.get_or_create(username="bench")
    campaign = campaign or story.start_campaign(Campaign.objects.create(
        owner=user, title="Bench state", protagonist="Edrin, a lamplighter", opening=REPLIES[0],
        context_token_budget=8192, max_output_tokens=400,
    ))
    main = campaign.head_branch
    Node.objects.bulk_create([
        Node(campaign=campaign, branch=main, depth=depth, role="player" if depth % 2 else "narrator",
             mode="do" if depth % 2 else "", text=REPLIES[depth % 4] if depth % 2 == 0 else ACTIONS[depth % 4],
             tokens=60, tokens_through=60 * depth)
        for depth in range(1, 2 * turns + 1)
    ])
    side = Branch.objects.create(campaign=campaign, parent=main, fork_depth=2 * turns - 10)
    replies = {n.depth: n for n in Node.objects.filter(campaign=campaign, role="narrator")}
    events = StateEvent.objects.bulk_create([
        StateEvent(campaign=campaign, node=replies[2 * turn], source="recorder", payload={"type": "bench"},
                   status="applied") for turn in range(1, turns + 1)
    ])
    kinds = [("Character", "character", 200), ("Place", "place", 100), ("Item", "item", 150), ("Faction", "faction", 50)]
    records = []

    def add(turn, branch=main, **fields):
        records.append(StateRecord(campaign=campaign, branch=branch, depth=2 * turn, event=events[turn - 1],
                                   authority="state", **fields))

    names = []
    for prefix, kind, count in kinds:
        for number in range(count):
            name = f"{prefix} {number}"
            key = name.lower().replace(" ", "-")
            names.append((key, kind))
            add(1 + len(names) % turns, slot=f"entity:{key}", kind="entity", subject=key, value=name,
                data={"kind": kind, "aliases": [f"the {kind} {number}"], "description": f"a {kind} of the bench"})
    places = [key for key, kind in names if kind == "place"]
    people = [key for key, kind in names if kind == "character"]
    for index, key in enumerate(people):
        add(turns, slot=f"location:{key}", kind="location", subject=key, value=places[index % len(places)])
    for index, (key, kind) in enumerate(names):
        if kind == "item":
            add(turns, slot=f"holder:{key}", kind="holder", subject=key, value=people[index % len(people)])
    add(turns, slot="scene", kind="scene", value="The bench's scene.", data={"location": scene or places[2]})
    add(turns, slot="location:protagonist", kind="location", subject="protagonist", value=scene or places[2])
    for index in range(facts):
        subject = names[index % len(names)][0]
        text = f"Bench fact {index} about {subject}."
        add(1 + index % turns, slot=fact_slot(text), kind="fact", subject=subject, value=text)
        if index % 10 == 0:
            add(turns, slot=fact_slot(text), kind="fact", subject=subject, value=text, retracted=True)
        if index % 50 == 0:
            add(turns - 1, branch=side, slot=fact_slot(f"Abandoned {index}."), kind="fact", value=f"Abandoned {index}.")
    StateRecord.objects.bulk_create(records, batch_size=2000)
    campaign.head_depth = 2 * turns
    campaign.save(update_fields=["head_depth"])
    return campaign


def commit_bench_turn(campaign, index):
    from campaigns import story
    from campaigns.models import Campaign

    campaign = Campaign.objects.get(pk=campaign.pk)
    action = story.PlayerAction(mode="do", text=f"step {index}", tokens=5)
    reply = story.Reply(text=REPLIES[index % 4], tokens=60, report={"bench": True}, model="bench", api="bench")
    return story.commit_turn(campaign.pk, (campaign.head_branch_id, campaign.head_depth), action, reply)


def recorder_batch(index):
    """Return twenty valid events of every kind the recorder proposes, distinct per ``index``."""
    def ev(type, subject="", object="", value="", **data):
        return {"type": type, "subject": subject, "object": object, "value": value, "narrator_only": False,
                "data": data}

    newcomer, place, item = f"Newcomer {index}", f"New place {index}", f"New item {index}"
    return [
        ev("introduce", newcomer, "character", "a stranger"),
        ev("introduce", place, "place"),
        ev("scene", "", place, f"Scene {index} begins."),
        ev("introduce", item, "item"),
        ev("arrive", newcomer),
        ev("item_changes", newcomer, ops=[{"op": "take", "item": item}]),
        ev("item_changes", newcomer, ops=[{"op": "give", "item": item, "to": "protagonist"}]),
        ev("move", "Character 5", place),
        ev("relationship", newcomer, "protagonist", "wary"),
        ev("set_condition", newcomer, "", "soaked"),
        ev("open_thread", "", "", f"Who sent newcomer {index}?"),
        ev("resolve_thread", "", "answered", f"Who sent newcomer {index}?"),
        *[ev("add_fact", newcomer, "", f"Newcomer {index} knows fact {n}.") for n in range(6)],
        ev("retract_fact", "", "", f"Newcomer {index} knows fact 0."),
        ev("item_changes", "protagonist", ops=[{"op": "drop", "item": item}]),
    ]
