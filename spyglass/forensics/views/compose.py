"""A query with the views it names in front, as CTEs over the window's events (`with_views`)."""

from __future__ import annotations

import re
from typing import Any

from spyglass.collectors.fields import columns as declared_fields_of
from spyglass.collectors.received import RECEIVED
from spyglass.exporters.event_schema import json_typed_select, source_kinds, source_view
from spyglass.exporters.request_rows import behind_guard_sql, from_events_sql, row_tables
from spyglass.forensics.views.registry import VIEWS
from spyglass.forensics.views.schema import PAD


def source_kinds_sql(sources: dict[str, Any]) -> str:
    """The configured sources, and the received ones (spans, alerts, smoke), as a VALUES list of
    (source, source_kind, lane)."""
    rows = [
        f"({literal(name)}, {literal(o.kind)}, {literal(getattr(o, 'lane', '') or None)})"
        for name, o in sorted(sources.items())
    ]
    rows += [f"({literal(name)}, {literal(kind)}, NULL)" for name, kind in RECEIVED.items() if name not in sources]
    return f"SELECT * FROM (VALUES {', '.join(rows)}) AS t(source, source_kind, lane)"


WINDOW = f"e.ts >= $from - {PAD} AND e.ts < $to + {PAD}"
EV = f"""SELECT e.seq, e.ts, e.source, coalesce(e.source_kind, k.source_kind) AS source_kind, e.kind, e.instance, e.host,
    e.request_id, e.fields, k.lane
  FROM events e LEFT JOIN source_kinds k ON k.source = e.source
  WHERE {WINDOW}"""
SOURCE_EV = re.compile(r"\bev_(\w+)\b")
ROWS = re.compile(r"\brows_(requests_\w+)\b")


def rows_source(table: str, from_events: bool, shared: bool = False) -> str:
    """`rows_<table>`: the per-request rows of the window (widened by PAD), read from the store's table
    (an error if they wait for a fold: `behind_guard_sql`), or with `from_events` computed from the window's
    events (Parquet, a store from before the rows, or one whose rows are behind); with `shared`, read from
    the temp table of that name that the same computation filled once for every query of the window
    (run.share_rows: diagnose's probes over Parquet)."""
    found = row_tables()[table]
    if shared:
        return f"rows_{table} AS (SELECT * FROM {table})"
    if from_events:
        return f"rows_{table} AS ({from_events_sql(found, f'ev_{found.source_kind}')})"
    return (
        f"rows_{table} AS (SELECT t.* FROM {behind_guard_sql()} g, {table} t"
        f" WHERE g.ok AND t.ts >= $from - {PAD} AND t.ts < $to + {PAD})"
    )


def ev_source(source_kind: str) -> str:
    """`ev_<source kind>`: the window's events of one source kind, typed columns, with their source's lane
    (from the config) unless its events carry their own `lane` field (the gateway's, the infer store's)."""
    lane = "" if "lane" in declared_fields_of(source_kind) else ", k.lane"
    return (
        f"ev_{source_kind} AS (SELECT e.*, '{source_kind}' AS source_kind{lane}\n"
        f"  FROM {source_view(source_kind)} e LEFT JOIN source_kinds k ON k.source = e.source WHERE {WINDOW})"
    )


def literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def strip_comments_and_literals(sql: str) -> str:
    """`sql` with its `--` comments removed, then its string literals emptied: names outside both
    remain. Comments go first: an apostrophe inside a comment would otherwise open a literal."""
    out, i = [], 0
    while i < len(sql):
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = len(sql) if end < 0 else end
        elif sql[i] == "'":
            end = i + 1
            while end < len(sql) and (sql[end] != "'" or sql.startswith("''", end)):
                end += 2 if sql.startswith("''", end) else 1
            out.append("''")
            i = end + 1
        else:
            out.append(sql[i])
            i += 1
    return "".join(out)


def needed(sql: str) -> list[str]:
    """The views `sql` names (outside comments and string literals), with the views they are built
    on (which name them as NAME__all), in definition order."""
    bare = strip_comments_and_literals(sql)
    found = {name for name in VIEWS if re.search(rf"\b{name}(__all)?\b", bare)}
    pending = list(found)
    while pending:
        for name in re.findall(r"\b(\w+)__all\b", VIEWS[pending.pop()].sql):
            if name in VIEWS and name not in found:
                found.add(name)
                pending.append(name)
    return [name for name in VIEWS if name in found]


def needed_rows(sql: str, views: list[str]) -> list[str]:
    """The row tables whose `rows_<table>` the views (or `sql` itself) read."""
    text = strip_comments_and_literals(sql) + "".join(VIEWS[name].sql for name in views)
    return sorted({t for t in ROWS.findall(text) if t in row_tables()})


def needed_sources(sql: str, views: list[str], from_events: bool = False) -> list[str]:
    """The source kinds whose `ev_<source kind>` the views (or `sql` itself) read (with `from_events`,
    those the rows are computed from too)."""
    text = strip_comments_and_literals(sql) + "".join(VIEWS[name].sql for name in views)
    known = set(source_kinds())
    rows = {row_tables()[t].source_kind for t in needed_rows(sql, views)} if from_events else set()
    return sorted({sk for sk in SOURCE_EV.findall(text) if sk in known} | rows)


def ctes(
    sql: str, sources: dict[str, Any], json_events: bool = False, from_events: bool = False, shared_rows: bool = False
) -> list[str]:
    """The CTEs in front of `sql`. With `json_events` (Parquet segments of the JSON layout), each
    source kind's typed events are extracted from `events`' JSON fields instead of read from the
    store's `events_<source kind>` view; with it or `from_events` (segments, which hold no rows), the
    per-request rows are computed from the window's events instead of read from the store's tables (with
    `shared_rows`, read from the temp tables that computation filled once: `rows_source`)."""
    views = needed(sql)
    from_events = from_events or json_events
    kinds = needed_sources(sql, views, from_events and not shared_rows)
    out = [f"source_kinds AS ({source_kinds_sql(sources)})", f"ev AS ({EV})"]
    if json_events:
        out += [f"{source_view(sk)} AS ({json_typed_select(sk, 'events', 'source_kinds')})" for sk in kinds]
    out += [ev_source(sk) for sk in kinds]
    out += [rows_source(table, from_events, shared_rows) for table in needed_rows(sql, views)]
    for name in views:
        out.append(f"{name}__all AS ({VIEWS[name].sql.strip()})")
        out.append(f"{name} AS (SELECT * FROM {name}__all WHERE ts_utc >= $from AND ts_utc < $to)")
    return out


def with_views(
    sql: str, sources: dict[str, Any], json_events: bool = False, from_events: bool = False, shared_rows: bool = False
) -> str:
    """`sql` (one SELECT, which may start with comments and its own WITH) with the views it names in front."""
    text = sql.strip().rstrip(";")
    comments = re.match(r"(?:[ \t]*--[^\n]*\n)*", text).group(0)  # type: ignore[union-attr] # * matches always
    body = text[len(comments) :].lstrip()
    head = ",\n".join(ctes(body, sources, json_events, from_events, shared_rows))
    own = re.match(r"(?is)^with\s+(?!recursive\b)", body)
    return f"{comments}WITH {head},\n{body[own.end() :]}" if own else f"{comments}WITH {head}\n{body}"
