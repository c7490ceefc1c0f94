"""The forensic schema's parts: a view's columns, its clocks, and the typed fields it may name.

A view reads the typed columns of one source kind's events (`ev_<source kind>`: the window of the
store's `events_<source kind>`, exporters/event_schema.py) and names each field through `Fields`,
which refuses, when the view is defined (at import), a field no kind of that source kind declares
(collectors/fields.py): a renamed regex group fails the build, it does not become a NULL column.
Only the timeline reads `ev`, every event with its fields as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

from spyglass.collectors.fields import fields as declared_fields
from spyglass.exporters.event_schema import column_name, quoted

PAD = "INTERVAL 1 HOUR"
TZ, BJ, INT, FLOAT, TEXT, BOOL, JSON = (
    "TIMESTAMP WITH TIME ZONE",
    "TIMESTAMP",
    "BIGINT",
    "DOUBLE",
    "VARCHAR",
    "BOOLEAN",
    "JSON",
)


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    doc: str


@dataclass(frozen=True)
class View:
    """A named SELECT over `ev` (the window's events) and other views' `NAME__all`; its documented
    columns are exactly what it returns (tests/test_forensics_views.py checks names and types)."""

    name: str
    doc: str
    sql: str
    columns: tuple[Column, ...]


def clocks(expr: str, name: str = "ts") -> str:
    """`expr` as the pair NAME_utc, NAME_local: the wall time in `$display_tz` ([agent] display_tz, filled in
    by every query's text, spyglass.forensics.run.Query)."""
    return f"{expr} AS {name}_utc, timezone($display_tz, {expr}) AS {name}_local"


def clock_columns(name: str, what: str) -> tuple[Column, Column]:
    return (
        Column(f"{name}_utc", TZ, f"{what} (UTC)"),
        Column(f"{name}_local", BJ, f"{what}, wall time in the display zone ([agent] display_tz)"),
    )


class UnknownField(ValueError):
    """A view, report or probe names a field that no kind of its source kind declares."""


class Fields:
    """The typed columns of one or more source kinds' events, by field name: `F('ttft_ms')` is the column,
    `F('ttft_ms', 'done')` its value on the group's `done` row. A field no kind declares (or that kind
    `where` does not) raises UnknownField when the SQL is built."""

    def __init__(self, *source_kinds: str) -> None:
        table = declared_fields()
        self.source_kinds = source_kinds
        self.kinds = {kind: set(found) for sk in source_kinds for kind, found in table[sk].items()}
        self.names = set().union(*self.kinds.values())

    def __call__(self, key: str, where: str | None = None) -> str:
        owner = ", ".join(self.source_kinds)
        if key not in self.names:
            raise UnknownField(f"no kind of {owner} declares a field {key!r}")
        if where is not None and key not in self.kinds.get(where, ()):
            raise UnknownField(f"kind {where!r} of {owner} declares no field {key!r}")
        column = quoted(column_name(key))
        return f"max({column}) FILTER (WHERE kind = '{where}')" if where else column


ENGINE, GATEWAY, SERVE = Fields("engine_log"), Fields("gateway_log"), Fields("serve_status")
PROCESS = Fields("supervisord_log", "supervisord_rpc", "switch_log")
ALERT, SMOKE, SPAN, HOST = Fields("alertmanager"), Fields("smoke"), Fields("otlp"), Fields("host")


def instant(value: str) -> str:
    """A time given as epoch seconds (as the agent stores Alertmanager's times); NULL past what a
    timestamp holds."""
    return f"CASE WHEN {value} BETWEEN 0 AND 253402300799 THEN to_timestamp({value}) END"


def cols(spec: str) -> tuple[Column, ...]:
    """Columns from 'name TYPE: doc' lines (TYPE one of the short names above)."""
    kinds = {"tz": TZ, "bj": BJ, "int": INT, "float": FLOAT, "text": TEXT, "bool": BOOL, "json": JSON}
    out = []
    for line in filter(None, (raw.strip() for raw in spec.strip().splitlines())):
        head, doc = line.split(":", 1)
        name, kind = head.split()
        out.append(Column(name, kinds[kind], doc.strip()))
    return tuple(out)


TS = clock_columns("ts", "When it happened")
