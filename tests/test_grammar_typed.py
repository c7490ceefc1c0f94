"""A kind's fields come from one generated function for the common line and from the general
converter loop otherwise; both must give the same fields, types and refusals for any message."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spyglass.collectors import engine_log, gateway_log, supervisord_log, switch_log
from spyglass.collectors.grammar import MAX_NUMBER, Miss, build_kinds

GRAMMARS = {module.__name__.split(".")[-1]: build_kinds(module.PATTERNS, {}, "test", frozenset(module.TEXT_FIELDS))
            for module in (engine_log, gateway_log, supervisord_log, switch_log)}
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
    parts = [f"(?: {name}=(?P<{name}>{draw(st.sampled_from(SHAPES))})){'?' if draw(st.booleans()) else ''}"
             for name in names]
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


@pytest.mark.parametrize(("kind", "message", "expected"), [
    (PARK, PARK_LINE.format(123), {"conv": "c1", "parked": 1, "bytes": 123, "used": 5, "budget": 9, "evictions": 0}),
    (PARK, PARK_LINE.format("9" * 15), {"conv": "c1", "parked": 1, "bytes": int("9" * 15), "used": 5, "budget": 9,
                                        "evictions": 0}),
    (PARK, PARK_LINE.format(MAX_NUMBER), {"conv": "c1", "parked": 1, "bytes": MAX_NUMBER, "used": 5, "budget": 9,
                                          "evictions": 0}),   # 16 digits: the general path, still in range
    (PARK, PARK_LINE.format(MAX_NUMBER + 1), Miss.invalid("bytes")),
    (PARK, PARK_LINE.format("0" * 40 + "7"), {"conv": "c1", "parked": 1, "bytes": 7, "used": 5, "budget": 9,
                                              "evictions": 0}),  # long, but a small number
    (REJECTED, "task 3 rejected 429 queue full", {"task": 3, "status": 429, "reason": "queue full"}),  # absent groups
], ids=["common", "15-digits", "16-digits-in-range", "out-of-range", "leading-zeros", "optional-groups-absent"])
def test_typed_fields_at_the_edges(kind, message, expected):
    found = kind.pattern.match(message.encode())
    assert found is not None
    assert kind.typed(found) == expected
