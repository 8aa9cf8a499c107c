"""The game master's ``resolve_round`` as the typed events it means, checked on a copy of the round's state (pure).

Each actor's ``moves_to`` is a ``move`` (along open exits unless
``ignore_exits``), its ``item_changes`` one ``item_changes`` event (dry-run
in order, whole or not at all, every reason at once), its
``variable_changes`` one ``variable_change`` each. They are validated with
the game master's rights (a world file's: it may move someone ignoring
exits or break a lock), in order, on a copy of the state the round starts
from; what is refused is reported back to the game master with its reason
and changes nothing, the rest applies (decision D12). The round's travel —
the longest journey of its moves — is what the story clock lengthens a
too-short round to (``clock.elapse``). Nothing is written here: the turn
commits the applied events once, at its end.
"""

from dataclasses import dataclass, field

from campaigns.state.time import clock
from campaigns.state.world import authoring


@dataclass
class Resolved:
    events: list = field(default_factory=list)
    where: list = field(default_factory=list)
    outcomes: list = field(default_factory=list)
    refused: list = field(default_factory=list)  # (where, reason): what the game master is told
    travel_seconds: int = 0  # the longest journey of the round's moves
    elapsed_seconds: int | None = None  # as the game master gave it (None: the campaign's round_seconds)
    state: object = None  # the copy, after the round

    def applied(self):
        """Return the events that applied, in order: what the turn commits for this round."""
        return [event for event, outcome in zip(self.events, self.outcomes) if outcome.status == "applied"]


def resolution_events(resolution):
    """Return (events, where) of a ``resolve_round`` (docs/voices.md: ``{"actors": [...], "elapsed_seconds"}``)."""
    events, where = [], []
    for n, actor in enumerate(resolution.get("actors") or [], 1):
        who = actor.get("who", "")
        if actor.get("moves_to"):
            events.append({"type": "move", "subject": who, "object": actor["moves_to"],
                           "data": {"ignore_exits": bool(actor.get("ignore_exits"))}})
            where.append(f"actors[{n}].moves_to")
        if actor.get("item_changes"):
            events.append({"type": "item_changes", "subject": who, "data": {"ops": actor["item_changes"]}})
            where.append(f"actors[{n}].item_changes")
        for m, change in enumerate(actor.get("variable_changes") or [], 1):
            # Story time's event (docs/rules.md): object / the variable / "", data.to or data.by.
            events.append({"type": "variable_change", "subject": change.get("object") or who,
                           "object": change.get("name", ""),
                           # Every field is written (the schema requires them): an empty "to" or a "by" of 0 is none.
                           "data": {key: change[key] for key in ("to", "by") if change.get(key) not in (None, "", 0)}})
            where.append(f"actors[{n}].variable_changes[{m}]")
    return events, where


def resolve(state, resolution):
    """Return the Resolved round: ``resolution`` validated on a copy of ``state`` (a whole State), in order."""
    resolved = Resolved(elapsed_seconds=resolution.get("elapsed_seconds"))
    resolved.events, resolved.where = resolution_events(resolution)
    resolved.state = authoring.scratch(state)
    resolved.outcomes = authoring.validate(resolved.state, resolved.events)
    journeys = []
    for spot, outcome in zip(resolved.where, resolved.outcomes):
        if outcome.status != "applied":
            resolved.refused.append((spot, outcome.reason))
            continue
        journeys += [[write["data"]["travel_seconds"]] for write in outcome.writes
                     if write["kind"] == "location" and "travel_seconds" in write.get("data", {})]
    resolved.travel_seconds = clock.round_travel(journeys)
    return resolved
