"""One wide table with typed nullable columns, or a table per event kind, against today's JSON column.

    .venv/bin/python bench/store_layout.py [--events 2000000] [--batch 2000]

Generates an engine-log-like stream (queued, prompt, thinking, done, park, evict, stats in the
proportions of a busy engine; 130 declared fields of which each kind fills 2-9), inserts it in
batches of `--batch` events (one transaction a batch, from Arrow, as the agent commits) into a
fresh DuckDB file per layout, then times, warm, the median of 5: a 15-minute per-request GROUP BY
(the heart of the `requests` view) and a 15-minute timeline (every event with its fields as JSON).
Prints one JSON object; docs/benchmarks.md records the run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

KINDS = {  # kind: (share of events, {field: type})
    "queued": (0.12, {"task": "BIGINT", "req": "VARCHAR", "conv": "VARCHAR", "prefill_depth": "BIGINT"}),
    "prompt": (0.12, {"task": "BIGINT", "prompt": "BIGINT", "reused": "BIGINT", "read": "BIGINT", "ms": "BIGINT"}),
    "thinking": (0.12, {"task": "BIGINT", "tokens": "BIGINT", "max": "BIGINT", "cause": "VARCHAR"}),
    "done": (
        0.12,
        {
            "task": "BIGINT",
            "finish": "VARCHAR",
            "prompt": "BIGINT",
            "completion": "BIGINT",
            "ttft_ms": "BIGINT",
            "decode_tps": "DOUBLE",
        },
    ),
    "park": (
        0.2,
        {
            "conv": "VARCHAR",
            "parked": "BIGINT",
            "bytes": "BIGINT",
            "used": "BIGINT",
            "budget": "BIGINT",
            "evictions": "BIGINT",
        },
    ),
    "evict": (
        0.12,
        {
            "conv": "VARCHAR",
            "bytes": "BIGINT",
            "reason": "VARCHAR",
            "parked": "BIGINT",
            "used": "BIGINT",
            "budget": "BIGINT",
            "evictions": "BIGINT",
        },
    ),
    "stats": (
        0.2,
        {
            "busy": "BIGINT",
            "slots": "BIGINT",
            "prefill_queue": "BIGINT",
            "decode_tps": "DOUBLE",
            "parked": "BIGINT",
            "used": "BIGINT",
            "budget": "BIGINT",
            "evictions": "BIGINT",
        },
    ),
}
FILLER = {f"other_{i}": ("BIGINT" if i % 2 else "VARCHAR") for i in range(100)}  # the other sources' fields
COLUMNS = {name: t for _, fields in KINDS.values() for name, t in fields.items()} | FILLER
ARROW = {"BIGINT": pa.int64(), "DOUBLE": pa.float64(), "VARCHAR": pa.string()}
T0 = 1_780_000_000


def generate(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    names = list(KINDS)
    kind = rng.choice(len(names), n, p=[KINDS[k][0] for k in names])
    ts = T0 + np.arange(n) * (7 * 86400 / n)  # a week
    request = np.arange(n) // 8
    return kind, ts, request


def value(field: str, t: str, rows: np.ndarray, request: np.ndarray) -> pa.Array:
    if t == "VARCHAR":
        return pa.array([f"{field[:2]}-{r}" for r in request[rows]], pa.string())
    if t == "DOUBLE":
        return pa.array(rows * 0.5, pa.float64())
    return pa.array(rows % 100_000, pa.int64())


def base(rows, kind, ts, request, seq0):
    names = list(KINDS)
    return {
        "ts": pa.array((ts[rows] * 1e6).astype(np.int64), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "source": pa.array(["engine-a"] * len(rows)),
        "kind": pa.array([names[k] for k in kind[rows]]),
        "request_id": pa.array([f"r{r}" for r in request[rows]]),
        "seq": pa.array(rows + seq0, pa.int64()),
    }


def batches(n, size):
    kind, ts, request = generate(n)
    for lo in range(0, n, size):
        yield np.arange(lo, min(n, lo + size)), kind, ts, request


def insert_json(con, n, size):
    con.execute(
        "CREATE TABLE events (ts TIMESTAMPTZ, source VARCHAR, kind VARCHAR, request_id VARCHAR, seq BIGINT,"
        " fields JSON)"
    )
    names = list(KINDS)
    for rows, kind, ts, request in batches(n, size):
        cols = base(rows, kind, ts, request, 0)
        blobs = []
        for r in rows:
            fields = KINDS[names[kind[r]]][1]
            blobs.append(
                json.dumps(
                    {
                        f: (
                            f"{f[:2]}-{request[r]}"
                            if t == "VARCHAR"
                            else r * 0.5
                            if t == "DOUBLE"
                            else int(r % 100_000)
                        )
                        for f, t in fields.items()
                    }
                )
            )
        cols["fields"] = pa.array(blobs, pa.string())
        con.begin()
        con.from_arrow(pa.table(cols)).insert_into("events")
        con.commit()


def insert_wide(con, n, size):
    typed = ", ".join(f'"{c}" {t}' for c, t in COLUMNS.items())
    con.execute(
        f"CREATE TABLE events (ts TIMESTAMPTZ, source VARCHAR, kind VARCHAR, request_id VARCHAR, seq BIGINT, {typed})"
    )
    names = list(KINDS)
    for rows, kind, ts, request in batches(n, size):
        cols = base(rows, kind, ts, request, 0)
        for c, t in COLUMNS.items():
            mask = np.array([c in KINDS[names[k]][1] for k in kind[rows]])
            if not mask.any():
                cols[c] = pa.nulls(len(rows), ARROW[t])
                continue
            full = value(c, t, rows, request)
            cols[c] = pa.compute.if_else(pa.array(mask), full, pa.scalar(None, ARROW[t]))
        con.begin()
        con.from_arrow(pa.table(cols)).insert_into("events")
        con.commit()


def insert_per_kind(con, n, size):
    for name, (_, fields) in KINDS.items():
        typed = ", ".join(f'"{c}" {t}' for c, t in fields.items())
        con.execute(
            f"CREATE TABLE ev_{name} (ts TIMESTAMPTZ, source VARCHAR, kind VARCHAR, request_id VARCHAR,"
            f" seq BIGINT, {typed})"
        )
    names = list(KINDS)
    for rows, kind, ts, request in batches(n, size):
        con.begin()
        for i, name in enumerate(names):
            sub = rows[kind[rows] == i]
            if not len(sub):
                continue
            cols = base(sub, kind, ts, request, 0)
            for c, t in KINDS[name][1].items():
                cols[c] = value(c, t, sub, request)
            con.from_arrow(pa.table(cols)).insert_into(f"ev_{name}")
        con.commit()
    union = " UNION ALL BY NAME ".join(f"SELECT * FROM ev_{k}" for k in KINDS)
    con.execute(f"CREATE VIEW events AS {union}")


def json_fields(layout: str) -> str:
    if layout == "json":
        return "fields"
    pairs = {k: ", ".join(f"'{c}', \"{c}\"" for c in f) for k, (_, f) in KINDS.items()}
    cases = " ".join(f"WHEN '{k}' THEN json_object({p})" for k, p in pairs.items())
    return f"CASE kind {cases} END"


def queries(layout: str) -> dict[str, str]:
    window = f"ts >= to_timestamp({T0 + 3 * 86400}) AND ts < to_timestamp({T0 + 3 * 86400 + 900})"
    if layout == "json":
        get = lambda f, t, k: f"max(TRY_CAST(fields->>'{f}' AS {t})) FILTER (WHERE kind = '{k}')"  # noqa: E731
    else:
        get = lambda f, t, k: f"max(\"{f}\") FILTER (WHERE kind = '{k}')"  # noqa: E731
    if layout == "per_kind":
        source = (
            f"(SELECT * FROM ev_queued WHERE {window} UNION ALL BY NAME SELECT * FROM ev_prompt WHERE {window}"
            f" UNION ALL BY NAME SELECT * FROM ev_done WHERE {window})"
        )
    else:
        source = f"(SELECT * FROM events WHERE {window} AND kind IN ('queued', 'prompt', 'done'))"
    requests = (
        f"SELECT request_id, min(ts), {get('conv', 'VARCHAR', 'queued')}, {get('prompt', 'BIGINT', 'prompt')},"
        f" {get('reused', 'BIGINT', 'prompt')}, {get('ttft_ms', 'BIGINT', 'done')},"
        f" {get('decode_tps', 'DOUBLE', 'done')}, {get('finish', 'VARCHAR', 'done')} FROM {source}"
        f" GROUP BY request_id"
    )
    timeline = f"SELECT ts, source, kind, request_id, ({json_fields(layout)})::VARCHAR FROM events WHERE {window}"
    return {
        "requests_15min": requests,
        "timeline_15min": timeline,
        "day_sum_bytes": f"SELECT sum({'(fields->>$$bytes$$)::BIGINT' if layout == 'json' else 'bytes'})"
        f" FROM {'ev_evict' if layout == 'per_kind' else 'events'}"
        f" WHERE ts >= to_timestamp({T0}) AND ts < to_timestamp({T0 + 86400})"
        f"{'' if layout == 'per_kind' else ' AND kind = $$evict$$'}",
    }


def timed(con, sql, runs=5):
    con.execute(sql).fetchall()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        con.execute(sql).fetchall()
        times.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(times), 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=2000)
    args = parser.parse_args()
    out = {"events": args.events, "batch": args.batch}
    with tempfile.TemporaryDirectory() as tmp:
        for layout, insert in (("json", insert_json), ("wide", insert_wide), ("per_kind", insert_per_kind)):
            path = Path(tmp) / f"{layout}.duckdb"
            con = duckdb.connect(str(path), config={"threads": "1"})
            con.execute("SET TimeZone = 'UTC'")
            t = time.perf_counter()
            cpu = time.process_time()
            insert(con, args.events, args.batch)
            con.execute("CHECKPOINT")
            wall, cpu = time.perf_counter() - t, time.process_time() - cpu
            row = {
                "insert_events_per_cpu_second": round(args.events / cpu),
                "insert_wall_s": round(wall, 1),
                "bytes_per_event": round(path.stat().st_size / args.events, 1),
            }
            row.update({name: timed(con, sql) for name, sql in queries(layout).items()})
            out[layout] = row
            con.close()
            print(layout, row, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
