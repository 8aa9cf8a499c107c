"""What characters perceived and believe: events, perceptions, beliefs and notices (seed 002 记录内容, issue 14).

The typed events of characters' minds, registered in the one table
``validate`` dispatches on; pure like every handler (a ``State`` and plain
values in, writes out). The records (decision D2: ``StateRecord`` kinds,
kept out of the state's lines by ``reading.MIND_KINDS``):

- ``event:<id>`` — value = what happened, short and objective; data
  ``{importance 1-5, tags, participants, location, items, gist, keywords,
  perceived_by: {who: present|nearby}, at_ms}``. **Sealed**: once written, no
  event writes its slot again; a person may only retract it as erroneous.
- ``perception:<event id>:<who>`` — value = the character's own wording; data
  ``{mode: witnessed|heard|told|inferred, gist, accuracy: accurate|partial|wrong}``.
  Witnessed or heard only by those the event found present or nearby (one
  open exit away, D13); told or inferred by anyone, later too. The accuracy is
  for checking: nothing a character is given ever carries it.
- ``belief:<who>:<id>`` — value = the belief; data ``{confidence:
  doubtful|likely|sure, supports, contradicts (that character's own
  perception slots), about, tags, formed_at_ms}``.
- ``notice:<item>`` — those present notice (or hear said) where an item is,
  or ``to`` names whom it is told privately; data ``{item, place, by,
  holder}``. Read by the whereabouts beliefs (``whereabouts``) record by
  record, so every notice counts, not only the slot's last.

Story time is the story clock's record (slot ``clock``, value UTC ms) when
the line has one; before that every time is None and nothing fades.
"""

from ..reading import key_for
from ..registry import CORRECTION, RECORDER, SCRIPT, Field, Rejected, hook, register
from ..world import world
from .beliefs import perceivers

MINDS = 40  # listed after the story's and the world's types

MODES = ("witnessed", "heard", "told", "inferred")
PRESENT_MODES = ("witnessed", "heard")  # the modes that need the character there (present or nearby)
ACCURACY = ("accurate", "partial", "wrong")
CONFIDENCE = ("doubtful", "likely", "sure")
MAX_TAGS = 8
MAX_TAG = 40
# An id made from an event's or a belief's own words keeps this many characters of them.
ID_CHARS = 48

# Who records minds: the recorder's second call (and a script, which follows its rules), and a person.
SOURCES = (RECORDER, SCRIPT, CORRECTION)

EVENT_FIELDS = {
    "importance": Field("int", "how much it matters, 1 (a trifle) to 5 (never forgotten)", minimum=1, maximum=5),
    "tags": Field("names", "a few words to find it by (secret, key)"),
    "participants": Field("names", "the characters involved"),
    "location": Field("name", "where it happened (empty: the scene's place)"),
    "items": Field("names", "the items involved"),
    "gist": Field("text", "what is left of it once the details fade"),
}
PERCEPTION_FIELDS = {
    "mode": Field("choice", "how they learned it", choices=MODES),
    "gist": Field("text", "the vague version kept once the wording fades"),
    "accuracy": Field("choice", "how right they are, for checking only: never told to the character",
                      choices=ACCURACY),
}
BELIEF_FIELDS = {
    "confidence": Field("choice", "how sure they are", choices=CONFIDENCE),
    "supports": Field("names", "their own perceptions that support it (event ids)"),
    "contradicts": Field("names", "their own perceptions that contradict it (event ids)"),
    "about": Field("names", "who or what it is about"),
    "tags": Field("names", "a few words to find it by"),
    "gist": Field("text", "the vague version"),
}
NOTICE_FIELDS = {
    "place": Field("name", "where it is said or seen (empty: where the speaker is, or the scene)"),
    "by": Field("name", "who says it (empty: nobody; everyone there sees it)"),
    "holder": Field("name", "where they say it is (empty: where the speaker believes it is)"),
    "to": Field("names", "told privately to these characters only (empty: to everyone there)"),
}


def clock_ms(state):
    """Return the story time of ``state`` in UTC ms (its ``clock`` record), or None before the clock starts."""
    record = state.get("clock")
    if record is None:
        return None
    try:
        return int(record.value)
    except (TypeError, ValueError):
        return None


def event_id(name):
    """Return the id an event or belief is named by: ``event:the-key`` and ``the-key`` are both ``the-key``."""
    text = str(name or "").strip()
    for prefix in ("event:", "belief:"):
        if text.lower().startswith(prefix):
            text = text[len(prefix):]
    return key_for(text)[:ID_CHARS]


@hook("prefetch")
def slots_for(state, events):
    """Return the slots validating ``events`` (cleaned) will read, so a partial state reads them in one go.

    Each event, perception and belief checks its own slot and the ones it
    refers to; read one at a time, a busy turn's fifty records cost fifty reads.
    """
    slots = set()
    for event in events:
        kind, who = event.get("type"), state.resolve(event.get("subject", "")) or ""
        key = event_id(event.get("object", ""))
        if kind == "event":
            slots.add(f"event:{key}")
        elif kind in ("perception", "perception_edit"):
            slots.update((f"event:{key}", f"perception:{key}:{who}"))
        elif kind in ("belief", "belief_edit"):
            slots.add(f"belief:{who}:{key}")
            data = event.get("data") or {}
            for name in (*data.get("supports", ()), *data.get("contradicts", ())):
                parts = str(name).split(":")
                slots.add(f"perception:{event_id(parts[1] if parts[0] == 'perception' and len(parts) > 1 else name)}"
                          f":{who}")
    return sorted(slots | {"clock"}) if slots else []


def within_earshot(state, place):
    """Return ``{who: "present" | "nearby"}``: the characters who can perceive what happens at ``place`` now."""
    neighbours = {e.to for e in world.exits_from(state, place) if e.state == "open"}
    neighbours |= {e.origin for e in world.exits_into(state, place) if e.state == "open"}
    places = {place} | neighbours
    state.load_occupants(places)
    positions = {r.subject: r.value for r in state.of_kind("location")
                 if r.value in places and world.kind_of(state, r.subject) == "character"}
    exits = [(place, other, "open") for other in neighbours]
    return perceivers(place, positions, exits)


def _names(check, names, role, kinds):
    keys = []
    for name in names or ():
        if name:
            key = check.entity(name, role, kinds=kinds)
            if key not in keys:
                keys.append(key)
    return keys


def _tags(tags):
    cleaned = []
    for tag in tags or ():
        word = " ".join(str(tag).lower().split())[:MAX_TAG]
        if word and word not in cleaned:
            cleaned.append(word)
    if len(cleaned) > MAX_TAGS:
        raise Rejected(f"{len(cleaned)} tags; give at most {MAX_TAGS} words to find it by")
    return cleaned


def _new_id(check, kind, owner, wanted, text):
    """Return the id of a new event (or of ``owner``'s new belief): the one asked for, else one from its words."""
    prefix = f"{kind}:{owner}:" if owner else f"{kind}:"
    if wanted:
        return event_id(wanted)
    base = event_id(text) or kind
    key, number = base, 2
    while check.state.get(prefix + key) is not None:
        key, number = f"{base}-{number}", number + 1
    return key


@register(MINDS, "event", sources=SOURCES, fields=EVENT_FIELDS, call="minds",
          help="\"\" / its id (empty: one is made) / what happened, short, past tense, objective: sealed once written")
def _event(check, event):
    state, data = check.state, event["data"]
    text = check.text(event, "event (what happened)")
    key = _new_id(check, "event", "", event["object"], text)
    slot = f"event:{key}"
    if not key:
        raise Rejected("the event's id has no letters or digits; give another")
    if state.get(slot) is not None:
        raise Rejected(f"events are sealed: {slot} is already written on this line; correct what a character "
                       "perceived with perception_edit, or retract the event as erroneous")
    place = check.entity(data["location"], "place", kinds=("place",)) if data.get("location") else state.place()
    if not place:
        raise Rejected("the event names no location and the scene has none; say where it happened")
    participants = _names(check, data.get("participants"), "participant", ("character",))
    items = _names(check, data.get("items"), "item", ("item",))
    tags = _tags(data.get("tags"))
    keywords = " ".join(state.name_of(key) for key in (place, *items, *participants))
    fields = {"importance": data.get("importance", 1), "tags": tags, "participants": participants,
              "location": place, "items": items, "gist": data.get("gist", ""), "keywords": keywords,
              "perceived_by": dict(sorted(within_earshot(state, place).items())), "at_ms": clock_ms(state)}
    return [{"slot": slot, "kind": "event", "subject": "", "value": text, "data": fields,
             "narrator_only": event["narrator_only"]}]


def _perceiver(check, event):
    """Return (who, the event record, the perception slot) an event of perception names."""
    who = check.entity(event["subject"], "character who perceived it", kinds=("character",))
    if not event["object"]:
        raise Rejected("the perception names no event (its id)")
    key = event_id(event["object"])
    record = check.state.get(f"event:{key}")
    if record is None:
        raise Rejected(f"no event {key!r} on this line; record the event first")
    return who, record, f"perception:{key}:{who}"


def _presence(check, who, record, mode):
    """Refuse a witnessed or heard perception by someone who was neither present nor nearby when it happened."""
    if mode not in PRESENT_MODES:
        return
    present = record.data.get("perceived_by", {})
    if who in present:
        return
    name = check.state.name_of
    there = ", ".join(name(key) for key in present) or "nobody"
    raise Rejected(f"{name(who)} was not present or nearby when it happened at {name(record.data.get('location', ''))}"
                   f" (only {there}); record how they learned it later as told or inferred, or correct where they "
                   "were")


@register(MINDS, "perception", sources=SOURCES, fields=PERCEPTION_FIELDS, call="minds",
          help="who / the event's id / how they saw it, in their own words: one per character per event")
def _perception(check, event):
    who, record, slot = _perceiver(check, event)
    if check.state.get(slot) is not None:
        raise Rejected(f"{check.state.name_of(who)} already has a perception of {record.slot}; use perception_edit")
    wording = check.text(event, "wording (how they saw it)")
    data = event["data"]
    mode = data.get("mode") or "witnessed"
    _presence(check, who, record, mode)
    fields = {"mode": mode, "gist": data.get("gist", ""), "accuracy": data.get("accuracy") or "accurate"}
    return [{"slot": slot, "kind": "perception", "subject": who, "value": wording, "data": fields}]


@register(MINDS, "perception_edit", sources=SOURCES, fields=PERCEPTION_FIELDS, call="minds",
          help="who / the event's id / their new wording (empty: kept): correct what someone perceived; "
               "the event never changes")
def _perception_edit(check, event):
    who, record, slot = _perceiver(check, event)
    current = check.state.get(slot)
    if current is None:
        raise Rejected(f"{check.state.name_of(who)} has no perception of {record.slot} to edit; record one with "
                       "perception")
    data = event["data"]
    if not event["value"] and not data:
        raise Rejected("the edit changes nothing")
    fields = {**current.data, **data}
    if fields.get("mode") != current.data.get("mode"):
        _presence(check, who, record, fields.get("mode"))
    return [{"slot": slot, "kind": "perception", "subject": who, "value": event["value"] or current.value,
             "data": fields}]


def _evidence(check, who, names):
    """Return the perception slots ``names`` (event ids or slots) name, each ``who``'s own and on this line."""
    slots = []
    for name in names or ():
        text = str(name).strip()
        if not text:
            continue
        if text.lower().startswith("perception:"):
            _, key, owner = (text.split(":", 2) + ["", ""])[:3]
            owner = key_for(owner)
            if owner != who:
                other = check.state.resolve(owner) or owner
                raise Rejected(f"evidence must be {check.state.name_of(who)}'s own perceptions: {text} is "
                               f"{check.state.name_of(other)}'s")
            key = event_id(key)
        else:
            key = event_id(text)
        slot = f"perception:{key}:{who}"
        if check.state.get(slot) is None:
            raise Rejected(f"{check.state.name_of(who)} has no perception of event {key!r} to hold as evidence; "
                           "evidence must be their own perceptions")
        if slot not in slots:
            slots.append(slot)
    return slots


def _belief_fields(check, who, data, current=None):
    fields = dict(current.data) if current else {"confidence": "likely", "supports": [], "contradicts": [],
                                                  "about": [], "tags": [], "gist": "",
                                                  "formed_at_ms": clock_ms(check.state)}
    if "confidence" in data:
        fields["confidence"] = data["confidence"]
    for name in ("supports", "contradicts"):
        if name in data:
            fields[name] = _evidence(check, who, data[name])
    if set(fields["supports"]) & set(fields["contradicts"]):
        raise Rejected("a perception cannot both support and contradict the same belief")
    if "about" in data:
        fields["about"] = _names(check, data["about"], "what the belief is about", None)
    if "tags" in data:
        fields["tags"] = _tags(data["tags"])
    if "gist" in data:
        fields["gist"] = data["gist"]
    return fields


@register(MINDS, "belief", sources=SOURCES, fields=BELIEF_FIELDS, call="minds",
          help="who / its id (empty: one is made) / what they believe, in their words")
def _belief(check, event):
    who = check.entity(event["subject"], "character who believes it", kinds=("character",))
    text = check.text(event, "belief")
    key = _new_id(check, "belief", who, event["object"], text)
    slot = f"belief:{who}:{key}"
    if check.state.get(slot) is not None:
        raise Rejected(f"{check.state.name_of(who)} already holds the belief {key!r}; use belief_edit")
    return [{"slot": slot, "kind": "belief", "subject": who, "value": text,
             "data": _belief_fields(check, who, event["data"])}]


@register(MINDS, "belief_edit", sources=SOURCES, fields=BELIEF_FIELDS, call="minds",
          help="who / the belief's id / its new wording (empty: kept): a belief changes (beliefs may)")
def _belief_edit(check, event):
    who = check.entity(event["subject"], "character who believes it", kinds=("character",))
    if not event["object"]:
        raise Rejected("the edit names no belief (its id)")
    slot = f"belief:{who}:{event_id(event['object'])}"
    current = check.state.get(slot)
    if current is None:
        raise Rejected(f"{check.state.name_of(who)} holds no belief {event_id(event['object'])!r}; record it with "
                       "belief")
    if not event["value"] and not event["data"]:
        raise Rejected("the edit changes nothing")
    return [{"slot": slot, "kind": "belief", "subject": who, "value": event["value"] or current.value,
             "data": _belief_fields(check, who, event["data"], current)}]


@register(MINDS, "notice", sources=SOURCES, fields=NOTICE_FIELDS, call="minds",
          help="item / \"\" / \"\": those present notice, or hear said, where an item is (\"the key is in the "
               "teapot\"); data.to tells it to some privately")
def _notice(check, event):
    state, data = check.state, event["data"]
    item = check.entity(event["subject"], "item", kinds=("item",))
    by = check.entity(data["by"], "speaker", kinds=("character",)) if data.get("by") else ""
    place = check.entity(data["place"], "place", kinds=("place",)) if data.get("place") else ""
    place = place or (state.location_of(by) if by else "") or state.place()
    holder = check.entity(data["holder"], "holder", kinds=("place", "character", "item")) if data.get("holder") else ""
    to = _names(check, data.get("to"), "listener", ("character",))
    if not place and not to:
        raise Rejected("the notice says neither where it is said nor to whom; give data.place or data.to")
    fields = {"item": item, "place": place, "by": by, "holder": holder, "to": to}
    return [{"slot": f"notice:{item}", "kind": "notice", "subject": item, "value": holder, "data": fields},
            *_told_of(state, item, holder, by, place, to)]


def _told_of(state, item, holder, by, place, to):
    """Return the ``knows`` writes of those a notice reaches: the item, and the place or container it is said in.

    Being told where something is (or seeing it pointed out) is learning that
    it exists: each listener who did not know of it now does, how ``told``
    (``observed`` when nobody spoke). The speaker is not told its own words.
    """
    if to:
        listeners = [who for who in to if who != by]
    else:
        state.load_occupants([place])
        listeners = [who for who in state.at(place) if who != by and world.kind_of(state, who) == "character"]
    targets = [("item", item)] + ([(world.kind_of(state, holder), holder)]
                                  if world.kind_of(state, holder) in ("place", "item") else [])
    wanted = {world.knows_slot(who, kind, target): (who, target) for who in listeners for kind, target in targets}
    known = state.existing(list(wanted))
    how = "told" if by else "observed"
    return [{"slot": slot, "kind": "knows", "subject": who, "value": target, "data": {"how": how}}
            for slot, (who, target) in wanted.items() if slot not in known]
