"""The Parquet segments' columns: the store's typed schema (exporters/event_schema.py) as one wide table.

A segment holds every kind of event of its hour, so its columns are the common ones, `source_kind`,
one typed column per declared field of any kind (NULL where an event's kind does not have it) and
`extra` (JSON): what the event carries that its kind does not declare, or every field of an event of
an undeclared kind (the store's `ev_other`, `source_kind` NULL). Parquet stores a column of NULLs in
a few bytes per row group, so the width costs little on disk, and readers (DuckDB, ClickHouse) read
only the columns a query names.

A column two source kinds declare with different types (`status`: an HTTP code in one, a word in
another) is stored in the widest of them (`SEGMENT_TYPES`: int and float as float, anything else
with text as text); `source_view_sql` casts it back to the source kind's own type, so a query over
the segments sees the same types as over the store. Everything here is pure: SQL text and Arrow.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING

import orjson

from spyglass.collectors.event import Event
from spyglass.collectors.fields import SQL_TYPES, FieldType
from spyglass.exporters import event_schema
from spyglass.exporters.event_schema import (
    BASE_COLUMNS,
    BASE_NAMES,
    OTHER,
    KindTable,
    arrow_types,
    column_name,
    kind_tables,
    quoted,
)

if TYPE_CHECKING:  # pyarrow loads when a segment is written, not for the SQL over segments (the commands')
    import pyarrow as pa

# The segments' own columns: the base columns, `ts` first (files sort by it), and the event's source kind.
COMMON = [
    *(c for c in BASE_COLUMNS if c[0] == "ts"),
    *(c for c in BASE_COLUMNS if c[0] != "ts"),
    ("source_kind", "text"),
]
COMMON_NAMES = ", ".join(name for name, _ in COMMON[:-1])


@cache
def arrow(type_: str) -> pa.DataType:
    """A column's Arrow type in a segment: the store's, but JSON as Arrow's JSON type."""
    import pyarrow as pa

    return pa.json_(pa.string()) if type_ == "json" else arrow_types()[type_]


def widest(types: set[FieldType]) -> FieldType:
    if len(types) == 1:
        return next(iter(types))
    return "float" if types <= {"int", "float"} else "text"


@cache
def segment_types() -> dict[str, FieldType]:
    """Every typed column of the segments, in the order the kinds declare them, with its stored type."""
    found: dict[str, set[FieldType]] = {}
    for table in kind_tables().values():
        for field, type_ in table.fields:
            found.setdefault(column_name(field), set()).add(type_)
    return {column: widest(types) for column, types in found.items()}


@cache
def segment_schema() -> pa.Schema:
    import pyarrow as pa

    columns = [*COMMON, *segment_types().items(), ("extra", "json")]
    return pa.schema([(c, arrow(t)) for c, t in columns])


READ_AS = {**event_schema.COLUMN_SQL, "json": "VARCHAR"}  # JSON columns come back as text from Parquet


def every_column_sql() -> str:
    """No rows, but every column of today's segments, typed as DuckDB reads them: its UNION ALL BY NAME with
    older segments gives them the columns they lack (fields declared since they were written) as NULLs."""
    typed = [(c, READ_AS[t]) for c, t in [*COMMON, *segment_types().items(), ("extra", "json")]]
    return "SELECT " + ", ".join(f"CAST(NULL AS {t}) AS {quoted(c)}" for c, t in typed) + " WHERE false"


def _stored(column: str, type_: FieldType) -> str:
    """A kind table's column as the segments store it (JSON as text: Arrow gets it as a string)."""
    wide = segment_types()[column]
    if wide in ("json", "text") and type_ in ("json", "text"):
        return f"{quoted(column)}::VARCHAR AS {quoted(column)}"
    if wide != type_:
        return f"CAST({quoted(column)} AS {SQL_TYPES[wide]}) AS {quoted(column)}"
    return quoted(column)


def rows_sql(tables: list[KindTable]) -> str:
    """SELECT every stored event with $1 <= seq <= $2 in the segments' columns, ordered by (ts, seq);
    a column a kind does not have is NULL."""
    common = COMMON_NAMES
    parts = [
        f"SELECT {common}, '{t.source_kind}' AS source_kind, "
        + "".join(f"{_stored(column_name(f), ty)}, " for f, ty in t.fields)
        + f"extra::VARCHAR AS extra FROM {quoted(t.name)} WHERE seq BETWEEN $1 AND $2"
        for t in tables
    ]
    parts.append(
        f"SELECT {common}, NULL::VARCHAR AS source_kind, fields::VARCHAR AS extra FROM {OTHER}"
        " WHERE seq BETWEEN $1 AND $2"
    )
    return f"SELECT * FROM ({' UNION ALL BY NAME '.join(parts)}) ORDER BY ts, seq"


def conform(table: pa.Table) -> pa.Table:
    """Rows with some of the segments' columns (as `rows_sql` gives them) in exactly the segments' schema."""
    import pyarrow as pa

    schema = segment_schema()
    arrays = [
        table[f.name].cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type) for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def from_json_segment(old: pa.Table, sources: Mapping[str, str]) -> pa.Table:
    """A segment of the JSON schema (`fields` JSON, before the typed store) in the typed columns, each
    event typed as the store types it (`event_schema.kind_arrow`): undeclared fields kept in `extra`."""
    import pyarrow as pa

    events: dict[str, tuple[KindTable | None, list[Event], list[int]]] = {}
    for row in old.to_pylist():
        event = Event(
            row["ts"].timestamp(),
            row["source"],
            row["kind"],
            row["instance"],
            orjson.loads(row["fields"]) if row["fields"] else {},
            row["request_id"],
            row["host"] or "",
        )
        table = event_schema.table_of(event, sources)
        group = events.setdefault(table.name if table else OTHER, (table, [], []))
        group[1].append(event)
        group[2].append(row["seq"])
    parts = []
    for table, found, seqs in events.values():
        if table is None:
            rows = event_schema.other_arrow(found, seqs)
            parts.append(conform(rows.rename_columns([*rows.column_names[:-1], "extra"])))
        else:
            rows = event_schema.kind_arrow(table, found, seqs)
            parts.append(conform(rows.append_column("source_kind", pa.array([table.source_kind] * rows.num_rows))))
    if not parts:
        return segment_schema().empty_table()
    return pa.concat_tables(parts).sort_by([("ts", "ascending"), ("seq", "ascending")])


def _typed(column: str, type_: FieldType) -> str:
    """A segment column read back as a source kind declares it."""
    return quoted(column) if segment_types()[column] == type_ else f"CAST({quoted(column)} AS {SQL_TYPES[type_]})"


def source_view_sql(source_kind: str, segments: str) -> str:
    """`events_<source kind>` over the segments (a CTE body): the store's view of the same name, its
    columns typed as the source kind declares them."""
    body = "".join(f"{_typed(c, t)} AS {quoted(c)}, " for c, t in event_schema.declared_columns(source_kind).items())
    return f"SELECT {BASE_NAMES}, {body}extra FROM {segments} WHERE source_kind = '{source_kind}'"


def events_view_sql(segments: str) -> str:
    """`events` over the segments (a CTE body): every event with its fields as one JSON object (NULLs
    left out, `extra` merged in, keys in its kind's order) and its source kind, as the store's
    `events` view gives them."""
    cases = []
    for table in kind_tables().values():
        declared = event_schema.declared_columns(table.source_kind)
        pairs = ", ".join(f"'{f}', {_typed(column_name(f), declared[column_name(f)])}" for f, _ in table.fields)
        cases.append(
            f"WHEN '{table.source_kind}/{table.kind}' THEN"
            f" json_merge_patch('{{}}', json_object({pairs}), coalesce(extra, '{{}}'))"
        )
    return (
        f"SELECT {BASE_NAMES}, CASE source_kind || '/' || kind"
        f" {' '.join(cases)} ELSE extra END AS fields, source_kind FROM {segments}"
    )
