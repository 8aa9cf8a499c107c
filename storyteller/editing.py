"""Edit any message: a new version of it, never an overwrite, with the story's derived data following it.

An edited reply is a sibling of the reply it edits, on a branch of its own,
as a retry's is (``story.commit_edit``): the old text stays one flip away,
and every post-turn step — the recorder, the minds, memory — runs on the new
version as on a new reply, so what the old version changed stays on the old
line. Editing a reply before the head's is a branch from there; the page
says so before it happens. An edited action is a turn: the narrator answers
it (``turns.play_turn(edit_of=...)``).

A game master's reply is not edited: its rounds, and the events they
applied, hang under the reply node, and a new version would have to play
them again.
"""

from django.db import transaction

from campaigns import lineage, story
from campaigns.models import NODE_CHARS, Campaign, Node

from . import context


class EditRefused(Exception):
    """An edit could not be saved; the message says why and what to do. Nothing was changed."""


def later_turns(campaign, node):
    """Return how many turns of the line come after ``node``'s turn: what an edit there leaves on the old branch."""
    return max(0, (campaign.head_depth - node.depth - (1 if node.role == Node.Role.PLAYER else 0)) // 2)


def editable(campaign, node_id):
    """Return the action or reply ``node_id`` on the campaign's line, or refuse in words."""
    node = (Node.objects.select_related("snapshot").filter(pk=node_id, campaign=campaign)
            .exclude(role=Node.Role.OPENING).first())
    if node is None or not lineage.path_of(campaign).contains(node.branch_id, node.depth):
        raise EditRefused("That message is no longer on this line of the story (another tab moved it); the page now "
                          "shows the story as it stands. Nothing was changed.")
    if node.role == Node.Role.NARRATOR and node.rounds.filter(kind="gm").exists():
        raise EditRefused("A game master's reply cannot be edited (its rounds, and what they changed, belong to it). "
                          "Retry it, or edit your action before it. Nothing was changed.")
    return node


def edit_reply(campaign_id, node_id, text):
    """Save ``text`` as a new version of reply ``node_id`` and show it; return the new reply node.

    The new version's inspector shows what the narrator was told for the
    version it edits, marked as edited. Run the post-turn steps on it after
    the commit (``postturn.schedule``).
    """
    text = _checked(text)
    with transaction.atomic():
        campaign = Campaign.objects.get(pk=campaign_id)
        node = editable(campaign, node_id)
        if node.role != Node.Role.NARRATOR:
            raise EditRefused("Only a reply is saved this way; an edited action is played (the narrator answers it).")
        if text == node.text:
            raise EditRefused("The reply is unchanged, so no new version was saved.")
        report = {**node.snapshot.report, "edited": {"from": node.pk, "chars_before": len(node.text)}}
        try:
            return story.commit_edit(campaign.pk, (campaign.head_branch_id, campaign.head_depth), node, text,
                                     context.node_tokens(Node.Role.NARRATOR, "", text), report)
        except story.StoryMovedOn as moved:
            raise EditRefused(str(moved)) from moved


def _checked(text):
    """Return the edited text, or refuse it in words (empty, too long, not Unicode text)."""
    text = (text or "").strip()
    if not text:
        raise EditRefused("An edited reply needs some text; to take a reply back, use Undo. Nothing was changed.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise EditRefused(f"The edit holds a broken character at position {error.start + 1:,} (half of a surrogate "
                          "pair, often left by copying part of an emoji). Delete or retype it; nothing was "
                          "changed.") from error
    if len(text) > NODE_CHARS:
        raise EditRefused(f"The edit is {len(text):,} characters long; a reply may hold {NODE_CHARS:,}. Shorten it "
                          f"by {len(text) - NODE_CHARS:,}; nothing was changed.")
    return text
