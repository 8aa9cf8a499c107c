"""``branches``: the branches page (every line named, and its SVG tree) over HTTP for a 200-node, 12-branch story."""

import time

from .measure import ACTIONS, REPLIES, bench_user, figure


def run(sizes, repeat):
    """The branches page of a story of 200 nodes on 12 branches (the sizes do not change its shape)."""
    from django.test import Client
    from django.urls import reverse

    campaign = _forked_story(nodes=200, branches=12)
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(bench_user())
    url = reverse("branches", args=[campaign.pk])
    samples = []
    for index in range(repeat + 3):
        started = time.perf_counter()
        response = client.get(url)
        if index >= 3:
            samples.append(time.perf_counter() - started)
    assert response.status_code == 200 and response.content.count(b'<a href="#line-') == 12
    return [figure("branches page", "200 nodes, 12 branches", samples, "median < 200 ms (the tree drawn)")]


def _forked_story(nodes, branches):
    """Return a campaign whose ``nodes`` nodes lie on ``branches`` lines, each fork from the line before it."""
    from campaigns import story
    from campaigns.models import Branch, Campaign, Node

    campaign = Campaign.objects.create(owner=bench_user(), title="Bench branches", protagonist="Edrin",
                                       opening=REPLIES[0], context_token_budget=8192, max_output_tokens=400)
    story.start_campaign(campaign)
    line, depth, rows = campaign.head_branch, 0, []
    per_line = (nodes - 1) // branches
    for number in range(branches):
        if number:
            fork = max(0, depth - per_line // 2) // 2 * 2  # half way back along the line before, after a reply
            line, depth = Branch.objects.create(campaign=campaign, parent=line, fork_depth=fork), fork
        for _ in range(per_line + (nodes - 1) % branches * (number == branches - 1)):
            depth += 1
            player = depth % 2 == 1
            rows.append(Node(campaign=campaign, branch=line, depth=depth, role="player" if player else "narrator",
                             mode="do" if player else "", text=ACTIONS[depth % 4] if player else REPLIES[depth % 4],
                             tokens=20, tokens_through=20 * depth))
    Node.objects.bulk_create(rows)
    Campaign.objects.filter(pk=campaign.pk).update(head_branch=line, head_depth=depth)
    return Campaign.objects.get(pk=campaign.pk)
