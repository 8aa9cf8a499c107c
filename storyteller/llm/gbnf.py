"""A JSON schema as a llama.cpp grammar (GBNF), for the built-in narrator's structured answers.

llama-cpp-python's own converter writes a string's ``maxLength`` as nested
optional groups, one per character; past a few hundred characters llama.cpp
refuses the grammar (and sampling with a refused grammar crashes the
process). This one writes bounded repetition (``char{0,160}``), which
llama.cpp takes for any length. It covers what this project's schemas use:
objects with properties, arrays with items and maxItems, strings with
maxLength, enum and const, booleans, numbers, null, anyOf/oneOf and lists
of types. Every property is written, in order; one optional space follows
each token, the shape ``bounds.longest`` counts.
"""

import json

_CHAR = r'''char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})'''
_PRIMITIVES = {
    "boolean": '("true" | "false") space',
    "null": '"null" space',
    "integer": '"-"? ("0" | [1-9] [0-9]{0,15}) space',
    "number": '"-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? space',
}


class Unsupported(ValueError):
    """The schema uses something this converter does not write (the message says what)."""


def grammar(schema):
    """Return the GBNF text whose root accepts exactly the JSON values ``schema`` describes (see the docstring)."""
    rules = {"space": '" "?', "char": _CHAR.split(" ::= ", 1)[1]}
    rules["root"] = _rule(schema, "root", rules)
    return "\n".join(f"{name} ::= {body}" for name, body in rules.items()) + "\n"


def _rule(schema, name, rules):
    """Return the body of the rule for ``schema``, adding the rules it needs under names starting with ``name``."""
    if not isinstance(schema, dict):
        raise Unsupported(f"{name}: a schema must be an object, not {schema!r}")
    if "const" in schema:
        return f"{_literal(schema['const'])} space"
    if "enum" in schema:
        return "(" + " | ".join(_literal(value) for value in schema["enum"]) + ") space"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return "(" + " | ".join(_ref(option, f"{name}-{index}", rules)
                                    for index, option in enumerate(schema[key])) + ")"
    kind = schema.get("type")
    if isinstance(kind, list):
        return "(" + " | ".join(_ref({**schema, "type": each}, f"{name}-{each}", rules) for each in kind) + ")"
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else None
    if kind == "object":
        properties = schema.get("properties")
        if not properties:
            raise Unsupported(f"{name}: an object needs its properties listed")
        pairs = [f'{_literal(key)} space ":" space {_ref(sub, f"{name}-{_slug(key)}", rules)}'
                 for key, sub in properties.items()]
        return '"{" space ' + ' "," space '.join(pairs) + ' "}" space'
    if kind == "array":
        items, least, most = schema.get("items"), schema.get("minItems", 0), schema.get("maxItems")
        if not isinstance(items, dict):
            raise Unsupported(f"{name}: an array needs one schema for its items")
        if most == 0:
            return '"[" space "]" space'
        item = _ref(items, f"{name}-item", rules)
        more = max(least - 1, 0)
        body = item if most == 1 else f'{item} ("," space {item}){{{more},{"" if most is None else most - 1}}}'
        return '"[" space ' + (body if least else f"({body})?") + ' "]" space'
    if kind == "string":
        if any(key in schema for key in ("pattern", "format")):
            raise Unsupported(f"{name}: string patterns and formats are not supported")
        least, most = schema.get("minLength", 0), schema.get("maxLength")
        count = "*" if most is None else f"{{{least},{most}}}"
        return f'"\\"" char{count} "\\"" space'
    if kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    raise Unsupported(f"{name}: unsupported schema {json.dumps(schema)[:80]}")


def _ref(schema, name, rules):
    """Add the rule for ``schema`` as ``name`` (made unique) and return that name."""
    unique, number = name, 2
    while unique in rules:
        unique, number = f"{name}{number}", number + 1
    rules[unique] = ""  # reserved while its own sub-rules are added
    rules[unique] = _rule(schema, unique, rules)
    return unique


def _literal(value):
    """Return ``value`` as JSON, written as one GBNF string literal."""
    text = json.dumps(value, ensure_ascii=False)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _slug(key):
    return "".join(c if c.isalnum() else "-" for c in key).strip("-") or "key"
