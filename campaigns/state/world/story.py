"""The story's own event types: who and what exists, who comes and goes, the scene, facts, threads and canon.

``introduce`` and ``entity`` name people, places, items and factions (an
item with its holder, through ``world``); ``arrive``, ``leave`` and
``scene`` move people along the world's routes; ``add_fact`` and
``retract_fact`` keep what is true, refusing a contradiction of Level 1
canon and superseding initial canon an accepted fact overturns;
``open_thread`` and ``resolve_thread`` the story's open questions;
``retract`` and ``mark`` are a person's corrections of any line. Pure: each
handler reads the batch's ``State`` and returns the records it writes.
"""

import re

from ..reading import ENTITY_KINDS, PROTAGONIST, fact_slot, key_for, normalize, thread_slot
from ..registry import EVERYONE, PEOPLE, STORY, Field, Rejected, register
from . import world

# What a person (or a world file) writes of a character beyond its one-line description (issue 25: characters made
# in forms): the narrator reads both while the character is in the scene, the character its own nature only.
CHARACTER_FIELDS = {
    "personality": Field("text", "a character's nature: temper, manner, what drives them (the narrator and the "
                                 "character read it)"),
    "brief": Field("text", "the game master's brief: how to play them, what they hide (the narrator only)"),
}


@register(STORY, "introduce", sources=EVERYONE, fields=world.ITEM_FIELDS, aliases=True,
          help="name / kind (character, place, item or faction) / a one-line description: someone or something "
               "new; an item says in data.holder who or what holds it (empty: the scene's place)")
def _introduce(check, event):
    name = event["subject"]
    if not name:
        raise Rejected("the event names no entity to introduce")
    kind = (event["object"] or "character").lower()
    if kind not in ENTITY_KINDS:
        raise Rejected(f"unknown kind {kind!r}; an entity is a {', '.join(ENTITY_KINDS)}")
    data = event["data"]
    if kind != "item" and set(data) - {"id"}:
        raise Rejected(f"only an item's introduction carries {', '.join(sorted(set(data) - {'id'}))}; introduce "
                       f"the {kind} without it")
    key = _new_key(check, name, kind, data.get("id", ""))
    writes = [_entity_write(key, name, kind, event["aliases"], event["value"], event["narrator_only"])]
    if kind == "item":
        writes += world.introduce_item(check, key, name, data)
    return writes


def _new_key(check, name, kind, wanted):
    """Return the key of a new entity called ``name``: its own, or (a world file's or a person's) ``wanted`` one.

    Only a person or a world file may give an item the name of another item
    (same-named stacks in different places); the recorder naming a known
    thing again is a mistake, refused with the name it should use.
    """
    state = check.state
    if wanted:
        key = key_for(wanted)
        if state.entity(key) is not None:
            raise Rejected(f"the key {key!r} is taken by {state.name_of(key)!r}")
        return key
    existing = state.resolve(name)
    if existing is not None and not (kind == "item" and not check.by_recorder
                                     and world.kind_of(state, existing) == "item"):
        raise Rejected(f"{name!r} is already known as {state.name_of(existing)!r}")
    key = key_for(name)
    if existing is None and state.entity(key) is not None:
        raise Rejected(f"{name!r} is too close to the existing {state.name_of(key)!r}; use that name")
    number = 2
    base = key
    while state.entity(key) is not None:
        key, number = f"{base}-{number}", number + 1
    return key


@register(STORY, "entity", sources=PEOPLE, aliases=True, fields=CHARACTER_FIELDS,
          help="name / kind / description: create or rewrite an entity, keeping what is left blank (a character's "
               "personality and brief too: a field left out keeps its value, an empty one clears it)")
def _entity(check, event):
    key = check.state.resolve(event["subject"]) if event["subject"] else None
    told = event["data"]
    if key is None:
        writes = _introduce(check, {**event, "data": {}})
        current = None
    else:
        current = check.state.entity(key)
        kind = (event["object"] or current.data.get("kind", "character")).lower()
        if kind not in ENTITY_KINDS:
            raise Rejected(f"unknown kind {kind!r}; an entity is a {', '.join(ENTITY_KINDS)}")
        aliases = event["aliases"] or current.data.get("aliases", [])
        writes = [_entity_write(key, current.value, kind, aliases,
                                event["value"] or current.data.get("description", ""), event["narrator_only"])]
    entry = writes[0]
    if told and entry["data"]["kind"] != "character":
        raise Rejected(f"only a character has {', '.join(sorted(told))}; leave it out for a {entry['data']['kind']}")
    for name in CHARACTER_FIELDS:
        value = told.get(name, current.data.get(name, "") if current else "")
        if value:
            entry["data"][name] = value
    return writes


def _entity_write(key, name, kind, aliases, description, narrator_only):
    return {"slot": f"entity:{key}", "kind": "entity", "subject": key, "value": name,
            "data": {"kind": kind, "aliases": list(aliases), "description": description},
            "narrator_only": narrator_only}


def _place(check, name):
    return check.entity(name, "place", kinds=("place",))


@register(STORY, "arrive", sources=EVERYONE, help="who / place (or \"\" for the scene's place) / \"\": someone comes")
def _arrive(check, event):
    who = check.entity(event["subject"])
    if event["object"]:
        where = _place(check, event["object"])
    else:
        scene = check.state.scene()
        where = scene.data.get("location", "") if scene else ""
        if not where:
            raise Rejected("arrive names no place and the scene has no location")
    return [world.relocate(check, who, where)]


@register(STORY, "leave", sources=EVERYONE, help="who / place they go to (or \"\") / \"\": someone goes")
def _leave(check, event):
    who = check.entity(event["subject"])
    where = _place(check, event["object"]) if event["object"] else ""
    if not where and not check.state.location_of(who):
        raise Rejected(f"{check.state.name_of(who)} is not anywhere to leave")
    return [world.relocate(check, who, where)]


@register(STORY, "add_fact", sources=EVERYONE,
          help="who it is about (or \"\") / the fact it replaces (or \"\") / the fact, one sentence")
def _add_fact(check, event):
    text = check.text(event, "fact")
    subject = check.entity(event["subject"]) if event["subject"] else ""
    if check.state.find_fact(text):
        raise Rejected(f"already recorded: {text!r}")
    writes = []
    if event["object"]:
        writes += _end_fact(check, event["object"], replacing=text)
    for rule in _against_canon(check, text):
        writes.append(_supersede(rule, text))
    writes.append({"slot": fact_slot(text), "kind": "fact", "subject": subject, "value": text,
                   "narrator_only": event["narrator_only"]})
    return writes


def _against_canon(check, text):
    """Raise when ``text`` contradicts an invariant canon rule; return initial rules it contradicts."""
    superseded = []
    for rule in check.state.canon:
        if _contradicts(text, rule.text):
            if rule.scope == "invariant":
                raise Rejected(f"contradicts campaign canon (Level 1): {rule.text!r}")
            superseded.append(rule)
    return superseded


@register(STORY, "retract_fact", sources=EVERYONE, help="\"\" / \"\" / the exact fact that is no longer true")
def _retract_fact(check, event):
    return _end_fact(check, check.text(event, "fact to retract"))


def _end_fact(check, text, replacing=None):
    """Return the writes that end ``text``: a live fact, or an initial-state canon rule."""
    for rule in check.state.canon:
        if normalize(rule.text) == normalize(text):
            if rule.scope == "invariant":
                raise Rejected(f"{rule.text!r} is campaign canon (Level 1); edit the canon rules to change it")
            if check.state.superseded(rule.id):
                raise Rejected(f"the initial canon {rule.text!r} no longer holds on this line already")
            return [_supersede(rule, replacing or "")]
    fact = check.state.find_fact(text)
    if fact is None:
        raise Rejected(f"no such fact in the current state: {text!r}")
    check.guard(fact.slot)
    return [{"slot": fact.slot, "kind": "fact", "subject": fact.subject, "value": fact.value, "retracted": True}]


def _supersede(rule, text):
    return {"slot": f"canon:{rule.id}", "kind": "superseded_canon", "subject": str(rule.id), "value": text,
            "data": {"canon": rule.text}}


@register(STORY, "open_thread", sources=EVERYONE, help="\"\" / \"\" / the unresolved question or goal")
def _open_thread(check, event):
    text = check.text(event, "thread")
    current = check.state.find_thread(text)
    if current and current.data.get("status") == "open":
        raise Rejected(f"the thread {text!r} is already open")
    return [{"slot": thread_slot(text), "kind": "thread", "value": text, "data": {"status": "open"},
             "narrator_only": event["narrator_only"]}]


@register(STORY, "resolve_thread", sources=EVERYONE, help="\"\" / outcome / the exact thread")
def _resolve_thread(check, event):
    text = check.text(event, "thread")
    current = check.state.find_thread(text)
    if current is None or current.data.get("status") != "open":
        raise Rejected(f"no open thread {text!r} to resolve")
    return [{"slot": current.slot, "kind": "thread", "value": current.value,
             "data": {"status": "resolved", "outcome": event["object"]}, "narrator_only": current.narrator_only}]


@register(STORY, "scene", sources=EVERYONE, help="\"\" / place (or \"\") / one line saying where the scene stands now "
                                          "(the protagonist goes to the place along open exits)")
def _scene(check, event):
    summary = check.text(event, "scene summary")
    where = _place(check, event["object"]) if event["object"] else ""
    writes = [{"slot": "scene", "kind": "scene", "value": summary, "data": {"location": where}}]
    if where and check.state.location_of(PROTAGONIST) != where:
        writes.append(world.relocate(check, PROTAGONIST, where))
    return writes


@register(STORY, "retract", sources=PEOPLE, help="\"\" / slot / \"\": end whatever line a slot holds")
def _retract(check, event):
    current = check.state.get(event["object"])
    if current is None or current.source == "campaign":
        raise Rejected("that line is not in the current state (or comes from the campaign settings)")
    return [{"slot": current.slot, "kind": current.kind, "subject": current.subject, "value": current.value,
             "retracted": True}]


@register(STORY, "mark", sources=PEOPLE,
          help="\"\" / slot / \"\": make a line narrator-only, or known to the player again")
def _mark(check, event):
    current = check.state.get(event["object"])
    if current is None or current.source == "campaign":
        raise Rejected("that line is not in the current state (or comes from the campaign settings)")
    return [{"slot": current.slot, "kind": current.kind, "subject": current.subject, "value": current.value,
             "data": current.data, "narrator_only": event["narrator_only"]}]

# Negation words and the positive form of contracted negatives: "cannot" and
# "can" differ only in polarity, which is what a contradiction of canon is
# (as do the words of ``_OPPOSITES`` below).
_NEGATIONS = {"not", "never", "no"}
_CONTRACTIONS = {
    "cannot": "can", "can't": "can", "won't": "will", "isn't": "is", "aren't": "are", "wasn't": "was",
    "weren't": "were", "doesn't": "does", "don't": "do", "didn't": "did", "hasn't": "has", "haven't": "have",
    "hadn't": "had", "couldn't": "could", "wouldn't": "would", "shouldn't": "should", "mustn't": "must",
}
_AUXILIARIES = {"does", "do", "did"}
# Words that deny their partner: "dead" reads as "not alive", so "Mara is dead"
# contradicts "Mara is alive" and agrees with "Mara is not alive". Only pairs
# with no third state worth telling apart; "shut" and "closed" both deny "open".
_OPPOSITES = {
    "dead": "alive", "closed": "open", "shut": "open", "unlocked": "locked", "asleep": "awake",
    "absent": "present", "false": "true", "unarmed": "armed", "mortal": "immortal", "unbroken": "broken",
}


def _polarity(text):
    """Return ``text`` without its negations and opposites (lightly stemmed) and whether it was negated."""
    words = re.findall(r"[a-z0-9']+", normalize(text))
    negated = False
    kept = []
    previous = ""
    for word in words:
        if word in _CONTRACTIONS:
            negated = not negated
            word = _CONTRACTIONS[word]
        elif word in _OPPOSITES:
            negated = not negated
            word = _OPPOSITES[word]
        elif word in _NEGATIONS:
            negated = not negated
            previous = word
            continue
        if (word == "longer" and previous == "no") or word in _AUXILIARIES:
            previous = word
            continue
        previous = word
        kept.append(word[:-1] if len(word) > 3 and word.endswith("s") else word)
    return " ".join(kept), negated


def _contradicts(text, rule):
    """Return whether ``text`` says the opposite of ``rule``: the same claim with the other polarity."""
    claim, negated = _polarity(text)
    canon, canon_negated = _polarity(rule)
    return bool(claim) and claim == canon and negated != canon_negated
