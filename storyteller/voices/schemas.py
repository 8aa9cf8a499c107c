"""The JSON every voice answers with (decision D3: a fixed sequence of ``complete_json`` steps, no native tools).

Every array has a ``maxItems`` and every free string a ``maxLength``, so the
built-in narrator's grammar (``llm.builtin``, ``llm.bounds.fit``) can hold
any of them within its token limit and a server's answer always closes.
Every property is required, as llama.cpp's grammar writes them all anyway:
an empty string, list or ``false`` says "nothing". docs/voices.md says
what each field means and which step asks for it.
"""

from campaigns.state import registry
from campaigns.state.registry import MAX_NAME
from campaigns.state.world import authoring

NAME = {"type": "string", "maxLength": MAX_NAME}
LINE = {"type": "string", "maxLength": 300}
BOOL = {"type": "boolean"}
SECONDS = {"type": "integer", "minimum": 0, "maximum": 86_400}
# What one character says in one round: a few sentences, not a chapter.
SPEECH = {"type": "string", "maxLength": 600}


def _object(properties):
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _list(items, most):
    return {"type": "array", "items": items, "maxItems": most}


def _ops(source, most):
    """The item operations as ``source`` may send them (the game master may force a lock; a character may not)."""
    return _list(registry.schema("item_changes", source)["properties"]["data"]["properties"]["ops"]["items"], most)


# --- the game master ------------------------------------------------------------------------------------------------

# One actor's outcome in a round: the player's character (under its key) or a character who acted before.
ACTOR = _object({
    "who": NAME,
    "moves_to": NAME,  # "" stays; a move is checked against open exits unless ignore_exits
    "ignore_exits": BOOL,  # story transport, a forced move
    "item_changes": _ops("world", 6),
    "variable_changes": _list(_object({"object": NAME, "name": NAME, "to": {"type": "string", "maxLength": 60},
                                       "by": {"type": "number", "minimum": -1000, "maximum": 1000}}), 4),
})
EXPAND_WORLD = _object({"need": {"enum": ["", *authoring.NEEDS]}, "what": {"type": "string", "maxLength": 200}})
# One game-master step, once per round: resolve what was done, say who acts next and why, and whether to narrate.
GM_ROUND = _object({
    "resolve_round": _object({"actors": _list(ACTOR, 5), "elapsed_seconds": SECONDS}),
    "activate_characters": _list(_object({"who": NAME, "why": LINE}), 8),
    "expand_world": EXPAND_WORLD,
    # Dice checks the round calls for (decision D8: rolled once, seeded by the player's node; a retry reuses them).
    "rolls": _list(_object({"check": NAME, "who": NAME, "reason": LINE}), 3),
    "narrate": BOOL,  # true: no more rounds, the game master narrates the outcome now
})
# After the narration has streamed: which announced beats it took up, and whether a new stage begins (the recorder).
NARRATION = _object({"addressed": _list(NAME, 6), "new_stage": BOOL})

# --- a character ----------------------------------------------------------------------------------------------------

CHARACTER_REPLY = _object({
    "speech": SPEECH,  # what it says aloud, in its own voice ("" to keep silent)
    "action": LINE,  # what it does, for the game master to resolve next round ("" for nothing)
    "moves_to": NAME,  # where it means to go (a place it knows), "" to stay
    "item_changes": _ops("recorder", 4),
    "lore": NAME,  # asked once: the key of a lore entry on its list to look up before answering, "" for none
})
# An off-stage character's answer (seed 002 离场行动): what it does unobserved, and the away note's account.
OFFSTAGE_REPLY = _object({
    "action": LINE,
    "moves_to": NAME,
    "activity": {"type": "string", "maxLength": 120},
    "account": {"type": "string", "maxLength": 300},  # third person, past tense, no thoughts or secrets
})

# --- the world author -------------------------------------------------------------------------------------------------

_RELATION = _object({"to": NAME, "label": {"type": "string", "maxLength": 60}, "summary": LINE})
_CHARACTER = _object({"name": NAME, "aliases": _list(NAME, 3), "description": LINE, "place": NAME,
                      "relationships": _list(_RELATION, 2)})
_PLACE = _object({"name": NAME, "aliases": _list(NAME, 3), "description": LINE,
                  "features": _list(_object({"name": NAME, "text": LINE}), 3),
                  "exits": _list(_object({"to": NAME, "label": NAME, "travel_seconds": SECONDS, "both_ways": BOOL}),
                                 3)})
_ITEM = _object({"name": NAME, "aliases": _list(NAME, 3), "description": LINE, "holder": NAME})
DECISIONS = ("create", "reuse", "refuse")
EDIT_WORLD = _object({
    "decision": {"enum": list(DECISIONS)},
    "reuse": NAME,  # decision reuse: the existing one that serves
    "reason": LINE,
    "characters": _list(_CHARACTER, 2),
    "places": _list(_PLACE, 2),
    "items": _list(_ITEM, 2),
})
CONSOLIDATE = _object({
    "exits": _list(_object({"from": NAME, "to": NAME, "label": NAME, "both_ways": BOOL}), 6),
    "relationships": _list(_object({"from": NAME, "to": NAME, "label": {"type": "string", "maxLength": 60},
                                    "summary": LINE}), 6),
})

ALL = {"gm_round": GM_ROUND, "narration": NARRATION, "character_reply": CHARACTER_REPLY,
       "offstage_reply": OFFSTAGE_REPLY, "edit_world": EDIT_WORLD, "consolidate": CONSOLIDATE}
