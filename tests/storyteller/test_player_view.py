"""The player's view never shows what the player's character does not know; the author's view shows it (issue 24).

A world holds a canary — a word found nowhere else — in each kind of thing
the player's character has no reason to know: a narrator-only fact, another
character's inner state, routine, plan, belief and ties, a hidden item, exit
and feature, what is shut in a closed chest, a secret trigger, where someone
absent is, a stranger, a thing far away, a narrator-only variable, event and
file, a roll of the game master's, the narrator's thinking, the game
master's reasons and what happened off stage. Every panel of the play page,
the play page itself, every socket frame kind and the export of the
player's view are read in the player's view (no canary anywhere) and in the
author's (each canary where the author's view shows it).
"""

import json
import re

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.test import Client
from django.urls import reverse

from campaigns import story, worldfile
from campaigns import state as story_state
from campaigns.models import Campaign, ContextSnapshot, Node, StateEvent
from knowledge.models import Source
from storyteller.llm.fake_server import Thought
from storyteller.steps import postturn
from tests.conftest import as_author
from tests.storyteller.test_consumers import connect, frames_until_end
from tests.storyteller.voices.test_played import gm, says

pytestmark = pytest.mark.django_db(transaction=True)

HTMX = {"HTTP_HX_REQUEST": "true"}

# Each hidden kind, its canary, and where the author's view shows it (the panels by their URL names, or pages).
CANARIES = {
    "a narrator-only fact": ("canaryfact", ["state_panel"]),
    "another's inner state": ("canaryinner", ["world_panel", "export"]),
    "another's routine": ("canaryroutine", ["time_panel"]),
    "another's plan": ("canaryplan", ["time_panel"]),
    "another's ties": ("canaryrelation", ["state_panel"]),
    "a hidden item": ("canaryhidden", ["state_panel"]),
    "what is shut away": ("canaryshut", ["state_panel"]),
    "a hidden exit": ("canarydoor", ["world_panel"]),
    "a hidden feature": ("canaryfeature", ["world_panel"]),
    "a secret trigger": ("canarytrigger", ["triggers_panel"]),
    "where someone absent is": ("canaryattic", ["time_panel", "world_map", "export"]),
    "a stranger": ("canarystranger", ["time_panel", "state_panel"]),
    "a thing far away": ("canaryidol", ["items_panel", "export"]),
    "a narrator-only variable": ("canaryvariable", ["variables_panel"]),
    "another's belief": ("canarybelief", ["remember_mara"]),
    "a narrator-only event": ("canaryevent", ["state_events"]),
    "a narrator-only file": ("canaryfile", ["knowledge_panel"]),
    "the game master's roll": ("canaryroll", ["rolls_panel"]),
    "the narrator's thinking": ("canarythinking", ["play", "frames"]),
    "the game master's reasons": ("canarywhy", ["play", "frames", "inspector", "export"]),
    "what happened off stage": ("canaryoffstage", ["meanwhile"]),
}
PANELS = ("world_panel", "world_map", "items_panel", "cast_panel", "state_panel", "time_panel", "variables_panel",
          "rolls_panel", "triggers_panel", "minds_panel", "memory_panel", "plot_panel", "knowledge_panel", "note_panel",
          "voices_panel")


def canary_world():
    return {
        "format": "storyteller-world", "version": 1,
        "campaign": {"title": "Canary Keep", "protagonist": "Edrin, a young cartographer",
                     "opening": "Edrin stands in the Hall, where Mara tends the fire."},
        "places": [
            {"name": "Hall", "description": "a vaulted hall",
             "features": [{"name": "hearth", "text": "a wide hearth"},
                          {"name": "hatch", "text": "canaryfeature under the rug", "hidden": True}]},
            {"name": "Corridor", "description": "a draughty corridor"},
            {"name": "Canaryattic", "description": "the attic"},
        ],
        "exits": [
            {"from": "Hall", "to": "Corridor", "travel_seconds": 30, "both_ways": True},
            {"from": "Corridor", "to": "Canaryattic", "travel_seconds": 30, "both_ways": True},
            {"from": "Hall", "to": "Canaryattic", "label": "canarydoor", "hidden": True},
        ],
        "characters": [
            {"name": "Edrin", "protagonist": True, "place": "Hall",
             "relationships": [{"to": "Aldric", "label": "brother", "summary": "his elder brother"}]},
            {"name": "Mara", "place": "Hall", "description": "the steward",
             "condition": {"public": "soaked", "inner": "canaryinner", "activity": "tending the fire"},
             "relationships": [{"to": "Aldric", "label": "rival", "summary": "canaryrelation"}]},
            {"name": "Aldric", "place": "Canaryattic"},
            {"name": "Canarystranger", "place": "Canaryattic"},
        ],
        "items": [
            {"name": "chest", "holder": "Hall", "container": "closed"},
            {"name": "letter", "holder": "chest", "description": "canaryshut"},
            {"name": "dagger", "holder": "Hall", "hidden": True, "description": "canaryhidden"},
            {"name": "Canaryidol", "holder": "Canaryattic"},
        ],
        "starting_time": "2031-03-14T08:00",
        "routines": [{"who": "Mara", "windows": [{"start": "00:00", "end": "23:59", "place": "Hall",
                                                  "activity": "canaryroutine"}]}],
        "intents": [{"who": "Mara", "plan": "canaryplan"}],
        "variables": [
            {"name": "secrecy", "type": "number", "applies_to": ["world"], "range": [0, 10], "default": 0,
             "visibility": "narrator", "description": "canaryvariable", "values": {"world": 5}},
            {"name": "unease", "type": "number", "applies_to": ["world"], "range": [0, 10], "default": 0,
             "description": "how afraid the Keep is", "values": {"world": 4}},
        ],
        "triggers": [
            {"id": "canarytrigger", "when": {"type": "time", "after": "2031-03-20T00:00"}, "beat": "canarytrigger"},
            {"id": "bell", "when": {"type": "time", "after": "2031-03-15T00:00"},
             "announce": {"audience": "everyone", "text": "The bell rings at dawn"}, "beat": "The bell rings."},
        ],
    }


def _build(owner, fake):
    campaign, _ = worldfile.create_campaign(owner, worldfile.read(json.dumps(canary_world()).encode()),
                                            game_master=True)
    fake.script_gm(gm([("Mara", "canarywhy")]))
    fake.script_characters(says("Good morning, Edrin."))
    fake.script(Thought("canarythinking", "The fire crackles."))
    from storyteller import turns
    from storyteller.context import Action

    async def turn():
        async def relay(text):
            pass
        await turns.play_turn(campaign.pk, Action(mode="say", text="Good morning"), relay)
        await postturn.settle()
    async_to_sync(turn)()
    campaign.refresh_from_db()
    head = Node.objects.get(campaign=campaign, depth=campaign.head_depth)
    for payload in ({"type": "add_fact", "subject": "", "object": "", "value": "canaryfact", "narrator_only": True},
                    {"type": "event", "value": "canaryevent happened", "narrator_only": True},
                    {"type": "belief", "subject": "Mara", "value": "canarybelief about the chest"}):
        assert story_state.correct(campaign, owner, payload).status == StateEvent.Status.APPLIED, payload
    story_state.apply_events(head, [{"type": "roll", "subject": "Mara",
                                     "data": {"expression": "1d6", "reason": "canaryroll"}}],
                             source=StateEvent.Source.WORLD)
    Source.objects.create(campaign=campaign, title="canaryfile", filename="canaryfile.md", hidden=True,
                          classification="reference", text="", content_hash="x", size_bytes=0, parser_version=1,
                          chunking_version=1)
    snapshot = ContextSnapshot.objects.get(node=head)
    snapshot.report = {**snapshot.report, "away_note": {"lines": ["canaryoffstage went by"]}}
    snapshot.save()
    return campaign, head


@pytest.fixture
def keep(owner, narrator_server):
    return _build(owner, narrator_server)


def _client(user):
    client = Client()
    client.force_login(user)
    return client


def surfaces(client, campaign, head):
    """Return {surface: text} of everything the play page shows: its panels, itself, its pages and the export."""
    found = {name: client.get(reverse(name, args=[campaign.pk]), **HTMX).content.decode() for name in PANELS}
    found["play"] = client.get(reverse("play", args=[campaign.pk])).content.decode()
    found["play_update"] = client.get(reverse("play", args=[campaign.pk]), **HTMX).content.decode()
    found["meanwhile"] = client.get(reverse("meanwhile", args=[campaign.pk]), **HTMX).content.decode()
    found["worker"] = client.get(reverse("worker_status", args=[campaign.pk]), **HTMX).content.decode()
    found["export"] = client.get(reverse("story_export", args=[campaign.pk])).content.decode()
    found["remember_you"] = client.get(reverse("remember", args=[campaign.pk, "protagonist"])).content.decode()
    found["remember_mara"] = client.get(reverse("remember", args=[campaign.pk, "mara"])).content.decode()
    found["inspector"] = client.get(reverse("inspector", args=[campaign.pk, head.pk])).content.decode()
    found["offstage"] = client.get(reverse("offstage_rounds", args=[campaign.pk, head.pk])).content.decode()
    found["state_events"] = client.get(reverse("state_events", args=[campaign.pk, head.pk])).content.decode()
    for page in ("world_panel", "world_map", "items_panel", "state_panel", "minds_panel"):
        found[f"{page} page"] = client.get(reverse(page, args=[campaign.pk])).content.decode()
    return {name: text.lower() for name, text in found.items()}


def leaks(found):
    return sorted((kind, name) for kind, (canary, _) in CANARIES.items() for name, text in found.items()
                  if canary in text)


def test_no_panel_page_or_export_of_the_players_view_holds_a_canary(keep, owner):
    campaign, head = keep
    found = surfaces(_client(owner), campaign, head)
    assert leaks(found) == []
    # What the player's character does know is there: the world as it sees it.
    assert "mara" in found["world_panel"] and "soaked" in found["world_panel"] and "chest" in found["world_panel"]
    assert "aldric" in found["state_panel"], "Edrin knows his brother exists, not where he is"
    assert "the bell rings at dawn" in found["triggers_panel"] and "unease" in found["variables_panel"]
    assert "good morning, edrin." in found["play"] and "the fire crackles." in found["play"]
    for page in ("inspector", "offstage", "state_events", "remember_mara"):
        assert "part of the author's view" in found[page], page


def test_the_authors_view_shows_each_canary_where_its_panel_shows_it(keep, owner):
    campaign, head = keep
    found = surfaces(_client(owner), as_author(campaign), head)
    missing = [(kind, name) for kind, (canary, places) in CANARIES.items() for name in places
               if name != "frames" and canary not in found[name]]
    assert missing == []
    marked = [name for name in PANELS if name not in ("note_panel", "voices_panel")
              and "data-author-view" not in found[name]]
    assert marked == [], "every panel says it is the author's view while it is on"


async def _frames(campaign, owner, fake, back=""):
    """Play a game master's turn with thinking, a click that is refused and one that plays; return every frame.

    ``back``: a way to the Hall to take first (where Mara is), as a click.
    """
    communicator, connected = await connect(campaign, owner)
    assert connected
    frames = []
    if back:
        fake.script_gm(gm())
        await communicator.send_json_to({"action": "act", "op": "go", "exit": back, "at": "exit-b"})
        frames += await frames_until_end(communicator)
        await postturn.settle()
    fake.script_gm(gm([("Mara", "canarywhy")]))
    fake.script_characters(says("The chest is old."))
    fake.script(Thought("canarythinking", "Mara shrugs."))
    await communicator.send_json_to({"mode": "say", "text": "Mara, what is in the chest?"})
    frames += await frames_until_end(communicator)
    await postturn.settle()
    await communicator.send_json_to({"action": "act", "op": "go", "exit": "exit:hall:canarydoor", "at": "exit-x"})
    frames.append(await communicator.receive_from(timeout=10))
    fake.script_gm(gm())
    fake.script(Thought("canarythinking", "The corridor is cold."))
    await communicator.send_json_to({"action": "act", "op": "go", "exit": "exit:hall:corridor", "at": "exit-c"})
    frames += await frames_until_end(communicator)
    await postturn.settle()
    await communicator.disconnect()
    return frames


def kinds(frames):
    """Return {kind: [frames]}: each frame by what it carries."""
    patterns = {"start": 'id="pending-reply"', "voices": 'id="pending-voices"', "thinking": "pending-thinking-text",
                "chunk": '<span id="pending-text" hx-swap-oob="beforeend">', "end": 'id="turn-outcome"',
                "refusal": 'id="refusal-'}
    found = {}
    for frame in frames:
        for kind, mark in patterns.items():
            if mark in frame:
                found.setdefault(kind, []).append(frame.lower())
    return found


async def test_no_socket_frame_of_the_players_view_holds_a_canary_and_the_authors_hold_its_own(keep, owner,
                                                                                               narrator_server):
    campaign, _ = keep
    frames = kinds(await _frames(campaign, owner, narrator_server))
    assert {"start", "voices", "chunk", "end", "refusal"} <= set(frames), sorted(frames)
    assert "thinking" not in frames, "the narrator's thinking is not sent to the player's view at all"
    assert {kind: [c for _, (c, _) in CANARIES.items() if any(c in f for f in fs)] for kind, fs in frames.items()} \
        == {kind: [] for kind in frames}
    assert "you see no such way." in " ".join(frames["refusal"]) and "the chest is old." in " ".join(frames["voices"])

    await sync_to_async(as_author)(campaign)
    frames = kinds(await _frames(await Campaign.objects.aget(pk=campaign.pk), owner, narrator_server,
                                 back="exit:corridor:hall"))
    assert any("canarythinking" in f for f in frames["thinking"])
    assert any("canarywhy" in f for f in frames["voices"]), "the round's head says why the game master chose Mara"


def test_the_demo_opened_fresh_shows_none_of_the_five_spoilers(owner, client_of):
    from storyteller.management.commands.seed_demo import DEMO_WORLD

    campaign, _ = worldfile.create_campaign(owner, json.loads(DEMO_WORLD.read_text()))
    found = {name: client_of.get(reverse(name, args=[campaign.pk]), **HTMX).content.decode()
             for name in PANELS}
    found["play"] = client_of.get(reverse("play", args=[campaign.pk])).content.decode()
    every = " ".join(found.values())
    assert not re.search(r"Mara\s*</strong>\s*—\s*Lamp room", found["time_panel"]), "where Mara is: the mystery"
    assert "Lamp room" not in found["time_panel"]
    assert "he saw a light climb the headland" not in every.lower(), "Old Tam's inner state"
    assert "brass button" not in every, "the hidden button"
    assert "the key to the lamp room" not in every and "brass key" not in found["state_panel"]
    assert "chapel bell tolls" not in every and "midnight-bell" not in every, "the secret bell"
    assert "secret until it fires" not in every
    for words in ("(event ", "narrator-only", "Refused after", "trigger_check", "Waiting for the world author",
                  "judge step", "consolidation step", "Minds step", "`", "Round 1", "world_lint"):
        assert words not in every, words


def test_a_player_and_the_author_switch_views_and_each_panel_follows(owner, client_of, narrator_server):
    campaign, _ = _build(owner, narrator_server)
    play = reverse("play", args=[campaign.pk])
    assert 'data-action="author-view"' in client_of.get(play).content.decode()
    response = client_of.post(reverse("author_view", args=[campaign.pk]), {"on": "1"})
    assert response.status_code == 302 and response["Location"] == play
    campaign.refresh_from_db()
    assert campaign.author_view, "remembered with the campaign"
    page = client_of.get(play).content.decode()
    assert "Author's view:</strong> everything is shown" in page and 'data-action="player-view"' in page
    assert client_of.post(reverse("author_view", args=[campaign.pk]), {"on": "0", "next": "https://evil.example/"}
                          )["Location"] == play, "only a page of this site"
    campaign.refresh_from_db()
    assert not campaign.author_view
    assert client_of.get(reverse("author_view", args=[campaign.pk])).status_code == 405


def test_another_persons_view_switch_is_not_found(client, outsider, owner, narrator_server):
    campaign, _ = _build(owner, narrator_server)
    client.force_login(outsider)
    assert client.post(reverse("author_view", args=[campaign.pk]), {"on": "1"}).status_code == 404
    assert client.get(reverse("story_export", args=[campaign.pk])).status_code == 404
    campaign.refresh_from_db()
    assert not campaign.author_view


def test_undo_leaves_the_view_as_it_was(owner, narrator_server):
    campaign, _ = _build(owner, narrator_server)
    as_author(campaign)
    story.undo(campaign)
    campaign.refresh_from_db()
    assert campaign.author_view, "the view is the person's, not the story's"
