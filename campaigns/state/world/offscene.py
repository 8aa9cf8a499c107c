"""Which off-stage items have been answered on this line (seed 002 离场行动 ``offscene.handled``), pure.

When a character away from the player has acted on a due engagement or an
overdue goal, the off-stage step writes ``offscene:<item slot>`` in the same
transaction as the round: the item is handled on this line from that reply
on, so the next turn does not play it again. Undo past that reply, or a
branch without it, and the item is due again there, as everything anchored
to a node is. An item whose run failed has no marker and waits.
"""

from ..registry import PEOPLE, Field, Rejected, register
from ..time.rules import write

OFFSCENE_RANK = 55  # after the world author's type

# The items the off-stage step answers (``storyteller.voices.offstage.Due.item``).
ITEM_KINDS = ("engagement", "intent")


def handled(state):
    """Return the item slots answered off stage on ``state``'s line."""
    return frozenset(r.subject for r in state.of_kind("offscene"))


@register(OFFSCENE_RANK, "offscene", sources=PEOPLE, fields={
    "round": Field("int", "the off-stage round that answered it (100 or more)", minimum=100, maximum=999),
    "who": Field("name", "the character who acted")},
    help="the item's slot (engagement:<id> or intent:<who>:<id>) / \"\" / what was done: an off-stage item is "
         "answered; retract offscene:<slot> to have it played again")
def _offscene(check, event):
    item = event["subject"].strip()
    if item.split(":", 1)[0] not in ITEM_KINDS or ":" not in item:
        raise Rejected(f"{item!r} is not an off-stage item; name it engagement:<id> or intent:<who>:<id>")
    if check.state.get(item) is None:
        raise Rejected(f"there is no {item} on this line")
    if check.state.get(f"offscene:{item}") is not None:
        raise Rejected(f"{item} was already answered off stage on this line")
    data = {name: value for name, value in event["data"].items() if value not in ("", None)}
    return [write(f"offscene:{item}", "offscene", subject=item, value=event["value"], data=data)]
