"""The Plot panel: the current summary with its anchor and range, edited by the person (anchored where they typed
it) and rebuilt by the summariser (seed 000 §11 "As implemented", issue 4 item 6)."""

import re

import pytest
from django.urls import reverse

from campaigns import lineage, story
from campaigns.models import Node, StateRecord
from memory import checkpoints
from memory.models import Checkpoint
from storyteller import context
from storyteller.context import Action
from tests.campaigns.test_lineage import act

from .conftest import play_to
from tests.conftest import as_author

HTMX = {"HTTP_HX_REQUEST": "true"}


def summarised(campaign, through, text):
    campaign.refresh_from_db()
    return checkpoints.write(lineage.path_of(campaign), through, text, context.prefix_hash(campaign), model="m1")


def prompt_of(campaign):
    campaign.refresh_from_db()
    ctx = context.build(campaign, lineage.path_of(campaign), Action(mode="do", text="look"))
    return "\n".join(m["content"] for m in ctx.messages)


def edit(client, campaign, text):
    return client.post(reverse("plot_edit", args=[campaign.pk]), {"text": text}, **HTMX).content.decode()


def test_the_page_and_the_fragment_show_the_summary_with_its_anchor_and_range(client_of, campaign):
    as_author(campaign)
    play_to(campaign, 10)
    checkpoint = summarised(campaign, 6, "Aldric reached the abbey and <b>met Mara</b>.")
    page = client_of.get(reverse("plot_panel", args=[campaign.pk])).content.decode()
    assert "<h1>" in page and 'id="plot-panel"' in page
    fragment = client_of.get(reverse("plot_panel", args=[campaign.pk]), **HTMX).content.decode()
    assert fragment.lstrip().startswith('<aside id="plot-panel"')
    assert "Covers depths 0–6" in fragment and f"branch #{checkpoint.branch_id}, depth 6" in fragment
    assert "&lt;b&gt;met Mara&lt;/b&gt;" in fragment and "<b>met Mara" not in fragment  # escaped
    assert "Written by m1" in fragment


def test_the_play_page_loads_the_plot_panel(client_of, campaign):
    page = client_of.get(reverse("play", args=[campaign.pk])).content.decode()
    assert reverse("plot_panel", args=[campaign.pk]) in page


def test_the_panel_says_so_when_there_is_no_summary(client_of, campaign):
    as_author(campaign)
    fragment = client_of.get(reverse("plot_panel", args=[campaign.pk]), **HTMX).content.decode()
    assert "No summary on this line yet" in fragment


def test_a_typed_summary_sits_at_the_head_covers_what_it_replaces_and_reaches_the_narrator(client_of, campaign):
    as_author(campaign)
    play_to(campaign, 10)
    replaced = summarised(campaign, 6, "The model's summary.")
    fragment = edit(client_of, campaign, "MY-SUMMARY: Aldric <i>distrusts</i> the ferryman.")
    typed = Checkpoint.objects.latest("id")
    campaign.refresh_from_db()
    assert typed.typed_by_person and (typed.branch_id, typed.depth) == (campaign.head_branch_id, 10)
    assert typed.source_end == replaced.source_end == 6
    assert "Typed by you" in fragment and "&lt;i&gt;distrusts&lt;/i&gt;" in fragment
    prompt = prompt_of(campaign)
    assert "MY-SUMMARY" in prompt and "The model's summary." not in prompt
    assert Checkpoint.objects.filter(pk=replaced.pk).exists()  # kept


def test_a_typed_summary_leaves_the_line_on_undo_and_comes_back_on_redo(client_of, campaign):
    play_to(campaign, 10)
    edit(client_of, campaign, "MY-SUMMARY of ten passages.")
    story.undo(campaign)
    assert "MY-SUMMARY" not in prompt_of(campaign)
    act(campaign, "another way")
    assert "MY-SUMMARY" not in prompt_of(campaign)
    story.switch_branch(campaign, campaign.head_branch.parent)
    assert "MY-SUMMARY" in prompt_of(campaign)


def test_with_no_summary_a_typed_one_covers_all_but_the_newest_turn(client_of, campaign):
    play_to(campaign, 6)
    edit(client_of, campaign, "Everything before the last turn.")
    assert Checkpoint.objects.get().source_end == 4


def test_an_empty_summary_or_one_at_the_opening_is_refused_and_nothing_is_saved(client_of, campaign):
    assert "play a turn first" in edit(client_of, campaign, "Too early.")
    play_to(campaign, 4)
    assert "Nothing was saved: A summary needs some text" in edit(client_of, campaign, "   ")
    assert not Checkpoint.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_rebuilding_asks_the_summariser_afresh_from_the_story_alone(client_of, campaign, narrator_server):
    play_to(campaign, 10)
    summarised(campaign, 6, "A wrong summary the rebuild must not carry on.")
    narrator_server.script_json({"summary": "REBUILT: Aldric walked five steps."})
    fragment = client_of.post(reverse("plot_rebuild", args=[campaign.pk]), **HTMX).content.decode()
    assert "Rebuilt from depths 0–6" in fragment and "REBUILT: Aldric walked five steps." in fragment
    [request] = [b for b in narrator_server.bodies("/api/chat") if b.get("format")]
    assert "A wrong summary" not in request["messages"][1]["content"]
    assert campaign.opening in request["messages"][1]["content"]
    assert "REBUILT" in prompt_of(campaign)


@pytest.mark.django_db(transaction=True)
def test_a_failed_rebuild_says_why_and_keeps_the_summary(client_of, campaign, narrator_server):
    play_to(campaign, 10)
    summarised(campaign, 6, "The summary that stays.")
    narrator_server.script_json({"summary": ""}, {"summary": ""})  # an empty summary, and again when asked once more
    fragment = client_of.post(reverse("plot_rebuild", args=[campaign.pk]), **HTMX).content.decode()
    assert "The summary was not rebuilt" in fragment and "summary is 0 characters long" in fragment
    assert "The summary that stays." in fragment
    assert Checkpoint.objects.count() == 1


def test_an_unusable_summary_is_shown_with_its_reason(client_of, campaign):
    as_author(campaign)
    play_to(campaign, 10)
    summarised(campaign, 6, "Soon stale.")
    campaign.nodes.filter(depth=3).update(text="a forged line")
    fragment = client_of.get(reverse("plot_panel", args=[campaign.pk]), **HTMX).content.decode()
    assert "is not used" in fragment and "source hash" in fragment



def test_a_summary_written_under_other_canon_is_shown_unused_as_the_next_turn_would_refuse_it(client_of, campaign):
    as_author(campaign)
    play_to(campaign, 10)
    summarised(campaign, 6, "Written before the canon changed.")
    campaign.canon_rules.create(text="Magic is forbidden in Greyhollow.")
    fragment = client_of.get(reverse("plot_panel", args=[campaign.pk]), **HTMX).content.decode()
    assert "is not used" in fragment and "stable prefix" in fragment

@pytest.mark.parametrize("name", ["plot_panel", "plot_edit", "plot_rebuild"])
def test_another_persons_campaign_is_404_and_the_wrong_method_405(client, outsider, campaign, name):
    client.force_login(outsider)
    method = client.get if name == "plot_panel" else client.post
    assert method(reverse(name, args=[campaign.pk])).status_code == 404
    client.force_login(campaign.owner)
    wrong = client.post if name == "plot_panel" else client.get
    assert wrong(reverse(name, args=[campaign.pk])).status_code == 405


def test_the_inspector_names_the_summarys_anchor_and_range_and_which_nodes_were_verbatim(client_of, campaign):
    as_author(campaign)
    play_to(campaign, 10)
    checkpoint = summarised(campaign, 6, "Aldric walked and <em>waited</em>.")
    campaign.refresh_from_db()
    ctx = context.build(campaign, lineage.path_of(campaign), Action(mode="do", text="look"))
    node = story.commit_turn(
        campaign.pk, (campaign.head_branch_id, campaign.head_depth), story.PlayerAction(mode="do", text="look"),
        story.Reply(text="You look.", tokens=2, report=ctx.report, model="test", api="test"))
    page = client_of.get(reverse("inspector", args=[campaign.pk, node.pk])).content.decode()
    assert (f"Checkpoint #{checkpoint.pk}: it sits at branch #{checkpoint.branch_id}, depth 6, "
            "and covers depths 0–6") in page
    assert "Verbatim: depths 7–10 (4 passages, word for word)." in page
    assert "Covered by the checkpoint summary: depths 0–6." in page
    assert "&lt;em&gt;waited&lt;/em&gt;" in page and "<em>waited" not in page


def test_deleting_every_checkpoint_changes_no_node_state_or_page(client_of, campaign):
    play_to(campaign, 10)
    summarised(campaign, 6, "A summary to delete.")
    edit(client_of, campaign, "A typed one too.")

    def snapshot():
        page = client_of.get(reverse("play", args=[campaign.pk])).content.decode()
        page = re.sub(r"[A-Za-z0-9]{64}", "", page)  # CSRF tokens are masked afresh on every render
        campaign.refresh_from_db()
        return (page, list(Node.objects.values()), list(StateRecord.objects.values()),
                (campaign.head_branch_id, campaign.head_depth))

    before = snapshot()
    assert checkpoints.delete_all(campaign.pk) == 2
    assert snapshot() == before


def test_the_admin_lists_checkpoints_and_never_edits_one(admin_client, campaign):
    play_to(campaign, 4)
    checkpoint = summarised(campaign, 2, "Listed in the admin.")
    listing = admin_client.get(reverse("admin:memory_checkpoint_changelist")).content.decode()
    assert f">{checkpoint.pk}<" in listing
    admin_client.post(reverse("admin:memory_checkpoint_change", args=[checkpoint.pk]), {"text": "Edited."})
    assert Checkpoint.objects.get(pk=checkpoint.pk).text == "Listed in the admin."
