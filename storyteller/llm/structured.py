"""
Structured output: how a server is asked for JSON, and how its reply is checked before use.

OpenAI-compatible servers differ in what they accept. Some take
``response_format`` ``json_schema`` (vLLM, LM Studio, newer llama.cpp), some
``json_object`` with a ``schema`` beside it (llama-cpp-python, llama.cpp),
some only a bare ``json_object``, some nothing at all. The client tries the
modes in ``MODES`` order and remembers, per (URL, model) for the life of the
process, the first one the server accepted; the model settings page shows it.

Whatever the mode, a reply is used only once it parses and matches the
schema (``schemas.problems``). One that does not is asked for once more,
with the reasons; a second miss is an error in words.

A reply the token limit cut off is kept up to its last complete list item
when that still matches the schema (``salvage``): a small model under a JSON
grammar often repeats one event until the limit, and the events it finished
are as good as those of a reply that closed. A cut-off reply's repeats of one
item are one item.
"""

import json
import threading
from collections.abc import Awaitable, Callable

from .base import NarratorError, model_label
from .schemas import problems

JSON_SCHEMA = "json_schema"
JSON_OBJECT_SCHEMA = "json_object_schema"
JSON_OBJECT = "json_object"
TEXT = "text"
MODES = (JSON_SCHEMA, JSON_OBJECT_SCHEMA, JSON_OBJECT, TEXT)

# What each mode means, for the model settings page.
LABELS = {
    JSON_SCHEMA: "response_format json_schema — the server holds every reply to the schema",
    JSON_OBJECT_SCHEMA: "response_format json_object with the schema — the server holds every reply to the schema",
    JSON_OBJECT: "response_format json_object, the schema in the prompt — the server makes the reply JSON, the "
                 "prompt asks for its shape, and each reply is checked",
    TEXT: "plain text, the schema in the prompt — only the prompt asks for JSON, and each reply is checked",
}

# The fake server finds the schema in a prompt by this phrase (storyteller/llm/fake_server.py).
SCHEMA_MARKER = "Answer with one JSON object and nothing else, matching this JSON schema:"

# Enough reasons for the model to fix its reply, few enough to keep the request short.
MAX_REASONS = 6

_negotiated: dict[tuple[str, str], str] = {}
_negotiated_lock = threading.Lock()

# ask(messages) -> (reply text, finish reason)
Ask = Callable[[list[dict]], Awaitable[tuple[str, str | None]]]


def negotiated(url: str, model: str) -> str | None:
    """Return the mode the server at `url` accepted for `model` in this process, or None before the first call."""
    with _negotiated_lock:
        return _negotiated.get((url, model))


def remember(url: str, model: str, mode: str):
    """Record that the server at `url` accepted `mode` for `model`."""
    with _negotiated_lock:
        _negotiated[(url, model)] = mode


def forget():
    """Forget every negotiated mode (a test's server may reuse an earlier one's port)."""
    with _negotiated_lock:
        _negotiated.clear()


def response_format(mode: str, schema: dict) -> dict | None:
    """Return the ``response_format`` a request in `mode` carries, or None for plain text."""
    if mode == JSON_SCHEMA:
        return {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}}
    if mode == JSON_OBJECT_SCHEMA:
        return {"type": "json_object", "schema": schema}
    if mode == JSON_OBJECT:
        return {"type": "json_object"}
    return None


def prompted(mode: str, messages: list[dict], schema: dict) -> list[dict]:
    """Return `messages`, with the schema asked for in words where the server does not hold the reply to it."""
    if mode in (JSON_SCHEMA, JSON_OBJECT_SCHEMA):
        return messages
    return _with_request(messages, f"{SCHEMA_MARKER}\n{json.dumps(schema)}")


async def checked(ask: Ask, messages: list[dict], schema: dict, *, model: str, limit: int) -> dict:
    """
    Return the first reply of `ask` that is JSON matching `schema`, asking once more with the reasons.

    `limit` is the reply's token limit, named when a reply was cut off by it.
    """
    text, finish_reason = await ask(messages)
    value, reasons = read(text, schema, finish_reason, limit)
    if not reasons:
        return value
    # A reply cut off by the limit is no help to its own fix, and would only lengthen the prompt.
    again = messages if finish_reason == "length" else [*messages, {"role": "assistant", "content": text}]
    again = _with_request(again, _ask_again(reasons, schema), new=True)
    text, finish_reason = await ask(again)
    value, reasons = read(text, schema, finish_reason, limit)
    if not reasons:
        return value
    raise NarratorError(
        f"The model {model_label(model)} answered twice without the JSON that was asked for "
        f"({'; '.join(reasons[:MAX_REASONS])}), so nothing was used. Retry, or choose a larger narrator model."
    )


def read(text: str, schema: dict, finish_reason: str | None = None, limit: int | None = None):
    """Return (value, reasons): the JSON in `text` and why it does not fit `schema` (no reasons: it fits)."""
    value = _parse(text)
    if value is _UNPARSED and finish_reason == "length":
        salvaged = salvage(text)
        if salvaged is not None and not problems(salvaged, schema):
            return salvaged, []
    if value is _UNPARSED:
        if finish_reason == "length":
            cut = f"the {limit}-token limit" if limit else "the token limit"
            return None, [f"the reply was cut off by {cut} before its JSON closed"]
        # Not quoted: the person reads this on the play page, where a model's broken JSON helps nobody.
        return None, ["the reply is not JSON" if text.strip() else "the reply is empty"]
    return value, problems(value, schema)


_UNPARSED = object()


def _parse(text: str):
    """Return the JSON value in `text`, allowing code fences or words around one object."""
    text = text.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            return json.loads(text[start:end + 1])
        except json.JSONDecodeError:
            pass
    return _UNPARSED


def salvage(text: str):
    """
    Return the JSON object a cut-off `text` began, closed after its last complete list item; None if none.

    Only whole items are kept: an object, list or string that closed as an
    item of one of the object's lists. Repeats of an item already kept in the same list are left out (the
    loop a cut-off reply usually is). Keys, numbers and items cut in half never
    make it in, and a reply with no complete item salvages nothing.
    """
    start = text.find("{")
    if start < 0:
        return None
    stack, in_string, escaped, cut = [], False, False, None
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
                if _whole_item(stack):
                    cut = (index + 1, "".join(stack))
            continue
        if char == '"':
            in_string = True
        elif char in "{[":
            stack.append(char)
        elif char in "}]":
            if not stack or "{[".index(stack[-1]) != "}]".index(char):
                return None
            stack.pop()
            if not stack:
                return None  # the object closed: not a cut-off reply, and _parse already had its chance
            if _whole_item(stack):
                cut = (index + 1, "".join(stack))
    if cut is None:
        return None
    end, open_ = cut
    closing = "".join("}" if each == "{" else "]" for each in reversed(open_))
    try:
        value = json.loads(text[start:end] + closing)
    except json.JSONDecodeError:
        return None
    return _without_repeats(value)


def _whole_item(stack):
    """Return whether what just closed is an item of a list the reply's object holds, lists in lists allowed.

    Closing there drops only the items after it and the object's later keys
    (the schema's required keys catch those); closing inside an item's own
    object would keep half an item.
    """
    return len(stack) >= 2 and all(each == "[" for each in stack[1:])


def _without_repeats(value):
    """Return `value` with each list's repeated items left out (first kept), at every depth."""
    if isinstance(value, dict):
        return {key: _without_repeats(item) for key, item in value.items()}
    if isinstance(value, list):
        kept, seen = [], set()
        for item in value:
            key = json.dumps(item, sort_keys=True)
            if key not in seen:
                seen.add(key)
                kept.append(_without_repeats(item))
        return kept
    return value


def _ask_again(reasons: list[str], schema: dict) -> str:
    shown = reasons[:MAX_REASONS]
    more = f" (and {len(reasons) - len(shown)} more)" if len(reasons) > len(shown) else ""
    return (f"That answer could not be used: {'; '.join(shown)}{more}. {SCHEMA_MARKER}\n{json.dumps(schema)}")


def _with_request(messages: list[dict], request: str, *, new: bool = False) -> list[dict]:
    """Append `request` to the last user message (some chat templates allow one system message, first)."""
    if not new and messages and messages[-1].get("role") == "user":
        last = messages[-1]
        return [*messages[:-1], {**last, "content": f"{last.get('content') or ''}\n\n{request}"}]
    return [*messages, {"role": "user", "content": request}]
