"""Eligibility is the lineage chokepoint: campaign, active head-capped path, not forgotten, enabled.

Seed 000 §19 and §57.
"""

from campaigns import lineage, story
from memory import bank
from storyteller.context import Action, build
from tests.campaigns.test_lineage import act
from tests.conftest import make_campaign

from .conftest import play_to, remember_at


def eligible_texts(campaign):
    campaign.refresh_from_db()
    return sorted(bank.eligible(campaign.pk, lineage.path_of(campaign)).values_list("text", flat=True))


def prompt(campaign, text="ask about the promise"):
    campaign.refresh_from_db()
    return build(campaign, lineage.path_of(campaign), Action("do", text)).messages[-1]["content"]


def test_an_abandoned_branch_memory_is_never_retrieved(long_story):
    remember_at(long_story, 11, "Mara hid the letter beneath the hearthstone.")
    for _ in range(3):
        story.undo(long_story)  # back to depth 18
    remember_at(long_story, 17, "The abbot blessed the well.")
    play_to(long_story, 18)
    long_story.refresh_from_db()
    story.undo(long_story)
    story.undo(long_story)  # depth 14: the well's blessing (17) is after the head
    act(long_story, "take the other road", "A new road opens.")  # diverge at 14
    act(long_story, "walk on", "The road goes on.")
    assert eligible_texts(long_story) == ["Mara hid the letter beneath the hearthstone."]
    assert "abbot blessed" not in prompt(long_story, "the abbot and the well")


def test_moving_the_head_back_excludes_memories_derived_after_it_and_redo_restores_them(long_story):
    remember_at(long_story, 5, "Aldric promised to return before dawn.")
    remember_at(long_story, 17, "The silver key bears the abbey crypt's symbol.")
    story.undo(long_story)
    story.undo(long_story)
    story.undo(long_story)  # head 18: 17 is still on the line
    assert len(eligible_texts(long_story)) == 2
    story.undo(long_story)  # head 16: the block ending at 17 is after the head
    assert eligible_texts(long_story) == ["Aldric promised to return before dawn."]
    assert "crypt's symbol" not in prompt(long_story, "the silver key")
    story.redo(long_story)
    assert len(eligible_texts(long_story)) == 2
    assert "crypt's symbol" in prompt(long_story, "the silver key")


def test_forgotten_and_disabled_memories_are_not_eligible(long_story):
    remember_at(long_story, 5, "Kept.")
    remember_at(long_story, 11, "Forgotten.", forgotten=True)
    remember_at(long_story, 17, "Disabled.", enabled=False)
    assert eligible_texts(long_story) == ["Kept."]


def test_another_campaigns_memories_never_reach_this_one(long_story, owner):
    other = play_to(make_campaign(owner, title="Other"), 12)
    remember_at(other, 5, "The other campaign's dragon sleeps under the mill.")
    remember_at(long_story, 5, "Mara hid the letter.")
    assert eligible_texts(long_story) == ["Mara hid the letter."]
    assert "sleeps under" not in prompt(long_story, "the dragon under the mill")


def test_a_corrected_memory_is_ranked_on_its_new_words(long_story):
    from storyteller.context import memories as memory_section

    for end in (5, 11, 17):
        remember_at(long_story, end, f"The travellers rested, stretch {end}.")
    wrong = remember_at(long_story, 23, "Mara hid the key in the well.")

    def lexical(question):
        long_story.refresh_from_db()
        path = lineage.path_of(long_story)
        report = memory_section.section(long_story, path, memory_section.query_for(long_story, path,
                                                                                   Action("do", question)))[1]
        return {entry["id"]: entry["lexical"] for entry in report["used"]}[wrong.pk]

    assert lexical("Where is the sundial?") == 0.0
    bank.edit_text(wrong, "Mara hid the sundial in the teapot.")
    assert lexical("Where is the sundial?") == 1.0
