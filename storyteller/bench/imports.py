"""``imports``: exporting and importing long stories, and hostile uploads while another person plays."""

import time

from .measure import ACTIONS, figure
from .turn import generate_story, summarise_by_hand


def run(sizes, repeat):
    """Exporting and importing long stories; hostile uploads into the running app while another person plays."""
    return [_measure_bundle(turns) for turns in sizes] + _measure_hostile_uploads()


def _measure_bundle(turns):
    """Export a story of ``turns`` turns whose every reply keeps a full prompt record; import it back."""
    from django.contrib.auth import get_user_model

    from campaigns import lineage
    from campaigns.models import ContextSnapshot, Node
    from storyteller import bundle, context
    from storyteller.diagnostics.load import PeakMemory

    campaign = generate_story(turns)
    summarise_by_hand(campaign)  # a played story of this length has its summary: the record is of a full prompt
    report = context.build(campaign, lineage.path_of(campaign), context.Action(mode="do", text=ACTIONS[0])).report
    ContextSnapshot.objects.bulk_create(
        [ContextSnapshot(node=node, report=report, model="bench", api="ollama")
         for node in Node.objects.filter(campaign=campaign, role="narrator")], batch_size=500)
    data = bundle.dumps(campaign)
    zipped = len(bundle.dumps(campaign, zipped=True))
    owner = get_user_model().objects.get(username="bench")
    with PeakMemory() as memory:
        started = time.perf_counter()
        bundle.import_bundle(owner, data)
        seconds = time.perf_counter() - started
    mib = 1024 * 1024
    return figure("bundle import", f"{turns:,} turns: {len(data) / mib:.1f} MiB JSON ({zipped / mib:.1f} zipped), "
                                   f"peak +{memory.above / mib:.0f} MiB", [seconds],
                  f"within the {bundle.max_bytes() // mib} MiB limit")


def _measure_hostile_uploads():
    """Each upload issue 10 reproduced, into the app under Daphne while another person plays (diagnostics.load)."""
    from storyteller.diagnostics import load
    from storyteller.llm.fake_server import FakeModelServer

    with FakeModelServer() as server, load.LiveApp(server) as app:
        idle, outcomes = load.run(app, load.hostile_uploads(app))
    rows = [figure("turn, no import", "another person's turn", idle, "send to commit, fake model server")]
    for outcome in outcomes:
        rows.append(figure("turn during upload", f"{outcome.name}: HTTP {outcome.status} in {outcome.seconds:.1f} s, "
                                                 f"app peak +{outcome.peak_above_idle / load.MiB:.0f} MiB",
                           outcome.turns, "turn max < 3 s; app peak < +200 MiB"))
    return rows
