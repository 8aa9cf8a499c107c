"""World files fuzzed (issue 22, point 4): 1,200 files, each a real world with one part replaced by something else
of any JSON shape, or bytes and JSON of no world at all. Every one is imported or refused in words: no other
exception, so no page answers 500 and nothing prints a traceback."""

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from campaigns import worldfile

WORLDS = [Path(__file__).parent / "worlds" / "lantern_keep.json",
          Path(__file__).parents[2] / "campaigns" / "worlds" / "greyhollow.json"]
BASES = [json.loads(path.read_text()) for path in WORLDS]

# What a careless or hostile author puts where a value belongs: every JSON kind, the edges of numbers and
# text, and shapes that nest.
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10 ** 60), max_value=10 ** 60),
    st.sampled_from([0, -1, 10 ** 15, 10 ** 30, 2 ** 63, -(2 ** 63), 253402300799000, -62135596800000]),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40),
    st.sampled_from(["", " ", "everyone", "a to " * 300, "9999-12-31T23:59", "0001-01-01T00:00", "mon-fri",
                     "25:99", "tomorrow at 7", "the second Tuesday of March 0000", "x" * 5000, "Hall", "Edrin",
                     "iron-key", "2d6", "100d1000", "1" * 400 + "d6", "{", "[]", "\u0000", "🙂" * 50]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                       st.dictionaries(st.text(max_size=12), inner, max_size=5)),
                      max_leaves=20)


def _paths(value, path=()):
    """Yield the path of every value inside ``value`` (keys and indices), the value itself first."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*path, index))


# Paths by (world, section), so every section is fuzzed as often as the places that outnumber it.
PATHS = {}
for _number, _base in enumerate(BASES):
    for _path in _paths(_base):
        if _path:
            PATHS.setdefault((_number, _path[0]), []).append(_path)
SECTIONS = sorted(PATHS)


def _replaced(base, path, value):
    document = json.loads(json.dumps(base))
    holder = document
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = value
    return document


@st.composite
def mutated(draw):
    """A real world file with one to three of its values replaced."""
    number, section = draw(st.sampled_from(SECTIONS))
    path = draw(st.sampled_from(PATHS[number, section]))
    document = _replaced(BASES[number], path, draw(VALUES))
    for _ in range(draw(st.integers(0, 2))):
        paths = [p for p in _paths(document) if p]
        document = _replaced(document, draw(st.sampled_from(paths)), draw(VALUES))
    return document


def _imported_or_refused(data):
    try:
        document = worldfile.read(data)
        worldfile.prepare(object(), document)
    except worldfile.WorldRefused as refusal:
        assert refusal.reasons and all(isinstance(reason, str) and reason for reason in refusal.reasons)
        assert "Traceback" not in str(refusal)


@settings(max_examples=1_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_a_world_file_with_anything_in_any_place_is_imported_or_refused_in_words(document):
    _imported_or_refused(json.dumps(document).encode())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(VALUES.map(lambda value: json.dumps(value).encode()), st.binary(max_size=200),
                 st.builds(lambda depth, kind: (kind[0] * depth + kind[1] * depth).encode(), st.integers(1, 5000),
                           st.sampled_from(["[]", "{}"])).filter(lambda data: data != b"{}" * 1)))
def test_bytes_of_no_world_at_all_are_refused_in_words(data):
    _imported_or_refused(data)


@pytest.mark.parametrize("case", ["deep", "digits", "depth-900", "boxes"])
def test_the_probes_shapes_are_refused_naming_the_reason(case):
    base = json.loads(json.dumps(BASES[0]))
    if case == "deep":
        data = b'{"places": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        words = "nested more than"
    elif case == "digits":
        data = b'{"places": [{"name": "Hall", "capacity": ' + b"7" * 5000 + b"}]}"
        words = "digits long"
    elif case == "depth-900":
        nested = "[" * 900 + "]" * 900
        data = json.dumps({**base, "facts": "@"}).replace('"@"', nested).encode()
        words = "nested more than"
    else:
        base["items"] = [{"id": "box-0", "name": "Box 0", "holder": "Hall", "container": "open"}] + [
            {"id": f"box-{n}", "name": f"Box {n}", "holder": f"box-{n - 1}", "container": "open"} for n in range(1, 1200)]
        data = json.dumps(base).encode()
        words = "containers down"
    with pytest.raises(worldfile.WorldRefused) as refused:
        worldfile.prepare(object(), worldfile.read(data))
    assert any(words in reason for reason in refused.value.reasons), refused.value.reasons[:5]
