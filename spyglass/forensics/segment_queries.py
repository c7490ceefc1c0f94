"""The questions docs/forensics.md answers over the Parquet segments of many hosts, each written once
for DuckDB and once for ClickHouse: the one source of both. docs/forensics.md is generated from
here (spyglass/forensics/docs.py) and tests/test_clickhouse.py runs every pair over two hosts'
segments, DuckDB against ClickHouse's own engine (chdb), and requires the same rows in the same
order. Each query is totally ordered, so "the same answer" is well defined.

The segments have the store's typed columns (exporters/segment_schema.py): a field is a column of its
own name (`bytes`, `ttft_ms`, `origin`), NULL on the events whose kind does not have it.

The queries name the documentation's folder `ROOT`; a reader runs them with their own folder in
its place (the test does just that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ROOT = "/srv/spyglass/pq"
EVERY_FILE = f"{ROOT}/host=*/date=*/hour=*/*.parquet"


@dataclass(frozen=True)
class SegmentQuery:
    """One question, in DuckDB's SQL (after `SET TimeZone = 'UTC'`) and in ClickHouse's."""

    question: str
    duckdb: str
    clickhouse: str


QUERIES = [
    SegmentQuery(
        "Events per host and kind in a 15-minute window:",
        f"""SELECT host, kind, count(*) AS events
FROM read_parquet('{EVERY_FILE}', hive_partitioning = true)
WHERE date = DATE '2026-10-19' AND ts >= TIMESTAMPTZ '2026-10-19 04:45:00+00' AND ts < TIMESTAMPTZ '2026-10-19 05:00:00+00'
GROUP BY ALL ORDER BY host, events DESC, kind;""",
        f"""SELECT host, kind, count() AS events
FROM file('{ROOT}/host=*/date=2026-10-19/hour=*/*.parquet', Parquet)
WHERE ts >= '2026-10-19 04:45:00' AND ts < '2026-10-19 05:00:00'
GROUP BY host, kind ORDER BY host, events DESC, kind;""",
    ),
    SegmentQuery(
        "Evictions per host and hour, and the snapshot bytes they threw away, across every host at once:",
        f"""SELECT host, date, hour::INTEGER AS hour, count(*) AS evictions, sum(bytes) AS evicted_bytes
FROM read_parquet('{EVERY_FILE}', hive_partitioning = true)
WHERE kind = 'evict' GROUP BY ALL ORDER BY ALL;""",
        f"""SELECT host, toDate(ts) AS date, toHour(ts) AS hour, count() AS evictions,
       sum(bytes) AS evicted_bytes
FROM file('{EVERY_FILE}', Parquet)
WHERE kind = 'evict' GROUP BY host, date, hour ORDER BY host, date, hour;""",
    ),
    SegmentQuery(
        "How each host's prompts were restored (the engine's `restore ... from=`), and their tokens:",
        f"""SELECT host, instance, origin, count(*) AS restores, sum(tokens) AS tokens
FROM read_parquet('{EVERY_FILE}', hive_partitioning = true)
WHERE kind = 'restore' GROUP BY ALL ORDER BY ALL;""",
        f"""SELECT host, instance, origin, count() AS restores, sum(tokens) AS tokens
FROM file('{EVERY_FILE}', Parquet)
WHERE kind = 'restore' GROUP BY host, instance, origin ORDER BY host, instance, origin;""",
    ),
    SegmentQuery(
        "The five slowest first tokens of each host in an hour, with the request to `spyglass trace`:",
        f"""SELECT host, request_id, ttft_ms, prompt, ts
FROM read_parquet('{EVERY_FILE}', hive_partitioning = true)
WHERE date = DATE '2026-10-19' AND hour = '04' AND kind = 'done'
QUALIFY row_number() OVER (PARTITION BY host ORDER BY ttft_ms DESC, ts, request_id) <= 5
ORDER BY host, ttft_ms DESC, ts, request_id;""",
        f"""SELECT host, request_id, ttft_ms, prompt, ts
FROM file('{ROOT}/host=*/date=2026-10-19/hour=04/*.parquet', Parquet)
WHERE kind = 'done'
ORDER BY host, ttft_ms DESC, ts, request_id LIMIT 5 BY host;""",
    ),
    SegmentQuery(
        "The conversation cache's last 10-second sample per host (the engine's own eviction count):",
        f"""SELECT host, instance, max(ts) AS last_sample, arg_max(evictions, ts) AS evictions,
       arg_max(used, ts) AS used_bytes, arg_max(budget, ts) AS budget_bytes
FROM read_parquet('{EVERY_FILE}', hive_partitioning = true)
WHERE kind = 'stats' GROUP BY ALL ORDER BY ALL;""",
        f"""SELECT host, instance, max(ts) AS last_sample, argMax(evictions, ts) AS evictions,
       argMax(used, ts) AS used_bytes, argMax(budget, ts) AS budget_bytes
FROM file('{EVERY_FILE}', Parquet)
WHERE kind = 'stats' GROUP BY host, instance ORDER BY host, instance;""",
    ),
]


def on(sql: str, root: str) -> str:
    """`sql` reading the segments under `root` instead of the documentation's folder."""
    return sql.replace(ROOT, root.rstrip("/"))


def duckdb_rows(sql: str) -> list[tuple[Any, ...]]:
    """The rows of `sql` on a fresh in-memory DuckDB in UTC (how the docs' DuckDB queries are run)."""

    from spyglass.exporters.duckdb_open import connect

    con = connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        return con.execute(sql).fetchall()
    finally:
        con.close()


def clickhouse_rows(sql: str) -> list[tuple[Any, ...]]:
    """The rows of `sql` on embedded ClickHouse (chdb, a test and bench dependency only)."""
    import chdb  # type: ignore[import-not-found,import-untyped,unused-ignore]

    return [tuple(row.values()) for row in chdb.query(sql, "ArrowTable").to_pylist()]
