"""Forensic queries on a quarter's worth of stored events: the store, the Parquet segments through
DuckDB, and the same segments through ClickHouse's engine (chdb), one run.

    nice .venv/bin/python bench/forensics_bench.py [--events 100000000] [--runs 5] [--reuse] [--build-only]
        [--parquet-days N]

Builds (into bench/out/forensics/, not committed) the traffic of two busy engines: one day of their logs
from the mechanistic model (engine/emulator/logsynth.py: a request every 0.86 s on each of strata-a and
strata-b, a stats line every 10 s, about 1.5M events a day), stored by a real ingest (the pipeline, as
`spyglass ingest` runs it). That day is the template: it is copied in SQL, day after day, with distinct
request ids and conversations, until `--events` are stored (100M: about 67 days), each copy appended in
the agent's order (seq) as the agent would have stored it. Publishes them with the agent's own
publisher (exporters/parquet.py: hourly partitions, each closed hour compacted), or with
`--parquet-days N` writes the typed segments of N days around the measured one in bulk (DuckDB's
partitioned COPY), then measures:

- disk bytes per event, in the store and in Parquet;
- warm, the median of `--runs`: a 15-minute `spyglass timeline` and `spyglass requests` (the commands'
  default limits), what the timeline runs besides (the count of engine starts in its window), a one-day
  `spyglass report cache`, and `diagnose` of a day; each through the function every forensic command
  calls, from the store file opened read-only and with `--parquet GLOB`; "end to end" fetches the rows
  into Python, "SQL" is `SELECT count(*)` over the same query;
- `spyglass diagnose` of a day as a command (a new process: Python's start-up included);
- the docs' queries over the segments (spyglass/forensics/segment_queries.py) and the 15-minute window
  of events, through DuckDB and through ClickHouse (chdb).

Ingest rate is measured by bench/run.py (10M log lines against mtail). `--reuse` keeps the data of
the last run. Results into bench/out/forensics.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "out" / "forensics"
sys.path.insert(0, str(HERE.parent))

from spyglass.agent.pipeline import Pipeline  # noqa: E402
from spyglass.collectors.clock import ManualClock  # noqa: E402
from spyglass.config import Config, engine_log_config, parse_config, toml_text  # noqa: E402
from spyglass.engine.emulator.logsynth import EngineModel  # noqa: E402
from spyglass.exporters.event_schema import kind_tables, quoted, table_names  # noqa: E402
from spyglass.exporters.parquet import ParquetPublisher  # noqa: E402
from spyglass.exporters.segment_schema import rows_sql  # noqa: E402
from spyglass.exporters.store import DuckDBStore  # noqa: E402
from spyglass.forensics import reports  # noqa: E402
from spyglass.forensics.diagnose import diagnose  # noqa: E402
from spyglass.forensics.finder import Filters, requests_query  # noqa: E402
from spyglass.forensics.run import Query, Window, query  # noqa: E402
from spyglass.forensics.segment_queries import QUERIES, clickhouse_rows, duckdb_rows, on  # noqa: E402
from spyglass.forensics.timeline import starts_query, timeline_query  # noqa: E402
from spyglass.query.bounded import QueryError  # noqa: E402

START = datetime(2026, 10, 13, tzinfo=UTC)
ENGINES = {"engine-a": ("strata-a", 8081, 5), "engine-b": ("strata-b", 8082, 6)}  # source: instance, port, seed
EVERY = 0.86  # seconds between two requests on one engine: about 1.5M events a day for two


def busy_log(path: Path, day: datetime, port: int, seed: int) -> None:
    """One day of one busy engine's log, its lines in time order as the engine writes them."""
    model = EngineModel(seed=seed, instance_port=port, conversations=24)
    t0 = day.timestamp()
    lines = model.start_lines(t0 - 600)
    ts, i = t0, 0
    while ts < t0 + 86400 - 300:  # every request of the day done within the day
        lines += model.turn(ts)
        if i % round(10 / EVERY) == 0:
            lines.append(model.stats_line(ts))
        ts, i = ts + EVERY, i + 1
    lines.sort(key=lambda line: line[:23])  # requests overlap: the log is written in time order
    path.write_bytes(b"\n".join(lines) + b"\n")


def bench_toml(folder: Path, state: str = "state") -> str:
    """The config of both engines' logs in `folder`, the store in `folder / state`."""
    document = engine_log_config(folder / "engine-b.log", folder / state, host="h1")
    for source, (instance, _, _) in ENGINES.items():
        document["sources"][source] = {
            "kind": "engine_log",
            "path": folder / f"{source}.log",
            "instance": instance,
            "lane": "normal",
        }
    return toml_text(document)


def bench_config(folder: Path, state: str = "state") -> Config:
    import tomllib

    return parse_config(tomllib.loads(bench_toml(folder, state)), "bench")


def template(folder: Path) -> Path:
    """A store holding one real ingest of one day of both engines' logs."""
    for source, (_, port, seed) in ENGINES.items():
        busy_log(folder / f"{source}.log", START, port, seed)
    cfg = bench_config(folder, "template")
    pipeline = Pipeline(cfg, ManualClock(), DuckDBStore(cfg.store_path(), cfg.source_kinds()))
    try:
        pipeline.run_until_idle()
    finally:
        pipeline.close()
    return cfg.store_path()


def copy_sql(table: str, columns: list[str], per_copy: int) -> str:
    """One day's copy of a template table, `$c` days later, with distinct request ids and conversations."""
    replace = {
        "ts": "ts + to_days($c)",
        "seq": f"seq + $c * {per_copy}",
        "request_id": "CASE WHEN request_id IS NULL THEN NULL ELSE request_id || '-' || $c END",
        "conv": "CASE WHEN conv IS NULL THEN NULL ELSE conv || '-' || $c END",
    }
    select = ", ".join(f"{replace[c]} AS {quoted(c)}" if c in replace else quoted(c) for c in columns)
    return f"INSERT INTO {quoted(table)} SELECT {select} FROM t.{quoted(table)} ORDER BY seq"


def build(folder: Path, events: int) -> tuple[Path, dict]:
    """The store, copied from the template in SQL, one day a copy, each kind table in the agent's order."""
    import duckdb

    started = time.perf_counter()
    source = template(folder)
    templated = time.perf_counter() - started
    db = folder / "state" / "spyglass.duckdb"
    cfg = bench_config(folder)
    DuckDBStore(db, cfg.source_kinds()).close()  # the schema; its connection cannot ATTACH
    con = duckdb.connect(str(db))
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"ATTACH '{source}' AS t (READ_ONLY)")
    row = con.execute("SELECT count(*), min(seq), max(seq) FROM t.events").fetchone()
    assert row is not None and row[1] == 0 and row[2] == row[0] - 1  # seqs 0..n-1: copies never collide
    per_copy = row[0]
    tables = {}
    for name in table_names():
        [(n,)] = con.execute(f"SELECT count(*) FROM t.{quoted(name)}").fetchall()
        if n:
            tables[name] = [
                r[0]
                for r in con.execute(
                    "SELECT column_name FROM duckdb_columns() WHERE database_name = 't' AND table_name = ?"
                    " ORDER BY column_index",
                    [name],
                ).fetchall()
            ]
    days = -(-events // per_copy)  # whole days, at least `events`: each copy is a day of traffic
    for c in range(days):
        for name, columns in tables.items():
            con.execute(copy_sql(name, columns, per_copy).replace("$c", str(c)))
        print(f"  day {c + 1} of {days}", end="\r", flush=True)
    con.execute("CHECKPOINT")
    row = con.execute("SELECT count(*), min(ts), max(ts) FROM events").fetchone()
    assert row is not None  # an aggregate has a row
    n, first, last = row
    con.close()
    return db, {
        "events": n,
        "days": days,
        "template_events": per_copy,
        "from": first.isoformat(),
        "to": last.isoformat(),
        "template_s": round(templated, 1),
        "tables": len(tables),
        "build_s": round(time.perf_counter() - started, 1),
    }


def publish(db: Path, folder: Path, days: int) -> dict:
    """Every stored event published by the agent's own publisher (hourly parts, closed hours compacted)."""
    started = time.perf_counter()
    store = DuckDBStore(db)
    clock = ManualClock((START + timedelta(days=days + 2)).timestamp())  # every hour closed
    publisher = ParquetPublisher(store, clock, folder, host="h1", interval=60, max_rows=2_000_000)
    try:
        rows = publisher.run_once(everything=True)
    finally:
        store.close()
    return {"published": rows, "publish_and_compact_s": round(time.perf_counter() - started, 1), **on_disk(db, folder)}


def bulk_segments(db: Path, folder: Path, first: datetime, days: int) -> dict:
    """`days` of stored events from `first` written as the segments' typed columns in bulk (DuckDB's
    partitioned COPY: one file per host and hour, as a compacted hour), for a store too big to publish
    in the time a benchmark has."""
    import duckdb

    started = time.perf_counter()
    sql = rows_sql(list(kind_tables().values())).replace(
        "seq BETWEEN $1 AND $2", f"ts >= '{first:%Y-%m-%d}' AND ts < '{first + timedelta(days=days):%Y-%m-%d}'"
    )
    con = duckdb.connect(str(db), read_only=True)
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute(
            f"COPY (SELECT *, strftime(ts, '%Y-%m-%d') AS date, strftime(ts, '%H') AS hour FROM ({sql.rsplit(' ORDER BY', 1)[0]}))"
            f" TO '{folder}' (FORMAT parquet, PARTITION_BY (host, date, hour), WRITE_PARTITION_COLUMNS true,"
            " COMPRESSION zstd, ROW_GROUP_SIZE 122880)"
        )
        [(n,)] = con.execute(
            f"SELECT count(*) FROM events WHERE ts >= '{first:%Y-%m-%d}'"
            f" AND ts < '{first + timedelta(days=days):%Y-%m-%d}'"
        ).fetchall()
    finally:
        con.close()
    return {
        "published": n,
        "days": days,
        "from": f"{first:%Y-%m-%d}",
        "bulk_copy_s": round(time.perf_counter() - started, 1),
        **on_disk(db, folder),
    }


def on_disk(db: Path, folder: Path) -> dict:
    files = list(folder.glob("host=*/date=*/hour=*/*.parquet"))
    return {
        "files": len(files),
        "bytes": sum(f.stat().st_size for f in files),
        "store_bytes": db.stat().st_size + sum(f.stat().st_size for f in db.parent.glob("*.wal")),
    }


def median_ms(run: Callable[[], Any], runs: int) -> tuple[float, int]:
    """The median wall ms of `runs` calls after one to warm, and the rows of the last."""
    run()
    times, rows = [], 0
    for _ in range(runs):
        started = time.perf_counter()
        answer = run()
        times.append((time.perf_counter() - started) * 1000)
        rows = len(answer[1]) if isinstance(answer, tuple) else len(answer)
    return round(statistics.median(times), 1), rows


def record(
    results: list[dict],
    name: str,
    on: str,
    run: Callable[[], Any],
    runs: int,
    target: float | None,
    sql: Callable[[], Any] | None = None,
) -> None:
    try:
        ms, rows = median_ms(run, runs)
        sql_ms = median_ms(sql, runs)[0] if sql else None
    except QueryError as exc:  # a refused query is a result too (a miss), not the end of the run
        results.append({"query": name, "on": on, "error": str(exc), "met": False})
        print(f"{name:<34} {on:<16} refused: {exc}", flush=True)
        return
    met = None if target is None else ms < target
    results.append(
        {"query": name, "on": on, "median_ms": ms, "sql_ms": sql_ms, "rows": rows, "target_ms": target, "met": met}
    )
    print(
        f"{name:<34} {on:<16} {ms:>9.1f} ms  sql {sql_ms or 0:>8.1f} ms  {rows:>6} rows"
        f"  {'' if met is None else 'met' if met else 'MISSED'}",
        flush=True,
    )


def forensic_commands(cfg: Config, segments: str, day: datetime, runs: int) -> list[dict]:
    """The commands' queries and diagnose, from the store and from the segments through DuckDB."""
    window = Window(day + timedelta(hours=14, minutes=45), day + timedelta(hours=15))
    one_day = Window(day, day + timedelta(days=1))
    queries = {
        "timeline, 15 min": (timeline_query(window), 100),
        "timeline's start count, 15 min": (starts_query(window), 100),
        "requests, 15 min": (requests_query(window, Filters()), 100),
        "report cache, 1 day": (reports.get("cache").query(cfg, one_day), 1000),
    }
    results: list[dict] = []
    for where, parquet in (("store", None), ("parquet (DuckDB)", segments)):
        for name, (q, target) in queries.items():
            counted = Query(f"SELECT count(*) FROM (\n{q.sql}\n)", q.params)
            record(
                results,
                name,
                where,
                partial(query, cfg, q, parquet),
                runs,
                target,
                partial(query, cfg, counted, parquet),
            )
        record(results, "diagnose, 1 day", where, partial(findings, cfg, one_day, parquet), max(1, runs // 2), 5000)
    return results


def findings(cfg: Config, window: Window, parquet: str | None) -> list:
    return diagnose(cfg, window, parquet).findings


def diagnose_command(config: Path, day: datetime) -> dict:
    """`spyglass diagnose` of a day as a process, Python's start-up included (the second of two runs)."""
    cmd = [
        sys.executable,
        "-m",
        "spyglass.cli.app",
        "diagnose",
        "-c",
        str(config),
        "--from",
        f"{day:%Y-%m-%d}",
        "--to",
        f"{day + timedelta(days=1):%Y-%m-%d}",
        "--json",
    ]
    seconds = 0.0
    for _ in range(2):
        started = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - started
    findings = (
        [f["heuristic"] for f in json.loads(done.stdout)["findings"]]
        if done.stdout.startswith("{")
        else done.stderr[-500:]
    )
    print(
        f"spyglass diagnose, 1 day (process) {seconds:.2f} s, exit {done.returncode}, findings {findings}", flush=True
    )
    return {
        "query": "spyglass diagnose, 1 day (process)",
        "on": "store",
        "median_ms": round(seconds * 1000, 1),
        "exit": done.returncode,
        "findings": findings,
        "target_ms": 5000,
        "met": seconds < 5,
    }


def on_day(sql: str, root: Path, day: datetime) -> str:
    """A docs query over the segments in `root`, on `day` instead of the docs' 2026-10-19."""
    return on(sql, str(root)).replace("2026-10-19", f"{day:%Y-%m-%d}")


def segment_questions(root: Path, day: datetime, runs: int) -> list[dict]:
    """The docs' queries and a 15-minute window of events over the segments: DuckDB against ClickHouse."""
    start, hours = day + timedelta(hours=14, minutes=45), "{14,15}"
    window = (
        f"SELECT ts, seq, kind, instance, request_id FROM read_parquet('{root}/host=*/date={day:%Y-%m-%d}/hour=*/*.parquet',"
        f" hive_partitioning = true) WHERE hour IN ('14', '15') AND ts >= TIMESTAMPTZ '{start:%Y-%m-%d %H:%M}:00+00'"
        f" AND ts < TIMESTAMPTZ '{start + timedelta(minutes=15):%Y-%m-%d %H:%M}:00+00' ORDER BY ts, seq LIMIT 1001",
        f"SELECT ts, seq, kind, instance, request_id FROM file('{root}/host=*/date={day:%Y-%m-%d}/hour={hours}/*.parquet',"
        f" Parquet) WHERE ts >= '{start:%Y-%m-%d %H:%M}:00' AND ts < '{start + timedelta(minutes=15):%Y-%m-%d %H:%M}:00'"
        " ORDER BY ts, seq LIMIT 1001",
    )
    pairs = [("events of 15 min (timeline)", *window)] + [
        (q.question.rstrip(":"), on_day(q.duckdb, root, day), on_day(q.clickhouse, root, day)) for q in QUERIES
    ]
    results: list[dict] = []
    for name, duck, click in pairs:
        same = duckdb_rows(duck) == clickhouse_rows(click)
        for where, run in (
            ("parquet (DuckDB)", lambda sql=duck: duckdb_rows(sql)),
            ("parquet (ClickHouse)", lambda sql=click: clickhouse_rows(sql)),
        ):
            record(results, name[:60], where, run, runs, None)
            results[-1]["same_answer"] = same
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reuse", action="store_true", help="keep the store and segments of the last run")
    parser.add_argument("--build-only", action="store_true", help="build the store, then stop (--reuse goes on)")
    parser.add_argument(
        "--parquet-days",
        type=int,
        default=0,
        help="segments of only these days around the measured one, written in bulk (0: publish all)",
    )
    args = parser.parse_args()
    saved, stages = HERE / "out" / "forensics.json", OUT / "stages.json"
    done = json.loads(stages.read_text()) if args.reuse and stages.exists() else {}
    if "built" not in done:
        shutil.rmtree(OUT, ignore_errors=True)
        OUT.mkdir(parents=True)
        done["built"] = build(OUT, args.events)[1]
        print("built", done["built"], flush=True)
        stages.write_text(json.dumps(done))
    if args.build_only:
        return
    built = done["built"]
    if "published" not in done:
        shutil.rmtree(OUT / "pq", ignore_errors=True)
        db = OUT / "state" / "spyglass.duckdb"
        first = START + timedelta(days=built["days"] // 2 - args.parquet_days // 2)
        done["published"] = (
            bulk_segments(db, OUT / "pq", first, args.parquet_days)
            if args.parquet_days
            else publish(db, OUT / "pq", built["days"])
        )
        print("published", done["published"], flush=True)
        stages.write_text(json.dumps(done))
    published = done["published"]
    n = built["events"]
    sizes = {
        "store_bytes_per_event": round(published["store_bytes"] / n, 1),
        "parquet_bytes_per_event": round(published["bytes"] / published["published"], 1),
    }
    print("disk", sizes, flush=True)

    cfg = bench_config(OUT)
    config = OUT / "spyglass.toml"
    config.write_text(bench_toml(OUT))
    segments = str(OUT / "pq" / "host=*" / "date=*" / "hour=*" / "*.parquet")
    day = START + timedelta(days=built["days"] // 2)
    results = forensic_commands(cfg, segments, day, args.runs)
    results.append(diagnose_command(config, day))
    results += segment_questions(OUT / "pq", day, args.runs)
    saved.write_text(
        json.dumps(
            {
                "built": built,
                "published": published,
                "disk": sizes,
                "day": day.isoformat(),
                "load_average": os.getloadavg(),
                "queries": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
