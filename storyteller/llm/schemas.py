"""
Check a model's JSON reply against the JSON schema it was asked to follow.

Only the part of JSON Schema our callers send is understood: type, properties,
required, enum, const, items, minItems/maxItems, minLength/maxLength,
minimum/maximum and anyOf. A keyword outside that set is ignored, never
guessed at. No dependency: the schemas are small and the reasons go back to
the model in words, so they must read well.
"""

_TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def problems(value, schema: dict, where: str = "the reply") -> list[str]:
    """Return why `value` does not match `schema`, one sentence each; empty when it matches."""
    if "anyOf" in schema:
        tag = _tag(schema["anyOf"])
        if tag is not None and isinstance(value, dict):
            # A tagged union (the recorder's events, by "type"): judge the value by the shape its tag names.
            chosen = [option for option in schema["anyOf"] if option["properties"][tag]["const"] == value.get(tag)]
            if chosen:
                return problems(value, chosen[0], where)
            allowed = ", ".join(_show(option["properties"][tag]["const"]) for option in schema["anyOf"])
            return [f"{where}.{tag} is {_show(value.get(tag))}; it must be one of {allowed}"]
        if any(not problems(value, option, where) for option in schema["anyOf"]):
            return []
        return [f"{where} matches none of the allowed shapes"]
    if "const" in schema and value != schema["const"]:
        return [f"{where} must be {_show(schema['const'])}"]
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_show(option) for option in schema["enum"])
        return [f"{where} is {_show(value)}; it must be one of {allowed}"]
    kind = schema.get("type")
    if kind is not None and not _is(value, kind):
        return [f"{where} must be {_article(kind)}, not {_article(_kind_of(value))}"]
    if isinstance(value, dict):
        return _object_problems(value, schema, where)
    if isinstance(value, list):
        return _array_problems(value, schema, where)
    if isinstance(value, str):
        return _string_problems(value, schema, where)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _number_problems(value, schema, where)
    return []


def _tag(options: list) -> str | None:
    """Return the property whose ``const`` tells ``options`` apart (every option an object with its own), or None."""
    if not options or not all(isinstance(option, dict) and isinstance(option.get("properties"), dict)
                              for option in options):
        return None
    for name, sub in options[0]["properties"].items():
        if isinstance(sub, dict) and "const" in sub:
            values = [option["properties"].get(name, {}).get("const", ...) for option in options]
            if ... not in values and len(set(map(repr, values))) == len(values):
                return name
    return None


def _object_problems(value: dict, schema: dict, where: str) -> list[str]:
    found = [f"{where} lacks \"{name}\"" for name in schema.get("required", []) if name not in value]
    for name, sub in schema.get("properties", {}).items():
        if name in value:
            found += problems(value[name], sub, name if where == "the reply" else f"{where}.{name}")
    return found


def _array_problems(value: list, schema: dict, where: str) -> list[str]:
    found = []
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        found.append(f"{where} has {len(value)} items; at most {schema['maxItems']} are allowed")
    if "minItems" in schema and len(value) < schema["minItems"]:
        found.append(f"{where} has {len(value)} items; at least {schema['minItems']} are needed")
    if isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            found += problems(item, schema["items"], f"{where}[{index}]")
    return found


def _string_problems(value: str, schema: dict, where: str) -> list[str]:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return [f"{where} is {len(value)} characters long; at most {schema['maxLength']} are allowed"]
    if "minLength" in schema and len(value) < schema["minLength"]:
        return [f"{where} is {len(value)} characters long; at least {schema['minLength']} are needed"]
    return []


def _number_problems(value: float, schema: dict, where: str) -> list[str]:
    if "minimum" in schema and value < schema["minimum"]:
        return [f"{where} is {value}; the least allowed is {schema['minimum']}"]
    if "maximum" in schema and value > schema["maximum"]:
        return [f"{where} is {value}; the most allowed is {schema['maximum']}"]
    return []


def _is(value, kind) -> bool:
    if isinstance(kind, list):
        return any(_is(value, each) for each in kind)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and value.is_integer()
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = _TYPES.get(kind)
    return expected is None or isinstance(value, expected)


def _kind_of(value) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return next((name for name, cls in _TYPES.items() if isinstance(value, cls)), type(value).__name__)


def _article(kind) -> str:
    if isinstance(kind, list):
        return " or ".join(_article(each) for each in kind)
    return {"object": "an object", "array": "a list", "integer": "an integer", "null": "null"}.get(kind, f"a {kind}")


def _show(value) -> str:
    text = repr(value) if not isinstance(value, str) else f'"{value}"'
    return text if len(text) <= 40 else text[:37] + "…"
