"""Story time's own writes: a turn's round, Skip time, and the clock's mode (seed 002 时间, 日程; docs/rules.md).

Each is one atomic function through the one write path (``apply_events``)
and none asks a model anything: the clock, the routines' catch-up and the
trigger check are code. ``advance`` runs inside a turn's commit
transaction; ``skip`` and ``correct`` are a person's corrections at the
head, with what the engine does after them in the same transaction.
"""

import time

from django.db import transaction
from django.utils import timezone

from . import lineage
from .models import Campaign, Node, StateEvent
from .state import apply_events, state_for_events
from .state.time import rulebook

ENGINE = StateEvent.Source.ENGINE


def advance(node, *, started_ms=None, travel_seconds=0):
    """Time the turn that ends at reply ``node``, in the caller's transaction; return the engine's events.

    The clock starts if the line has none; a real clock first catches up
    with the wall as it was when the turn started (decision D7: undo or a
    branch switch may have left this line behind, or the person was away),
    then takes the round's wall time; a simulated one moves by the round
    (``round_seconds``, until the recorder says how long the turn took), or
    by the journey the player's own move made (``travel_seconds``) when longer.
    Then whoever is away from the protagonist follows their routine (when
    the line has routines), and the world's triggers are checked
    (``apply_events``).
    """
    campaign = Campaign.objects.get(pk=node.campaign_id)
    path = lineage.path_at(campaign.pk, node.branch_id, node.depth)
    state = state_for_events(path, campaign, [])
    current = rulebook.clock_of(state)
    wall = int(time.time() * 1000)
    events = []
    created = int(campaign.created_at.timestamp() * 1000)
    at = current.at if current else created - created % 60_000
    if current is None:
        events.append({"type": "clock_start"})
    if (current.mode if current else campaign.clock_mode) == Campaign.ClockMode.REAL:
        started = min(started_ms or wall, wall)
        if started > at:
            # A first turn is no return from an absence; after it, the last turn played says how long one was.
            seen = started if current is None else campaign.last_played_at
            seen = seen if isinstance(seen, int) or seen is None else int(seen.timestamp() * 1000)
            events.append({"type": "resync", "data": {"wall_ms": started,
                                                      **({"last_seen_ms": seen} if seen is not None else {})}})
        if wall > max(at, started):
            events.append({"type": "real", "data": {"wall_ms": wall}})
    else:
        events.append({"type": "elapse", "data": {"travel_seconds": travel_seconds} if travel_seconds else {}})
    if state.of_kind("routine"):
        events.append({"type": "catch_up"})
    stored = apply_events(node, events, source=ENGINE)
    Campaign.objects.filter(pk=campaign.pk).update(last_played_at=timezone.now())
    return stored


def head_node(campaign):
    head = Campaign.objects.values_list("head_branch_id", "head_depth").get(pk=campaign.pk)
    return Node.objects.get(campaign_id=campaign.pk, branch_id=head[0], depth=head[1])


def _started(node):
    """Start the clock at ``node`` if its line has none (a skip or a mode switch before the first turn)."""
    campaign = Campaign.objects.get(pk=node.campaign_id)
    path = lineage.path_at(campaign.pk, node.branch_id, node.depth)
    if rulebook.clock_of(state_for_events(path, campaign, [])) is None:
        apply_events(node, [{"type": "clock_start"}], source=ENGINE)


def skip(campaign, user, data):
    """Skip story time at the head by ``user``'s correction; return its StateEvent.

    ``data`` is the ``skip`` event's: ``reason`` and ``by_minutes``, or
    ``until_time`` with ``days_later``. When it applies, whoever is away from
    the protagonist catches up with their routine and the routine-less are
    queued for one, in the same transaction (and the triggers are checked
    after each).
    """
    with transaction.atomic():
        node = head_node(campaign)
        _started(node)
        event, *_ = apply_events(node, [{"type": "skip", "data": data}], source=StateEvent.Source.CORRECTION,
                                 author=user)
        if event.status == StateEvent.Status.APPLIED:
            apply_events(node, [{"type": "catch_up", "data": {"skipping": True}}], source=ENGINE)
    return event


def correct(campaign, user, payload):
    """Apply a correction of story time or world rules at the head; return its StateEvent.

    The clock is started first when the correction needs it (a mode switch,
    an engagement or an intent read against the time now).
    """
    with transaction.atomic():
        node = head_node(campaign)
        if payload.get("type") in NEEDS_CLOCK:
            _started(node)
        event, *_ = apply_events(node, [payload], source=StateEvent.Source.CORRECTION, author=user)
    return event


def switch_mode(campaign, user, before):
    """Switch the head line's clock to the campaign's (new) ``clock_mode``; return why not, or "".

    A line whose clock has not started starts in the campaign's mode anyway.
    """
    if campaign.clock_mode == before:
        return ""
    node = head_node(campaign)
    path = lineage.path_at(campaign.pk, node.branch_id, node.depth)
    current = rulebook.clock_of(state_for_events(path, campaign, []))
    if current is None or current.mode == campaign.clock_mode:
        return ""
    event, *_ = apply_events(node, [{"type": "clock_mode", "data": {"mode": campaign.clock_mode}}],
                             source=StateEvent.Source.CORRECTION, author=user)
    return event.reason if event.status == StateEvent.Status.REJECTED else ""


NEEDS_CLOCK = ("clock_mode", "engagement", "engagement_edit", "intent_add", "intent_edit", "trigger_define")
