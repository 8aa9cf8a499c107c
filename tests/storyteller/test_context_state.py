"""The state in the context: the worked examples of seed 000 §53-§54, order, framing, protection."""

from campaigns import lineage
from campaigns.models import CanonRule, Node
from campaigns.state import apply_events, selection
from storyteller.context import Action, build
from tests.campaigns.test_lineage import act
from tests.conftest import make_campaign
from tests.storyteller.test_context_checkpoints import build_compacting


def ev(type, subject="", object="", value="", **extra):
    return {"type": type, "subject": subject, "object": object, "value": value, **extra}


def record(campaign, *events):
    campaign.refresh_from_db()
    node = Node.objects.get(branch_id=campaign.head_branch_id, depth=campaign.head_depth)
    stored = apply_events(node, list(events), source="recorder", attempt=1)
    assert all(e.status == "applied" for e in stored), [e.reason for e in stored]


def context_for(campaign, text):
    campaign.refresh_from_db()
    return build(campaign, lineage.path_of(campaign), Action(mode="do", text=text))


def positions(text, *needles):
    return [text.index(needle) for needle in needles]


def test_the_tavern_example_of_section_53(owner):
    campaign = make_campaign(owner, protagonist="Aldric, searching for Edrin")
    for rule in ("Magic is rare.", "The dead cannot be resurrected."):
        CanonRule.objects.create(campaign=campaign, text=rule)
    act(campaign, "enter the tavern", "The Crooked Lantern is full of smoke.")
    record(
        campaign,
        ev("introduce", "Crooked Lantern Tavern", "place"),
        ev("introduce", "Mara", "character"),
        ev("scene", "", "Crooked Lantern Tavern", "Aldric has found Mara by the fire."),
        ev("arrive", "Mara"),
        ev("introduce", "silver key", "item", data={"holder": "Aldric"}),
        ev("relationship", "Mara", "Aldric", "trusts him cautiously"),
    )
    ask = "I ask Mara whether she recognizes the symbol on the key."
    ctx = context_for(campaign, ask)

    system, tail = ctx.messages[0]["content"], ctx.messages[-1]["content"]
    assert "You are the narrator" in system
    assert positions(system, "Magic is rare.", "The dead cannot be resurrected.")
    assert "Mara" not in system, "the state is not in the stable prefix"
    state = [s for s in ctx.sections if s.key == "state"][0].text
    for line in ("Location: Crooked Lantern Tavern", "- Here: silver key, carried by Aldric. [state]",
                 "- Mara is present. [state]", "- Mara → Aldric: trusts him cautiously [state]"):
        assert line in state
    assert tail.index("Current story state") < tail.index(ask)
    assert tail.endswith(f"The player's character acts: {ask}")
    assert [s.key for s in ctx.sections] == [
        "narrator_rules", "campaign_profile", "canon", "history", "state", "player_input",
    ]


def test_the_persephone_example_of_section_54(owner):
    campaign = make_campaign(owner, title="Persephone", genre="science fiction",
                             protagonist="Captain Reyes of the Persephone", opening="Ceres Station, dock 4.")
    for rule in ("FTL does not exist.", "Persephone uses a fusion torch drive."):
        CanonRule.objects.create(campaign=campaign, text=rule)
    act(campaign, "prepare to depart", "Clamps release.")
    record(
        campaign,
        ev("introduce", "Ceres Station", "place"),
        ev("introduce", "Persephone", "item", "the crew's fusion-torch ship"),
        ev("scene", "", "Ceres Station", "Persephone is departing Ceres Station."),
        ev("add_fact", "Persephone", "", "Fuel reserve: established as limited."),
        ev("add_fact", "", "", "Crew has detected a radiation storm."),
    )
    question = "Can the Persephone reach Europa before the storm hits?"
    ctx = context_for(campaign, question)
    system, tail = ctx.messages[0]["content"], ctx.messages[-1]["content"]
    assert "- FTL does not exist." in system and "- Persephone uses a fusion torch drive." in system
    state_at, fuel, storm, asked = positions(
        tail, "Scene: Persephone is departing Ceres Station.", "Fuel reserve: established as limited.",
        "Crew has detected a radiation storm.", question)
    assert state_at < fuel < asked and storm < asked
    assert "Persephone (item): the crew's fusion-torch ship" in tail, "a thing the player names is in scope"
    # An event claiming FTL is rejected by canon, so the state never says so.
    node = Node.objects.filter(campaign=campaign).order_by("-depth").first()
    [rejected] = apply_events(node, [ev("add_fact", value="FTL exists.")], source="correction")
    assert rejected.status == "rejected" and "FTL does not exist." in rejected.reason


def test_each_state_line_in_the_report_carries_its_authority_and_provenance(campaign, owner):
    from campaigns.state import correct

    act(campaign, "enter", "Mara is here.")
    record(campaign, ev("introduce", "Mara", "character", "an archivist"), ev("introduce", "tavern", "place"),
           ev("scene", "", "tavern", "Evening."), ev("arrive", "Mara"))
    correct(campaign, owner, ev("add_fact", "Mara", "", "Mara keeps a ledger.", narrator_only=True))
    ctx = context_for(campaign, "talk to Mara")
    [section] = [s for s in ctx.report["sections"] if s["key"] == "state"]
    assert section["protected"] and section["zone"] == "dynamic_tail"
    [secret] = [c for c in section["components"] if c["text"] == "Mara keeps a ledger."]
    assert secret["authority"] == "correction" and secret["narrator_only"]
    assert secret["provenance"].startswith("correction by reader at turn 1")
    [present] = [c for c in section["components"] if c["text"] == "Mara is present."]
    assert present["authority"] == "state" and present["provenance"].startswith("recorded after turn 1")


def test_state_is_protected_so_history_gives_way_first(campaign):
    act(campaign, "enter", "word " * 400)
    record(campaign, ev("introduce", "tavern", "place"), ev("scene", "", "tavern", "A quiet evening."))
    campaign.context_token_budget = 1300
    campaign.save()
    campaign.refresh_from_db()
    ctx = build_compacting(campaign, Action(mode="do", text="wait"))
    assert "Scene: A quiet evening." in ctx.messages[-1]["content"]
    assert ctx.report["history"]["covered"], "history gives way to a summary, never the state"


def test_state_lines_beyond_the_limit_are_reported_as_left_out(campaign):
    act(campaign, "look", "Many things are true.")
    record(campaign, *[ev("add_fact", value=f"Fact number {i} holds.") for i in range(selection.MAX_LINES + 5)])
    ctx = context_for(campaign, "look")
    left_out = [item for item in ctx.report["dropped"] if item["key"] == "state"]
    assert len(left_out) == 5
    assert [item["what"] for item in left_out] == [f"Fact number {i} holds." for i in range(4, -1, -1)]
    assert f"Fact number {selection.MAX_LINES + 4} holds." in ctx.messages[-1]["content"], "newest facts are kept"


def test_nothing_is_added_while_the_story_has_no_state(campaign):
    ctx = context_for(campaign, "look")
    assert "state" not in [s.key for s in ctx.sections]
