"""What a player does from the page (Go, Unlock with…, Take, Drop, Put in…, Give to…, Open, Close, travel by the map):
each click as the typed event it is and the sentence the turn's action says.

Pure: a State, who acts and what the click names in; an ``Act`` (its events
and its words) out, or ``Refused`` with the reason in a player's words. The
turn that plays it validates the events against the head before the narrator
is asked, and applies them with the player's rights (the recorder's: along
open exits, never forcing a lock) in the turn's commit.
"""

from dataclasses import dataclass

from .state.reading import PROTAGONIST
from .state.time import calendar
from .state.world import world

OPS = ("go", "travel", "unlock", "take", "drop", "put", "give", "open", "close")


class Refused(Exception):
    """The click names something that cannot be done; the message says why, for a player."""


@dataclass(frozen=True)
class Act:
    events: tuple  # the typed events the turn applies
    text: str  # the turn's action, in the player's words


def act(state, op, *, who=PROTAGONIST, exit="", item="", to="", place=""):
    """Return the Act of ``op`` by ``who``: ``exit`` an exit's slot, ``item`` an item's key, ``to`` a container's or
    a person's key, ``place`` a place's key (travel)."""
    if op not in OPS:
        raise Refused("That is not something the page can do.")
    if op in ("go", "unlock"):
        return _through(state, who, op, _exit(state, who, exit))
    if op == "travel":
        return _travel(state, who, place)
    thing = _item(state, item)
    name = thing.name
    if op == "take":
        return _ops(f"Take the {name}.", who, {"op": "take", "item": thing.key})
    if op == "drop":
        return _ops(f"Drop the {name}.", who, {"op": "drop", "item": thing.key})
    if op == "open":
        return _ops(f"Open the {name}.", who, {"op": "open", "item": thing.key})
    if op == "close":
        return _ops(f"Close the {name}.", who, {"op": "close", "item": thing.key})
    receiver = state.entity(to) if to else None
    if receiver is None:
        raise Refused("Choose who to give it to." if op == "give" else "Choose what to put it in.")
    if op == "give":
        return _ops(f"Give the {name} to {receiver.value}.", who, {"op": "give", "item": thing.key, "to": to})
    return _ops(f"Put the {name} in the {receiver.value}.", who, {"op": "put", "item": thing.key, "to": to})


def _exit(state, who, slot):
    record = state.get(slot) if slot.startswith("exit:") else None
    if record is None or record.kind != "exit":
        raise Refused("That way is not there any more.")
    exit = world.exit_of(record)
    if exit.hidden:
        raise Refused("You see no such way.")
    if exit.origin != state.location_of(who):
        raise Refused(f"That way leaves {state.name_of(exit.origin)}, and you are not there.")
    return exit


def _through(state, who, op, exit):
    way = f"the {exit.label}" if exit.label else ""
    if op == "unlock":
        if not exit.opener:
            raise Refused(f"Nothing unlocks {way or 'that way'}.")
        key = state.name_of(exit.opener)
        what = way or f"the way to {state.name_of(exit.to)}"
        return _ops(f"Unlock {what} with the {key}.", who,
                    {"op": "unlock", "exit": exit.key, "key": exit.opener})
    seconds = f" ({calendar.describe_duration(exit.travel_seconds)})" if exit.travel_seconds else ""
    through = f" through {way}" if way else ""
    return Act(({"type": "move", "subject": who, "object": exit.to},),
               f"Go{through} to {state.name_of(exit.to)}{seconds}.")


def _travel(state, who, place):
    here = state.location_of(who)
    if not place or world.kind_of(state, place) != "place":
        raise Refused("That place is not on the map any more.")
    if place == here:
        raise Refused(f"You are at {state.name_of(place)} already.")
    route = world.known_route(state, who, here, place)
    if route is None:
        raise Refused(f"No open way you know of leads from {state.name_of(here)} to {state.name_of(place)}.")
    by = [state.name_of(step) for step in route.places[:-1]]
    via = f" by {_listed(by)}" if by else ""
    seconds = f" ({calendar.describe_duration(route.travel_seconds)})" if route.travel_seconds else ""
    return Act(({"type": "move", "subject": who, "object": place},), f"Go to {state.name_of(place)}{via}{seconds}.")


def _listed(names):
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _item(state, key):
    thing = world.item_of(state, key) if key else None
    if thing is None or thing.gone:
        raise Refused("That is not there any more.")
    return thing


def _ops(text, who, op):
    full = {"op": op["op"], "item": op.get("item", ""), "quantity": 0, "to": op.get("to", ""),
            "key": op.get("key", ""), "slot": "", "exit": op.get("exit", ""), "from": ""}
    return Act(({"type": "item_changes", "subject": who, "data": {"ops": [full]}},), text)
