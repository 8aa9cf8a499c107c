"""``rules``: story time and world rules (issue 13): agendas, catch-up, triggers, dice, calendar parsing, a batch."""

import time

from django.core.management.base import CommandError

from .measure import figure
from .state import commit_bench_turn, generate_state, recorder_batch


def run(sizes, repeat):
    """Story time and world rules, pure (issue 13): agendas, catch-up, triggers, dice and calendar parsing."""
    from campaigns.state.time import calendar

    tz = "Europe/Lisbon"
    now = calendar.parse_instant("2031-03-14T08:00", now_ms=0, tz=tz)
    return [*_measure_agendas(now, tz, repeat), *_measure_trigger_check(now, tz, repeat), *_measure_dice(repeat),
            *_measure_calendar_parsing(now, tz, repeat), *_measure_rules_apply(repeat)]


RULES_WINDOWS = [
    {"start": "06:00", "end": "09:00", "place": "home", "activity": "waking"},
    {"start": "09:00", "end": "17:00", "days": "mon-fri", "place": "work", "activity": "working"},
    {"start": "17:00", "end": "22:00", "place": "tavern", "activity": "drinking"},
    {"start": "22:00", "end": "06:00", "place": "home", "activity": "sleeping"},
]


def _measure_agendas(now, tz, repeat):
    from campaigns.state.time import agenda, calendar

    people = [f"c{i}" for i in range(500)]
    routines = {who: agenda.parse_routine(who, [{**w, "place": f"{w['place']}-{i % 20}"} for w in RULES_WINDOWS])
                for i, who in enumerate(people)}
    engagements = {who: [agenda.Engagement(f"{who}-e{n}", (who,), now + n * 1_200_000, "tavern-1", "meet")
                         for n in range(3)] for who in people}
    intents = {who: [agenda.Intent(who, f"i{n}", priority=1 + n % 5, urgency=1 + (n * 3) % 5, plan=f"plan {n}")
                     for n in range(4)] for who in people}
    at = calendar.moment(now + 3_600_000, tz)
    daily, daily_cpu = [], []
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        for who in people[:200]:
            agenda.agenda_at(who, at, routine=routines[who], engagements=engagements[who], intents=intents[who])
        daily.append(time.perf_counter() - started)
        daily_cpu.append(time.process_time() - started_cpu)
    locations = {who: "street" for who in people}
    # Just under the 30-day cap, landing in the evening window so that every character moves. The cost does not
    # grow with the skip: catch-up compares each routine's window now with its cursor, nothing in between.
    later = calendar.moment(now + 29 * calendar.DAY_MS + 10 * 3_600_000, tz)
    catch_up = []
    for _ in range(repeat):
        started = time.perf_counter()
        plan = agenda.catch_up_plan(people, later, routines=routines, locations=locations, cursors={},
                                    protagonist_place="street-0", skipping=True)
        catch_up.append(time.perf_counter() - started)
    if len(plan.moves) != len(people):
        raise CommandError(f"the catch-up benchmark moved {len(plan.moves)} of {len(people)} characters")
    # CPU time beside wall time, as for "state": the one figure other people's load on the machine does not move.
    return [figure("agenda_at", "200 characters", daily, "median < 5 ms"),
            figure("  (CPU time)", "200 characters", daily_cpu, ""),
            figure("catch-up, 30-day skip", "500 characters", catch_up, "median < 50 ms")]


class _BenchWorld:
    """The world after a batch, as plain dicts: what a trigger check asks of the story State."""

    def __init__(self, locations, holders, values):
        self.locations, self.holders, self.values = locations, holders, values

    def location_of(self, who):
        return self.locations.get(who, "")

    def holder_of(self, item):
        return self.holders.get(item, "")

    def place_of(self, item):
        holder = self.holders.get(item, "")
        return self.locations.get(holder, holder)

    def variable(self, obj, name):
        return self.values.get((obj, name), 0)


def _measure_trigger_check(now, tz, repeat):
    """500 triggers of every condition type, read from their record data and checked after a 20-event batch."""
    from campaigns.state.time import triggers

    kinds = [
        lambda i: {"type": "time", "after": now + i * 60_000},
        lambda i: {"type": "at", "who": f"c{i % 50}", "place": f"p{i % 7}"},
        lambda i: {"type": "variable", "object": f"c{i % 50}", "name": "debt", "op": ">=", "value": i % 100},
        lambda i: {"type": "holds", "who": f"c{i % 50}", "item": f"i{i % 80}"},
        lambda i: {"type": "item_at", "item": f"i{i % 80}", "place": f"p{i % 7}"},
        lambda i: {"type": "time", "every": "20:00", "days": "mon-fri"},
        lambda i: {"type": "time", "window": {"start": "09:00", "end": "17:00"}},
        lambda i: {"all": [{"type": "trigger", "id": f"t{i - 1}", "status": "fired"},
                           {"type": "at", "who": f"c{i % 50}", "place": f"p{i % 7}"}]},
    ]
    definitions = [{"id": f"t{i}", "when": kinds[i % len(kinds)](i), "priority": i % 10, "max_fires": 3,
                    "beat": f"beat {i}", "effects": [{"type": "variable_change", "name": "debt", "by": 1}]}
                   for i in range(500)]
    records = [triggers.record(t, triggers.Status())["data"] for t in triggers.load_triggers(definitions, tz=tz)]
    world = _BenchWorld({f"c{i}": f"p{i % 7}" for i in range(50)}, {f"i{i}": f"c{i % 50}" for i in range(80)},
                        {(f"c{i}", "debt"): i for i in range(50)})
    samples, cpu = [], []
    for index in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        entries = [triggers.from_record(data) for data in records]
        ctx = triggers.Context(world, now + 3_600_000 + index, now + 3_570_000, tz=tz)
        triggers.check(entries, ctx, seed=(1, index))
        samples.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return [figure("triggers check", "500 triggers", samples, "median < 5 ms (records read, after a batch)"),
            figure("  (CPU time)", "500 triggers", cpu, "")]


def _measure_dice(repeat):
    from campaigns.state.time import dice

    pool = {"definition": {"dice": "10d10>=7", "bands": [
        {"label": "fail", "min": 0, "max": 0, "outcome": "nothing"},
        {"label": "some", "min": 1, "max": 4, "outcome": "something"},
        {"label": "many", "min": 5, "max": 10, "outcome": "everything"}]}}
    coverage, rolls = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        check = dice.parse_check("pool", pool)
        coverage.append(time.perf_counter() - started)
    for index in range(repeat):
        started = time.perf_counter()
        dice.roll(check, seed=(1, 2, index), who="mara")
        rolls.append(time.perf_counter() - started)
    return [figure("dice band coverage", "10d10 successes", coverage, "median < 5 ms"),
            figure("dice roll", "10d10 successes", rolls, "median < 1 ms")]


def _measure_calendar_parsing(now, tz, repeat):
    """1,000 different expressions of every form of the grammar, parsed into instants."""
    from campaigns.state.time import calendar

    months = list(calendar.MONTH_NAMES[1:])
    forms = [
        lambda i: f"{1 + i % 28} {months[i % 12]} {2031 + i % 5} at {i % 24:02d}:{i % 60:02d}",
        lambda i: f"the {['first', 'second', 'third', 'last'][i % 4]} {calendar.WEEKDAY_NAMES[i % 7]} of "
                  f"{months[i % 12]} {2031 + i % 5} at {i % 24}:{(i * 17) % 60:02d}",
        lambda i: f"the {1 + i % 28}th of each month at {i % 24:02d}:{(i * 11) % 60:02d}",
        lambda i: f"{months[i % 12]} {1 + i % 28}, {2031 + i % 9} {1 + i % 12}pm",
        lambda i: f"{2031 + i % 9}-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}",
        lambda i: f"tomorrow at {i % 24:02d}:{(i * 7) % 60:02d}",
        lambda i: f"every {calendar.WEEKDAY_NAMES[i % 7]} at {1 + i % 12}:{i % 60:02d} am",
        lambda i: f"{i % 24:02d}:{(i * 13) % 60:02d}",
    ]
    # Each form in turn, its fields varying with j = i // len(forms) so no two expressions are alike by accident.
    expressions = [forms[i % len(forms)](i // len(forms)) for i in range(1000)]
    if len(set(expressions)) < 950:
        raise CommandError("the calendar benchmark's expressions repeat; it would measure a cache")
    samples, cpu = [], []
    for _ in range(max(5, repeat // 5)):
        started, started_cpu = time.perf_counter(), time.process_time()
        for text in expressions:
            calendar.parse_instant(text, now_ms=now, tz=tz)
        samples.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return [figure("calendar parsing", "1,000 expressions", samples, "median < 50 ms"),
            figure("  (CPU time)", "1,000 expressions", cpu, "")]


def _measure_rules_apply(repeat):
    """A recorder batch of 20 events through ``apply_events`` with 500 triggers on the line (issue 13): the whole
    batch, and the trigger check ``rulebook.after_batch`` runs inside it (the same calls, timed from within)."""
    from campaigns.models import Node
    from campaigns.state import apply_events, registry
    from campaigns.state.time import rulebook

    campaign = generate_state(entities=500, facts=5000, turns=200)
    head = Node.objects.get(campaign=campaign, depth=campaign.head_depth)
    places = [f"place-{n}" for n in range(100)]
    kinds = [
        lambda i: {"type": "time", "after": f"2031-03-{15 + i % 10}T{i % 24:02d}:00"},
        lambda i: {"type": "at", "who": f"character-{i % 200}", "place": places[(i * 7) % 100]},
        lambda i: {"type": "variable", "object": f"character-{i % 200}", "name": "debt", "op": ">=", "value": 50},
        lambda i: {"type": "holds", "who": f"character-{i % 200}", "item": f"item-{i % 150}"},
        lambda i: {"type": "item_at", "item": f"item-{i % 150}", "place": places[i % 100]},
        lambda i: {"type": "time", "every": "20:00", "days": "mon-fri"},
        lambda i: {"type": "time", "window": {"start": "09:00", "end": "17:00"}},
        lambda i: {"all": [{"type": "trigger", "id": f"t{i - 1}", "status": "fired"},
                           {"type": "at", "who": f"character-{i % 200}", "place": places[i % 100]}]},
    ]
    definitions = [{"id": f"t{i}", "when": kinds[i % len(kinds)](i), "priority": i % 10, "max_fires": 3,
                    "beat": f"beat {i}"} for i in range(500)]
    setup = apply_events(head, [
        {"type": "clock_start", "data": {"starting_time": "2031-03-14T08:00"}},
        {"type": "variable_define", "data": {"definition": {"name": "debt", "type": "number", "range": [0, 100]}}},
        {"type": "trigger_define", "data": {"triggers": definitions}}], source="correction")
    refused = [event.reason for event in setup if event.status != "applied"]
    if refused:
        raise CommandError("the rules benchmark's world was refused: " + "; ".join(refused))
    checks, checks_cpu, original = [], [], rulebook.after_batch

    def timed(*args, **kwargs):
        started, started_cpu = time.perf_counter(), time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            checks.append(time.perf_counter() - started)
            checks_cpu.append(time.process_time() - started_cpu)

    hooks = registry.HOOKS.after_batch
    hooks[hooks.index(original)] = timed
    wall, cpu = [], []
    try:
        for index in range(repeat + 3):
            node = commit_bench_turn(campaign, index)
            started, started_cpu = time.perf_counter(), time.process_time()
            events = apply_events(node, recorder_batch(index), source="recorder", attempt=1)
            if index >= 3:  # the first batches warm the cached base with the triggers
                wall.append(time.perf_counter() - started)
                cpu.append(time.process_time() - started_cpu)
            if index == 0 and any(event.status != "applied" for event in events):
                raise CommandError("the rules benchmark's batch was rejected: "
                                   + "; ".join(event.reason for event in events if event.reason))
    finally:
        hooks[hooks.index(timed)] = original
    size = "500 triggers, 500 entities"
    return [figure("state apply 20 events", size, wall, "median < 10 ms (500 triggers checked inside)"),
            figure("  (CPU time)", size, cpu, ""),
            figure("  triggers check in it", size, checks[3:], "median < 5 ms"),
            figure("  (CPU time)", size, checks_cpu[3:], "")]
