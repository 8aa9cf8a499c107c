"""Keyed entries in the prompt: framed by their book's level in the tail, constants priced first, every drop
reported with its cost, and the inspector saying why each entry fired or not."""

import pytest
from django.urls import reverse

from campaigns import lineage, story
from campaigns.models import ContextSnapshot
from knowledge import importer, worldinfo
from storyteller import context
from storyteller.context import lorebook

from . import make


def _book(campaign, entries, level="canon", name="Abbey"):
    importer.import_keyed(campaign, f"{name}.json", worldinfo.read({"entries": entries}, name), level)


def _build(campaign, text):
    return context.build(campaign, lineage.path_of(campaign), context.Action(mode="do", text=text))


@pytest.mark.django_db
def test_fired_entries_sit_in_the_tail_framed_by_their_books_level(campaign):
    _book(campaign, {"0": {"uid": 0, "key": ["dragon"], "content": "{{char}} fears the dragon."}}, "inspiration")
    ctx = _build(campaign, "A dragon!")
    section = next(s for s in ctx.sections if s.key == "lorebook_inspiration")
    assert section.zone == "dynamic_tail" and "BEGIN LOREBOOK, INSPIRATION — UNTRUSTED DATA" in section.text
    assert "dragon" not in ctx.messages[0]["content"], "the stable prefix never changes with what fires"
    assert ctx.report["lorebook"]["fired"][0]["key_text"] == "dragon"
    assert ctx.report["budget"]["lorebook_tokens"] == section.tokens + 1


@pytest.mark.django_db
def test_constants_are_priced_first_and_a_drop_is_reported_with_its_cost(campaign):
    long = "The abbey's rule. " * 400
    _book(campaign, {"0": {"uid": 0, "constant": True, "comment": "Rule", "content": long},
                     "1": {"uid": 1, "key": ["bell"], "comment": "Bell", "content": "The bell is cracked."},
                     "2": {"uid": 2, "constant": True, "comment": "Small", "content": "The abbey is old."}})
    ctx = _build(campaign, "the bell")
    report = ctx.report["lorebook"]
    included = {entry["title"]: entry["included"] for entry in report["fired"]}
    assert included == {"Rule": False, "Bell": True, "Small": True}
    dropped = [item for item in ctx.report["dropped"] if item["key"] == "lorebook"]
    assert dropped and dropped[0]["what"] == "Rule (Abbey), constant lorebook entry"
    assert dropped[0]["tokens"] > report["budget"] and "no room left in the lorebook budget" in dropped[0]["reason"]


@pytest.mark.django_db
def test_the_inspector_says_why_each_entry_fired_or_not(campaign, client_of):
    _book(campaign, {
        "0": make.every_field_entry(0, position=0, keysecondary=[]),
        "1": make.every_field_entry(1, key=["gate"], keysecondary=["north"], comment="The gate",
                                    content="The gate is barred."),
        "2": make.every_field_entry(2, key=["wyrm"], keysecondary=[], comment="<script>alert(1)</script>",
                                    content="<b>x</b>"),
        "3": make.every_field_entry(3, key=["harbour"], keysecondary=[], comment="Harbour"),
    })
    ctx = _build(campaign, "The wyrm flies over the gate.")
    reply = story.commit_turn(campaign.pk, (campaign.head_branch_id, 0),
                              story.PlayerAction("do", "The wyrm flies over the gate."),
                              story.Reply("It circles.", 3, ctx.report, "m", "ollama"))
    page = client_of.get(reverse("inspector", args=[campaign.pk, reply.pk])).content.decode()
    assert "its key “wyrm” in turn 1 (you)" in page
    assert "its key “gate” was found, but its secondary keys (“north”) must be “and any” and are not" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert "1 other entry had none of its keys" in page
    assert ContextSnapshot.objects.get(node=reply).report["lorebook"]["quiet"] == 1


@pytest.mark.django_db
def test_no_keyed_book_costs_nothing_and_reports_nothing(campaign):
    ctx = _build(campaign, "hello")
    assert "lorebook" not in ctx.report
    assert lorebook.sections(campaign, lineage.path_of(campaign), context.Action("do", "x"), 1000) == ([], None, 0)
