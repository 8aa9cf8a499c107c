"""Story variables: one mechanism for mood, injuries, debt, flags and reputation (seed 002 故事变量).

A definition says what a variable is (``number``, ``flag``, ``choice`` or
``text``), what it applies to (characters, items, places, the world), its
range or options, its default, who may see it, whether it is shown at its
default (``always``), its numeric bands and its baseline. A value is stored
only while it differs from the default: a write equal to the default
retracts the slot. A change sets a value (``to``: out of range is refused),
moves a number (``by``: clamped to the range) or returns it to its baseline
(``baseline``); each change is accepted or refused on its own, with the
reason. ``valence``, ``arousal`` and ``dominance`` are built in for every
character, from −1 to 1, private to that character, resting at the
character's temperament.
"""

from dataclasses import dataclass, field

from .rules import Refused, shown, write

TYPES = ("number", "flag", "choice", "text")
APPLIES_TO = ("character", "item", "place", "world")
# ▶ Seed 002 names visibility without its values: public (whoever is present sees it), private (the character it
# belongs to and the narrator), narrator (the narrator alone). ``always`` is a separate flag, not a visibility.
VISIBILITIES = ("public", "private", "narrator")
# Seed 002 故事变量: "最多 60 个" definitions (the three built-ins are not counted).
MAX_DEFINITIONS = 60
# Seed 002 故事变量: the narrator sees "最多 14 行", "每个对象最多八项".
MAX_LINES = 14
PER_OBJECT = 8
# The object key of variables that apply to the world.
WORLD = "world"
MAX_TEXT = 200
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_")


@dataclass(frozen=True)
class Band:
    label: str
    low: float | None = None
    high: float | None = None

    def holds(self, value):
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)


@dataclass(frozen=True)
class Definition:
    name: str
    type: str
    applies_to: frozenset
    default: object = None
    minimum: float | None = None
    maximum: float | None = None
    options: tuple = ()
    visibility: str = "public"
    always: bool = False
    bands: tuple = ()
    baseline: object = None
    description: str = ""
    builtin: bool = False

    def band_of(self, value):
        """Return the label of the first band holding a number, or ""."""
        return next((band.label for band in self.bands if band.holds(value)), "") if self.type == "number" else ""

    def default_for(self, obj, temperaments=None):
        """Return the value ``obj`` has when nothing is stored: a built-in's rests at the character's temperament."""
        if self.builtin:
            return _number((temperaments or {}).get(obj, {}).get(self.name, self.default))
        return self.default

    def baseline_for(self, obj, temperaments=None):
        if self.builtin or self.baseline is None:
            return self.default_for(obj, temperaments)
        return self.baseline

    def describe(self, value):
        """Return "debt 80 (crushing)": the name, the value, and its band if it has one."""
        band = self.band_of(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
        shown = ("yes" if value else "no") if self.type == "flag" else _show(value)
        return f"{self.name} {shown}" + (f" ({band})" if band else "")

    def data(self):
        """Return the definition as stored in its ``variable_def:<name>`` record (and as a world file gives it)."""
        data = {"name": self.name, "type": self.type, "applies_to": sorted(self.applies_to), "default": self.default,
                "visibility": self.visibility, "always": self.always}
        if self.type == "number":
            data["range"] = [self.minimum, self.maximum]
            if self.bands:
                data["bands"] = [{"label": b.label, "min": b.low, "max": b.high} for b in self.bands]
        if self.options:
            data["options"] = list(self.options)
        if self.baseline is not None:
            data["baseline"] = self.baseline
        if self.description:
            data["description"] = self.description
        return data

    def write(self):
        return write(f"variable_def:{self.name}", "variable_def", subject=self.name, value=self.type, data=self.data())


BUILTINS = {name: Definition(name, "number", frozenset({"character"}), 0.0, -1.0, 1.0, visibility="private",
                             builtin=True, description=text)
            for name, text in (("valence", "how pleasant the character feels, −1 to 1"),
                               ("arousal", "how stirred up the character is, −1 to 1"),
                               ("dominance", "how much in control the character feels, −1 to 1"))}


# A choice's options, and a number's bands.
MAX_OPTIONS = 50


def parse_definition(data):
    """Return the Definition of ``data``, or refuse with every reason at once."""
    if not isinstance(data, dict):
        raise Refused(f"a variable definition is an object, not {shown(data)}")
    reasons = []
    name = str(data.get("name") or "").strip().lower()
    if not name or not set(name) <= _NAME_CHARS or ":" in name:
        reasons.append(f"variable name {shown(data.get('name'))}: use lower-case letters, digits and _")
    elif name in BUILTINS:
        reasons.append(f"{name!r} is built in (valence, arousal and dominance exist for every character)")
    kind = data.get("type")
    if kind == "boolean":
        kind = "flag"
    if not isinstance(kind, str) or kind not in TYPES:
        reasons.append(f"{name or 'the variable'}: type {shown(kind)} is not one of {', '.join(TYPES)}")
    applies = data.get("applies_to") or ["character"]
    applies = [applies] if isinstance(applies, str) else applies if isinstance(applies, list) else [applies]
    bad = [shown(a) for a in applies if not isinstance(a, str) or a not in APPLIES_TO]
    if bad:
        reasons.append(f"{name}: applies_to {bad} is not among {', '.join(APPLIES_TO)}")
    visibility = data.get("visibility") or "public"
    if not isinstance(visibility, str) or visibility not in VISIBILITIES:
        reasons.append(f"{name}: visibility {shown(visibility)} is not one of {', '.join(VISIBILITIES)}")
    fields = {}
    if kind == "number":
        fields = _number_fields(name, data, reasons)
    elif kind == "choice":
        given = data.get("options") or []
        options = tuple(str(o).strip()[:MAX_TEXT] for o in (given if isinstance(given, list) else [])[:MAX_OPTIONS]
                        if str(o).strip())
        if len(options) < 2 or len(set(options)) != len(options):
            reasons.append(f"{name}: a choice needs two or more different options")
        default = data.get("default", options[0] if options else None)
        if options and default not in options:
            reasons.append(f"{name}: the default {shown(default)} is not one of the options {list(options)[:10]}")
        fields = {"options": options, "default": default}
    elif kind == "flag":
        default = data.get("default", False)
        if not isinstance(default, bool):
            reasons.append(f"{name}: a flag's default is true or false, not {shown(default)}")
        fields = {"default": default}
    elif kind == "text":
        fields = {"default": str(data.get("default") or "")[:MAX_TEXT]}
    if kind == "number" and len(fields.get("bands", ())) > MAX_OPTIONS:
        reasons.append(f"{name}: a number has at most {MAX_OPTIONS} bands")
    if kind != "number" and (data.get("bands") or data.get("range") is not None):
        reasons.append(f"{name}: only numbers have a range and bands")
    if reasons:
        raise Refused("; ".join(reasons))
    return Definition(name, kind, frozenset(applies), visibility=visibility, always=data.get("always") is True,
                      description=str(data.get("description") or "")[:MAX_TEXT], **fields)


def _number_fields(name, data, reasons):
    bounds = data.get("range") or [data.get("min"), data.get("max")]
    low = high = None
    if isinstance(bounds, (list, tuple)) and len(bounds) == 2:
        low, high = _number(bounds[0]), _number(bounds[1])
    if low is None or high is None or low >= high:
        reasons.append(f"{name}: a number needs a range [min, max] with min below max")
        return {}
    default = _number(data.get("default", low if low > 0 or high < 0 else 0))
    if default is None or not low <= default <= high:
        reasons.append(f"{name}: the default {shown(data.get('default'))} is outside {_show(low)}–{_show(high)}")
    baseline = data.get("baseline")
    if baseline is not None and (_number(baseline) is None or not low <= _number(baseline) <= high):
        reasons.append(f"{name}: the baseline {shown(baseline)} is outside {_show(low)}–{_show(high)}")
    bands = []
    given = data.get("bands") or []
    for index, item in enumerate(given if isinstance(given, list) else [None]):
        label = str(item.get("label") or "").strip() if isinstance(item, dict) else ""
        if not label:
            reasons.append(f"{name}: band {index + 1} has no label")
            continue
        band = Band(label, _number(item.get("min")), _number(item.get("max")))
        if band.low is not None and band.high is not None and band.low > band.high:
            reasons.append(f"{name}: band {label!r} ends before it starts")
        bands.append(band)
    return {"minimum": low, "maximum": high, "default": default, "bands": tuple(bands),
            "baseline": _number(baseline) if baseline is not None else None}


def load_definitions(items, *, existing=()):
    """Return {name: Definition} for a world file's variables, or refuse with every reason at once.

    ``existing`` holds the names already defined on the line: together they
    may not pass ``MAX_DEFINITIONS``.
    """
    reasons, defs = [], {}
    for index, item in enumerate(items or []):
        try:
            definition = parse_definition(item)
        except Refused as error:
            reasons.append(f"variable {index + 1}: {error}")
            continue
        if definition.name in defs or definition.name in existing:
            reasons.append(f"variable {definition.name!r} is defined twice")
        defs[definition.name] = definition
    total = len(set(existing) | set(defs))
    if total > MAX_DEFINITIONS:
        reasons.append(f"{total} variables; a story has at most {MAX_DEFINITIONS} (the built-in valence, arousal "
                       "and dominance not counted)")
    if reasons:
        raise Refused("the variables are refused: " + "; ".join(reasons))
    return defs


def define(defs, data):
    """Return the Definition a ``variable_define`` event adds to ``defs`` (name -> Definition), or refuse."""
    definition = parse_definition(data)
    if definition.name in defs:
        raise Refused(f"variable {definition.name!r} is already defined")
    if len([d for d in defs.values() if not d.builtin]) >= MAX_DEFINITIONS:
        raise Refused(f"a story has at most {MAX_DEFINITIONS} variables (the built-in valence, arousal and "
                      f"dominance not counted); {definition.name!r} would be one more")
    return definition


def with_builtins(defs):
    """Return ``defs`` with the three built-in emotion variables after them."""
    return {**defs, **{name: d for name, d in BUILTINS.items() if name not in defs}}


def value_of(defs, values, obj, name, temperaments=None):
    """Return the value of ``name`` on ``obj``: the stored one, else its default; None for an unknown variable.

    What a trigger's variable condition reads (``rules.World.variable``).
    """
    definition = defs.get(name)
    if definition is None:
        return None
    return values.get((obj, name), definition.default_for(obj, temperaments))


def slot_of(obj, name):
    return f"var:{obj}:{name}"


# --- changes ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """An accepted change: the new value, the record write (None when nothing needs storing) and a note."""

    obj: str
    name: str
    value: object
    write: dict | None
    note: str = ""


def change(item, *, defs, values, kind_of, temperaments=None):
    """Return the Change one ``variable_change`` item makes, or refuse with the reason.

    ``item``: ``{"object", "name", "to" | "by" | "baseline": true}``.
    ``defs`` holds the definitions (built-ins included: ``with_builtins``),
    ``values`` the stored values by (object, name), ``kind_of(key)`` the kind
    of an object (character, item, place; ``world`` for the world) or None.
    """
    name = str(item.get("name") or "").strip().lower()
    definition = defs.get(name)
    if definition is None:
        known = ", ".join(sorted(defs)) or "none"
        raise Refused(f"unknown variable {name!r}; the variables are {known}")
    obj = str(item.get("object") or (WORLD if definition.applies_to == {"world"} else "")).strip()
    if not obj:
        raise Refused(f"a change to {name} names no object (a character, item or place)")
    kind = WORLD if obj == WORLD else kind_of(obj)
    if kind is None:
        raise Refused(f"unknown object {obj!r} for {name}")
    if kind not in definition.applies_to:
        article = "an" if kind[0] in "aeiou" else "a"
        raise Refused(f"{name} applies to {', '.join(sorted(definition.applies_to))}, and {obj!r} is {article} {kind}")
    ways = [way for way in ("to", "by") if item.get(way) is not None] + (["baseline"] if item.get("baseline") else [])
    if len(ways) != 1:
        raise Refused(f"a change to {name} gives exactly one of to, by or baseline")
    default = definition.default_for(obj, temperaments)
    current = values.get((obj, name), default)
    note = ""
    if ways == ["to"]:
        value = _checked(definition, item["to"])
    elif ways == ["by"]:
        if definition.type != "number":
            raise Refused(f"{name} is a {definition.type}; only numbers change by an amount")
        step = _number(item["by"])
        if step is None:
            raise Refused(f"by {item['by']!r} is not a number")
        wanted = current + step
        value = min(max(wanted, definition.minimum), definition.maximum)
        if value != wanted:
            note = f"clamped to {_show(value)} (the range is {_show(definition.minimum)}–{_show(definition.maximum)})"
    else:
        value = definition.baseline_for(obj, temperaments)
    value = _tidy(value)
    stored = (obj, name) in values
    if value == default:
        record = write(slot_of(obj, name), "var", subject=obj, value=_show(value), retracted=True) if stored else None
    else:
        record = write(slot_of(obj, name), "var", subject=obj, value=_show(value),
                       data={"name": name, "value": value}, narrator_only=definition.visibility != "public")
    return Change(obj, name, value, record, note)


def apply_changes(items, *, defs, values, kind_of, temperaments=None):
    """Apply ``items`` in order, each seeing the ones before; return [(item, Change | None, reason)].

    A refused item does not stop the others. ``values`` is updated in place.
    """
    outcomes = []
    for item in items:
        try:
            made = change(item, defs=defs, values=values, kind_of=kind_of, temperaments=temperaments)
        except Refused as error:
            outcomes.append((item, None, str(error)))
            continue
        if made.write is not None and made.write.get("retracted"):
            values.pop((made.obj, made.name), None)
        elif made.write is not None:
            values[(made.obj, made.name)] = made.value
        outcomes.append((item, made, ""))
    return outcomes


def _checked(definition, value):
    """Return ``value`` as a value of ``definition``, or refuse (out of range, not an option, wrong type)."""
    name = definition.name
    if definition.type == "number":
        number = _number(value)
        if number is None:
            raise Refused(f"{name} is a number; {value!r} is not")
        if not definition.minimum <= number <= definition.maximum:
            raise Refused(f"{_show(number)} is out of range {_show(definition.minimum)}–{_show(definition.maximum)} "
                          f"for {name}")
        return number
    if definition.type == "flag":
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no"):
            return value.lower() in ("true", "yes")
        if not isinstance(value, bool):
            raise Refused(f"{name} is a flag: true or false, not {value!r}")
        return value
    if definition.type == "choice":
        if value not in definition.options:
            raise Refused(f"{value!r} is not an option of {name}: {', '.join(definition.options)}")
        return value
    text = " ".join(str(value).split())
    if len(text) > MAX_TEXT:
        raise Refused(f"{name} holds at most {MAX_TEXT} characters")
    return text


def _number(value):
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else number


def _tidy(value):
    return round(value, 4) if isinstance(value, float) else value


def _show(value):
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)


# --- views --------------------------------------------------------------------------------------------------------


@dataclass
class View:
    lines: list = field(default_factory=list)
    left_out: int = 0  # objects with something to show that did not fit


def view(*, defs, values, kind_of, viewer=None, scene=(), present=(), temperaments=None, name_of=lambda key: key,
         max_lines=MAX_LINES, per_object=PER_OBJECT):
    """Return the variable lines a viewer may see, one line per object.

    The narrator (``viewer`` None) sees every variable: the ``scene``'s
    objects first (its place, those present, what is there), then every
    other object with a stored value, at most ``max_lines`` lines. A
    character sees its own public and private variables and the public ones
    of the characters ``present``. Shown: values that differ from the
    default, or whose definition says ``always``, at most ``per_object`` on a
    line.
    """
    if viewer is None:
        order = list(dict.fromkeys([*scene, *present]))
        stored = sorted({obj for obj, _ in values} - set(order), key=lambda key: (name_of(key).lower(), key))
        order += stored
    else:
        order = list(dict.fromkeys([viewer, *present]))
    result = View()
    for obj in order:
        kind = WORLD if obj == WORLD else kind_of(obj)
        items = []
        for definition in defs.values():
            if kind not in definition.applies_to:
                continue
            if viewer is not None and not sees(definition, obj, viewer):
                continue
            default = definition.default_for(obj, temperaments)
            value = values.get((obj, definition.name), default)
            if value != default or definition.always:
                items.append(definition.describe(value))
        if not items:
            continue
        if len(result.lines) >= max_lines:
            result.left_out += 1
            continue
        result.lines.append(f"{name_of(obj)}: {', '.join(items[:per_object])}")
    return result


def sees(definition, obj, viewer):
    """Return whether ``viewer`` sees variable ``definition`` on ``obj``: public on anyone, private on itself."""
    if obj == viewer:
        return definition.visibility in ("public", "private")
    return definition.visibility == "public"
