"""Bounded JSON schemas: answers that must close within a token limit.

A grammar built from a schema with an unbounded string lets a small model
write that one string until the token limit cuts it off, unclosed ("Unterminated
string …"). ``bound`` puts a ``maxItems`` on every array and a ``maxLength``
on every free string; ``longest`` says how many characters the longest answer
to a bounded schema can be, written as llama.cpp's grammar writes JSON (at
most one space between tokens); ``fit`` bounds a schema so that its longest
answer is at most a given number of characters. Pure functions over plain
dicts: any schema, today's or a later step's, goes through the same three.
"""

import json

# A string shorter than this is a word, not a sentence: fit() shortens arrays before strings go below it.
SENTENCE = 80


def bound(schema, *, max_items=None, max_length=None):
    """Return a copy of ``schema`` whose arrays hold at most ``max_items`` and free strings at most ``max_length``.

    Bounds the schema already has are kept where they are tighter. A string
    with an enum, const, pattern or format is already bounded by it.
    """
    if isinstance(schema, list):
        return [bound(each, max_items=max_items, max_length=max_length) for each in schema]
    if not isinstance(schema, dict):
        return schema
    result = {}
    for key, value in schema.items():
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            result[key] = {name: bound(sub, max_items=max_items, max_length=max_length) for name, sub in value.items()}
        elif key in ("items", "prefixItems", "additionalProperties", "anyOf", "oneOf", "allOf"):
            result[key] = bound(value, max_items=max_items, max_length=max_length)
        else:
            result[key] = value
    kinds = _kinds(result)
    if "array" in kinds and max_items is not None:
        result["maxItems"] = min(result.get("maxItems", max_items), max_items)
    if "string" in kinds and max_length is not None and not _fixed(result):
        result["maxLength"] = min(result.get("maxLength", max_length), max_length)
    return result


def longest(schema):
    """Return the most characters an answer to ``schema`` can take, or None if nothing bounds it.

    Counted as llama.cpp's grammar writes JSON: every optional property
    present, one space after each token, a string's characters one each
    (an escape such as ``\\n`` counts as one: a model rarely writes them).
    """
    if not isinstance(schema, dict) or not schema:
        return None
    if "const" in schema:
        return len(json.dumps(schema["const"])) + 1
    if "enum" in schema:
        return max(len(json.dumps(value)) for value in schema["enum"]) + 1
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return _largest(longest(option) for option in schema[key])
    kinds = _kinds(schema)
    if len(kinds) > 1:
        return _largest(longest({**schema, "type": kind}) for kind in kinds)
    kind = kinds[0] if kinds else ("object" if "properties" in schema else "array" if "items" in schema else None)
    if kind == "object":
        if schema.get("additionalProperties") not in (None, False) or "properties" not in schema:
            return None
        parts = [(len(json.dumps(name)) + 3, longest(sub)) for name, sub in schema["properties"].items()]
        if any(size is None for _, size in parts):
            return None
        return 3 + sum(name + size for name, size in parts) + 2 * max(len(parts) - 1, 0) + 1
    if kind == "array":
        items, count = schema.get("items"), schema.get("maxItems")
        size = longest(items) if isinstance(items, dict) else None
        if size is None or count is None:
            return None if count is None or count > 0 else 4
        return 3 + count * size + 2 * max(count - 1, 0) + 1
    if kind == "string":
        if schema.get("maxLength") is None:
            return None
        return schema["maxLength"] + 3
    return {"boolean": 6, "null": 5, "integer": 18, "number": 40}.get(kind)


def fit(schema, chars, *, sentence=SENTENCE):
    """Return ``schema`` bounded so that ``longest`` of it is at most ``chars``, or None if no bound can do that.

    (A string with a pattern or format, or an object open to any property,
    has no length a bound can give it: None.)

    Strings are shortened first, down to ``sentence`` characters; then
    arrays hold fewer items; only an array of one item gets shorter strings.
    Arrays with no bound start at ``chars`` items (the search cuts them down).
    """
    schema = bound(schema, max_items=chars, max_length=chars)
    if _within(schema, chars):
        return schema
    items = _most_items(schema)
    while True:
        floor = sentence if items > 1 else 1
        length = _largest_fitting(lambda n: bound(schema, max_items=items, max_length=n), floor, chars, chars)
        if length is not None:
            return bound(schema, max_items=items, max_length=length)
        if items <= 1:
            return None
        # The most items that fit with sentence-long strings, found by halving rather than one at a time.
        fewer = _largest_fitting(lambda n: bound(schema, max_items=n, max_length=floor), 1, items - 1, chars)
        items = fewer if fewer is not None else 1


def _largest_fitting(bounded, low, high, chars):
    """Return the largest n in [low, high] for which longest(bounded(n)) <= chars (it grows with n), or None."""
    if low > high or not _within(bounded(low), chars):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if _within(bounded(middle), chars):
            low = middle
        else:
            high = middle - 1
    return low


def _within(schema, chars):
    size = longest(schema)
    return size is not None and size <= chars


def _most_items(schema):
    """Return the largest maxItems anywhere in a bounded ``schema`` (1 when it has no array)."""
    found = [1]

    def visit(node):
        if isinstance(node, dict):
            if "maxItems" in node:
                found.append(node["maxItems"])
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(schema)
    return max(found)


def _kinds(schema):
    kind = schema.get("type")
    return [kind] if isinstance(kind, str) else list(kind) if isinstance(kind, list) else []


def _fixed(schema):
    return any(key in schema for key in ("enum", "const", "pattern", "format"))


def _largest(sizes):
    sizes = list(sizes)
    return None if any(size is None for size in sizes) else max(sizes)
