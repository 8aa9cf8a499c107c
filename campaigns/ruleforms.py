"""Rules made in forms: a variable, a trigger, a dice check and a routine, each with its JSON one fold away.

Each form reads and writes one world-file entry (the shape docs/world-files.md
gives for ``variables``, ``triggers``, ``dice`` and ``routines``): ``entry()``
makes the entry from the fields, ``from_entry()`` the fields from an entry,
so the JSON view and the form are two views of the same thing. What the
form has no field for (a variable's bands, a trigger's second effect, a
nested condition) rides along in ``extra`` untouched. Nothing here judges
whether a rule makes sense: ``event()`` turns the entry into the correction
that the event pipeline validates like any other (``storytime.correct``).
"""

import json
import random

from django import forms

from .state.registry import TYPES as EVENT_TYPES
from .state.time import dice, triggers, variables
from .state.time.rules import Refused

WHEN_KINDS = (("variable", "a variable passes a value"), ("time", "a time comes"),
              ("place", "someone is at a place"), ("judged", "the judge decides a condition in words"),
              ("other", "as written in the JSON"))
BAND_ROWS, WINDOW_ROWS = 5, 4
JSON_CHARS = 20_000


def _text(**attrs):
    return forms.CharField(required=False, max_length=attrs.pop("max_length", variables.MAX_TEXT), strip=True,
                           **attrs)


def _value(text):
    """Read a typed value as the JSON it looks like (a number, true/false), else as the text itself."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (int, float, bool)) else text


def _shown(value):
    return json.dumps(value) if isinstance(value, bool) else "" if value is None else str(value)


def _number(text):
    value = _value(text)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else text


class RuleForm(forms.Form):
    """The fields of one kind of rule, the JSON they make, and what the form could not show."""

    kind = ""  # variable | trigger | dice | routine
    sections = ()  # (heading, field names) in the order the page shows them
    json = forms.CharField(required=False, max_length=JSON_CHARS, widget=forms.Textarea(attrs={"rows": 8}))
    json_shown = forms.CharField(required=False, max_length=JSON_CHARS, widget=forms.HiddenInput)
    extra = forms.CharField(required=False, max_length=JSON_CHARS, widget=forms.HiddenInput)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, prefix=self.kind, **kwargs)

    @classmethod
    def from_entry(cls, entry):
        """Return the form bound to ``entry`` (what the JSON view holds), every field filled from it."""
        fields, extra = cls.fields_of(entry if isinstance(entry, dict) else {})
        text = json.dumps(entry, indent=2, ensure_ascii=False)
        data = {f"{cls.kind}-{name}": value for name, value in {**fields, "json": text, "json_shown": text,
                                                                 "extra": json.dumps(extra)}.items()}
        return cls(data)

    @classmethod
    def from_post(cls, posted):
        """Return the form as posted, read from its JSON when the person changed the JSON since it was shown."""
        form = cls(posted)
        form.is_valid()
        clean = form.cleaned_data
        if clean.get("json", "").strip() != clean.get("json_shown", "").strip():
            entry = json.loads(clean["json"])  # the caller turns a ValueError into words
            return cls.from_entry(entry)
        return cls.from_entry(form.entry())

    def entry(self):
        """Return the world-file entry the fields make, with what the form does not show put back."""
        if not hasattr(self, "cleaned_data"):
            self.is_valid()
        try:
            extra = json.loads(self.cleaned_data.get("extra") or "{}")
        except ValueError:
            extra = {}
        return self.build({name: self.cleaned_data.get(name) for name in self.fields}, extra)

    redraws = ()  # fields whose change redraws the whole form (what else it asks depends on them)

    def wire(self, sync_url):
        """Point the fields that change what the form asks (and the JSON) at a redraw of the whole form.

        Any other field's change redraws only the JSON beside it, so what the person is typing in the next field is
        never replaced by the answer to the last one.
        """
        for name in (*self.redraws, "json"):
            self.fields[name].widget.attrs.update({
                "hx-post": sync_url, "hx-target": f"#rule-form-{self.kind}", "hx-swap": "outerHTML",
                "hx-vals": '{"redraw": "form"}', "data-redraw": ""})
        return self

    def grouped(self):
        """Return [(heading, [bound fields])] for the page."""
        return [(heading, [self[name] for name in names]) for heading, names in self.sections]


class VariableForm(RuleForm):
    kind = "variable"
    save_label, panel_id = "Define the variable", "variables-panel"
    name = _text(label="Name", help_text="lower-case letters, digits and _ (debt, has_map)")
    type = forms.ChoiceField(label="Kind", choices=[(t, t) for t in variables.TYPES], initial="number",
                             help_text="a number, a flag (true or false), a choice of options, or free text")
    minimum = _text(label="From", help_text="numbers: the lowest value")
    maximum = _text(label="to", help_text="numbers: the highest value")
    options = _text(label="Options", max_length=2000, help_text="a choice: its options, comma separated")
    default = _text(label="Starts at", help_text="the value it has until the story changes it (a flag: true or "
                                                 "false)")
    applies_to = forms.MultipleChoiceField(label="Belongs to", required=False, widget=forms.CheckboxSelectMultiple,
                                           choices=[(a, a) for a in variables.APPLIES_TO], initial=["character"])
    visibility = forms.ChoiceField(label="Who sees it", choices=[(v, v) for v in variables.VISIBILITIES],
                                   initial="public", help_text="public: the player's page; private: the one it "
                                                               "belongs to; narrator: only the narrator")
    description = _text(label="What it means", help_text="a line the narrator reads")
    sections = (("The variable", ("name", "type", "description")),
                ("Its values", ("minimum", "maximum", "options", "default")),
                ("Whose it is", ("applies_to", "visibility")))
    SHOWN = {"name", "type", "range", "options", "default", "applies_to", "visibility", "description"}
    redraws = ("type",)
    VALUES = {"number": ("minimum", "maximum", "default"), "choice": ("options", "default"), "flag": ("default",),
              "text": ("default",)}

    def grouped(self):
        """Its values are asked as its kind has them: a range for a number, options for a choice."""
        groups = super().grouped()
        wanted = self.VALUES.get(self["type"].value() or "number", self.VALUES["number"])
        groups[1] = ("Its values", [field for field in groups[1][1] if field.name in wanted])
        return groups

    @classmethod
    def fields_of(cls, entry):
        bounds = entry.get("range") if isinstance(entry.get("range"), list) and len(entry["range"]) == 2 else ["", ""]
        options = entry.get("options") if isinstance(entry.get("options"), list) else []
        applies = entry.get("applies_to") or ["character"]
        return ({"name": _shown(entry.get("name")), "type": entry.get("type", "number"),
                 "minimum": _shown(bounds[0]), "maximum": _shown(bounds[1]),
                 "options": ", ".join(str(o) for o in options), "default": _shown(entry.get("default")),
                 "applies_to": applies if isinstance(applies, list) else [applies],
                 "visibility": entry.get("visibility") or "public", "description": _shown(entry.get("description"))},
                {key: value for key, value in entry.items() if key not in cls.SHOWN})

    def build(self, f, extra):
        entry = {"name": f["name"] or "", "type": f["type"] or "number"}
        if entry["type"] == "number":
            entry["range"] = [_number(f["minimum"] or ""), _number(f["maximum"] or "")]
        if entry["type"] == "choice":
            entry["options"] = [part.strip() for part in (f["options"] or "").split(",") if part.strip()]
        if f["default"]:
            entry["default"] = _number(f["default"]) if entry["type"] == "number" else (
                _value(f["default"]) if entry["type"] == "flag" else f["default"])
        entry["applies_to"] = f["applies_to"] or ["character"]
        entry["visibility"] = f["visibility"] or "public"
        if f["description"]:
            entry["description"] = f["description"]
        return {**entry, **extra}

    def event(self, entry):
        return {"type": "variable_define", "subject": "", "data": {"definition": entry}}


class TriggerForm(RuleForm):
    kind = "trigger"
    save_label, panel_id = "Define the trigger", "triggers-panel"
    id = _text(label="Name", help_text="a short key of its own, without ':' (debt-collector)")
    when = forms.ChoiceField(label="It fires when", choices=WHEN_KINDS, initial="variable")
    variable = _text(label="Variable", help_text="its name")
    holder = _text(label="of", help_text="the character, item or place it belongs to; empty: the world")
    op = forms.ChoiceField(label="is", choices=[(op, op) for op in triggers.OPERATORS], initial=">=")
    value = _text(label="value")
    every = _text(label="Every day at", help_text="a time of day: 00:00, 7pm, midnight")
    after = _text(label="or once, after", help_text="a date and time: 1892-10-29T07:00, tomorrow at 07:00")
    who = _text(label="Who", help_text="a character")
    place = _text(label="is at", help_text="a place")
    judged = _text(label="The judge decides", help_text="a condition in words, decided after each turn")
    effect = forms.ChoiceField(label="Then send", required=False, help_text="an event, checked as the engine's")
    effect_subject = _text(label="subject", help_text="what the event's subject is (for a variable: its holder)")
    effect_object = _text(label="object", help_text="for a variable: its name")
    effect_value = _text(label="value", max_length=2000, help_text="for a fact: the sentence")
    effect_data = _text(label="with", max_length=2000, widget=forms.Textarea(attrs={"rows": 2}),
                        help_text="the event's fields, one per line as name: value (by: 1, reason: the bell)")
    beat = _text(label="and tell the narrator", help_text="a beat the narrator weaves in (the bell tolls)")
    max_fires = forms.IntegerField(label="Fires at most", min_value=1, max_value=10_000, initial=1,
                                   help_text="times")
    announce = _text(label="Announced to everyone as", help_text="what everyone knows is coming (the ferry "
                                                                 "leaves at seven); empty: a secret, nobody knows")
    sections = (("The trigger", ("id",)), ("When", ("when",)),
                ("Then", ("effect", "effect_subject", "effect_object", "effect_value", "effect_data", "beat")),
                ("How often, and who knows", ("max_fires", "announce")))
    CONDITIONS = {"variable": ("variable", "holder", "op", "value"), "time": ("every", "after"),
                  "place": ("who", "place"), "judged": ("judged",), "other": ()}
    SHOWN = {"id", "when", "effects", "beat", "max_fires", "announce"}
    redraws = ("when", "effect")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["effect"].choices = [("", "nothing more")] + [(name, name) for name in sorted(EVENT_TYPES)]

    def grouped(self):
        """The condition's own fields follow When: only those of the kind chosen."""
        chosen = self["when"].value() or "variable"
        groups = super().grouped()
        groups[1] = ("When", [self["when"]] + [self[name] for name in self.CONDITIONS.get(chosen, ())])
        return groups

    def effect_help(self):
        """Return what the chosen event takes: its subject / object / value in words, and [(field, help)]."""
        chosen = EVENT_TYPES.get(self["effect"].value() or "")
        if chosen is None:
            return None
        return {"envelope": chosen.help, "fields": [(name, field.help) for name, field in chosen.fields.items()]}

    @classmethod
    def fields_of(cls, entry):
        when = entry.get("when") if isinstance(entry.get("when"), dict) else {}
        kind = {"variable": "variable", "time": "time", "at": "place", "judged": "judged"}.get(when.get("type"),
                                                                                               "other")
        if set(when) - {"type", "name", "object", "op", "value", "every", "after", "who", "place", "text"}:
            kind = "other"
        effects = entry.get("effects") if isinstance(entry.get("effects"), list) else []
        first = effects[0] if effects and isinstance(effects[0], dict) else {}
        announce = entry.get("announce") if isinstance(entry.get("announce"), dict) else None
        extra = {key: value for key, value in entry.items() if key not in cls.SHOWN}
        if kind == "other" and when:
            extra["when"] = when
        if effects[1:]:
            extra["effects"] = effects[1:]
        if announce and set(announce) - {"audience", "text"} or announce and announce.get("audience") != "everyone":
            extra["announce"] = announce
        data = first.get("data") if isinstance(first.get("data"), dict) else {}
        return ({"id": _shown(entry.get("id")), "when": kind, "variable": _shown(when.get("name")),
                 "holder": "" if when.get("object") in (None, "world") else _shown(when.get("object")),
                 "op": when.get("op", ">="), "value": _shown(when.get("value")), "every": _shown(when.get("every")),
                 "after": _shown(when.get("after")), "who": _shown(when.get("who")),
                 "place": _shown(when.get("place")), "judged": _shown(when.get("text")),
                 "effect": first.get("type", ""), "effect_subject": _shown(first.get("subject")),
                 "effect_object": _shown(first.get("object")), "effect_value": _shown(first.get("value")),
                 "effect_data": "\n".join(f"{key}: {_shown(value)}" for key, value in data.items()),
                 "beat": _shown(entry.get("beat")), "max_fires": entry.get("max_fires", 1),
                 "announce": announce.get("text", "") if announce else ""},
                extra)

    def build(self, f, extra):
        extra = dict(extra)
        entry = {"id": f["id"] or "", "when": self._condition(f, extra.pop("when", None))}
        effects = []
        if f["effect"]:
            effect = {"type": f["effect"]}
            if f["effect_subject"]:
                effect["subject"] = f["effect_subject"]
            if f["effect_object"]:
                effect["object"] = f["effect_object"]
            if f["effect_value"]:
                effect["value"] = f["effect_value"]
            data = {}
            for line in (f["effect_data"] or "").splitlines():
                name, _, value = line.partition(":")
                if name.strip():
                    data[name.strip()] = _value(value.strip())
            if data:
                effect["data"] = data
            effects.append(effect)
        effects += extra.pop("effects", [])
        if effects:
            entry["effects"] = effects
        if f["beat"]:
            entry["beat"] = f["beat"]
        entry["max_fires"] = f["max_fires"] or 1
        announce = extra.pop("announce", None)
        if f["announce"]:
            entry["announce"] = {**(announce or {"audience": "everyone"}), "text": f["announce"]}
        return {**entry, **extra}

    @staticmethod
    def _condition(f, written):
        kind = f["when"] or "variable"
        if kind == "variable":
            return {"type": "variable", "name": f["variable"] or "", "object": f["holder"] or "world",
                    "op": f["op"] or ">=", "value": _value(f["value"] or "")}
        if kind == "time":
            return {"type": "time", **({"every": f["every"]} if f["every"] else {}),
                    **({"after": f["after"]} if f["after"] else {})}
        if kind == "place":
            return {"type": "at", "who": f["who"] or "", "place": f["place"] or ""}
        if kind == "judged":
            return {"type": "judged", "text": f["judged"] or ""}
        return written or {}

    def event(self, entry):
        return {"type": "trigger_define", "subject": "", "data": {"triggers": [entry]}}


def _row_fields(prefix, rows, parts, row_name):
    """Return the fields of a table of ``rows`` rows: ``<prefix><row>_<part>``, each labelled for a screen reader."""
    return {f"{prefix}{row}_{part}": _text(label=label, widget=forms.TextInput(
                attrs={"aria-label": f"{row_name} {row + 1}: {label}"}))
            for row in range(rows) for part, label in parts}


class DiceForm(RuleForm):
    kind = "dice"
    save_label, panel_id = "Define the check", "rolls-panel"
    key = _text(label="Key", help_text="a short key (search, lockpick)")
    name = _text(label="Name", help_text="what it is called (Search a place)")
    use_text = _text(label="Used when", help_text="when the story should call for it (looking for something hidden)")
    dice = _text(label="Dice", help_text="notation: 2d6, 1d20+3, 4d6kh3")
    locals().update(_row_fields("band", BAND_ROWS, (("label", "Band"), ("min", "from"), ("max", "to"),
                                                    ("outcome", "what happens")), "band"))
    sections = (("The check", ("key", "name", "use_text", "dice")),)
    SHOWN = {"key", "name", "use_text", "definition"}

    def bands(self):
        """Return the band rows' bound fields: [(label, min, max, outcome)]."""
        return [tuple(self[f"band{row}_{part}"] for part in ("label", "min", "max", "outcome"))
                for row in range(BAND_ROWS)]

    @classmethod
    def fields_of(cls, entry):
        definition = entry.get("definition") if isinstance(entry.get("definition"), dict) else {}
        bands = definition.get("bands") if isinstance(definition.get("bands"), list) else []
        fields = {"key": _shown(entry.get("key")), "name": _shown(entry.get("name")),
                  "use_text": _shown(entry.get("use_text")), "dice": _shown(definition.get("dice"))}
        for row, band in enumerate(b for b in bands[:BAND_ROWS] if isinstance(b, dict)):
            for part in ("label", "min", "max", "outcome"):
                fields[f"band{row}_{part}"] = _shown(band.get(part))
        extra = {key: value for key, value in entry.items() if key not in cls.SHOWN}
        rest = {key: value for key, value in definition.items() if key not in ("dice", "bands")}
        if rest:
            extra["definition"] = rest
        if bands[BAND_ROWS:]:
            extra["more_bands"] = bands[BAND_ROWS:]
        return fields, extra

    def build(self, f, extra):
        extra = dict(extra)
        bands = []
        for row in range(BAND_ROWS):
            band = {part: f[f"band{row}_{part}"] for part in ("label", "outcome") if f[f"band{row}_{part}"]}
            band.update({part: _number(f[f"band{row}_{part}"]) for part in ("min", "max") if f[f"band{row}_{part}"]})
            if band:
                bands.append(band)
        definition = {"dice": f["dice"] or "", **extra.pop("definition", {}),
                      "bands": bands + extra.pop("more_bands", [])}
        return {"key": f["key"] or "", "name": f["name"] or "", "use_text": f["use_text"] or "",
                "definition": definition, **extra}

    def event(self, entry):
        return {"type": "dice_check_define", "subject": entry.get("key", ""),
                "data": {"name": entry.get("name", ""), "use_text": entry.get("use_text", ""),
                         "definition": entry.get("definition", {})}}


def sample_roll(entry, rng=None):
    """Return one roll of the check ``entry`` makes, in words, or why it cannot be rolled (the form shows either)."""
    definition = entry.get("definition") or {}
    if not definition.get("dice"):
        return {"text": "", "problem": "Give the dice (2d6, 1d20+3) to see a sample roll."}
    try:
        check = dice.parse_check(entry.get("key") or "sample", entry)
        rolled = dice.roll(check, seed=(0, (rng or random).randrange(1 << 30), 0))
    except Refused as refusal:
        return {"text": "", "problem": str(refusal)}
    return {"text": rolled.describe(), "problem": ""}


class RoutineForm(RuleForm):
    kind = "routine"
    save_label, panel_id = "Set the routine", "time-panel"
    who = _text(label="Whose routine", help_text="a character")
    locals().update(_row_fields("window", WINDOW_ROWS, (("start", "from"), ("end", "to"), ("days", "on days"),
                                                        ("place", "at"), ("activity", "doing")), "line"))
    sections = (("The routine", ("who",)),)
    PARTS = ("start", "end", "days", "place", "activity")

    def windows(self):
        return [tuple(self[f"window{row}_{part}"] for part in self.PARTS) for row in range(WINDOW_ROWS)]

    @classmethod
    def fields_of(cls, entry):
        windows = entry.get("windows") if isinstance(entry.get("windows"), list) else []
        fields = {"who": _shown(entry.get("who"))}
        extra = {key: value for key, value in entry.items() if key not in ("who", "windows")}
        kept = []
        for row, window in enumerate(w for w in windows[:WINDOW_ROWS] if isinstance(w, dict)):
            for part in cls.PARTS:
                fields[f"window{row}_{part}"] = _shown(window.get(part))
            kept.append({key: value for key, value in window.items() if key not in cls.PARTS})
        if any(kept):
            extra["window_extras"] = kept
        if windows[WINDOW_ROWS:]:
            extra["more_windows"] = windows[WINDOW_ROWS:]
        return fields, extra

    def build(self, f, extra):
        extra = dict(extra)
        extras = extra.pop("window_extras", [])
        windows = []
        for row in range(WINDOW_ROWS):
            window = {part: f[f"window{row}_{part}"] for part in self.PARTS if f[f"window{row}_{part}"]}
            if window:
                windows.append({**window, **(extras[row] if row < len(extras) else {})})
        return {"who": f["who"] or "", "windows": windows + extra.pop("more_windows", []), **extra}

    def event(self, entry):
        return {"type": "routine_set", "subject": entry.get("who", ""), "data": {"windows": entry.get("windows", [])}}


FORMS = {form.kind: form for form in (VariableForm, TriggerForm, DiceForm, RoutineForm)}
# Which rules panel each form lives in (rule_views.PANELS).
PANEL_OF = {"variable": "variables", "trigger": "triggers", "dice": "rolls", "routine": "time"}


def blank(kind, sync_url):
    """Return the empty form of ``kind``, its JSON view showing the entry its defaults make."""
    return FORMS[kind].from_entry(FORMS[kind]({}).entry()).wire(sync_url)


def correction(form):
    """Return the correction event ``form``'s entry makes (``storytime.correct`` validates it)."""
    form.is_valid()
    entry = json.loads(form.cleaned_data["json"])
    return {"object": "", "value": "", "aliases": "", "narrator_only": False, **form.event(entry)}
