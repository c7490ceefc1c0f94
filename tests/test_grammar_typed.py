"""A kind's fields come from one generated function for the common line and from the general
converter loop otherwise; both must give the same fields, types and refusals for any message."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from spyglass.collectors import engine_log, gateway_log, supervisord_log, switch_log
from spyglass.collectors.fields import capture_type, fields
from spyglass.collectors.grammar import MAX_NUMBER, Miss, _float, _int, build_kinds, converters

GRAMMARS = {
    module.__name__.split(".")[-1]: build_kinds(module.PATTERNS, {}, "test", frozenset(module.TEXT_FIELDS))
    for module in (engine_log, gateway_log, supervisord_log, switch_log)
}
KINDS = [kind for kinds in GRAMMARS.values() for kind in kinds]


def typed_strictly(value):
    """Fields with their types: 1 and 1.0 are equal as values, not as fields."""
    return value if isinstance(value, str) else sorted((name, type(v).__name__, v) for name, v in value.items())


@given(st.sampled_from(KINDS), st.data())
def test_the_generated_path_equals_the_general_one_for_any_message(kind, data):
    message = data.draw(st.from_regex(kind.pattern, fullmatch=True))
    found = kind.pattern.match(message)
    assert found is not None
    assert typed_strictly(kind.typed(found)) == typed_strictly(kind._typed_any(found))


SHAPES = [r"\d+", r"\d{1,3}", r"[\d.]+", r"-?\d+", r"\S+", r"\w+", r"[a-z]*"]
NAMES = ["n", "if", "class", "None", "v0", "names", "found", "int", "typed", "c0", "text"]


@st.composite
def override_kinds(draw):
    """A configured kind: 0-4 named groups of any shape, each optional or not, some named as text."""
    names = draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True))
    parts = [
        f"(?: {name}=(?P<{name}>{draw(st.sampled_from(SHAPES))})){'?' if draw(st.booleans()) else ''}" for name in names
    ]
    text = frozenset(draw(st.sets(st.sampled_from(NAMES))))
    [kind] = [k for k in build_kinds({"x": ("", "", "x")}, {"y": "y" + "".join(parts)}, "test", text) if k.kind == "y"]
    return kind


@given(override_kinds(), st.data())
def test_the_generated_path_equals_the_general_one_for_configured_kinds(kind, data):
    """Overrides may name groups anything, leave untyped groups optional, or match numbers of any length."""
    message = data.draw(st.from_regex(kind.pattern, fullmatch=True))
    found = kind.pattern.match(message)
    assert found is not None
    assert typed_strictly(kind.typed(found)) == typed_strictly(kind._typed_any(found))


PARK = next(kind for kind in GRAMMARS["engine_log"] if kind.kind == "park")
REJECTED = next(kind for kind in GRAMMARS["engine_log"] if kind.kind == "rejected")
PARK_LINE = "park conv=c1 parked=1 bytes={} used=5 budget=9 evictions=0"


@pytest.mark.parametrize(
    ("kind", "message", "expected"),
    [
        (
            PARK,
            PARK_LINE.format(123),
            {"conv": "c1", "parked": 1, "bytes": 123, "used": 5, "budget": 9, "evictions": 0},
        ),
        (
            PARK,
            PARK_LINE.format("9" * 15),
            {"conv": "c1", "parked": 1, "bytes": int("9" * 15), "used": 5, "budget": 9, "evictions": 0},
        ),
        (
            PARK,
            PARK_LINE.format(MAX_NUMBER),
            {"conv": "c1", "parked": 1, "bytes": MAX_NUMBER, "used": 5, "budget": 9, "evictions": 0},
        ),  # 16 digits: the general path, still in range
        (PARK, PARK_LINE.format(MAX_NUMBER + 1), Miss.invalid("bytes")),
        (
            PARK,
            PARK_LINE.format("0" * 40 + "7"),
            {"conv": "c1", "parked": 1, "bytes": 7, "used": 5, "budget": 9, "evictions": 0},
        ),  # long, but a small number
        (
            REJECTED,
            "task 3 rejected 429 queue full",
            {"task": 3, "status": 429, "reason": "queue full"},
        ),  # absent groups
    ],
    ids=["common", "15-digits", "16-digits-in-range", "out-of-range", "leading-zeros", "optional-groups-absent"],
)
def test_typed_fields_at_the_edges(kind, message, expected):
    found = kind.pattern.match(message.encode())
    assert found is not None
    assert kind.typed(found) == expected


DECLARED = fields()  # the store's column types, from the same regexes
GROUPS = [(source_kind, kind) for source_kind, kinds in GRAMMARS.items() for kind in kinds]
NUMBER_TYPES = {"int": int, "float": float}


@given(st.sampled_from(GROUPS), st.data())
def test_every_field_declared_a_number_arrives_as_that_number(group, data):
    """The parser and the store read a capture's type off the same regex (collectors/fields.capture_type)."""
    source_kind, kind = group
    message = data.draw(st.from_regex(kind.pattern, fullmatch=True))
    typed = kind.typed(kind.pattern.match(message))  # from_regex matches: never None
    assume(not isinstance(typed, str))  # a number past MAX_NUMBER refuses the line (tested above)
    declared = DECLARED[source_kind][kind.kind]
    for name, value in typed.items():
        wanted = NUMBER_TYPES.get(declared.get(name, "text"))
        assert wanted is None or value.__class__ is wanted, (source_kind, kind.kind, name, value)


PRECHECK = next(kind for kind in GRAMMARS["gateway_log"] if kind.kind == "precheck")
PRECHECK_LINE = "precheck req=r1 count_tokens=9 window=262144 room={}"


@pytest.mark.parametrize(
    ("room", "expected"),
    [
        ("107348", 107348),
        ("-5000", -5000),
        ("0", 0),
        ("-0", 0),
        (f"-{MAX_NUMBER}", -MAX_NUMBER),
        ("-" + "9" * 15, -int("9" * 15)),
        (f"-{MAX_NUMBER + 1}", Miss.invalid("room")),
    ],
    ids=["positive", "negative", "zero", "minus-zero", "most-negative", "15-digits", "out-of-range"],
)
def test_a_signed_group_is_an_int_whatever_its_sign(room, expected):
    """The gateway's room=(?P<room>-?\\d+) goes negative exactly when the prompt overflows the window."""
    assert DECLARED["gateway_log"]["precheck"]["room"] == "int"
    found = PRECHECK.pattern.match(PRECHECK_LINE.format(room).encode())
    typed = PRECHECK.typed(found)
    assert (typed if isinstance(typed, str) else typed["room"]) == expected
    assert isinstance(typed, str) or typed["room"].__class__ is int
    assert typed_strictly(typed) == typed_strictly(PRECHECK._typed_any(found))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (r"\d+", "int"),
        (r"-?\d+", "int"),
        (r"\d", "int"),
        (r"\d{3}", "int"),
        (r"-?\d{1,3}", "int"),
        (r"[\d.]+", "float"),
        (r"[.\d]+", "float"),
        (r"\d+\.\d+", "float"),
        (r"-?\d+\.\d+", "float"),
        (r"\S+", None),
        (r"\w+", None),
        (r"\d+|inf", None),
        (r"-\d+", None),
        (r"\d*", None),
    ],
)
def test_a_capture_type_is_read_off_its_body(body, expected):
    assert capture_type(body) == expected
    assert converters(f"(?P<x>{body})", frozenset()).get("x") is {"int": _int, "float": _float, None: None}[expected]
