"""The typed event schema: a table per event kind, its columns the kind's declared fields.

One table per (source kind, event kind) (`KindTable`), named `ev_<source kind>__<kind>`, holds the
events of that kind: the common columns (BASE), one typed column per declared field
(collectors/fields.py: int BIGINT, float DOUBLE, text VARCHAR, bool BOOLEAN, json JSON) and `extra`
(JSON): the fields an event carries that its kind does not declare (a configured pattern's extra
group), and a value that is not of its declared type, kept as given. An event of a kind no source
kind declares (a configured pattern's new kind, a source the store does not know) goes to OTHER,
with its fields as JSON. Measured against one wide table with a nullable column per field
(docs/benchmarks.md, bench/store_layout.py): a third of the disk, 5 times the insert rate.

Over the tables, three kinds of view give what queries read (`view_statements`):
- `events_<source kind>`: every kind of a source kind, UNION ALL BY NAME: the forensic views read these;
- `events`: every event with its fields as JSON (`fields`, NULLs left out) and its `source_kind`,
  so a query written for the JSON store (`fields->>'reason'`) runs unchanged.

A field whose name is one of BASE's (`ts`, `kind`, `instance`: an infer row's own `ts`, a span's `kind`)
is stored as `field_<name>` (`column_name`). Everything here is pure: it builds SQL text and Arrow
tables, and touches no connection (exporters/store.py does).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import orjson

from spyglass.collectors.event import Event
from spyglass.collectors.fields import SQL_TYPES, FieldType, KindFields, fields

if TYPE_CHECKING:
    import pyarrow as pa

SCHEMA_VERSION = 3  # 1: one `events` table with every field in a JSON column; 2: a table per kind; 3: and the
# per-request rows (exporters/request_rows.py)
# The columns every event has, each with its type: the one list the kind tables' SQL (BASE), their Arrow
# batches (base_arrow), the Parquet segments (exporters/segment_schema.py) and the JSON segments before the
# typed store (exporters/parquet.py) derive theirs from. A field type (collectors/fields.py) or a timestamp.
BASE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("seq", "int"),
    ("ts", "timestamp"),
    ("source", "text"),
    ("kind", "text"),
    ("instance", "text"),
    ("host", "text"),
    ("request_id", "text"),
)
REQUIRED = frozenset({"ts", "source", "kind"})  # NOT NULL in the kind tables
COLUMN_SQL = {**SQL_TYPES, "timestamp": "TIMESTAMPTZ"}
BASE = tuple((name, COLUMN_SQL[type_] + (" NOT NULL" if name in REQUIRED else "")) for name, type_ in BASE_COLUMNS)
BASE_NAMES = ", ".join(name for name, _ in BASE_COLUMNS)  # as a SELECT lists them
RESERVED = frozenset({name for name, _ in BASE} | {"extra", "fields", "source_kind"})
OTHER = "ev_other"


@cache
def arrow_types() -> dict[str, pa.DataType]:
    """The Arrow type of each column type (pyarrow loads here, not at import: the SQL side needs none)."""
    import pyarrow as pa

    return {
        "int": pa.int64(),
        "float": pa.float64(),
        "text": pa.string(),
        "bool": pa.bool_(),
        "json": pa.string(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }


@cache
def base_arrow() -> list[tuple[str, pa.DataType]]:
    types = arrow_types()
    return [(name, types[type_]) for name, type_ in BASE_COLUMNS]


def column_name(field: str) -> str:
    """The column a field is stored in: its name, or `field_<name>` for a name BASE uses."""
    return f"field_{field}" if field in RESERVED else field


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class KindTable:
    """The table of one event kind of one source kind."""

    source_kind: str
    kind: str
    fields: tuple[tuple[str, FieldType], ...]  # declared fields, in order

    @property
    def name(self) -> str:
        return table_name(self.source_kind, self.kind)

    def columns(self) -> list[tuple[str, str]]:
        """(column, SQL type) of every column, in table order."""
        return [*BASE, *((column_name(f), SQL_TYPES[t]) for f, t in self.fields), ("extra", "JSON")]

    def create_sql(self) -> str:
        body = ", ".join(f"{quoted(c)} {t}" for c, t in self.columns())
        return f"CREATE TABLE IF NOT EXISTS {quoted(self.name)} ({body})"

    def fields_json_sql(self) -> str:
        """The event's fields as one JSON object (NULLs left out, `extra` merged in)."""
        pairs = ", ".join(f"'{f}', {quoted(column_name(f))}" for f, _ in self.fields)
        return f"json_merge_patch('{{}}', json_object({pairs}), coalesce(extra, '{{}}'))"

    def arrow_schema(self) -> pa.Schema:
        return _arrow_schema(self)


@cache
def _arrow_schema(table: KindTable) -> pa.Schema:
    import pyarrow as pa

    types = arrow_types()
    return pa.schema([*base_arrow(), *((column_name(f), types[t]) for f, t in table.fields), ("extra", pa.string())])


@cache
def table_name(source_kind: str, kind: str) -> str:
    return "ev_" + re.sub(r"\W", "_", f"{source_kind}__{kind}")


@cache
def kind_tables() -> dict[tuple[str, str], KindTable]:
    """Every declared kind's table, by (source kind, kind)."""
    return {
        (sk, kind): KindTable(sk, kind, tuple(found.items()))
        for sk, kinds in fields().items()
        for kind, found in kinds.items()
    }


def source_kinds() -> list[str]:
    return sorted({sk for sk, _ in kind_tables()})


def source_view(source_kind: str) -> str:
    """The name of the view of every event of a source kind."""
    return f"events_{source_kind}"


def _source_view_sql(source_kind: str, tables: Iterable[KindTable]) -> str:
    parts = [f"SELECT * FROM {quoted(t.name)}" for t in tables if t.source_kind == source_kind]
    return f"CREATE OR REPLACE VIEW {quoted(source_view(source_kind))} AS {' UNION ALL BY NAME '.join(parts)}"


def events_view_sql(tables: Iterable[KindTable]) -> str:
    """`events`: every event, fields as JSON, as the JSON store had it, plus its source kind."""
    common = ", ".join(name for name, _ in BASE)
    parts = [
        f"SELECT {common}, {t.fields_json_sql()} AS fields, '{t.source_kind}' AS source_kind FROM {quoted(t.name)}"
        for t in tables
    ]
    parts.append(f"SELECT {common}, fields, NULL AS source_kind FROM {OTHER}")
    return f"CREATE OR REPLACE VIEW events AS {' UNION ALL '.join(parts)}"


def other_create_sql() -> str:
    body = ", ".join(f"{quoted(c)} {t}" for c, t in BASE)
    return f"CREATE TABLE IF NOT EXISTS {OTHER} ({body}, fields JSON)"


def view_statements() -> list[str]:
    tables = list(kind_tables().values())
    return [*(_source_view_sql(sk, tables) for sk in source_kinds()), events_view_sql(tables)]


def create_statements() -> list[str]:
    """Every table (IF NOT EXISTS) and view (OR REPLACE) of the typed schema."""
    return [*(t.create_sql() for t in kind_tables().values()), other_create_sql(), *view_statements()]


def table_names() -> list[str]:
    """Every table events are stored in: the kind tables and OTHER."""
    return [*(t.name for t in kind_tables().values()), OTHER]


def table_of(event: Event, sources: Mapping[str, str]) -> KindTable | None:
    """The table of an event: its source's source kind and its kind; None (OTHER) if undeclared."""
    source_kind = sources.get(event.source)
    return kind_tables().get((source_kind, event.kind)) if source_kind else None


# Arrow, for the bulk insert.


def _int(value: Any) -> int | None:
    if value.__class__ is int:
        return value
    if value.__class__ is float and value.is_integer() or value.__class__ is str and value.lstrip("-").isdigit():
        return int(value)
    raise ValueError


def _float(value: Any) -> float:
    if value.__class__ in (int, float):
        return float(value)
    if value.__class__ is str:
        return float(value)
    raise ValueError


def _text(value: Any) -> str:
    if value.__class__ in (str, int, float):
        return str(value)
    raise ValueError


def _bool(value: Any) -> bool:
    if value.__class__ is bool:
        return value
    raise ValueError


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()


COERCE = {"int": _int, "float": _float, "text": _text, "bool": _bool, "json": _json}
# A column goes to Arrow as it is when each value is of exactly these classes (Arrow would take 3.5 for an int
# as 3, True for a float as 1.0); else value by value (COERCE). set(map(type, ...)) runs in C: the hot path's.
EXACT = {t: frozenset({c, type(None)}) for t, c in (("int", int), ("float", float), ("text", str), ("bool", bool))}


def _base(events: list[Event], seqs: list[int]) -> list[pa.Array]:
    import pyarrow as pa

    return [
        pa.array(seqs, pa.int64()),
        pa.array([round(e.ts * 1_000_000) for e in events], arrow_types()["timestamp"]),
        pa.array([e.source for e in events], pa.string()),
        pa.array([e.kind for e in events], pa.string()),
        pa.array([e.instance for e in events], pa.string()),
        pa.array([e.host for e in events], pa.string()),
        pa.array([e.request_id for e in events], pa.string()),
    ]


def kind_arrow(table: KindTable, events: list[Event], seqs: list[int]) -> pa.Table:
    """Events of one kind as its table's Arrow rows: each declared field coerced to its type; what is
    not declared, or will not coerce, kept as given in `extra`."""
    import pyarrow as pa

    types = arrow_types()
    declared = {f for f, _ in table.fields}
    extras: list[dict[str, Any] | None] = [None] * len(events)
    columns = _base(events, seqs)
    given = [e.fields for e in events]
    for name, type_ in table.fields:
        values = [f.get(name) for f in given]
        if set(map(type, values)) <= EXACT.get(type_, frozenset()):
            columns.append(pa.array(values, types[type_]))
            continue
        coerce, out = COERCE[type_], []
        for i, value in enumerate(values):
            try:
                out.append(None if value is None else coerce(value))
            except (TypeError, ValueError, OverflowError):
                out.append(None)
                extras[i] = {**(extras[i] or {}), name: value}
        columns.append(pa.array(out, types[type_]))
    for i, e in enumerate(events):
        if not e.fields.keys() <= declared:
            extras[i] = {**(extras[i] or {}), **{k: v for k, v in e.fields.items() if k not in declared}}
    columns.append(
        pa.array([None if x is None else orjson.dumps(x, default=str).decode() for x in extras], pa.string())
    )
    return pa.Table.from_arrays(columns, schema=table.arrow_schema())


def other_arrow(events: list[Event], seqs: list[int]) -> pa.Table:
    import pyarrow as pa

    columns = _base(events, seqs)
    columns.append(pa.array([orjson.dumps(e.fields, default=str).decode() for e in events], pa.string()))
    return pa.Table.from_arrays(columns, schema=pa.schema([*base_arrow(), ("fields", pa.string())]))


def split(events: list[Event], first_seq: int, sources: Mapping[str, str]) -> dict[str, pa.Table]:
    """The events as Arrow tables by table name, numbered from `first_seq` in the order given."""
    tables = kind_tables()
    groups: dict[tuple[str, str], tuple[list[Event], list[int]]] = {}
    for seq, event in enumerate(events, first_seq):
        key = (sources.get(event.source, ""), event.kind)  # grouped by key: a KindTable hashes all its fields
        group = groups.get(key)
        if group is None:
            group = groups[key] = ([], [])
        group[0].append(event)
        group[1].append(seq)
    out: dict[str, pa.Table] = {}
    others: tuple[list[Event], list[int]] = ([], [])
    for key, (found, seqs) in groups.items():
        table = tables.get(key) if key[0] else None
        if table is None:
            others[0].extend(found)
            others[1].extend(seqs)
        else:
            out[table.name] = kind_arrow(table, found, seqs)
    if others[0]:
        order = sorted(range(len(others[1])), key=others[1].__getitem__)  # in seq order, as one group was
        out[OTHER] = other_arrow([others[0][i] for i in order], [others[1][i] for i in order])
    return out


def declared_columns(source_kind: str) -> KindFields:
    """{column: type} of a source kind's view: every field of its kinds, by column name."""
    out: KindFields = {}
    for (sk, _), table in kind_tables().items():
        if sk == source_kind:
            out.update((column_name(f), t) for f, t in table.fields)
    return out


def json_typed_select(source_kind: str, events: str, sources: str) -> str:
    """A SELECT with the columns of `events_<source kind>`, from a relation `events` of the JSON layout
    (schema 1, or Parquet segments of it) whose sources `sources` (source, source_kind) names: each
    declared field extracted and cast to its type."""
    columns = [f"e.{name}" for name, _ in BASE]
    for column, type_ in declared_columns(source_kind).items():
        field = column.removeprefix("field_") if column.startswith("field_") and column[6:] in RESERVED else column
        value = f"(e.fields->'{field}')" if type_ == "json" else f"TRY_CAST(e.fields->>'{field}' AS {SQL_TYPES[type_]})"
        columns.append(f"{value} AS {quoted(column)}")
    columns.append("NULL::JSON AS extra")
    kinds = ", ".join(f"'{kind}'" for sk, kind in kind_tables() if sk == source_kind)
    return (
        f"SELECT {', '.join(columns)} FROM {events} e JOIN {sources} k ON k.source = e.source"
        f" WHERE k.source_kind = '{source_kind}' AND e.kind IN ({kinds})"
    )
