"""Limits and the write lock (issue 22): the largest accepted world file, bundle and dice check.

``manage.py bench --only limits``. The inputs are built by
``storyteller.diagnostics.limits``, which the limits tests share.
"""

import time

from campaigns.state.time import dice
from storyteller.diagnostics import limits

from .measure import figure


def run(sizes, repeat):
    """``manage.py bench --only limits``: the largest accepted world file, bundle and dice check, imported or
    defined; each row's samples are seconds, its size says the longest write transaction and the peak memory."""
    from django.contrib.auth import get_user_model

    from campaigns import story
    from campaigns.models import Campaign
    from storyteller import bundle

    owner = get_user_model().objects.get_or_create(username="bench-limits")[0]
    rows = []
    world = limits.measure_world(owner, limits.largest_world())
    rows.append(_row("largest world file import", world, "longest transaction < 200 ms; peak < 300 MiB"))
    source = story.start_campaign(Campaign.objects.create(owner=owner, title="Long story", protagonist="Edrin",
                                                          opening="The story starts on the quay."))
    long = limits.measure_bundle(owner, limits.largest_bundle(bundle.export_campaign(source)))
    rows.append(_row("largest bundle import", long, "longest transaction < 200 ms"))
    made = limits.largest_check()
    samples = []
    for _ in range(max(3, repeat)):
        started = time.perf_counter()
        dice.parse_check(made["key"], made)
        samples.append(time.perf_counter() - started)
    rows.append(figure("largest dice check", f"100d1000, {dice.MAX_BANDS} bands: coverage checked", samples,
                       "median < 5 ms"))
    return rows


def _row(name, measured, target):
    return {"name": name, "size": f"{measured.what}: {measured.rows:,} rows in {measured.batches:,} transactions, "
                                  f"longest {measured.longest * 1000:.0f} ms ({measured.longest_work * 1000:.0f} "
                                  f"ms of work), peak +{measured.peak_above / limits.MiB:.0f} MiB",
            "samples": 1, "median_ms": round(measured.seconds * 1000, 1), "p95_ms": round(measured.seconds * 1000, 1),
            "target": target}
