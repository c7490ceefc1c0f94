"""The fields of every event kind, with their types, declared once per source kind.

A source kind whose events come from a grammar declares its fields from the grammar (`from_patterns`:
each named group's type is read off its regex, as the parser converts it) plus the fields its code adds;
a source of another shape (a JSON body, /proc, an API) declares them explicitly. Each declaring module
calls `declare` once at import; `fields()` loads every collector and returns the whole table:
{source kind: {event kind: {field: type}}}. The store (exporters/store.py) makes a typed column of each
field, the forensic views may name only declared fields (tests/test_field_names.py), and a field an event
carries that its kind does not declare (a configured pattern's extra group) is kept in the store's JSON
`extra` column, never lost.

Types are the five below; SQL_TYPES gives the column type each is stored as (bytes and counts are
BIGINT, timestamps are not fields: an event's own time is its `ts`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

FieldType = Literal["int", "float", "text", "bool", "json"]
KindFields = dict[str, FieldType]  # field name -> type, in the order the event gives them
SourceFields = dict[str, KindFields]  # event kind -> its fields

SQL_TYPES: dict[str, str] = {"int": "BIGINT", "float": "DOUBLE", "text": "VARCHAR", "bool": "BOOLEAN", "json": "JSON"}

# Every grammar source's `error` kind: a line at the error level that no pattern knows.
ERROR_KIND: SourceFields = {"error": {"component": "text", "message": "text"}}
POLL_ERROR: SourceFields = {"poll_error": {"error": "text"}}

_DECLARED: dict[str, SourceFields] = {}
_GROUP = re.compile(r"\(\?P<(\w+)>((?:[^()\\]|\\.)*)\)")
# The bodies of a number group: digits (\d, \d+, \d{1,3}), digits with a point ([\d.]+, \d+\.\d+), each
# maybe signed (-?). One table for the parser (collectors/grammar.py), the store's columns and the
# columnar path, so a value arrives as the type its column has (`room=(?P<room>-?\d+)`: -5000 is an int).
_INT_BODY = re.compile(r"(?:-\?)?\\d(?:\+|\{[\d,]+\})?")
_FLOAT_BODY = re.compile(r"\[\\d\.\]\+|\[\.\\d\]\+|(?:-\?)?\\d\+\\\.\\d\+")


def group_bodies(regex: str) -> dict[str, str]:
    """Each named group's body (the first one, for a name repeated in alternatives); a group with
    a group inside it is not listed (its shape is no number)."""
    return dict(reversed(_GROUP.findall(regex)))


def capture_type(body: str) -> Literal["int", "float"] | None:
    """The number type a group's body says its values are, or None for any other shape."""
    if _INT_BODY.fullmatch(body):
        return "int"
    if _FLOAT_BODY.fullmatch(body):
        return "float"
    return None


def group_type(name: str, body: str, text_fields: frozenset[str]) -> FieldType:
    """The type of one named group, as the parser converts it: text when the source names it text,
    int or float as its body says (capture_type), text for anything else (the parser types a value of
    such a group by its look, and the store keeps it as text)."""
    if name in text_fields:
        return "text"
    return capture_type(body) or "text"


def from_patterns(
    patterns: Mapping[str, tuple[str, ...]],
    text_fields: frozenset[str] | tuple[str, ...],
    overrides: Mapping[str, Mapping[str, FieldType]] | None = None,
) -> SourceFields:
    """Each kind's fields from its regex (the last element of its tuple), in group order; `overrides`
    give a kind's fields whose type the regex does not tell, or that its code adds after parsing."""
    texts = frozenset(text_fields)
    out: SourceFields = {}
    for kind, spec in patterns.items():
        bodies = group_bodies(spec[-1])
        found: KindFields = {
            name: group_type(name, bodies.get(name, ""), texts) for name in re.compile(spec[-1]).groupindex
        }
        found.update((overrides or {}).get(kind, {}))
        out[kind] = found
    return out


def merge(*declarations: SourceFields) -> SourceFields:
    """The union of declarations of one source kind (a kind's fields in order of first mention)."""
    out: SourceFields = {}
    for declaration in declarations:
        for kind, kind_fields in declaration.items():
            out.setdefault(kind, {}).update(kind_fields)
    return out


def declare(source_kind: str, kinds: SourceFields) -> SourceFields:
    """Register the fields of `source_kind`'s event kinds (once per source kind; a second, different
    declaration is a ValueError). Within a source kind a field name has one type in every kind, so its
    kinds can be read together (ValueError naming the field otherwise)."""
    types: dict[str, str] = {}
    for kind, fields in kinds.items():
        for name, type_ in fields.items():
            if type_ not in SQL_TYPES:
                raise ValueError(f"{source_kind}.{kind}.{name}: unknown type {type_!r}")
            if types.setdefault(name, type_) != type_:
                raise ValueError(f"{source_kind}: field {name!r} is {types[name]} in one kind and {type_} in {kind!r}")
    if _DECLARED.get(source_kind, kinds) != kinds:
        raise ValueError(f"source kind {source_kind!r} declared twice")
    _DECLARED[source_kind] = {kind: dict(fields) for kind, fields in kinds.items()}
    return kinds


def extend(source_kind: str, kinds: SourceFields) -> SourceFields:
    """Add a preset's event kinds and fields to a declared source kind (collectors.register_preset): the
    union, held to the same one-type-per-field rule as `declare`."""
    if source_kind not in _DECLARED:
        raise ValueError(f"source kind {source_kind!r}: declare its fields before a preset extends them")
    merged = merge(_DECLARED.pop(source_kind), kinds)
    return declare(source_kind, merged)


def fields() -> dict[str, SourceFields]:
    """{source kind: {event kind: {field: type}}} for every collector and every received kind, sorted by
    source kind. This is the one table the store's typed columns and the views' field names come from."""
    from spyglass.collectors import load_all

    load_all()  # every module of the package, collectors/received.py (spans, alerts, smoke) included
    return {name: _DECLARED[name] for name in sorted(_DECLARED)}


def columns(source_kind: str) -> KindFields:
    """Every field of a source kind's kinds, with its type: what a query over all its kinds can name."""
    out: KindFields = {}
    for kind_fields in fields()[source_kind].values():
        out.update(kind_fields)
    return out
