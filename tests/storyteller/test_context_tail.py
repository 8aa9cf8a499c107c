"""The dynamic tail carries labels, not framing (issue 27): what each part is and how far it is trusted is said
once, in the stable prefix, so the part of the prompt a one-cache server reads again every turn stays short."""

import re

from memory import bank
from storyteller import tokens
from storyteller.context import layers
from storyteller.context import memories as memory_section
from storyteller.context import rules as rules_section
from storyteller.context import state as state_section
from tests.campaigns.test_lineage import act
from tests.conftest import make_campaign
from tests.storyteller.test_context_state import context_for, ev, record

LABELS = {"memories": memory_section.HEADER, "state": state_section.HEADER, "rules": rules_section.HEADER}


def test_each_part_of_the_tail_starts_with_a_label_the_stable_prefix_explains(owner):
    campaign = make_campaign(owner, protagonist="Aldric, searching for Edrin")
    act(campaign, "enter the tavern", "The Crooked Lantern is full of smoke.")
    record(campaign, ev("introduce", "Crooked Lantern Tavern", "place"), ev("introduce", "Mara", "character"),
           ev("scene", "", "Crooked Lantern Tavern", "Aldric has found Mara by the fire."), ev("arrive", "Mara"))
    bank.add_by_hand(campaign, "Mara keeps the tavern's ledger.")
    ctx = context_for(campaign, "I ask Mara about the ledger.")

    system, tail = ctx.messages[0]["content"], ctx.messages[-1]["content"]
    present = {s.key: s for s in ctx.sections if s.key in LABELS}
    assert {"memories", "state"} <= set(present), [s.key for s in ctx.sections]
    for key, section in present.items():
        assert section.text.split("\n")[0] == LABELS[key]
        assert section.text in tail
        assert f'"{LABELS[key]}"' in system, f"the stable prefix says what {key} is"
    # What the labels used to say at length is in the stable prefix, each once.
    for framing in ("Lines marked [inferred] are interpretation", "only campaign canon outranks it",
                    "[correction] marks what the player set by hand", "narrate in step with them"):
        assert system.count(framing) == 1 and framing not in tail, framing
    assert system.startswith(layers.NARRATOR_RULES)


def test_the_tails_labels_cost_a_few_tokens_a_turn(owner):
    # The three labels together against the 126 tokens their framing took when it was repeated every turn.
    assert sum(tokens.count(label) for label in LABELS.values()) <= 20
    marked = re.findall(r'^- "([^"]+)"', layers.NARRATOR_RULES, re.MULTILINE)
    assert marked == list(LABELS.values()), "the stable prefix explains exactly the tail's labels, in the tail's order"
