"""Characters, places and items made in forms: each form is the typed world events it means (issue 25, point 2).

A form is filled from the thing as it stands at the head (``for_character``,
``for_place``, ``for_item``) or left empty for a new one, and ``plan()``
turns what the person posted into ``(field, event)`` pairs: a new thing is
``introduce`` and what follows it (where they start, what they carry, the
lore they know, their routine; a place's features and exits; where an item
is), a thing that exists is only what changed (``entity``, ``move``,
``feature``, ``exit_change``, ``item_edit``, ``set_holder``, ``retract``…).
Nothing here judges whether the world makes sense: ``save`` runs the events
through the one write path as a person's correction (``apply_events``), all
of them or none, and hands back each refusal with the field it came from so
the page shows it there, in the pipeline's own words.

Like the rule forms (``ruleforms``), each form has its JSON one fold away:
``document()`` is the world file's sections its fields make now, and
``posted()`` reads a form from that JSON when the person edited it, so the
two are views of the same thing.
"""

import json
from dataclasses import dataclass

from django import forms
from django.db import transaction

from . import ruleforms, storytime
from .models import StateEvent, StateRecord
from .state import apply_events
from .state.reading import normalize
from .state.registry import MAX_ALIASES, MAX_NAME, MAX_TEXT
from .state.world import lore, world

KINDS = ("character", "place", "item")
# ▶ Rows a form holds at most: enough for a room's furniture and its doors (a world file may give more; the form
# shows the first of them).
FEATURE_ROWS, EXIT_ROWS = 6, 4
# What one character starts out carrying, a line each (an item_changes event holds at most 20 operations too).
MAX_CARRIED = 20
EXIT_STATES = (("open", "open"), ("locked", "locked"), ("blocked", "blocked"))
CONTAINERS = (("", "not a container"), ("open", "an open container"), ("closed", "a closed container"),
              ("locked", "a locked container"))
MODES = (("", "as its holder has it"), ("carried", "carried"), ("worn", "worn"))


def _text(label, *, limit=MAX_TEXT, help_text="", rows=0, required=False):
    widget = forms.Textarea(attrs={"rows": rows}) if rows else None
    return forms.CharField(label=label, required=required, max_length=limit, strip=True, help_text=help_text,
                           **({"widget": widget} if widget else {}))


def _name(label, help_text="", datalist=""):
    field = _text(label, limit=MAX_NAME, help_text=help_text)
    if datalist:
        field.widget.attrs["list"] = datalist
    return field


# Empty rows a form shows after its filled ones (a new place: two features, two ways); saving shows two more.
SPARE_ROWS = 2


def _shown(rows, filled):
    """Return the rows the page shows: every filled one, then ``SPARE_ROWS`` empty ones."""
    last = max((n for n, row in enumerate(rows) if filled(row)), default=-1)
    return rows[:last + 1 + SPARE_ROWS]


def _aliases(text):
    return [part.strip() for part in (text or "").split(",") if part.strip()]


class EntityForm(forms.Form):
    """The fields every thing has: its name, other names, and a line of description."""

    kind = ""
    name = forms.CharField(label="Name", max_length=MAX_NAME, strip=True,
                           error_messages={"required": "Give it a name: what the story calls it."})
    aliases = _text("Also called", limit=2000, help_text="other names, comma separated (the archivist, Mags)")
    description = _text("Description", rows=2, help_text="one or two sentences the narrator reads")

    def __init__(self, *args, key="", state=None, **kwargs):
        super().__init__(*args, prefix=self.kind, **kwargs)
        self.key, self.state = key, state
        self.refusals = {}  # what the pipeline refused of rows and lists the form has no one field for
        if key:  # a name stays what it is: the story and its records know the thing by it
            self.fields["name"].disabled = True
            self.fields["name"].help_text = "a name stays as it is; add another in Also called"

    def clean_name(self):
        name = self.cleaned_data["name"]
        taken = self.state.resolve(name) if self.state is not None and not self.key else None
        if taken is not None and not (self.kind == "item" and world.kind_of(self.state, taken) == "item"):
            raise forms.ValidationError(f"“{name}” is already {_called(self.state, taken)} in this world: choose "
                                        "another name, or change that one from the list of characters, places and "
                                        "items.")
        return name

    def clean(self):
        clean = super().clean()
        current = self.state.entity(self.key) if self.key else None
        if current is not None and current.data.get("aliases") and not clean.get("aliases", True):
            self.add_error("aliases", "Other names are replaced, never all taken away (the story may know it by "
                                      "them): give at least one.")
        if current is not None and current.data.get("description") and not clean.get("description", True):
            self.add_error("description", "A description is rewritten, never taken away: give the new one.")
        return clean

    def known(self, field, kinds):
        """Say by ``field`` when what it names is not a ``kinds`` of this world (the pipeline would refuse it too,
        in its own words; these name what to do)."""
        name = self.cleaned_data.get(field)
        if not name or self.state is None:
            return
        key = self.state.resolve(name)
        if key is None or world.kind_of(self.state, key) not in kinds:
            what = " or ".join(kinds)
            self.add_error(field, f"There is no {what} called “{name}” in this world"
                                  + (f" (“{name}” is {_called(self.state, key)})" if key else "")
                                  + ": choose one it has (the list offers them as you type), or add it first.")

    def clean_aliases(self):
        aliases = _aliases(self.cleaned_data["aliases"])
        if len(aliases) > MAX_ALIASES:
            raise forms.ValidationError(f"{len(aliases)} other names; at most {MAX_ALIASES}.")
        return _short(aliases, "a name")

    def subject(self):
        """Return what the events call this thing: its key once it exists, else the name given."""
        return self.key or self.cleaned_data["name"]

    def _described(self, kind, planned, before=None):
        """Plan the thing itself: introduced when new, rewritten (``entity``) when its words changed."""
        clean = self.cleaned_data
        if not self.key:
            planned.append(("name", {"type": "introduce", "subject": clean["name"], "object": kind,
                                     "value": clean["description"], "aliases": clean["aliases"],
                                     "data": before or {}}))
            return
        current = self.state.entity(self.key)
        if clean["description"] != current.data.get("description", "") or \
                clean["aliases"] != current.data.get("aliases", []):
            planned.append(("description", {"type": "entity", "subject": self.key, "object": kind,
                                            "value": clean["description"], "aliases": clean["aliases"],
                                            "narrator_only": current.narrator_only}))


def _short(names, what):
    """Return ``names``, or say which is longer than a name may be."""
    long = [name for name in names if len(name) > MAX_NAME]
    if long:
        raise forms.ValidationError(f"“{long[0][:40]}…” is {len(long[0])} characters; {what} has at most {MAX_NAME}.")
    return names


def _called(state, key):
    kind = world.kind_of(state, key)
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def _initial(state, key):
    entity = state.entity(key)
    return {"name": entity.value, "aliases": ", ".join(entity.data.get("aliases", [])),
            "description": entity.data.get("description", "")}


# --- characters -----------------------------------------------------------------------------------------------------


class CharacterForm(EntityForm):
    kind = "character"
    personality = _text("Personality", rows=2, help_text="their nature: temper, manner, what drives them (the "
                                                         "narrator and the character read it)")
    brief = _text("The game master's brief", rows=3,
                  help_text="how to play them, what they hide, what they want: the narrator alone reads it")
    lore = forms.MultipleChoiceField(label="Lore they know", required=False, widget=forms.CheckboxSelectMultiple,
                                     help_text="entries of the world's lore they may recall")
    place = _name("Where they are", "a place of the world; left empty, nowhere yet (or where they already are)",
                  "entity-places")
    carries = _text("What they carry", limit=10_000, rows=3,
                    help_text="one thing a line (a brass lantern); a new line is a new thing in their hands, a "
                              "line taken away is put down where they are")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        entries = lore.world_lore(self.state) if self.state is not None else []
        self.fields["lore"].choices = [(entry.key, entry.title) for entry in entries]
        if not entries:
            self.fields["lore"].help_text = "this world has no lore of its own yet (lore comes with a world file)"

    def clean(self):
        clean = super().clean()
        self.known("place", ("place",))
        for row in range(ruleforms.WINDOW_ROWS):
            self.known(f"routine_{row}_place", ("place",))
        return clean

    def clean_carries(self):
        lines = [line.strip() for line in self.cleaned_data["carries"].splitlines() if line.strip()]
        had = {normalize(item.name) for item in _carried(self.state, self.key)} if self.key else set()
        new = [line for line in lines if normalize(line) not in had]
        if len(new) > MAX_CARRIED:
            raise forms.ValidationError(f"{len(new)} new things at once; give at most {MAX_CARRIED} a save (or "
                                        "make them in the item form).")
        return _short(lines, "a thing's name")

    def windows(self):
        """Return the routine's rows of bound fields: [(start, end, days, place, activity)]."""
        return _shown([tuple(self[f"routine_{row}_{part}"] for part in ruleforms.RoutineForm.PARTS)
                       for row in range(ruleforms.WINDOW_ROWS)], lambda row: any(f.value() for f in row))

    def routine_windows(self):
        return [{part: self.cleaned_data.get(f"routine_{row}_{part}", "") for part in ruleforms.RoutineForm.PARTS
                 if self.cleaned_data.get(f"routine_{row}_{part}")} for row in range(ruleforms.WINDOW_ROWS)]

    def plan(self):
        """Return the (field, event) pairs that make the character as posted, or change it to that."""
        clean, state, planned = self.cleaned_data, self.state, []
        who = self.subject()
        self._described("character", planned)
        current = state.entity(self.key) if self.key else None
        told = {name: clean[name] for name in ("personality", "brief")
                if clean[name] != (current.data.get(name, "") if current else "")}
        if told:
            planned.append(("personality" if "personality" in told else "brief",
                            {"type": "entity", "subject": who, "object": "character", "data": told,
                             "narrator_only": current.narrator_only if current else False}))
        here = state.location_of(self.key) if self.key else ""
        if clean["place"] and state.resolve(clean["place"]) != here:
            planned.append(("place", {"type": "move", "subject": who, "object": clean["place"],
                                      "data": {"ignore_exits": True}}))
        carried = {normalize(item.name): item for item in _carried(state, self.key)} if self.key else {}
        for line in clean["carries"]:
            if normalize(line) not in carried:
                planned.append(("carries", {"type": "introduce", "subject": line, "object": "item",
                                            "data": {"holder": who}}))
        kept = {normalize(line) for line in clean["carries"]}
        for name, item in carried.items():
            if name not in kept:
                planned.append(("carries", {"type": "set_holder", "subject": here, "object": item.key,
                                            "data": {"mode": "at"} if here else {}}))
        known = lore.known_lore(state, self.key) if self.key else set()
        offered = {key for key, _ in self.fields["lore"].choices}
        for key in clean["lore"]:
            if key not in known:
                planned.append(("lore", {"type": "know", "subject": who, "object": key,
                                         "data": {"kind": "lore", "how": "world"}}))
        for key in sorted((known & offered) - set(clean["lore"])):
            planned.append(("lore", {"type": "unknow", "subject": who, "object": key, "data": {"kind": "lore"}}))
        had = state.get(f"routine:{self.key}") if self.key else None
        stored = had.data.get("windows", []) if had else []
        windows = [{**_extras(stored, row), **window} for row, window in enumerate(self.routine_windows()) if window]
        windows += _windows_of(state, had)[ruleforms.WINDOW_ROWS:]
        if windows != _windows_of(state, had):
            planned.append(("routine", {"type": "routine_set", "subject": who, "data": {"windows": windows}}))
        return planned


def _routine_fields():
    fields = {}
    for row in range(ruleforms.WINDOW_ROWS):
        for part, label, help_text in (("start", "From", ""), ("end", "to", ""), ("days", "on days", ""),
                                       ("place", "at", ""), ("activity", "doing", "")):
            fields[f"routine_{row}_{part}"] = _text(label, limit=MAX_NAME if part != "activity" else MAX_TEXT)
            if part == "place":
                fields[f"routine_{row}_{part}"].widget.attrs["list"] = "entity-places"
    return fields


for _field_name, _field in _routine_fields().items():
    CharacterForm.base_fields[_field_name] = _field


def _carried(state, key):
    return [world.item_of(state, item) for item in world.holders(state).get(key, ())
            if not world.item_of(state, item).gone and world.item_of(state, item).mode != "worn"]


def _windows_of(state, record):
    """Return a routine's windows as the form writes them: places by name, with what the form has no field for."""
    windows = []
    for window in record.data.get("windows", []) if record else []:
        windows.append({**window, **({"place": state.name_of(window["place"])} if window.get("place") else {})})
    return windows


def _extras(stored, row):
    """Return what a stored window has beyond the form's fields (``on``: calendar names), kept when it is edited."""
    window = stored[row] if row < len(stored) and isinstance(stored[row], dict) else {}
    return {key: value for key, value in window.items() if key not in ruleforms.RoutineForm.PARTS}


def for_character(state, key):
    """Return the initial values of character ``key``'s form, as it stands in ``state``."""
    entity = state.entity(key)
    place = state.location_of(key)
    initial = {**_initial(state, key), "personality": entity.data.get("personality", ""),
               "brief": entity.data.get("brief", ""), "place": state.name_of(place) if place else "",
               "carries": "\n".join(item.name for item in _carried(state, key)),
               "lore": sorted(lore.known_lore(state, key))}
    for row, window in enumerate(_windows_of(state, state.get(f"routine:{key}"))[:ruleforms.WINDOW_ROWS]):
        for part in ruleforms.RoutineForm.PARTS:
            initial[f"routine_{row}_{part}"] = window.get(part, "")
    return initial


# --- places ---------------------------------------------------------------------------------------------------------


class PlaceForm(EntityForm):
    kind = "place"

    def features(self):
        """Return the feature rows' bound fields: [(name, text, notable, hidden)]."""
        return _shown([tuple(self[f"feature_{row}_{part}"] for part in ("name", "text", "notable", "hidden"))
                       for row in range(FEATURE_ROWS)], lambda row: row[0].value() or row[1].value())

    def exits(self):
        """Return the exit rows' bound fields: [(to, label, state, opener, minutes, hidden, both_ways)]."""
        return _shown([tuple(self[f"exit_{row}_{part}"] for part in EXIT_PARTS) for row in range(EXIT_ROWS)],
                      lambda row: row[0].value() or row[1].value() or row[-1].value())

    def clean(self):
        clean = super().clean()
        for row in range(EXIT_ROWS):
            if not clean.get(f"exit_{row}_to") and any(clean.get(f"exit_{row}_{part}") for part in
                                                       ("label", "opener")):
                self.add_error(f"exit_{row}_to", "Say where this way leads (a place of the world), or clear the "
                                                 "row.")
        for row in range(FEATURE_ROWS):
            if not clean.get(f"feature_{row}_name") and clean.get(f"feature_{row}_text"):
                self.add_error(f"feature_{row}_name", "Give the feature a name (the hearth), or clear the row.")
        for row in range(EXIT_ROWS):
            self.known(f"exit_{row}_to", ("place",))
            self.known(f"exit_{row}_opener", ("item",))
        return clean

    def plan(self):
        """Return the (field, event) pairs that make the place as posted, or change it to that."""
        clean, state, planned = self.cleaned_data, self.state, []
        where = self.subject()
        self._described("place", planned)
        # Only what the form showed may be taken away: a world file's seventh feature is not in it.
        had = {record.data.get("name", ""): record
               for record in world.features_at(state, self.key)[:FEATURE_ROWS]} if self.key else {}
        named = set()
        for row in range(FEATURE_ROWS):
            name = clean[f"feature_{row}_name"]
            if not name:
                continue
            named.add(normalize(name))
            wanted = {"text": clean[f"feature_{row}_text"] or name, "notable": clean[f"feature_{row}_notable"],
                      "hidden": clean[f"feature_{row}_hidden"]}
            current = next((r for n, r in had.items() if normalize(n) == normalize(name)), None)
            if current is None or (current.value, bool(current.data.get("notable")),
                                   bool(current.data.get("hidden"))) != tuple(wanted.values()):
                planned.append((f"feature_{row}_name", {"type": "feature", "subject": where, "object": name,
                                                        "value": wanted["text"],
                                                        "data": {"notable": wanted["notable"],
                                                                 "hidden": wanted["hidden"]}}))
        for name, record in had.items():
            if normalize(name) not in named:
                planned.append(("features", {"type": "retract", "object": record.slot}))
        ways = {exit.slot: exit for exit in world.exits_from(state, self.key)[:EXIT_ROWS]} if self.key else {}
        shown, changes = set(), []
        for row in range(EXIT_ROWS):
            to, current = clean[f"exit_{row}_to"], ways.get(clean[f"exit_{row}_slot"])
            if current is not None and to and state.resolve(to) == current.to:
                shown.add(current.slot)
            if not to:
                continue
            data = {"label": clean[f"exit_{row}_label"], "state": clean[f"exit_{row}_state"] or "open",
                    "opener": clean[f"exit_{row}_opener"],
                    "travel_seconds": round((clean[f"exit_{row}_minutes"] or 0) * 60),
                    "hidden": clean[f"exit_{row}_hidden"], "both_ways": clean[f"exit_{row}_both_ways"]}
            if current is None or current.slot not in shown:
                changes.append((f"exit_{row}_to", {"type": "exit_change", "subject": where, "object": to,
                                                   "data": data}))
            elif _way(state, current) != data:
                changes.append((f"exit_{row}_to", {"type": "exit_change", "subject": where, "object": current.key,
                                                   "data": data}))
                back = _back(state, current)
                if back is not None and not data["both_ways"]:  # one way now: the way back goes
                    changes.append((f"exit_{row}_both_ways", {"type": "retract", "object": back.slot}))
        for slot, exit in ways.items():
            if slot not in shown:  # cleared, or led elsewhere: this way goes, and its other side with it
                planned += [("exits", {"type": "retract", "object": way.slot}) for way in (exit, _back(state, exit))
                            if way is not None]
        planned += changes  # after the ways that go, so a way moved elsewhere may keep its label
        return planned


EXIT_PARTS = ("to", "label", "state", "opener", "minutes", "hidden", "both_ways", "slot")


def _place_fields():
    fields = {}
    for row in range(FEATURE_ROWS):
        fields[f"feature_{row}_name"] = _name("Feature", "a hearth, a well")
        fields[f"feature_{row}_text"] = _text("what it is")
        fields[f"feature_{row}_notable"] = forms.BooleanField(label="notable", required=False)
        fields[f"feature_{row}_hidden"] = forms.BooleanField(label="hidden", required=False)
    for row in range(EXIT_ROWS):
        fields[f"exit_{row}_to"] = _name("Leads to", "a place of the world", "entity-places")
        fields[f"exit_{row}_label"] = _name("through", "the iron door; needed for two ways between the same places")
        fields[f"exit_{row}_state"] = forms.ChoiceField(label="is", choices=EXIT_STATES, required=False,
                                                        initial="open")
        fields[f"exit_{row}_opener"] = _name("its key", "the item that locks and unlocks it", "entity-items")
        # Two decimals of a minute hold every whole second (30 s is 0.5, 20 s is 0.33), so a save changes none.
        fields[f"exit_{row}_minutes"] = forms.DecimalField(label="minutes on the way", required=False, min_value=0,
                                                           max_value=1440, decimal_places=2, max_digits=6)
        fields[f"exit_{row}_hidden"] = forms.BooleanField(label="hidden", required=False)
        fields[f"exit_{row}_both_ways"] = forms.BooleanField(label="both sides (one door, the same way back)",
                                                             required=False, initial=True)
        fields[f"exit_{row}_slot"] = forms.CharField(required=False, max_length=400, widget=forms.HiddenInput)
    return fields


PlaceForm.base_fields.update(_place_fields())


def _way(state, exit):
    """Return ``exit`` as the form's fields hold it."""
    return {"label": exit.label, "state": exit.state, "opener": state.name_of(exit.opener) if exit.opener else "",
            "travel_seconds": exit.travel_seconds, "hidden": exit.hidden, "both_ways": _back(state, exit) is not None}


def _minutes(seconds):
    return f"{seconds / 60:.2f}".rstrip("0").rstrip(".") if seconds else ""


def _back(state, exit):
    """Return the other side of ``exit``: the exit from where it leads, back, with the same label (or None)."""
    return next((back for back in world.exits_from(state, exit.to) if back.to == exit.origin
                 and back.label == exit.label), None)


def for_place(state, key):
    """Return the initial values of place ``key``'s form, as it stands in ``state``."""
    initial = _initial(state, key)
    for row, record in enumerate(world.features_at(state, key)[:FEATURE_ROWS]):
        initial.update({f"feature_{row}_name": record.data.get("name", ""), f"feature_{row}_text": record.value,
                        f"feature_{row}_notable": bool(record.data.get("notable")),
                        f"feature_{row}_hidden": bool(record.data.get("hidden"))})
    for row, exit in enumerate(world.exits_from(state, key)[:EXIT_ROWS]):
        way = _way(state, exit)
        initial.update({f"exit_{row}_to": state.name_of(exit.to), f"exit_{row}_label": way["label"],
                        f"exit_{row}_state": way["state"], f"exit_{row}_opener": way["opener"],
                        f"exit_{row}_minutes": _minutes(exit.travel_seconds), f"exit_{row}_hidden": exit.hidden,
                        f"exit_{row}_both_ways": way["both_ways"], f"exit_{row}_slot": exit.slot})
    return initial


# --- items ----------------------------------------------------------------------------------------------------------


class ItemForm(EntityForm):
    kind = "item"
    holder = _name("Where it is, or who holds it", "a place, a character, or a container it is in",
                   "entity-holders")
    mode = forms.ChoiceField(label="How", choices=MODES, required=False,
                             help_text="a place has it lying there, a character carries it, a container holds it")
    slot = forms.ChoiceField(label="worn on", required=False, help_text="worn: which wear slot (finger, head)")
    quantity = forms.IntegerField(label="How many", min_value=1, max_value=1_000_000, initial=1, required=False)
    condition = _text("Its state", help_text="dented, brand new")
    container = forms.ChoiceField(label="A container?", choices=CONTAINERS, required=False)
    opener = _name("Its key", "the item that locks and unlocks it", "entity-items")
    owner = _name("Owned by", "who owns it, when that is not who holds it", "entity-characters")
    notable = forms.BooleanField(label="notable: listed before the others", required=False)
    hidden = forms.BooleanField(label="hidden: nobody sees it until it is found", required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        slots = sorted(world.slots(self.state)) if self.state is not None else []
        self.fields["slot"].choices = [("", "its own slot")] + [(slot, slot) for slot in slots]

    def clean(self):
        clean = super().clean()
        if not self.key and not clean.get("holder"):
            self.add_error("holder", "Say where it is, or who holds it: a place, a character or a container.")
        if self.key and world.item_of(self.state, self.key).container and not clean.get("container"):
            self.add_error("container", "Once a container, it stays one: say whether it is open, closed or locked.")
        self.known("holder", ("place", "character", "item"))
        self.known("opener", ("item",))
        self.known("owner", ("character", "faction"))
        return clean

    def plan(self):
        """Return the (field, event) pairs that make the item as posted, or change it to that."""
        clean, state, planned = self.cleaned_data, self.state, []
        wanted = {"quantity": clean["quantity"] or 1, "condition": clean["condition"], "notable": clean["notable"],
                  "hidden": clean["hidden"], "container": clean["container"] or None, "opener": clean["opener"],
                  "owner": clean["owner"]}
        if not self.key:
            data = {"holder": clean["holder"], **{k: v for k, v in wanted.items() if v not in ("", None, False)}}
            if clean["mode"]:
                data["mode"] = clean["mode"]
            if clean["slot"]:
                data["slot"] = clean["slot"]
            self._described("item", planned, data)
            return planned
        self._described("item", planned)
        item = world.item_of(state, self.key)
        now = _properties(state, item)
        changed = {name: value for name, value in wanted.items() if value != now[name]}
        if changed:
            planned.append((next(iter(changed)), {"type": "item_edit", "subject": self.key, "data": changed}))
        holder = state.resolve(clean["holder"]) if clean["holder"] else None
        if clean["holder"] and (holder != item.holder or (clean["mode"] or item.mode) != item.mode
                                or (clean["slot"] and clean["slot"] != item.slot)):
            data = {name: clean[name] for name in ("mode", "slot") if clean[name]}
            planned.append(("holder", {"type": "set_holder", "subject": clean["holder"], "object": self.key,
                                       "data": data}))
        return planned


def _properties(state, item):
    return {"quantity": item.quantity, "condition": item.condition, "notable": item.notable, "hidden": item.hidden,
            "container": item.container, "opener": state.name_of(item.opener) if item.opener else "",
            "owner": state.name_of(item.owner) if item.owner else ""}


def for_item(state, key):
    """Return the initial values of item ``key``'s form, as it stands in ``state``."""
    item = world.item_of(state, key)
    properties = _properties(state, item)
    return {**_initial(state, key), **properties, "container": properties["container"] or "",
            "holder": state.name_of(item.holder) if item.holder else "",
            "mode": item.mode if item.mode in ("carried", "worn") else "", "slot": item.slot}


# --- the same as JSON -----------------------------------------------------------------------------------------------

# The world file's sections each kind's JSON holds, the first naming the thing itself (docs/world-files.md).
SECTIONS = {"character": ("characters", "items", "routines"), "place": ("places", "exits"), "item": ("items",)}
JSON_CHARS = 20_000
_FLAGS = ("notable", "hidden")


def document(form):
    """Return the world file's sections the form's fields make now (its JSON view): names, not keys."""
    v = {name: form[name].value() for name in form.fields}
    entry = _kept({"name": v["name"] or "", "aliases": _aliases(v["aliases"]), "description": v["description"]})
    if form.kind == "character":
        entry.update(_kept({"personality": v["personality"], "brief": v["brief"], "place": v["place"],
                            "knowledge": _kept({"lore": list(v["lore"] or [])})}))
        routine = [_kept({part: v[f"routine_{row}_{part}"] for part in ruleforms.RoutineForm.PARTS})
                   for row in range(ruleforms.WINDOW_ROWS)]
        return _kept({"characters": [entry],
                      "items": [{"name": line.strip(), "holder": entry["name"]}
                                for line in (v["carries"] or "").splitlines() if line.strip()],
                      "routines": [{"who": entry["name"], "windows": [w for w in routine if w]}]
                      if any(routine) else []})
    if form.kind == "place":
        entry["features"] = [_kept({"name": v[f"feature_{row}_name"], "text": v[f"feature_{row}_text"],
                                    **{flag: bool(v[f"feature_{row}_{flag}"]) for flag in _FLAGS}})
                             for row in range(FEATURE_ROWS) if v[f"feature_{row}_name"]]
        exits = [_kept({"from": entry["name"], "to": v[f"exit_{row}_to"], "label": v[f"exit_{row}_label"],
                        "state": v[f"exit_{row}_state"] or "open", "opener": v[f"exit_{row}_opener"],
                        "travel_seconds": _seconds(v[f"exit_{row}_minutes"]), "hidden": bool(v[f"exit_{row}_hidden"]),
                        "both_ways": bool(v[f"exit_{row}_both_ways"])})
                 for row in range(EXIT_ROWS) if v[f"exit_{row}_to"]]
        return _kept({"places": [_kept(entry)], "exits": exits})
    entry.update(_kept({"holder": v["holder"], "mode": v["mode"], "slot": v["slot"], "condition": v["condition"],
                        "container": v["container"], "opener": v["opener"], "owner": v["owner"],
                        **{flag: bool(v[flag]) for flag in _FLAGS}}))
    quantity = _number(v["quantity"])
    if quantity not in (None, 1):
        entry["quantity"] = quantity
    return {"items": [entry]}


def _kept(entry):
    return {key: value for key, value in entry.items() if value not in ("", None, False, [], {})}


def _number(value):
    try:
        return float(value) if "." in str(value) else int(value)
    except (TypeError, ValueError):
        return None if value in ("", None) else value


def _seconds(minutes):
    number = _number(minutes)
    return round(number * 60) if isinstance(number, (int, float)) else None


def document_text(form):
    return json.dumps(document(form), indent=2, ensure_ascii=False)


def read_document(kind, text):
    """Return the form's posted values (unprefixed) that the JSON ``text`` gives, or raise ValueError in words."""
    if len(text) > JSON_CHARS:
        raise ValueError(f"the JSON is {len(text):,} characters; the form reads at most {JSON_CHARS:,}")
    try:
        doc = json.loads(text or "{}")
    except ValueError as error:
        raise ValueError(f"it is not JSON ({error})") from None
    sections = SECTIONS[kind]
    if not isinstance(doc, dict) or set(doc) - set(sections):
        raise ValueError(f"it holds the sections {', '.join(sections)} and nothing else")
    main = doc.get(sections[0])
    if not isinstance(main, list) or len(main) != 1 or not isinstance(main[0], dict):
        raise ValueError(f"{sections[0]} is a list of one entry: this {kind}")
    entry = main[0]
    allowed = {"character": {"name", "aliases", "description", "personality", "brief", "place", "knowledge"},
               "place": {"name", "aliases", "description", "features"},
               "item": {"name", "aliases", "description", "holder", "mode", "slot", "quantity", "condition",
                        "container", "opener", "owner", "notable", "hidden"}}[kind]
    _only_keys(entry, allowed, f"{sections[0]}[0]")
    values = {"name": _str(entry.get("name")), "aliases": ", ".join(_str(a) for a in _list(entry.get("aliases"))),
              "description": _str(entry.get("description"))}
    return values | {"character": _character_values, "place": _place_values, "item": _item_values}[kind](doc, entry)


def _only_keys(entry, allowed, where):
    if not isinstance(entry, dict):
        raise ValueError(f"{where} is an object")
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ValueError(f"{where} has {', '.join(unknown)}, which the form has no field for (it has "
                         f"{', '.join(sorted(allowed))}); a world file can say more")


def _str(value):
    return "" if value is None else str(value)


def _list(value):
    return value if isinstance(value, list) else []


def _character_values(doc, entry):
    knowledge = entry.get("knowledge") if isinstance(entry.get("knowledge"), dict) else {}
    _only_keys(knowledge, {"lore"}, "characters[0].knowledge")
    lore_keys = [lore.lore_key(k.get("name", "") if isinstance(k, dict) else k) for k in _list(knowledge.get("lore"))]
    values = {"personality": _str(entry.get("personality")), "brief": _str(entry.get("brief")),
              "place": _str(entry.get("place")), "lore": lore_keys}
    for n, item in enumerate(_list(doc.get("items"))):
        _only_keys(item, {"name", "holder"}, f"items[{n}]")
    values["carries"] = "\n".join(_str(item.get("name")) for item in _list(doc.get("items")))
    routines = _list(doc.get("routines"))
    windows = _list(routines[0].get("windows")) if routines and isinstance(routines[0], dict) else []
    if len(windows) > ruleforms.WINDOW_ROWS:
        raise ValueError(f"the form holds {ruleforms.WINDOW_ROWS} lines of a routine, not {len(windows)}")
    for row, window in enumerate(windows):
        _only_keys(window, set(ruleforms.RoutineForm.PARTS), f"routines[0].windows[{row}]")
        values.update({f"routine_{row}_{part}": _str(window.get(part)) for part in ruleforms.RoutineForm.PARTS})
    return values


def _place_values(doc, entry):
    features, exits = _list(entry.get("features")), _list(doc.get("exits"))
    if len(features) > FEATURE_ROWS or len(exits) > EXIT_ROWS:
        raise ValueError(f"the form holds {FEATURE_ROWS} features and {EXIT_ROWS} ways")
    values = {}
    for row, feature in enumerate(features):
        _only_keys(feature, {"name", "text", *_FLAGS}, f"places[0].features[{row}]")
        values.update({f"feature_{row}_name": _str(feature.get("name")), f"feature_{row}_text": _str(feature.get(
            "text")), **{f"feature_{row}_{flag}": feature.get(flag) is True for flag in _FLAGS}})
    for row, way in enumerate(exits):
        _only_keys(way, {"from", "to", "label", "state", "opener", "travel_seconds", "hidden", "both_ways"},
                   f"exits[{row}]")
        seconds = way.get("travel_seconds") or 0
        values.update({f"exit_{row}_to": _str(way.get("to")), f"exit_{row}_label": _str(way.get("label")),
                       f"exit_{row}_state": _str(way.get("state") or "open"),
                       f"exit_{row}_opener": _str(way.get("opener")),
                       f"exit_{row}_minutes": _minutes(seconds) if isinstance(seconds, int) else _str(seconds),
                       f"exit_{row}_hidden": way.get("hidden") is True,
                       f"exit_{row}_both_ways": way.get("both_ways") is True})
    return values


def _item_values(doc, entry):
    values = {name: _str(entry.get(name)) for name in ("holder", "mode", "slot", "condition", "container", "opener",
                                                       "owner")}
    return values | {"quantity": _str(entry.get("quantity", 1)), **{flag: entry.get(flag) is True for flag in _FLAGS}}


def posted(kind, data, *, state, key, initial):
    """Return (the form as posted, what is wrong with its JSON or ""): read from its JSON when the person changed
    the JSON since it was shown, the ways of a place matched to those it has by where they lead and their door."""
    prefix = f"{kind}-"
    text, shown = (data.get(f"{prefix}{name}", "").replace("\r\n", "\n").strip() for name in ("json", "json_shown"))
    if not text or text == shown or _same_json(text, shown):
        return FORMS[kind](data, initial=initial, key=key, state=state), ""
    try:
        values = read_document(kind, text)
    except ValueError as error:
        return FORMS[kind](data, initial=initial, key=key, state=state), (
            f"The JSON cannot be read: {error}. The form still shows what it had: correct the JSON, or empty its "
            "box to go on with the form.")
    if kind == "place" and key:
        for row in range(EXIT_ROWS):
            way = _matching_way(state, key, values.get(f"exit_{row}_to", ""), values.get(f"exit_{row}_label", ""))
            values[f"exit_{row}_slot"] = way.slot if way else ""
    form_data = {f"{prefix}{name}": value for name, value in values.items() if value not in (False, None)}
    form_data = {name: ("on" if value is True else value) for name, value in form_data.items()}
    return FORMS[kind](form_data, initial=initial, key=key, state=state), ""


def _same_json(one, other):
    try:
        return json.loads(one) == json.loads(other)
    except ValueError:
        return False


def _matching_way(state, origin, to, label):
    target = state.resolve(to) if to else None
    return next((way for way in world.exits_from(state, origin) if way.to == target and way.label == label), None)


FORMS = {"character": CharacterForm, "place": PlaceForm, "item": ItemForm}
INITIAL = {"character": for_character, "place": for_place, "item": for_item}


# --- saving ---------------------------------------------------------------------------------------------------------


@dataclass
class Saved:
    """What a save did: its stored events, or the refusals by field (nothing was written)."""

    events: list
    refused: list  # [(field, reason)]

    def made(self):
        """Return the key of the thing the first event made or changed (two items may share a name; keys differ)."""
        record = StateRecord.objects.filter(event=self.events[0], kind="entity").first() if self.events else None
        return record.subject if record else ""


class _Undo(Exception):
    pass


def save(campaign, user, planned):
    """Write ``planned`` (``[(field, event)]``) at the head as one person's correction, all of it or nothing.

    The events run through ``apply_events`` in order, each seeing the ones
    before (the new place exists when its exits are made), with what the
    engine does after them. If any is refused, the transaction is undone
    and nothing is kept: a character half made (introduced, never placed)
    would be a world the person did not ask for.
    """
    refused = []
    try:
        with transaction.atomic():
            node = storytime.head_node(campaign)
            stored = apply_events(node, [event for _, event in planned],
                                            source=StateEvent.Source.CORRECTION, author=user)
            refused = [(spot, event.reason) for (spot, _), event in zip(planned, stored)
                       if event.status == StateEvent.Status.REJECTED]
            if refused:
                raise _Undo
    except _Undo:
        return Saved([], refused)
    return Saved(stored, [])
