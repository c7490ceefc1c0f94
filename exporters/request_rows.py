"""The per-request rows: one row per request and layer, maintained at ingest, so the forensic views
read rows instead of grouping a window's events on every query.

Three tables, one per layer that logs requests (`ROW_TABLES`):
- `requests_engine`: one row per engine task (source, request id, task; a 400 the engine refused before
  queueing has no request id and is a row of its own): queued, prompt, thinking, tool call, done or the
  engine's refusal, and `reuse_origin`, the origin of the conversation-cache restore logged between its
  queue and its prompt (what the views used to find with an ASOF join over every engine event);
- `requests_gateway`: one row per request id from the gateway log;
- `requests_infer`: one row per request id from the infer store (the row and its raw record's facts).

Each column is an aggregate of its request's events (`Column.agg`: the views' own definitions) with a
rule merging an old value with a batch's (`Column.merge`: least, greatest, or, sum), so a commit folds
the events stored since the last fold into the rows in the same transaction as it stores its own
(`maintain`): exactly once across kill -9, equal to the aggregate over all the request's events
whatever the batches (tests/test_request_rows.py holds it equal to the old views). Between folds the
store says its rows are behind (`STATE`), and a query reading them then fails on `behind_guard_sql`
and computes the rows from the events instead (the agent folds at its next start). A request's row is found again for up to
`SPAN` after its first event; an event later than that starts a row of its own. `rebuild_statements`
fills the tables from stored events (a store made before them); `from_events_sql` gives the same rows
from any relation of typed events (Parquet segments), for a query that has no tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import Any

from spyglass.collectors.fields import SQL_TYPES, fields
from spyglass.exporters.event_schema import BASE, KindTable, column_name, kind_tables, quoted

SPAN = timedelta(days=1)  # how long after a request's first event a later event still joins its row
MIN, MAX, OR, SUM, FIRST = (
    "least({t}, {b})",
    "greatest({t}, {b})",
    "greatest({t}, {b})",
    "{t} + {b}",
    "coalesce({t}, {b})",
)  # greatest and least skip a NULL; false < true


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # SQL type
    agg: str  # over the source kind's typed events of one request
    merge: str  # old value {t} and the batch's {b} into the new one (column names filled in)


@dataclass(frozen=True)
class RowTable:
    name: str
    source_kind: str
    kinds: tuple[str, ...] | None  # the event kinds it reads (None: every kind)
    where: str  # which of those events belong to a request
    key: tuple[tuple[str, str, str], ...]  # (column, SQL type, expression over the events)
    columns: tuple[Column, ...]

    def create_sql(self) -> str:
        body = ", ".join(f"{quoted(c)} {t}" for c, t, _ in self.key)
        body += "".join(f", {quoted(c.name)} {c.type}" for c in self.columns)
        extra = ", reuse_origin VARCHAR" if self.name == ENGINE_TABLE else ""
        return f"CREATE TABLE IF NOT EXISTS {quoted(self.name)} ({body}{extra})"

    def tables(self) -> list[str]:
        """The kind tables holding the events it reads."""
        return [t.name for t in self._kind_tables()]

    def _kind_tables(self) -> list[KindTable]:
        return [
            t
            for (sk, kind), t in kind_tables().items()
            if sk == self.source_kind and (self.kinds is None or kind in self.kinds)
        ]

    def events_sql(self, where: str, names: Iterable[str] | None = None) -> str:
        """The events it reads (of the kind tables `names`, default all) matching `where`, every
        column of its kinds in each (NULL where a kind has not got it)."""
        tables = [t for t in self._kind_tables() if names is None or t.name in names]
        columns: dict[str, str] = dict(BASE)
        for t in self._kind_tables():
            columns.update((column_name(f), SQL_TYPES[ty]) for f, ty in t.fields)
        parts = []
        for t in tables:
            have = {name for name, _ in BASE} | {column_name(f) for f, _ in t.fields}
            select = ", ".join(
                quoted(c) if c in have else f"NULL::{ty.replace(' NOT NULL', '')} AS {quoted(c)}"
                for c, ty in columns.items()
            )
            parts.append(f"SELECT {select} FROM {quoted(t.name)} WHERE {where}")
        return " UNION ALL ".join(parts)


class _Fields:
    """Aggregates of a source kind's declared fields; a field no kind declares fails at import."""

    def __init__(self, source_kind: str) -> None:
        self.kinds = fields()[source_kind]
        self.source_kind = source_kind

    def type(self, field: str, kind: str | None = None) -> str:
        declared = [found[field] for k, found in self.kinds.items() if field in found and kind in (None, k)]
        if not declared:
            raise ValueError(f"{self.source_kind}{'/' + kind if kind else ''} declares no field {field!r}")
        return SQL_TYPES[declared[0]]

    def max(self, name: str, field: str, kind: str | None = None) -> Column:
        """max(field), of the events of `kind` when given."""
        column = quoted(column_name(field))
        where = f" FILTER (WHERE kind = '{kind}')" if kind else ""
        return Column(name, self.type(field, kind), f"max({column}){where}", MAX)

    def any(self, name: str, kind: str, field: str) -> Column:
        """bool_or(field) of the events of `kind`."""
        self.type(field, kind)
        return Column(name, "BOOLEAN", f"bool_or({quoted(column_name(field))}) FILTER (WHERE kind = '{kind}')", OR)


def seen(name: str, kind: str) -> Column:
    return Column(name, "BOOLEAN", f"bool_or(kind = '{kind}')", OR)


def latest(name: str, kind: str) -> Column:
    return Column(name, "TIMESTAMPTZ", f"max(ts) FILTER (WHERE kind = '{kind}')", MAX)


FIRST_TS = Column("ts", "TIMESTAMPTZ", "min(ts)", MIN)
ENGINE_TABLE = "requests_engine"


@cache
def row_tables() -> dict[str, RowTable]:
    e, g, i = _Fields("engine_log"), _Fields("gateway_log"), _Fields("infer_store")
    engine = RowTable(
        ENGINE_TABLE,
        "engine_log",
        ("queued", "prompt", "thinking", "tool_call", "done", "rejected"),
        "true",
        (
            ("source", "VARCHAR", "source"),
            ("request_id", "VARCHAR", "request_id"),
            ("task", e.type("task"), quoted(column_name("task"))),
            ("lone_seq", "BIGINT", "CASE WHEN request_id IS NULL THEN seq END"),
        ),
        (
            Column("instance", "VARCHAR", "any_value(instance)", FIRST),
            FIRST_TS,
            e.max("conv", "conv", "queued"),
            e.max("prefill_depth", "prefill_depth", "queued"),
            e.max("prompt_tokens", "prompt", "prompt"),
            e.max("reused_tokens", "reused", "prompt"),
            e.max("read_tokens", "read", "prompt"),
            e.max("prefill_ms", "ms", "prompt"),
            latest("prompt_ts", "prompt"),
            e.max("thinking_tokens", "tokens", "thinking"),
            e.max("thinking_max", "max", "thinking"),
            e.max("thinking_cause", "cause", "thinking"),
            seen("wrote_tool_call", "tool_call"),
            e.max("finish", "finish", "done"),
            e.max("completion_tokens", "completion", "done"),
            e.max("ttft_ms", "ttft_ms", "done"),
            e.max("decode_tps", "decode_tps", "done"),
            latest("done_ts", "done"),
            e.max("outcome", "outcome", "done"),
            e.max("error_reason", "error_reason", "done"),
            e.max("error_status", "status", "done"),
            e.max("error_message", "message", "done"),
            e.max("queue_ms", "queue_ms", "done"),
            e.max("queue_basis", "queue_basis", "done"),
            e.max("client_wait_ms", "client_wait_ms", "done"),
            e.max("rejected_status", "status", "rejected"),
            e.max("rejected_code", "code", "rejected"),
            e.max("rejected_prompt", "prompt", "rejected"),
            e.max("rejected_window", "window", "rejected"),
        ),
    )
    gateway = RowTable(
        "requests_gateway",
        "gateway_log",
        None,
        "request_id IS NOT NULL",
        (("request_id", "VARCHAR", "request_id"),),
        (
            FIRST_TS,
            Column("instance", "VARCHAR", "any_value(instance)", FIRST),
            g.max("session", "session", "request"),
            g.max("lane", "lane"),
            g.max("mode", "mode"),
            g.max("client_msgs", "client_msgs"),
            g.max("sent_msgs", "sent_msgs"),
            g.max("chars", "chars", "request"),
            g.max("cjk", "cjk", "request"),
            g.max("est_tokens", "est_tokens"),
            g.max("max_tokens", "max_tokens", "request"),
            g.max("precheck_tokens", "count_tokens", "precheck"),
            g.max("precheck_window", "window", "precheck"),
            g.max("precheck_room", "room", "precheck"),
            g.max("clamped_max_tokens", "max_to", "clamp"),
            g.max("thinking_budget", "thinking_budget", "clamp"),
            g.max("done_status", "status", "done"),
            g.max("overfit_status", "status", "overfit"),
            g.max("reject_status", "status", "reject"),
            g.max("engine_prompt", "engine_prompt", "done"),
            g.max("completion_tokens", "completion", "done"),
            g.max("finish", "finish", "done"),
            g.max("tool_calls", "tool_calls", "done"),
            g.max("content_chars", "content_chars", "done"),
            g.max("ttft_ms", "ttft_ms", "done"),
            g.max("dur_ms", "dur_ms", "done"),
            Column("overfits", "BIGINT", "count(*) FILTER (WHERE kind = 'overfit')", SUM),
            g.max("overfit_prompt", "prompt", "overfit"),
            g.max("overfit_max", "max", "overfit"),
            g.max("overfit_upstream", "upstream", "overfit"),
            seen("retried", "retry_on_overfit"),
            g.max("reject_reason", "reason", "reject"),
        ),
    )
    body = "request_body"
    infer = RowTable(
        "requests_infer",
        "infer_store",
        ("request", body),
        "request_id IS NOT NULL",
        (("request_id", "VARCHAR", "request_id"),),
        (
            Column(
                "ts",
                "TIMESTAMPTZ",
                "coalesce(min(ts) FILTER (WHERE kind = 'request'), min(ts))",
                "coalesce(least({t:request_ts}, {b:request_ts}), least({t:first_ts}, {b:first_ts}))",
            ),
            Column("request_ts", "TIMESTAMPTZ", "min(ts) FILTER (WHERE kind = 'request')", MIN),
            Column("first_ts", "TIMESTAMPTZ", "min(ts)", MIN),
            *(i.max(name, name, "request") for name in ("session",)),
            i.max("lane", "lane"),
            *(
                i.max(name, name, "request")
                for name in (
                    "upstream",
                    "mode",
                    "client_msgs",
                    "sent_msgs",
                    "chars",
                    "est_tokens",
                    "prompt_tokens",
                    "completion_tokens",
                    "max_tokens",
                    "status",
                    "finish",
                    "tool_calls",
                    "content_chars",
                    "reasoning_chars",
                    "ttft_ms",
                    "dur_ms",
                    "seg",
                )
            ),
            i.max("segment", "segment", body),
            seen("has_body", body),
            i.max("special_literals", "special_literals", body),
            i.any("thinking_only", body, "thinking_only"),
            i.max("invalid_tool_json", "invalid_tool_json", body),
            i.any("anchor_survived", body, "anchor_survived"),
            i.any("offered_tools", body, "offered_tools"),
            i.any("plan_then_stop", body, "plan_then_stop"),
            i.max("body_finish", "finish", body),
            i.max("body_tool_calls", "tool_calls", body),
            i.max("body_content_chars", "content_chars", body),
        ),
    )
    return {t.name: t for t in (engine, gateway, infer)}


def create_statements() -> list[str]:
    return [t.create_sql() for t in row_tables().values()]


def aggregate_sql(table: RowTable, events: str) -> str:
    """A row per request of the events in relation `events` (typed columns of the table's source kind)."""
    kinds = "" if table.kinds is None else f" AND kind IN ({', '.join(repr(k) for k in table.kinds)})"
    keys = ", ".join(f"{expr} AS {quoted(name)}" for name, _, expr in table.key)
    aggs = ", ".join(f"{c.agg} AS {quoted(c.name)}" for c in table.columns)
    group = ", ".join(expr for _, _, expr in table.key)
    return f"SELECT {keys}, {aggs} FROM {events} WHERE ({table.where}){kinds} GROUP BY {group}"


RESTORES = "SELECT source, ts, conv, origin FROM {events} WHERE kind = 'restore'"


def with_origin_sql(rows: str, restores: str) -> str:
    """Engine rows with `reuse_origin`: the origin of the last restore of the task's conversation at or
    before its prompt (or its queue, with no prompt), if that restore is not older than the task."""
    return (
        f"SELECT t.*, CASE WHEN r.ts >= t.ts THEN r.origin END AS reuse_origin FROM ({rows}) t"
        f" ASOF LEFT JOIN ({restores}) r ON r.source = t.source AND r.conv = t.conv"
        f" AND coalesce(t.prompt_ts, t.ts) >= r.ts"
    )


def from_events_sql(table: RowTable, events: str) -> str:
    """The table's rows computed from `events` (every typed event of its source kind, all kinds)."""
    rows = aggregate_sql(table, events)
    if table.name != ENGINE_TABLE:
        return rows
    return with_origin_sql(rows, RESTORES.format(events=events))


def rebuild_statements() -> list[str]:
    """Fill the (empty) tables from every stored event: a store made before them."""
    out = []
    for table in row_tables().values():
        rows = aggregate_sql(table, f"({table.events_sql('true')})")
        if table.name == ENGINE_TABLE:
            rows = with_origin_sql(rows, RESTORES.format(events=quoted(_restore_table())))
        out.append(f"INSERT INTO {quoted(table.name)} BY NAME SELECT * FROM ({rows}) ORDER BY ts")
    return out


def _restore_table() -> str:
    return next(t.name for (sk, kind), t in kind_tables().items() if sk == "engine_log" and kind == "restore")


def _match(table: RowTable, t: str, b: str) -> str:
    return " AND ".join(f"{t}.{quoted(c)} IS NOT DISTINCT FROM {b}.{quoted(c)}" for c, _, _ in table.key)


def _merge_value(column: Column) -> str:
    rule = column.merge
    for side, alias in (("t", "t"), ("b", "b")):
        rule = rule.replace(f"{{{side}}}", f"{alias}.{quoted(column.name)}")
        while f"{{{side}:" in rule:
            start = rule.index(f"{{{side}:")
            end = rule.index("}", start)
            rule = rule[:start] + f"{alias}.{quoted(rule[start + 3 : end])}" + rule[end + 1 :]
    return rule


def merge_sql(table: RowTable, batch: str) -> str:
    """Fold the batch's rows (`batch`, one a request) into the table: a row of the last SPAN is merged,
    any other inserted. `$lo` bounds the rows looked at (zonemaps on ts: the last SPAN of a big table)."""
    sets = ", ".join(f"{quoted(c.name)} = {_merge_value(c)}" for c in table.columns)
    names = [c for c, _, _ in table.key] + [c.name for c in table.columns]
    return (
        f"MERGE INTO {quoted(table.name)} t USING {batch} b ON {_match(table, 't', 'b')} AND t.ts >= $lo"
        f" WHEN MATCHED THEN UPDATE SET {sets}"
        f" WHEN NOT MATCHED THEN INSERT ({', '.join(map(quoted, names))})"
        f" VALUES ({', '.join('b.' + quoted(n) for n in names)})"
    )


def origin_sql(batch: str) -> str:
    """Set `reuse_origin` of the engine rows the batch changed, and of those of a conversation it
    logged a restore of ($first..$last: the batch's seqs; $lo as in merge_sql)."""
    table = row_tables()[ENGINE_TABLE]
    keys = ", ".join(quoted(c) for c, _, _ in table.key)
    restore = quoted(_restore_table())
    return f"""
UPDATE {ENGINE_TABLE} t SET reuse_origin = p.origin FROM (
  SELECT a.*, arg_max(r.origin, r.ts) AS origin FROM (
    SELECT {keys}, conv, ts, coalesce(prompt_ts, ts) AS until FROM {ENGINE_TABLE} x
    WHERE ts >= $lo AND conv IS NOT NULL AND (
      EXISTS (SELECT 1 FROM {batch} b WHERE {_match(table, "x", "b")})
      OR EXISTS (SELECT 1 FROM {restore} n WHERE n.seq BETWEEN $first AND $last AND n.source = x.source
                 AND n.conv = x.conv))
  ) a LEFT JOIN (SELECT source, conv, ts, origin FROM {restore} WHERE ts >= $lo) r
    ON r.source = a.source AND r.conv = a.conv AND r.ts BETWEEN a.ts AND a.until
  GROUP BY ALL
) p WHERE {_match(table, "t", "p")} AND t.ts >= $lo AND t.reuse_origin IS DISTINCT FROM p.origin"""


def maintain(con: Any, first: int, last: int) -> None:
    """Fold the stored events with seqs `first`..`last` into the rows, on `con`, inside the caller's
    transaction: one read of where the range begins in time, then per row table one MERGE of the
    range's aggregate (and for the engine one UPDATE of the origins), nothing else fetched into Python.
    Its cost is mostly fixed (a few statements to plan), so the agent folds every
    `agent.request_rows_seconds`, not every commit."""
    earliest = _earliest(con, first, last)
    restores = earliest.get(_restore_table())
    for table in row_tables().values():
        names = [name for name in table.tables() if earliest.get(name) is not None]
        origins = table.name == ENGINE_TABLE and (bool(names) or restores is not None)
        if not names and not origins:
            continue
        found = [earliest[name] for name in names]
        if origins and restores is not None:
            found.append(restores)
        params = {"lo": min(found) - SPAN}
        batch = f"(SELECT * FROM {ENGINE_TABLE} WHERE false)"
        if names:
            parts = table.events_sql(f"seq BETWEEN {int(first)} AND {int(last)}", names)
            batch = f"({aggregate_sql(table, f'({parts})')})"
            con.execute(merge_sql(table, batch), params)
        if origins:
            con.execute(origin_sql(batch), {**params, "first": first, "last": last})


@cache
def read_tables() -> frozenset[str]:
    """Every kind table whose events a row reads (the restores included)."""
    return frozenset({name for t in row_tables().values() for name in t.tables()} | {_restore_table()})


def _earliest(con: Any, first: int, last: int) -> dict[str, Any]:
    """The first timestamp of the range's events in each kind table the rows read (absent: none)."""
    names = sorted(read_tables())
    sql = " UNION ALL ".join(
        f"SELECT '{name}', min(ts) FROM {quoted(name)} WHERE seq BETWEEN {int(first)} AND {int(last)}" for name in names
    )
    return {name: ts for name, ts in con.execute(sql).fetchall() if ts is not None}


STATE = "request_rows"  # agent_state: {"through": seq, "behind": true} while later events wait for their fold
BEHIND = "spyglass: the per-request rows are behind the stored events"


def behind_guard_sql() -> str:
    """A one-row relation whose `ok` is true, or an error (BEHIND) when the store's rows wait for a fold
    (an agent killed between folds, read before its next start): a reader then computes the rows from
    the events instead."""
    return (
        "(SELECT CASE WHEN coalesce(bool_or(CAST(state->>'behind' AS BOOLEAN)), false)"
        f" THEN error('{BEHIND}') ELSE true END AS ok FROM agent_state WHERE name = '{STATE}')"
    )
