"""A turn's rounds and who acts in them (seed 002 回合结构): the bounds, pure.

A turn is the player's message and up to ``max_rounds`` rounds; in each the
game master may activate at most ``max_characters`` of the characters with
the player. A round in which nobody else reacts (the game master skipped
``activate_characters``; only the player's move was resolved) is still a
round and counts toward the limit (seed: 「仍计入回合上限」). Off-stage rounds
are numbered from 100 so they never clash with the game master's, and do
not count toward ``max_rounds``. What is refused comes back with the reason,
for the game master's next step and the play page.
"""

from dataclasses import dataclass

from campaigns.state.reading import PROTAGONIST, mentioned
from campaigns.state.time.rules import Refused

GM, OFFSTAGE = "gm", "offstage"
KINDS = (GM, OFFSTAGE)
# Seed 002 离场行动: "从 100 开始编号的离场轮次，避免与游戏主持人轮次冲突".
OFFSTAGE_FIRST = 100


@dataclass(frozen=True)
class Activation:
    """The game master's activation after the bounds: who acts, in the order asked, and who was refused and why."""

    acting: tuple  # character keys
    why: dict  # key -> the game master's reason for activating them
    refused: tuple  # (the name asked for, the reason it was refused)


@dataclass(frozen=True)
class Planned:
    """One round of a turn as planned: its number, its kind, and the characters who act in it."""

    number: int
    kind: str
    activated: tuple = ()

    @property
    def player_only(self):
        """Whether nobody but the player acts: still a round, still counted."""
        return not self.activated


# Why a character acts that the game master did not choose: the player spoke to them (a name in a Say, or Ask).
ADDRESSED = "the player spoke to them"


def addressed(state, mode, text, asked=()):
    """Return the keys of the characters a player's action speaks to: those ``asked`` (an Ask button), and in a
    Say each character named in it, in the order named (the protagonist never)."""
    keys = [key for key in asked if key]
    if mode == "say" and text:
        keys += sorted(mentioned(state, text), key=lambda key: text.lower().find(state.name_of(key).lower()))
    kinds = {key: (state.entity(key).data.get("kind") if state.entity(key) else "") for key in keys}
    return tuple(dict.fromkeys(key for key in keys if key != PROTAGONIST and kinds[key] == "character"))


def activate(requested, *, present, resolve, name_of, max_characters, addressed=(), muted=frozenset()):
    """Return the Activation of ``requested`` (``[(name, why)]``, the game master's order) under the bounds.

    The player's wishes come first: each of ``addressed`` (keys) who is with
    the player acts, before the game master's own choices; no one in
    ``muted`` acts (the player muted them for the scene).

    ``present`` are the keys of the characters with the player; ``resolve``
    turns a name into a key (None when nobody is called that); ``name_of``
    a key into a name. Refused with the reason: nobody of that name, the
    protagonist (the system never asks the player's character to act), one
    not with the player (they act off stage, after the turn), one asked
    twice, and everyone past ``max_characters`` — naming who was chosen first.
    """
    acting, why, refused = [], {}, []
    wished = [(name_of(key), ADDRESSED) for key in addressed if key in present and key not in muted]
    for name, reason in [*wished, *requested]:
        key = resolve(name) if name else None
        if key is not None and key in why and reason != ADDRESSED and why[key] == ADDRESSED:
            why[key] = reason  # the game master chose them too: its reason says more
            continue
        if key is None:
            refused.append((name, f"nobody in the story is called {name!r}"))
        elif key == PROTAGONIST:
            refused.append((name, "the player's character never acts on its own: what it does comes from the "
                                  "player's action, resolved under its key in resolve_round"))
        elif key in muted:
            refused.append((name, f"the player muted {name_of(key)} for this scene"))
        elif key not in present:
            refused.append((name, f"{name_of(key)} is not with the player: characters elsewhere act off stage, "
                                  "after the turn"))
        elif key in why:
            refused.append((name, f"{name_of(key)} is already activated in this round"))
        elif len(acting) >= max_characters:
            chosen = ", ".join(name_of(k) for k in acting)
            refused.append((name, f"at most {max_characters} characters act in one round (max_characters); "
                                  f"{chosen} were activated first"))
        else:
            acting.append(key)
            why[key] = reason
    return Activation(tuple(acting), why, tuple(refused))


def plan_round(done, activation, *, max_rounds):
    """Return the next Planned game-master round of a turn that has played ``done`` (Planned rounds), or refuse.

    Off-stage rounds in ``done`` do not count; every game-master round does,
    a round of the player's move alone included.
    """
    played = [r for r in done if r.kind == GM]
    if len(played) >= max_rounds:
        alone = sum(1 for r in played if r.player_only)
        note = f" ({alone} of them the player's move alone, which counts too)" if alone else ""
        raise Refused(f"this turn has played its {max_rounds} rounds{note}; at most {max_rounds} rounds follow one "
                      "player message (max_rounds): narrate the outcome now")
    return Planned(len(played) + 1, GM, tuple(activation.acting) if activation is not None else ())


def offstage_number(done):
    """Return the number of the next off-stage round of a turn that has played ``done``: 100, 101, …"""
    return OFFSTAGE_FIRST + sum(1 for r in done if r.kind == OFFSTAGE)
