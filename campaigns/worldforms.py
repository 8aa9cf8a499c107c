"""Characters and places made in forms: each form becomes the world edits a world file's entry would, in one batch.

A character is introduced with its aliases and description, its personality
as a fact about it, the game master's brief as its inner condition (the
narrator's only), placed where it starts, given what it carries, told the
lore it knows and, when a line is given, its routine. A place is introduced
with its features and its exits (a door is an exit's label; its state open,
locked or blocked). ``events()`` only says what the person asked for; the
event pipeline checks it, and ``state.correct_together`` keeps all or none.
"""

from django import forms

from .state.events import MAX_TEXT

EXIT_ROWS = 3
EXIT_STATES = (("open", "open"), ("locked", "locked"), ("blocked", "blocked"))


def _text(label, help_text="", *, rows=None, max_length=MAX_TEXT, aria=""):
    widget = forms.Textarea(attrs={"rows": rows}) if rows else forms.TextInput(attrs={"aria-label": aria} if aria
                                                                                   else {})
    return forms.CharField(label=label, help_text=help_text, required=False, max_length=max_length, strip=True,
                           widget=widget)


def _names(text):
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _event(type, subject="", object="", value="", **extra):
    return {"type": type, "subject": subject, "object": object, "value": value, "aliases": [],
            "narrator_only": False, "data": {}, **extra}


class CharacterForm(forms.Form):
    kind = "character"
    name = forms.CharField(label="Name", max_length=MAX_TEXT, strip=True)
    aliases = _text("Also called", "other names, comma separated (the steward, Aunt Mara)")
    description = _text("Description", "what anyone sees: one line")
    personality = _text("Personality", "how they are (gruff, but fond of Edrin): a fact the narrator keeps")
    brief = _text("The game master's brief", "what only the narrator knows of them (her secret, what she wants)",
                  rows=2)
    place = _text("Starts at", "a place of the world")
    carries = _text("Carries", "items made for them, comma separated (a lantern, a ring of keys)", max_length=2000)
    lore = _text("Knows the lore", "lore entries by id, comma separated (keep-history)", max_length=2000)
    routine_start = _text("Routine: from", "a time, e.g. 06:00", aria="routine from")
    routine_end = _text("to", "e.g. 22:00 (past midnight is fine)", aria="routine to")
    routine_place = _text("at", "a place", aria="routine place")
    routine_activity = _text("doing", "e.g. serving ale", aria="routine activity")
    sections = (("Who they are", ("name", "aliases", "description", "personality", "brief")),
                ("Where they start and what they have", ("place", "carries", "lore")),
                ("Their day (more lines: Story time, Set a routine)",
                 ("routine_start", "routine_end", "routine_place", "routine_activity")))
    save_label = "Add the character"

    def grouped(self):
        return [(heading, [self[name] for name in names]) for heading, names in self.sections]

    def events(self):
        f = self.cleaned_data
        name = f["name"]
        made = [_event("introduce", name, "character", f["description"], aliases=_names(f["aliases"]))]
        if f["personality"]:
            made.append(_event("add_fact", name, "", f"{name} is {f['personality'].rstrip('.')}."))
        if f["brief"]:
            made.append(_event("set_condition", name, data={"inner": f["brief"]}))
        if f["place"]:
            made.append(_event("move", name, f["place"], data={"ignore_exits": True}))
        for item in _names(f["carries"]):
            made.append(_event("introduce", item, "item", data={"holder": name}))
        for entry in _names(f["lore"]):
            made.append(_event("know", name, entry, data={"kind": "lore", "how": "they always knew it"}))
        window = {part: f[f"routine_{part}"] for part in ("start", "end", "place", "activity") if f[f"routine_{part}"]}
        if window:
            made.append(_event("routine_set", name, data={"windows": [window]}))
        return made

    def done(self):
        return f"{self.cleaned_data['name']} is in the world. The narrator sees them from the next turn."


def _exit_fields():
    fields = {}
    for row in range(EXIT_ROWS):
        fields[f"exit{row}_to"] = _text("to", aria=f"exit {row + 1}: to")
        fields[f"exit{row}_label"] = _text("through", aria=f"exit {row + 1}: through (a door)")
        fields[f"exit{row}_state"] = forms.ChoiceField(label="which is", choices=EXIT_STATES, required=False,
                                                       widget=forms.Select(attrs={"aria-label":
                                                                                  f"exit {row + 1}: which is"}))
        fields[f"exit{row}_opener"] = _text("opened by", aria=f"exit {row + 1}: opened by (a key)")
    return fields


class PlaceForm(forms.Form):
    kind = "place"
    name = forms.CharField(label="Name", max_length=MAX_TEXT, strip=True)
    aliases = _text("Also called", "other names, comma separated")
    description = _text("Description", "what is seen on arriving")
    features = _text("Features", "one a line, as name: what it is (hearth: a wide hearth)", rows=3,
                     max_length=4000)
    locals().update(_exit_fields())
    sections = (("The place", ("name", "aliases", "description", "features")),)
    save_label = "Add the place"

    def grouped(self):
        return [(heading, [self[name] for name in names]) for heading, names in self.sections]

    def exits(self):
        return [tuple(self[f"exit{row}_{part}"] for part in ("to", "label", "state", "opener"))
                for row in range(EXIT_ROWS)]

    def events(self):
        f = self.cleaned_data
        name = f["name"]
        made = [_event("introduce", name, "place", f["description"], aliases=_names(f["aliases"]))]
        for line in (f["features"] or "").splitlines():
            feature, _, text = line.partition(":")
            if feature.strip():
                made.append(_event("feature", name, feature.strip(), text.strip() or feature.strip()))
        for row in range(EXIT_ROWS):
            to = f[f"exit{row}_to"]
            if not to:
                continue
            data = {"both_ways": True, "state": f[f"exit{row}_state"] or "open"}
            if f[f"exit{row}_label"]:
                data["label"] = f[f"exit{row}_label"]
            if f[f"exit{row}_opener"]:
                data["opener"] = f[f"exit{row}_opener"]
            made.append(_event("exit_change", name, to, data=data))
        return made

    def done(self):
        return f"{self.cleaned_data['name']} is in the world, with its exits. The narrator sees it from the next turn."


FORMS = {form.kind: form for form in (CharacterForm, PlaceForm)}
