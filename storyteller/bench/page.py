"""``page``: the play page and a flip between a reply's versions over HTTP; the end of a turn over the websocket."""

import time

from .measure import REPLIES, figure
from .turn import fake_model_server, generate_story, play_socket, summarise_by_hand


def run(sizes, repeat):
    """The play page and a flip between a reply's versions over HTTP; the end of a turn over the websocket."""
    results = []
    for turns in sizes:
        campaign = generate_story(turns)
        summarise_by_hand(campaign)
        _retry_head(campaign, versions=3)
        results.append(_measure_play_page(campaign, turns, repeat))
        results.append(_measure_flip(campaign, turns, repeat))
        results.append(_measure_turn_end(campaign, turns))
    return results


def _retry_head(campaign, versions):
    from campaigns import story

    for index in range(versions - 1):
        campaign.refresh_from_db()
        reply = story.Reply(text=f"{REPLIES[index % 4]} (version {index + 2})", tokens=60, report={"bench": True},
                            model="bench", api="bench")
        story.commit_retry(campaign.pk, (campaign.head_branch_id, campaign.head_depth), reply)


def _bench_client():
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(get_user_model().objects.get(username="bench"))
    return client


def _measure_play_page(campaign, turns, repeat):
    from django.urls import reverse

    client = _bench_client()
    url = reverse("play", args=[campaign.pk])
    samples = []
    for index in range(repeat + 3):
        started = time.perf_counter()
        assert client.get(url).status_code == 200
        if index >= 3:
            samples.append(time.perf_counter() - started)
    return figure("play page", f"{turns:,} turns", samples, "median < 100 ms (120 nodes shown)")


def _measure_flip(campaign, turns, repeat):
    from django.urls import reverse

    from campaigns.models import Node

    client = _bench_client()
    campaign.refresh_from_db()
    versions = list(Node.objects.filter(campaign=campaign, depth=campaign.head_depth).values_list("pk", flat=True))
    samples = []
    for index in range(repeat):
        url = reverse("show_version", args=[campaign.pk, versions[index % len(versions)]])
        started = time.perf_counter()
        assert client.post(url, HTTP_HX_REQUEST="true").status_code == 200
        samples.append(time.perf_counter() - started)
    return figure("version flip", f"{turns:,} turns", samples, "median < 100 ms (the story redrawn)")


def _measure_turn_end(campaign, turns, replies=3):
    """Time from a 4,000-token reply's last chunk to the frame that ends the turn; report that frame's size."""
    from asgiref.sync import async_to_sync

    campaign.max_output_tokens = 4096
    campaign.context_token_budget = 32768
    campaign.save(update_fields=["max_output_tokens", "context_token_budget"])
    long_reply = "The lantern swings over the flooded road. " * 500  # 4,000 tokens

    async def samples(server):
        from storyteller.steps import postturn

        communicator = await play_socket(campaign)
        found, largest = [], 0
        for index in range(replies):
            server.script([long_reply[i:i + 2000] for i in range(0, len(long_reply), 2000)])
            server.chunks.clear()
            await communicator.send_json_to({"mode": "do", "text": f"walk on {index}"})
            while True:
                frame = await communicator.receive_from(timeout=60)
                if 'id="turn-outcome"' in frame:
                    found.append(time.perf_counter() - server.chunks[-1].at)
                    largest = max(largest, len(frame.encode()))
                    break
        await communicator.disconnect()
        await postturn.settle()  # the recorder's requests must not outlive the fake server
        return found, largest

    with fake_model_server() as server:
        found, largest = async_to_sync(samples)(server)
    return figure("turn end", f"{turns:,} turns, {largest:,} B", found,
                  "frame ≈ one reply, whatever the story's length (daphne's limit: 1 MiB)")
