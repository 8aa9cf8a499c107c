"""``turn``: context build, commit and relay at the head of generated stories of each size.

Also the stories the other groups play on (``generate_story``, with an
abandoned side branch every 100 turns, and ``summarise_by_hand``), and the
fake model server and play socket the relay and page figures use.
"""

import asyncio
import contextlib
import time

from django.conf import settings
from django.db import transaction

from .measure import ACTIONS, REPLIES, figure


def run(sizes, repeat):
    """Context build, commit and relay at the head of a generated story of each size."""
    results = []
    for turns in sizes:
        campaign = generate_story(turns)
        results.append(_measure_build(campaign, turns, repeat))
        results += _measure_commit(campaign, turns, repeat)
        # The commits grew the verbatim story past the watermark: without a summary the relay's first turn would
        # compact, and the summariser would take the scripted reply meant for the narrator.
        summarise_by_hand(campaign)
        results.append(_measure_relay(campaign, turns))
    return results


def generate_story(turns, campaign=None):
    """Create a campaign of ``turns`` turns with an abandoned side branch every 100 turns (or grow ``campaign``'s
    story from its opening, as a world's)."""
    from django.contrib.auth import get_user_model

    from campaigns import story
    from campaigns.models import Branch, Campaign, CanonRule, Node
    from storyteller.context import node_tokens

    if campaign is None:
        user, _ = get_user_model().objects.get_or_create(username="bench")
        campaign = Campaign.objects.create(
            owner=user, title=f"Bench {turns}", protagonist="Edrin", opening=REPLIES[0],
            context_token_budget=8192, max_output_tokens=400,
        )
        story.start_campaign(campaign)
    for text in ["The story takes place in 1892.", "Magic cannot raise the dead.", "Mara is Edrin's aunt."]:
        CanonRule.objects.create(campaign=campaign, text=text)
    main = campaign.head_branch
    reply_tokens = [node_tokens("narrator", "", text) for text in REPLIES]
    action_tokens = [node_tokens("player", "do", text) for text in ACTIONS]
    nodes = []
    through = Node.objects.get(campaign=campaign).tokens_through
    for turn in range(1, turns + 1):
        if turn % 100 == 0:
            side = Branch.objects.create(campaign=campaign, parent=main, fork_depth=2 * turn - 2)
            side_through = through
            for depth in range(2 * turn - 1, 2 * turn + 5):
                side_through += 4
                nodes.append(Node(campaign=campaign, branch=side, depth=depth, role="player" if depth % 2 else "narrator",
                                  mode="do" if depth % 2 else "", text=f"abandoned {depth}", tokens=4,
                                  tokens_through=side_through))
        through += action_tokens[turn % 4]
        nodes.append(Node(campaign=campaign, branch=main, depth=2 * turn - 1, role="player", mode="do",
                          text=ACTIONS[turn % 4], tokens=action_tokens[turn % 4], tokens_through=through))
        through += reply_tokens[turn % 4] + 4
        nodes.append(Node(campaign=campaign, branch=main, depth=2 * turn, role="narrator",
                          text=f"{REPLIES[turn % 4]} ({turn})", tokens=reply_tokens[turn % 4] + 4,
                          tokens_through=through))
    Node.objects.bulk_create(nodes, batch_size=2000)
    campaign.head_depth = 2 * turns
    campaign.save(update_fields=["head_depth"])
    return campaign


def _measure_build(campaign, turns, repeat):
    from campaigns import lineage
    from storyteller import context

    summarise_by_hand(campaign)
    samples = []
    for index in range(repeat + 3):
        campaign.refresh_from_db()
        started = time.perf_counter()
        context.build(campaign, lineage.path_of(campaign), context.Action(mode="do", text=f"look around {index}"))
        if index >= 3:  # the first builds warm the tokenizer and SQLite's page cache
            samples.append(time.perf_counter() - started)
    return figure("context build", f"{turns:,} turns", samples, "median < 10 ms at 2,000 turns, flat to 5,000")


def summarise_by_hand(campaign):
    """Give a long generated story the checkpoint a played one would have, so the build measures a real turn."""
    from campaigns import lineage
    from memory import checkpoints
    from storyteller import context

    campaign.refresh_from_db()
    try:
        context.build(campaign, lineage.path_of(campaign), context.Action(mode="do", text="look around"))
    except context.NeedsCompaction as need:
        checkpoints.write(need.plan.path, need.plan.through, "The story so far, in a paragraph. " * 20,
                          need.plan.prefix_hash)


def _measure_commit(campaign, turns, repeat):
    from django.db import transaction

    from campaigns import story, storytime
    from campaigns.models import Campaign

    samples = []
    for index in range(repeat):
        campaign = Campaign.objects.get(pk=campaign.pk)
        action = story.PlayerAction(mode="do", text=f"step {index}", tokens=5)
        reply = story.Reply(text=REPLIES[index % 4], tokens=60, report={"bench": True}, model="bench", api="bench")
        started = time.perf_counter()
        story.commit_turn(campaign.pk, (campaign.head_branch_id, campaign.head_depth), action, reply)
        samples.append(time.perf_counter() - started)
    # A played turn's commit (turns._commit) also times the turn in the story: its round, catch-up and trigger check.
    timed = []
    for index in range(repeat):
        campaign = Campaign.objects.get(pk=campaign.pk)
        action = story.PlayerAction(mode="do", text=f"step {index}", tokens=5)
        reply = story.Reply(text=REPLIES[index % 4], tokens=60, report={"bench": True}, model="bench", api="bench")
        started = time.perf_counter()
        with transaction.atomic():
            node = story.commit_turn(campaign.pk, (campaign.head_branch_id, campaign.head_depth), action, reply)
            storytime.advance(node)
        timed.append(time.perf_counter() - started)
    return [figure("commit", f"{turns:,} turns", samples, "median < 10 ms"),
            figure("  + story time", f"{turns:,} turns", timed, "median < 10 ms (the played turn's commit)")]


@contextlib.contextmanager
def fake_model_server():
    """Serve the narrator from the fake Ollama server, as STORYTELLER_LLM_URL would, for the length of the block."""
    from storyteller.llm.fake_server import FakeModelServer

    with FakeModelServer() as server:
        overrides = {
            "STORYTELLER_LLM_URL": server.url,
            "STORYTELLER_LLM_URL_CONFIGURED": True,
            "STORYTELLER_LLM_API": "ollama",
        }
        saved = {name: getattr(settings, name) for name in overrides}
        for name, value in overrides.items():
            setattr(settings, name, value)
        try:
            yield server
        finally:
            for name, value in saved.items():
                setattr(settings, name, value)


def _measure_relay(campaign, turns):
    from asgiref.sync import async_to_sync

    with fake_model_server() as server:
        samples = async_to_sync(_relay_samples)(campaign, server)
    return figure("relay", f"{turns:,} turns", samples, "median < 5 ms")


async def play_socket(campaign):
    """Return a connected play websocket for the bench user's ``campaign``."""
    from channels.db import database_sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.contrib.auth import get_user_model
    from django.test import Client

    from storyteller.asgi import application

    @database_sync_to_async
    def cookie():
        client = Client()
        client.force_login(get_user_model().objects.get(username="bench"))
        return f"sessionid={client.cookies['sessionid'].value}".encode()

    headers = [(b"host", b"127.0.0.1:8000"), (b"origin", b"http://127.0.0.1:8000"), (b"cookie", await cookie())]
    communicator = WebsocketCommunicator(application, f"/ws/play/{campaign.pk}/", headers=headers)
    await communicator.connect()
    return communicator


async def _relay_samples(campaign, server, replies=5):
    communicator = await play_socket(campaign)
    server.chunk_delay(0.005)  # paced like a fast model: 200 tokens a second
    samples = []
    for index in range(replies):
        words = [f" word{index}_{n}" for n in range(40)]
        server.script(words)
        server.chunks.clear()
        arrivals = {}
        await communicator.send_json_to({"mode": "do", "text": f"relay {index}"})
        while True:
            frame = await communicator.receive_from(timeout=30)
            now = time.perf_counter()
            if 'id="turn-outcome"' in frame:
                break
            for word in words:
                if f">{word}<" in frame:
                    arrivals[word] = now
        written = {chunk.text: chunk.at for chunk in server.chunks}
        samples += [arrivals[word] - written[word] for word in words if word in arrivals and word in written]
    await communicator.disconnect()
    await asyncio.sleep(0)
    return samples
