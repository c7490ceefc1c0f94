"""The questions docs/forensics.md answers over the Parquet segments of many hosts, each written once
for DuckDB and once for ClickHouse: the one source of both. docs/forensics.md is generated from
here (spyglass/forensics/docs.py) and tests/test_clickhouse.py runs every pair over two hosts'
segments, DuckDB against ClickHouse's own engine (chdb), and requires the same rows in the same
order. Each query is totally ordered, so "the same answer" is well defined.

The queries name the documentation's folder `ROOT`; a reader runs them with their own folder in
its place (the test does just that).
"""
from __future__ import annotations

from dataclasses import dataclass

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
GROUP BY host, kind ORDER BY host, events DESC, kind;"""),
    SegmentQuery(
        "Evictions per host and hour, and the snapshot bytes they threw away, across every host at once:",
        f"""SELECT host, date, hour::INTEGER AS hour, count(*) AS evictions, sum((fields->>'bytes')::BIGINT) AS evicted_bytes
FROM read_parquet('{EVERY_FILE}', hive_partitioning = true)
WHERE kind = 'evict' GROUP BY ALL ORDER BY ALL;""",
        f"""SELECT host, toDate(ts) AS date, toHour(ts) AS hour, count() AS evictions,
       sum(JSONExtractUInt(fields, 'bytes')) AS evicted_bytes
FROM file('{EVERY_FILE}', Parquet)
WHERE kind = 'evict' GROUP BY host, date, hour ORDER BY host, date, hour;"""),
    SegmentQuery(
        "How each host's prompts were restored (the engine's `restore ... from=`), and their tokens:",
        f"""SELECT host, instance, fields->>'origin' AS origin, count(*) AS restores,
       sum((fields->>'tokens')::BIGINT) AS tokens
FROM read_parquet('{EVERY_FILE}', hive_partitioning = true)
WHERE kind = 'restore' GROUP BY ALL ORDER BY ALL;""",
        f"""SELECT host, instance, JSONExtractString(fields, 'origin') AS origin, count() AS restores,
       sum(JSONExtractUInt(fields, 'tokens')) AS tokens
FROM file('{EVERY_FILE}', Parquet)
WHERE kind = 'restore' GROUP BY host, instance, origin ORDER BY host, instance, origin;"""),
    SegmentQuery(
        "The five slowest first tokens of each host in an hour, with the request to `spyglass trace`:",
        f"""SELECT host, request_id, (fields->>'ttft_ms')::BIGINT AS ttft_ms, (fields->>'prompt')::BIGINT AS prompt, ts
FROM read_parquet('{EVERY_FILE}', hive_partitioning = true)
WHERE date = DATE '2026-10-19' AND hour = '04' AND kind = 'done'
QUALIFY row_number() OVER (PARTITION BY host ORDER BY ttft_ms DESC, ts, request_id) <= 5
ORDER BY host, ttft_ms DESC, ts, request_id;""",
        f"""SELECT host, request_id, JSONExtractUInt(fields, 'ttft_ms') AS ttft_ms, JSONExtractUInt(fields, 'prompt') AS prompt, ts
FROM file('{ROOT}/host=*/date=2026-10-19/hour=04/*.parquet', Parquet)
WHERE kind = 'done'
ORDER BY host, ttft_ms DESC, ts, request_id LIMIT 5 BY host;"""),
    SegmentQuery(
        "The conversation cache's last 10-second sample per host (the engine's own eviction count):",
        f"""SELECT host, instance, max(ts) AS last_sample, arg_max((fields->>'evictions')::BIGINT, ts) AS evictions,
       arg_max((fields->>'used')::BIGINT, ts) AS used_bytes, arg_max((fields->>'budget')::BIGINT, ts) AS budget_bytes
FROM read_parquet('{EVERY_FILE}', hive_partitioning = true)
WHERE kind = 'stats' GROUP BY ALL ORDER BY ALL;""",
        f"""SELECT host, instance, max(ts) AS last_sample, argMax(JSONExtractUInt(fields, 'evictions'), ts) AS evictions,
       argMax(JSONExtractUInt(fields, 'used'), ts) AS used_bytes, argMax(JSONExtractUInt(fields, 'budget'), ts) AS budget_bytes
FROM file('{EVERY_FILE}', Parquet)
WHERE kind = 'stats' GROUP BY host, instance ORDER BY host, instance;"""),
]


def on(sql: str, root: str) -> str:
    """`sql` reading the segments under `root` instead of the documentation's folder."""
    return sql.replace(ROOT, root.rstrip("/"))
