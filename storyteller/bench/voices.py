"""``voices``: off-stage selection, lore recall, a game master's round and commit, and the author's check (issue 15)."""

import json
import time

from django.core.management.base import CommandError
from django.db import transaction

from .checkpoint import PREFIX_REUSE_TURNS, measure_prefix_reuse
from .knowledge import prose, vocabulary
from .measure import REPLIES, bench_user, figure, timed
from .world import WORLD_CHARACTERS, WORLD_EXITS, WORLD_ITEMS, WORLD_PLACES, world_document


def run(sizes, repeat):
    """Voices (issue 15, phase 1): off-stage selection over 200 characters, lore recall, a round's resolve_round and
    a world author's edit checked on the 1,000-place world."""
    import random

    rng = random.Random(2015)
    return [*_measure_offstage(rng, repeat), *_measure_offstage_state(rng, repeat), *_measure_lore_recall(rng, repeat),
            *_measure_author(rng, repeat), *_measure_gm_round(rng, repeat), _measure_gm_commit(repeat),
            measure_prefix_reuse(PREFIX_REUSE_TURNS, layout="game master")]


class _InstantVoices:
    """A narrator that answers every voice at once, its answers read and checked as a server's are: the round's
    time is then everything but the model's."""

    model, api = "bench", "bench"

    def __init__(self, names):
        self.names = names

    async def complete_json(self, messages, schema, options):
        from storyteller.llm import structured

        properties = schema["properties"]
        if "activate_characters" in properties:
            answer = {"resolve_round": {"actors": [{"who": "Edrin", "moves_to": "", "ignore_exits": False,
                                                    "item_changes": [{"op": "take", "item": "Thing 0"}],
                                                    "variable_changes": []}], "elapsed_seconds": 30},
                      "activate_characters": [{"who": name, "why": "they are here"} for name in self.names],
                      "expand_world": {"need": "", "what": ""}, "rolls": [], "narrate": True}
        else:
            answer = {"speech": "I will see to it before the bell.", "action": "looks about", "moves_to": "Room 1",
                      "item_changes": [], "lore": ""}
        value, reasons = structured.read(json.dumps(answer), schema)
        if reasons:
            raise CommandError(f"the voices benchmark's canned answer does not match its schema: {reasons}")
        return value


def _measure_gm_round(rng, repeat):
    """One game-master round with 4 characters on the 1,000-place world, everything but the model: the step's
    answer read and checked, resolve_round, the activation, each character's recall, whereabouts and brief, its
    reply checked and its move resolved (``voices.gm.play`` with an instant narrator)."""
    from asgiref.sync import async_to_sync

    from campaigns import lineage, worldfile
    from storyteller import context
    from storyteller.voices import gm

    document = world_document(rng)
    for character in document["characters"][1:4]:
        character["place"] = "Room 0"
    campaign, _ = worldfile.create_campaign(bench_user(), document, game_master=True)
    path = lineage.path_of(campaign)
    ctx = context.build(campaign, path, context.Action(mode="do", text="I ask who saw Thing 0"))
    narrator = _InstantVoices([f"Villager {n}" for n in range(4)])
    samples, cpu = [], []
    for index in range(repeat + 3):
        started, started_cpu = time.perf_counter(), time.process_time()
        played = async_to_sync(gm.play)(campaign, path, ctx, narrator)
        if index >= 3:  # the first rounds warm the caches a turn's first read makes
            samples.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
    if len(played.rounds[0].briefs) != 4:
        raise CommandError("the voices benchmark's round did not brief 4 characters")
    size = f"4 characters, {WORLD_PLACES:,} places"
    return [figure("game-master round", size, samples, "median < 60 ms"), figure("  (CPU time)", size, cpu, "")]


def _measure_gm_commit(repeat):
    """The commit of a 3-round game-master turn: both nodes, three Round rows with their briefs, each round's
    events (a move and an item change) with the game master's rights, the turn's story time (the engine's round,
    then the rounds' sum), the head."""
    from django.db import transaction

    from campaigns import story, storytime, worldfile
    from campaigns.models import Campaign
    from storyteller import context
    from storyteller.voices import gm

    document = {"format": "storyteller-world", "version": 1,
                "campaign": {"title": "Commit bench", "protagonist": "Edrin", "opening": REPLIES[0]},
                "places": [{"name": "Kitchen"}, {"name": "Hall"}],
                "exits": [{"from": "Kitchen", "to": "Hall", "travel_seconds": 10, "both_ways": True}],
                "characters": [{"name": "Edrin", "protagonist": True, "place": "Kitchen"},
                               {"name": "Mara", "place": "Kitchen"}, {"name": "Aldric", "place": "Kitchen"}],
                "items": [{"name": "knife", "holder": "Kitchen"}]}
    campaign, _ = worldfile.create_campaign(bench_user(), document, game_master=True)
    brief = {"text": "You are Mara.\n" + "A line of the brief.\n" * 40, "sections": [], "left_out": {}, "name": "Mara"}
    samples = []
    for index in range(repeat):
        going = ("Hall", "Kitchen")[index % 2]
        events = [[{"type": "move", "subject": "Mara", "object": going, "data": {}}],
                  [{"type": "item_changes", "subject": "Aldric", "data": {"ops": [{"op": "take", "item": "knife"}]}}],
                  [{"type": "item_changes", "subject": "Aldric", "data": {"ops": [{"op": "drop", "item": "knife"}]}}]]
        rounds = [gm.RoundPlayed(n + 1, {"actors": [], "refused": []}, [{"who": "mara", "name": "Mara", "why": "x"}],
                                 [{"speaker": "mara", "name": "Mara", "text": "Yes.", "action": ""}],
                                 {"mara": brief, "aldric": brief}, events[n]) for n in range(3)]
        played = gm.Played(rounds, [], [], [], {"rounds": []}, elapsed=90)
        text = f"{REPLIES[index % 4]} ({index})"
        reply = story.Reply(text=text, tokens=context.node_tokens("narrator", "", text), report={}, model="bench",
                            api="bench")
        campaign.refresh_from_db()
        started = time.perf_counter()
        with transaction.atomic():
            node = story.commit_turn(campaign.pk, (campaign.head_branch_id, campaign.head_depth),
                                     story.PlayerAction(mode="do", text="wait", tokens=2), reply)
            storytime.advance(node)
            gm.commit(node, played, text)
        samples.append(time.perf_counter() - started)
    return figure("commit, 3 rounds", "3 events, 6 briefs", samples, "median < 15 ms")


def _measure_offstage(rng, repeat):
    from campaigns.state.time.agenda import Engagement, Intent
    from storyteller.voices import offstage

    now = 1_900_000_000_000
    people = [f"villager-{n}" for n in range(WORLD_CHARACTERS)]
    positions = {who: f"room-{rng.randrange(50)}" for who in people} | {"protagonist": "room-0"}
    # Three engagements and four goals each, about half of them due, a tenth already handled.
    engagements = [Engagement(f"{who}-e{n}", (who,), now + rng.randrange(-7_200_000, 7_200_000), f"room-{n}", "meet")
                   for who in people for n in range(3)]
    intents = [Intent(who, f"i{n}", plan="a plan", deadline=now + rng.randrange(-7_200_000, 7_200_000))
               for who in people for n in range(4)]
    handled = {f"engagement:{e.id}" for e in engagements[::10]}
    samples, cpu = [], []
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        offstage.select(offstage.due_items(positions=positions, protagonist_place="room-0", engagements=engagements,
                                           intents=intents, now_ms=now, handled=handled),
                        per_turn=2, per_character=1)
        samples.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    size = f"{WORLD_CHARACTERS} characters, {len(engagements) + len(intents):,} items"
    return [figure("off-stage selection", size, samples, "median < 5 ms"), figure("  (CPU time)", size, cpu, "")]


def _measure_offstage_state(rng, repeat):
    """The off-stage step's choice as it runs after a turn: the due items read from the state of the 200-villager
    world (three engagements and two goals each, about 60 % of them past their time), then selected."""
    from campaigns import lineage, storytime, worldfile
    from campaigns.state import state_at
    from storyteller.steps import away
    from storyteller.voices import offstage

    doc = world_document(rng)
    doc["starting_time"] = "2031-03-14T08:00"
    doc["engagements"] = [{"who": [f"Villager {n}"], "at": f"2031-03-14T{8 + 2 * k:02d}:{5 + n % 50:02d}",
                           "place": f"Room {rng.randrange(WORLD_PLACES)}", "what": f"errand {k}"}
                          for n in range(WORLD_CHARACTERS) for k in range(3)]
    doc["intents"] = [{"who": f"Villager {n}", "plan": f"plan {k} of villager {n}", "priority": 3,
                       "deadline": f"2031-03-14T{9 + 3 * k:02d}:30"} for n in range(WORLD_CHARACTERS) for k in range(2)]
    campaign, _ = worldfile.create_campaign(bench_user(), doc)
    storytime.skip(campaign, bench_user(), {"reason": "the bench's morning", "until_time": "11:00"})
    path = lineage.path_of(campaign)
    reads, samples, whole = [], [], []
    for _ in range(repeat):
        started = time.perf_counter()
        state = away.read_due(path, campaign)
        reads.append(time.perf_counter() - started)
        started = time.process_time()
        chosen = offstage.select(away.due_at(state), per_turn=2, per_character=1)
        samples.append(time.process_time() - started)
    for _ in range(max(3, repeat // 10)):
        started = time.perf_counter()
        state_at(path, campaign)
        whole.append(time.perf_counter() - started)
    size = f"{WORLD_CHARACTERS} characters, {len(doc['engagements']) + len(doc['intents']):,} items, " \
           f"{len(chosen.runs) + len(chosen.waiting)} due"
    world_size = f"{WORLD_PLACES:,} places, {WORLD_ITEMS:,} items"
    return [figure("off-stage choice from the state", size, samples, "median < 5 ms (CPU time)"),
            figure("  (the step's read of what it needs)", world_size, reads, "background work, no target"),
            figure("  (the whole state, for comparison)", world_size, whole, "")]


def _measure_lore_recall(rng, repeat):
    from campaigns.state.world import lore

    words = vocabulary(rng)
    entries = [lore.Entry(f"book:e{n}", prose(rng, words, 4), prose(rng, words, 120)) for n in range(2_000)]
    known = {entry.key for entry in rng.sample(entries, 200)}
    texts = [prose(rng, words, 30) for _ in range(repeat)]
    return [timed("lore recall", "2,000 entries, 200 known", lambda text: lore.recall(entries, known, text), texts,
                  "part of a round's 60 ms")]


def _measure_author(rng, repeat):
    from campaigns import lineage, worldfile
    from campaigns.state import state_at
    from campaigns.state.world import authoring, world
    from storyteller.voices import resolution

    campaign, _ = worldfile.create_campaign(bench_user(), world_document(rng))
    now = state_at(lineage.path_of(campaign), campaign)
    # A turn's state comes with the cached base's exit graph and holders built (state_for_turn); so does this one.
    world.graph(now)
    world.holders(now)
    size = f"{WORLD_PLACES:,} places, {WORLD_EXITS:,} exits, {WORLD_ITEMS:,} items"
    rounds = [{"actors": [{"who": f"Villager {rng.randrange(WORLD_CHARACTERS)}", "moves_to": f"Room {rng.randrange(50)}",
                           "ignore_exits": False, "item_changes": [], "variable_changes": []} for _ in range(4)],
               "elapsed_seconds": 30} for _ in range(repeat)]
    results = [timed("resolve_round", f"4 moves, {size}", lambda r: resolution.resolve(now, r), rounds,
                     "part of a round's 60 ms")]
    edits = [{"characters": [{"name": f"Stranger {n}", "aliases": [], "description": "a stranger", "place": "Room 0",
                              "relationships": [{"to": "Villager 0", "label": "", "summary": "owes money"}]}],
              "places": [{"name": f"Cellar {n}", "aliases": [], "description": "", "features": [],
                          "exits": [{"to": "Room 0", "label": "", "travel_seconds": 10, "both_ways": True}]}],
              "items": []} for n in range(max(5, repeat // 5))]
    results.append(timed("author edit check", f"2 new things, {size}",
                         lambda e: authoring.check_edit(now, e, turn=1, per_turn=2), edits,
                         "no target: a world_lint pass of the whole world"))
    return results
