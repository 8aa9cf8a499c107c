"""The deterministic retention scenarios (seed 004 §C.4.1), played through the real turn path.

Each scenario starts the stub model server on a free loopback port, points
the app at it, and plays a fresh campaign through ``turns.play_turn`` (the
turn the websocket plays) and the real post-turn worker, awaited after every
turn so eviction happens at a known turn. A planted fact F goes in as a
``story`` action; the recall question is the last turn; the result is the
diagnosis of F at that turn and the isolation checks that make it count.

Depths: the opening is 0, turn n's action is 2n - 1 and its reply 2n.
"""

import contextlib
import json
from dataclasses import asdict, dataclass, field

from asgiref.sync import sync_to_async
from django.conf import settings

from campaigns import lineage, story
from campaigns.models import Campaign, ContextSnapshot, Node, SavePoint
from memory import bank
from memory.models import Memory

from .. import turns
from ..context import Action
from ..llm.fake_server import FakeModelServer
from .isolation import isolation
from .retention import diagnose
from .stubs import DiagnosticStubs, Fact

F = Fact("I watch Mara slip the amber sundial inside the cracked teapot on the tavern's top shelf, "
         "and she makes me promise to tell no one.", ("sundial", "teapot"))
G = Fact("I see Aldric bury the iron compass beneath the lone birch behind the granary.", ("compass", "birch"))
RECALL = "I ask Mara where she hid the amber sundial."
ACTIONS = (
    "I walk on and look around.", "I ask the carter about the road ahead.", "I rest for a while and listen.",
    "I buy bread and cheese for the road.", "I read back over my journal.", "I follow the crowd along the lane.",
)
OPENING = "Rain falls on the river town as Aldric arrives with the evening ferry."
TITLE = "Memory diagnostic: {name}"


@dataclass(frozen=True)
class Scenario:
    name: str
    turns: int = 52  # played before the recall turn
    capacity: int = 80
    top_k: int = 5
    budget: int = 4096  # context_token_budget
    words: int = 60  # about how long each reply is
    plant_depth: int = 1  # F's action: 1 (turn 1) or 5 (turn 3)
    pin_first_other: bool = False
    lineage: bool = False

    @property
    def max_output_tokens(self):
        # Room for the reply's words (about 1.3 tokens each) so none is cut short.
        return max(200, int(self.words * 1.6))


SCENARIOS = {s.name: s for s in (
    Scenario("independent_default"),
    Scenario("past_capacity", capacity=6),
    Scenario("past_capacity_pinned", capacity=6, pin_first_other=True),
    Scenario("past_capacity_low_top_k", capacity=8, top_k=2),
    # Block 0-5 of ~850-word replies is over 2,000 tokens; by the recall a checkpoint covers it, not the history.
    Scenario("long_block_fact_early", turns=10, budget=16384, words=850, plant_depth=1),
    Scenario("long_block_fact_late", turns=10, budget=16384, words=850, plant_depth=5),
    Scenario("lineage_control", lineage=True),
)}


@dataclass
class Outcome:
    """One scenario's result: F's verdict, whether it counts (isolation holds), and what was seen on the way."""

    scenario: str
    verdict: str
    counts: bool
    diagnosis: dict
    isolation: dict
    details: dict = field(default_factory=dict)
    campaign_id: int | None = None
    recall_node_id: int | None = None

    def to_json(self):
        return json.loads(json.dumps(asdict(self), default=str))


async def run(scenario, owner):
    """Play ``scenario`` (a Scenario or the name of one) for ``owner`` against the stub server; return its Outcome."""
    scenario = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
    stubs = DiagnosticStubs(facts=[F, G], words=scenario.words)
    with FakeModelServer(stubs=stubs) as server, _pointed_at(server, scenario):
        campaign = await sync_to_async(_new_campaign)(scenario, owner)
        return await _play(scenario, campaign)


@contextlib.contextmanager
def _pointed_at(server, scenario):
    """Point the app at ``server`` with the scenario's capacity and top_k, and put every setting back after."""
    overrides = {
        "STORYTELLER_LLM_URL": server.url, "STORYTELLER_LLM_URL_CONFIGURED": True, "STORYTELLER_LLM_API": "ollama",
        "STORYTELLER_MEMORY_BANK_CAPACITY": scenario.capacity, "STORYTELLER_MEMORY_TOP_K": scenario.top_k,
    }
    saved = {name: getattr(settings, name, None) for name in overrides}
    for name, value in overrides.items():
        setattr(settings, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(settings, name, value)


def _new_campaign(scenario, owner):
    campaign = Campaign.objects.create(
        owner=owner, title=TITLE.format(name=scenario.name), genre="fantasy",
        protagonist="Aldric, a wandering scribe", opening=OPENING, context_token_budget=scenario.budget,
        max_output_tokens=scenario.max_output_tokens, temperature=0.0)
    return story.start_campaign(campaign)


async def _play(scenario, campaign):
    details = {}
    pinned = None
    turn = 0
    # Played to depth 2·turns on the line that is active at the end (lineage_control's undo is made up for).
    while await sync_to_async(_head_depth)(campaign) < 2 * scenario.turns:
        turn += 1
        await _turn(campaign, _action(scenario, turn))
        if scenario.pin_first_other and pinned is None:
            pinned = await sync_to_async(_pin_first_other)(campaign)
        if scenario.lineage and turn == 20:
            await sync_to_async(_save)(campaign, "before G")
        if scenario.lineage and turn == 29:
            details.update(await _diverge(campaign))
    recall = await _turn(campaign, Action("do", RECALL))
    if scenario.lineage:
        details.update(await sync_to_async(_lineage_checks)(campaign, details))
    if scenario.pin_first_other:
        details["pinned_memory"] = pinned
        details["pinned_memory_kept"] = await sync_to_async(
            lambda: pinned is not None and not Memory.objects.get(pk=pinned).forgotten)()
    return await sync_to_async(_judge)(scenario, campaign, recall, details)


def _action(scenario, turn):
    if scenario.lineage and turn == 21:
        return Action("story", G.text)
    if 2 * turn - 1 == scenario.plant_depth:
        return Action("story", F.text)
    return Action("do", ACTIONS[turn % len(ACTIONS)])


async def _turn(campaign, action):
    async def relay(_):
        pass

    result = await turns.play_turn(campaign.pk, action, relay)
    await result.post_turn  # settled before the next turn, so eviction happens at a known turn
    return result.node_id


def _head_depth(campaign):
    return Campaign.objects.values_list("head_depth", flat=True).get(pk=campaign.pk)


def _pin_first_other(campaign):
    """Pin the first written memory that does not carry F; return its id (None until one is written)."""
    for memory in Memory.objects.filter(campaign=campaign, origin=Memory.Origin.SUMMARISER).order_by("id"):
        if not F.carries(memory.text):
            bank.set_flags(memory, pinned=True)
            return memory.pk
    return None


def _save(campaign, name):
    campaign.refresh_from_db()
    story.create_save_point(campaign, name)


async def _diverge(campaign):
    """Save after G, undo nine turns (back before G), and return where the new line starts."""

    def step():
        campaign.refresh_from_db()
        story.create_save_point(campaign, "after G")
        g = Memory.objects.filter(campaign=campaign, source_start__lte=41, source_end__gte=41).first()
        for _ in range(9):
            story.undo(campaign)
        campaign.refresh_from_db()
        return {"g_memory": g.pk if g else None, "g_memory_carries_g": bool(g and G.carries(g.text)),
                "divergence_depth": campaign.head_depth,
                "last_node_before_divergence": Node.objects.filter(campaign=campaign).order_by("-id").first().pk}

    return await sync_to_async(step)()


def _lineage_checks(campaign, details):
    """Return seed 004 §I's assertions: G stays stored, is never eligible or injected after the divergence, and
    comes back when line A does."""
    g = details.get("g_memory")
    campaign.refresh_from_db()
    path = lineage.path_of(campaign)
    after = ContextSnapshot.objects.filter(node__campaign=campaign, node__pk__gt=details["last_node_before_divergence"])
    leaks = [snapshot.node_id for snapshot in after
             if g in [entry["id"] for entry in snapshot.report.get("memories", {}).get("used", [])]
             or any(G.leaks(section["text"]) for section in snapshot.report.get("sections", [])
                    if section["key"] != "player_input")]
    eligible_now = bank.eligible(campaign.pk, path).filter(pk=g).exists()
    end = story.create_save_point(campaign, "recall")
    story.restore_save_point(SavePoint.objects.get(campaign=campaign, name="after G"))
    campaign.refresh_from_db()
    eligible_on_a = bank.eligible(campaign.pk, lineage.path_of(campaign)).filter(pk=g).exists()
    story.restore_save_point(end)
    return {
        "g_memory_stored": Memory.objects.filter(pk=g).exists(),
        "g_eligible_after_divergence": eligible_now,
        "g_injected_after_divergence": leaks,
        "g_eligible_again_on_line_a": eligible_on_a,
    }


def _judge(scenario, campaign, recall_id, details):
    recall = Node.objects.get(pk=recall_id)
    path = lineage.path_at(campaign.pk, recall.branch_id, recall.depth)
    diagnosis = diagnose(campaign, F, recall)
    isolated = isolation(campaign, path, F, recall)
    details["evicted"] = Memory.objects.filter(campaign=campaign, forgotten=True).count()
    details["memories"] = Memory.objects.filter(campaign=campaign).count()
    return Outcome(scenario.name, diagnosis.verdict, isolated.holds, diagnosis.to_json(), isolated.to_json(), details,
                   campaign.pk, recall.pk)
