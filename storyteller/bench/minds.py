"""``minds``: per-character recall over 10,000 and 50,000 recall items, indexing, selection and beliefs (issue 14)."""

import contextlib
import time

from django.core.management.base import CommandError

from .knowledge import VECTOR_DIMS, prose, vocabulary
from .measure import ACTIONS, REPLIES, bench_user, figure
from .state import commit_bench_turn
from .turn import generate_story, summarise_by_hand


def run(sizes, repeat):
    """Per-character recall over 10,000 and 50,000 recall items, indexing, selection and beliefs (issue 14)."""
    import random

    rng = random.Random(2046)
    words = vocabulary(rng)
    results = []
    for count in MINDS_ITEMS:
        campaign = _generate_recall_items(rng, words, count)
        results += _measure_recall(campaign, rng, words, count, repeat)
    results += _measure_recall_index_update(campaign, rng, words, repeat)
    results += _measure_recall_selection(rng, words, repeat)
    results += _measure_whereabouts(repeat)
    results += _measure_minds_pipeline(rng, repeat)
    results += _measure_events_build(rng, words, repeat)
    return results


MINDS_ITEMS = (10_000, 50_000)
MINDS_PER_OWNER = 2_000  # one character's perceptions and beliefs
MINDS_VECTOR_OWNERS = 5  # owners given 768-d vectors (her and four others): 10,000 vectors of 3 KiB
MINDS_PLACES = ("kitchen", "yard", "hall", "cellar", "tower", "quay", "chapel", "market")
MINDS_TAGS = ("secret", "key", "debt", "fire", "love", "theft", "storm", "oath")


def _generate_recall_items(rng, words, count):
    """Create a campaign with ``count`` recall items, 2,000 per owner, "mara" first; her first 5 owners embedded."""
    import numpy as np
    from django.contrib.auth import get_user_model

    from campaigns import story
    from campaigns.models import Branch, Campaign
    from memory import recall_index
    from memory.models import RecallItem

    user, _ = get_user_model().objects.get_or_create(username="bench")
    campaign = story.start_campaign(Campaign.objects.create(
        owner=user, title=f"Minds bench {count}", protagonist="Edrin", opening=REPLIES[0]))
    turns = 2_000
    campaign.head_depth = 2 * turns  # eligibility reads only (branch, depth)
    campaign.save(update_fields=["head_depth"])
    main = campaign.head_branch_id
    side = Branch.objects.create(campaign=campaign, parent_id=main, fork_depth=2 * turns - 200).pk
    owners = ["mara"] + [f"person{i}" for i in range(1, count // MINDS_PER_OWNER)]
    for owner in owners:
        entries = []
        for i in range(MINDS_PER_OWNER):
            depth = 2 * rng.randrange(1, turns) if i % 50 else 2 * turns - 150  # a few on the abandoned side
            anchor = (side if i % 50 == 0 else main, depth)
            kind = "belief" if i % 40 == 0 else "perception"
            slot = f"belief:{owner}:b{i}" if kind == "belief" else f"perception:e{i}:{owner}"
            entries.append(recall_index.Entry(
                slot, kind, owner, prose(rng, words, rng.randint(8, 20)), anchor, gist=prose(rng, words, 4),
                importance=rng.randint(1, 5), tags=tuple(rng.sample(MINDS_TAGS, 2)),
                location=rng.choice(MINDS_PLACES), people=tuple(rng.sample(owners[:12], 2)),
                at_ms=depth * 600_000))
        for start in range(0, len(entries), 500):
            recall_index.index(campaign.pk, entries[start:start + 500])
    vectors = np.random.default_rng(count)
    for owner in owners[:MINDS_VECTOR_OWNERS]:
        ids = list(RecallItem.objects.filter(campaign=campaign, owner=owner).values_list("id", flat=True))
        matrix = vectors.standard_normal((len(ids), VECTOR_DIMS)).astype(np.float32)
        recall_index.store_vectors(campaign.pk, "nomic-embed-text", list(zip(ids, matrix)))
    return campaign


def _minds_situation(rng, words, index):
    from memory import recall

    return recall.Situation(f"{ACTIONS[index % 4]} {prose(rng, words, 12)} teapot",
                            people=frozenset({"person1", "person2"}), strength={"person1": 0.6},
                            location=MINDS_PLACES[index % len(MINDS_PLACES)], tags=frozenset({"secret"}))


def _measure_recall(campaign, rng, words, count, repeat):
    import numpy as np

    from campaigns import lineage
    from memory import recall_index

    path = lineage.path_of(campaign)
    queries = np.random.default_rng(12).standard_normal((repeat + 3, VECTOR_DIMS)).astype(np.float32)
    now = 2 * 2_000 * 600_000
    lexical, hybrid, cold = _Samples(), _Samples(), _Samples()
    for index in range(repeat + 3):
        situation = _minds_situation(rng, words, index)
        with lexical.timing(index >= 3):
            recall_index.recall(path, campaign, "mara", situation, now)
        if index < 3:  # her vectors read out of SQLite: the first recall after they change
            recall_index._matrices.clear()
        with (hybrid if index >= 3 else cold).timing():
            recall_index.recall(path, campaign, "mara", situation, now, vector=tuple(queries[index]),
                                model="nomic-embed-text")
    size = f"{count:,} items, 2,000 hers"
    return [*lexical.rows("recall, words + cues", size, "median < 30 ms, flat 10,000 → 50,000"),
            *hybrid.rows("recall, hybrid", size + ", 768-d", "median < 50 ms (hot vectors)"),
            *cold.rows("recall, cold matrix", size + ", 768-d", "< 150 ms (her matrix read from SQLite)")]


class _Samples:
    """Wall and CPU time of each timed block: SQLite runs in this process, so on a shared machine the
    CPU figure is the one other people's load does not move."""

    def __init__(self):
        self.wall, self.cpu = [], []

    @contextlib.contextmanager
    def timing(self, keep=True):
        started, started_cpu = time.perf_counter(), time.process_time()
        yield
        if keep:
            self.wall.append(time.perf_counter() - started)
            self.cpu.append(time.process_time() - started_cpu)

    def rows(self, name, size, target):
        return [figure(name, size, self.wall, target), figure("  (CPU time)", size, self.cpu, "")]


def _measure_recall_index_update(campaign, rng, words, repeat):
    """Index one turn's minds records at the head: 10 events, 40 perceptions, 3 beliefs."""
    from memory import recall_index

    samples = _Samples()
    for index in range(repeat):
        anchor = (campaign.head_branch_id, campaign.head_depth)
        entries = [recall_index.Entry(f"event:n{index}-{e}", "event", "", prose(rng, words, 12), anchor,
                                      importance=3, tags=("secret",), location="kitchen", at_ms=index)
                   for e in range(10)]
        entries += [recall_index.Entry(f"perception:n{index}-{p % 10}:person{p // 10 + 1}", "perception",
                                       f"person{p // 10 + 1}", prose(rng, words, 12), anchor, importance=3)
                    for p in range(40)]
        entries += [recall_index.Entry(f"belief:mara:n{index}-{b}", "belief", "mara", prose(rng, words, 10), anchor,
                                       importance=3) for b in range(3)]
        with samples.timing():
            recall_index.index(campaign.pk, entries)
    return samples.rows("recall index update", "53 records", "median < 10 ms")


def _measure_recall_selection(rng, words, repeat):
    """Fading, rerank fallback, MMR and association over 60 candidates: the pure part of one recall."""
    from memory import recall

    items = [recall.Item(i, f"perception:e{i}:mara", "perception", text, prose(rng, words, 4), rng.randint(1, 5),
                         frozenset({f"person{rng.randint(1, 8)}"}), frozenset(rng.sample(MINDS_TAGS, 2)),
                         rng.choice(MINDS_PLACES), frozenset(), i * 3_600_000, i, recall.terms(text))
             for i, text in ((i, prose(rng, words, 14)) for i in range(60))]
    pool = recall.Pool(items)
    word_scores = {i: rng.random() * 5 for i in range(0, 60, 2)}
    samples = _Samples()
    for index in range(repeat):
        situation = _minds_situation(rng, words, index)
        with samples.timing():
            recall.rank(pool, situation, now_ms=80 * 3_600_000, words=word_scores)
    return samples.rows("retention + MMR", "60 candidates", "median < 2 ms")


def _measure_whereabouts(repeat):
    """Beliefs of 50 characters about 2,000 items: replayed from a generated story's world steps, and per turn."""
    import random

    from campaigns.state.minds import beliefs

    rng = random.Random(50)
    places = [f"place{i}" for i in range(20)]
    people = [f"person{i}" for i in range(50)]

    def turn(index):
        who = rng.choice(people)
        steps = [beliefs.Move(who, rng.choice(places)),
                 beliefs.Change(f"item{rng.randrange(2_000)}", rng.choice(people), actor=who, hidden=index % 7 == 0)]
        if index % 8 == 0:
            steps.append(beliefs.Notice(f"item{rng.randrange(2_000)}", by=who))
        if index % 8 == 4:
            steps.append(beliefs.Tell(rng.choice(people), f"item{rng.randrange(2_000)}", by=who))
        return steps

    steps = []
    for i in range(2_000):
        holder = rng.choice(places) if i % 5 else f"item{i - 1}"  # every fifth item inside the one before it
        steps.append(beliefs.Change(f"item{i}", holder, hidden=i % 10 == 3))
        if i % 20 == 4:
            steps.append(beliefs.Container(f"item{i}", open=False))
    steps += [beliefs.Move(who, rng.choice(places)) for who in people]
    for index in range(400):
        steps += turn(index)
    replay, per_turn, pair = _Samples(), _Samples(), _Samples()
    for _ in range(max(5, repeat // 5)):
        with replay.timing():
            minds = beliefs.derive(steps)
            for who in people:
                minds.believes(who)
    for index in range(repeat):
        more = turn(index)
        with per_turn.timing():
            beliefs.derive(more, minds)
            for who in people:
                minds.believes(who)
        with pair.timing():
            minds.believes_about(people[0], people[1])
    size = f"50 people, 2,000 items, {len(steps):,} steps"
    return [*per_turn.rows("whereabouts, one turn", size, "median < 20 ms (a turn's steps + all 50 belief maps)"),
            *replay.rows("whereabouts, replay", size, "every step again (a branch switch, a new process)"),
            *pair.rows("second order, a pair", size, "one believes_about(a, b)")]


MINDS_PLACES_COUNT, MINDS_PEOPLE, MINDS_THINGS = 20, 50, 2_000


def _minds_world():
    """A world for minds: 20 rooms in a ring, 50 people (six of them and Edrin in room 0), 2,000 things, every
    tenth a closed chest holding the next, every seventh hidden."""
    rooms = [f"Room {n}" for n in range(MINDS_PLACES_COUNT)]
    exits = [{"from": rooms[n], "to": rooms[(n + 1) % len(rooms)], "both_ways": True} for n in range(len(rooms))]
    people = [{"name": f"Person {n}", "place": rooms[0 if n < 6 else n % len(rooms)]} for n in range(MINDS_PEOPLE)]
    people.append({"name": "Edrin", "protagonist": True, "place": rooms[0]})
    things = []
    for n in range(MINDS_THINGS):
        entry = {"name": f"Thing {n}", "holder": rooms[n % len(rooms)] if n % 10 != 1 else f"Thing {n - 1}"}
        if n % 10 == 0:
            entry["container"] = "closed"
        if n % 7 == 3:
            entry["hidden"] = True
        things.append(entry)
    return {"format": "storyteller-world", "version": 1,
            "campaign": {"title": "Minds bench", "protagonist": "Edrin, a lamplighter", "opening": REPLIES[0]},
            "places": [{"name": room} for room in rooms], "exits": exits, "characters": people, "items": things}


def _minds_world_batch(index):
    """A turn of the world: two people move, one takes a thing and puts it down elsewhere (they stay in room 0's
    ring), and something is said of a thing."""
    def ev(type, subject="", object="", value="", **extra):
        return {"type": type, "subject": subject, "object": object, "value": value, **extra}

    walker = f"Person {6 + index % 44}"
    here = int(walker.split()[1]) % MINDS_PLACES_COUNT
    step = (here + 1 + index % 2) % MINDS_PLACES_COUNT
    if step % 10 == 1:  # room 1 and room 11 hold the things inside chests: go one further
        step += 1
    thing = f"Thing {step + MINDS_PLACES_COUNT * (index * 7 % (MINDS_THINGS // MINDS_PLACES_COUNT))}"
    return [ev("move", walker, f"Room {step}"),
            ev("item_changes", walker, data={"ops": [{"op": "take", "item": thing}]}),
            ev("move", walker, f"Room {here}"),
            ev("item_changes", walker, data={"ops": [{"op": "drop", "item": thing}]}),
            ev("notice", f"Thing {index % 20 + 4}", data={"by": "Person 0", "holder": "Room 0"})]


def _minds_batch(index):
    """What a busy turn's minds step records: 10 events in room 0, 4 perceptions of each, 3 beliefs."""
    events = []
    for n in range(10):
        events.append({"type": "event", "object": f"b{index}-{n}", "value": f"Person {n % 6} did thing {n} ({index}).",
                       "data": {"importance": 1 + n % 5, "tags": ["bench", f"t{n % 4}"],
                                "participants": [f"Person {n % 6}"], "location": "Room 0",
                                "items": [f"Thing {n * 20}"]}})
    for n in range(10):
        for who in range(4):
            events.append({"type": "perception", "subject": f"Person {who}", "object": f"b{index}-{n}",
                           "value": f"I saw person {n % 6} do thing {n}.",
                           "data": {"mode": "witnessed", "accuracy": "accurate"}})
    for n in range(3):
        events.append({"type": "belief", "subject": "Person 0", "object": f"b{index}-belief-{n}",
                       "value": f"Person {n} is up to something ({index}).",
                       "data": {"confidence": "likely", "supports": [f"b{index}-{n}"]}})
    return events


def _measure_minds_pipeline(rng, repeat):
    """A minds batch applied through apply_events, and every character's whereabouts beliefs through the per-line
    cache after each turn of a 400-turn story in a world of 50 people and 2,000 things."""
    from campaigns import lineage, worldfile
    from campaigns.state import apply_events
    from campaigns.state.minds import whereabouts

    campaign, _ = worldfile.create_campaign(bench_user(), _minds_world())
    for index in range(400):
        node = commit_bench_turn(campaign, index)
        apply_events(node, _minds_world_batch(index), source="recorder", attempt=1)
    batch = _Samples()
    for index in range(repeat):
        node = commit_bench_turn(campaign, 1_000 + index)
        payloads = _minds_batch(index)
        with batch.timing():
            events = apply_events(node, payloads, source="recorder", attempt=1, mark=False)
        refused = [event.reason for event in events if event.status != "applied"]
        if refused:
            raise CommandError("the minds benchmark's batch was refused: " + "; ".join(refused[:3]))
    people = [f"person-{n}" for n in range(MINDS_PEOPLE)]
    campaign.refresh_from_db()
    path = lineage.path_of(campaign)
    whereabouts.forget()
    replay = _Samples()
    for _ in range(max(3, repeat // 10)):
        whereabouts.forget()
        with replay.timing():
            minds = whereabouts.minds_at(path, campaign)
            for who in people:
                minds.believes(who)
    steps = sum(len(minds.believes(who)) for who in people)
    per_turn = _Samples()
    for index in range(repeat):
        node = commit_bench_turn(campaign, 2_000 + index)
        apply_events(node, _minds_world_batch(500 + index), source="recorder", attempt=1)
        campaign.refresh_from_db()
        path = lineage.path_of(campaign)
        with per_turn.timing():
            minds = whereabouts.minds_at(path, campaign)
            for who in people:
                minds.believes(who)
    size = f"{MINDS_PEOPLE} people, {MINDS_THINGS:,} things, 400 turns"
    return [*batch.rows("minds batch apply", "10 events, 40 perceptions, 3 beliefs", "median < 15 ms"),
            *per_turn.rows("whereabouts, a turn (cache)", size, "median < 20 ms (new records + all 50 belief maps)"),
            *replay.rows("whereabouts, fresh read", size, f"every record again ({steps:,} beliefs held)")]


def _measure_events_build(rng, words, repeat):
    """Context build at 2,000 turns with 2,000 recorded events indexed and the events section searched."""
    from campaigns import lineage
    from campaigns.models import Node, StateEvent, StateRecord
    from memory import recall_index
    from storyteller import context

    campaign = generate_story(2_000)
    replies = {n.depth: n for n in Node.objects.filter(campaign=campaign, role="narrator",
                                                       branch_id=campaign.head_branch_id)}
    stored = StateEvent.objects.bulk_create([
        StateEvent(campaign=campaign, node=replies[2 * turn], source="recorder", payload={"type": "event"},
                   status="applied") for turn in range(1, 2_001)])
    StateRecord.objects.bulk_create([
        StateRecord(campaign=campaign, branch_id=campaign.head_branch_id, depth=2 * turn, event=stored[turn - 1],
                    authority="state", slot=f"event:bench-{turn}", kind="event",
                    value=f"{prose(rng, words, 10)} near the {MINDS_PLACES[turn % len(MINDS_PLACES)]}.",
                    data={"importance": 1 + turn % 5, "tags": [MINDS_TAGS[turn % len(MINDS_TAGS)]],
                          "participants": [], "location": "", "items": [], "at_ms": None, "perceived_by": {}})
        for turn in range(1, 2_001)], batch_size=2_000)
    recall_index.sync(campaign.pk)
    summarise_by_hand(campaign)
    samples, shown = _Samples(), 0
    for index in range(repeat + 3):
        campaign.refresh_from_db()
        text = f"I think back to the {MINDS_PLACES[index % len(MINDS_PLACES)]} and {words[index % len(words)]}"
        with samples.timing(index >= 3):
            ctx = context.build(campaign, lineage.path_of(campaign), context.Action(mode="do", text=text))
        shown += len(ctx.report["events"]["used"])
    if not shown:
        raise CommandError("the events benchmark's builds evoked no event: it would not measure the section")
    return samples.rows("context build + events", "2,000 turns, 2,000 events", "median < 30 ms")
