"""The author's note: depth and interval as SillyTavern's, in the dynamic tail, per campaign with a branch's own."""

import pytest
from django.urls import reverse

from campaigns import lineage, notes, story
from campaigns.models import AuthorNote, Campaign
from storyteller import context, tokens
from storyteller.context import Action
from tests.campaigns.test_lineage import act, retry
from tests.conftest import make_campaign
from tests.storyteller.test_views import HTMX

NOTE = "Keep the mood tense: Mara is hiding something."


def build(campaign):
    campaign.refresh_from_db()
    return context.build(campaign, lineage.path_of(campaign), Action(mode="do", text="look around"))


def note_of(ctx):
    return [index for index, message in enumerate(ctx.messages) if NOTE in message["content"]]


def rendered(messages):
    return "".join(f"<{m['role']}>{m['content']}" for m in messages)


def test_a_note_at_depth_2_every_3_turns_sits_exactly_there_and_the_prefix_still_holds(campaign):
    notes.save_note(campaign, text=NOTE, depth=2, interval=3, role="system", branch_only=False)
    previous = None
    for turn in range(1, 10):
        ctx = build(campaign)
        found = note_of(ctx)
        report = ctx.report["author_note"]
        if turn % 3:
            assert found == [] and report["due"] is False, f"turn {turn} is not given the note"
            assert ctx.tail_start == len(ctx.messages) - 1
        else:
            assert found == [len(ctx.messages) - 3], f"turn {turn}: two messages from the end"
            assert ctx.messages[-2]["role"] == "assistant" and ctx.messages[-3]["role"] == "system"
            assert report["due"] and report["from_end"] == 2 and report["index"] == found[0]
            assert report["tokens"] == tokens.count(ctx.messages[found[0]]["content"])
            assert report["after"]["role"] == "user", "after the player's last action, before the last reply"
            assert ctx.tail_start == found[0]
            section = next(s for s in ctx.report["sections"] if s["key"] == "author_note")
            assert section["zone"] == "dynamic_tail" and section["protected"]
        if previous is not None:
            assert rendered(ctx.messages).startswith(rendered(previous.messages[:previous.tail_start])), (
                f"turn {turn} starts with all of the previous prompt up to its tail")
        previous = ctx
        act(campaign, f"step {turn}", f"Reply {turn}.")


def test_depth_0_follows_the_players_input_and_costs_the_cache_nothing(campaign):
    act(campaign, "open the gate", "The gate creaks open.")
    notes.save_note(campaign, text=NOTE, depth=0, interval=1, role="user", branch_only=False)
    ctx = build(campaign)
    assert ctx.messages[-1] == {"role": "user", "content": NOTE}, "in the player's voice, as written"
    assert ctx.tail_start == ctx.input_at == len(ctx.messages) - 2


def test_the_note_is_priced_as_protected_and_a_note_that_is_off_is_never_given(campaign):
    before = build(campaign).report["budget"]["protected_tokens"]
    notes.save_note(campaign, text=NOTE, depth=1, interval=1, role="system", branch_only=False)
    ctx = build(campaign)
    assert ctx.report["budget"]["protected_tokens"] > before + tokens.count(NOTE)
    notes.save_note(campaign, text=NOTE, depth=1, interval=0, role="system", branch_only=False)
    ctx = build(campaign)
    assert note_of(ctx) == [] and ctx.report["author_note"]["next_turn"] is None


def test_a_branch_note_holds_on_its_branch_and_those_grown_from_it_and_nowhere_else(campaign):
    notes.save_note(campaign, text="The campaign's note.", depth=1, interval=1, role="system", branch_only=False)
    act(campaign, "open the gate", "The gate creaks open.")
    root = campaign.head_branch_id
    retry(campaign, "The gate sticks.")
    notes.save_note(campaign, text=NOTE, depth=1, interval=1, role="system", branch_only=True)
    assert note_of(build(campaign)), "the branch's own note"
    retry(campaign, "The gate shatters.")  # a branch grown from it
    assert note_of(build(campaign)), "kept by the branch grown from it"
    story.switch_branch(campaign, campaign.branches.get(pk=root))
    ctx = build(campaign)
    assert note_of(ctx) == [] and "The campaign's note." in rendered(ctx.messages), "the old line keeps the campaign's"


def test_the_note_reads_user_as_the_persona(campaign, owner):
    from campaigns.models import Persona

    campaign.persona = Persona.objects.create(owner=owner, name="Wren")
    campaign.save()
    notes.save_note(campaign, text="{{user}} is being followed.", depth=1, interval=1, role="system",
                    branch_only=False)
    assert "Wren is being followed." in rendered(build(campaign).messages)


def test_the_panel_shows_the_note_and_saves_it_for_the_campaign_or_the_branch(client_of, campaign):
    url = reverse("note_panel", args=[campaign.pk])
    fragment = client_of.get(url, **HTMX).content.decode()
    assert fragment.lstrip().startswith('<aside id="note-panel"') and "No note yet." in fragment
    page = client_of.get(url).content.decode()
    assert "<html" in page and 'id="note-panel"' in page
    save = reverse("note_save", args=[campaign.pk])
    response = client_of.post(save, {"text": NOTE, "depth": 2, "interval": 3, "role": "system"}, **HTMX)
    assert "Saved for the campaign" in response.content.decode() and "next on turn 3" in response.content.decode()
    assert AuthorNote.objects.get(campaign=campaign, branch=None).depth == 2
    response = client_of.post(save, {"text": "Other.", "depth": 1, "interval": 1, "role": "user",
                                     "branch_only": "on"}, **HTMX)
    assert "This branch has its own note." in response.content.decode()
    response = client_of.post(save, {"remove": "1"}, **HTMX)
    assert "now follows the campaign&#x27;s note" in response.content.decode()
    assert AuthorNote.objects.filter(campaign=campaign).count() == 1
    assert client_of.get(save).status_code == 405


def test_a_bad_note_is_refused_in_words_and_nothing_changes(client_of, campaign):
    save = reverse("note_save", args=[campaign.pk])
    response = client_of.post(save, {"text": NOTE, "depth": 0, "interval": 1, "role": "assistant"}, **HTMX)
    assert "would be read as the start of its reply" in response.content.decode()
    response = client_of.post(save, {"text": NOTE, "depth": 99, "interval": 1, "role": "system"}, **HTMX)
    assert "The note&#x27;s depth may be 0 to 50" in response.content.decode()
    assert not AuthorNote.objects.exists()


def test_another_users_note_is_404(client, campaign, outsider):
    client.force_login(outsider)
    assert client.get(reverse("note_panel", args=[campaign.pk]), **HTMX).status_code == 404
    assert client.post(reverse("note_save", args=[campaign.pk]), {"text": "x", "depth": 1, "interval": 1,
                                                                  "role": "system"}).status_code == 404
    assert not AuthorNote.objects.exists()
    assert Campaign.objects.get(pk=make_campaign(outsider).pk)


def test_a_bundle_keeps_the_notes_and_the_thinking_beside_the_replies(campaign, owner):
    from campaigns.models import Node
    from storyteller import bundle

    act(campaign, "open the gate", "The gate creaks open.")
    Node.objects.filter(depth=2).update(thinking="They want the gate; the key is hidden.")
    notes.save_note(campaign, text=NOTE, depth=2, interval=3, role="system", branch_only=False)
    notes.save_note(campaign, text="On this branch only.", depth=0, interval=1, role="user", branch_only=True)
    restored = bundle.import_bundle(owner, bundle.dumps(campaign))
    reply = restored.nodes.get(depth=2)
    assert reply.text == "The gate creaks open." and reply.thinking == "They want the gate; the key is hidden."
    kept = {(note.branch_id is None, note.text, note.depth, note.interval, note.role)
            for note in AuthorNote.objects.filter(campaign=restored)}
    assert kept == {(True, NOTE, 2, 3, "system"), (False, "On this branch only.", 0, 1, "user")}
    assert AuthorNote.objects.get(campaign=restored, branch__isnull=False).branch.campaign_id == restored.pk
