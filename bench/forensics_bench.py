"""Forensic queries on 10 million stored events: the store and the Parquet segments, one run.

    .venv/bin/python bench/forensics_bench.py [--events 10000000] [--days 7] [--runs 5] [--reuse]

Builds (into bench/out/forensics/) a week of engine-log events: a real `spyglass ingest` of a log
from the mechanistic model (engine/emulator/logsynth.py) is the template, copied with distinct
request ids and conversations, shifted by fractions of a second, until `--events` are stored,
in ts order and numbered by seq as the agent would store them. Publishes them with the agent's
own publisher (exporters/parquet.py: hourly partitions, each closed hour compacted), then
times, warm, the median of `--runs`:

- a 15-minute `spyglass timeline` and a 15-minute `spyglass requests` with the commands' default
  limits (1,000 events, 200 requests), and the timeline of every event of the window;
- what the timeline runs besides: the count of engine starts in its window, and when there is
  one, the deploy records its change rows come from (every engine start up to the window's end);
- a one-day `spyglass report cache` (engine requests, cache events, long prompts);

each through spyglass.forensics.run.query: from the store file opened read-only (what the CLI
does when no agent holds it), and with `--parquet GLOB`; end to end (rows fetched into Python)
and the SQL alone (`SELECT count(*)` over the same query). `--reuse` keeps the data of the last
run. Results into bench/out/forensics.json.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out" / "forensics"
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

from collectors.clock import ManualClock  # noqa: E402
from exporters.parquet import ParquetPublisher  # noqa: E402
from exporters.store import DuckDBStore  # noqa: E402
from spyglass.config import engine_log_toml, parse_config  # noqa: E402
from spyglass.forensics import reports  # noqa: E402
from spyglass.forensics.changes import deploys_query  # noqa: E402
from spyglass.forensics.finder import Filters, requests_query  # noqa: E402
from spyglass.forensics.run import Query, Window, query  # noqa: E402
from spyglass.forensics.timeline import starts_query, timeline_query  # noqa: E402
from spyglass.pipeline import Pipeline  # noqa: E402
from spyglass.query import QueryError  # noqa: E402

START = datetime(2026, 10, 13, tzinfo=UTC)


def template(folder: Path, days: int) -> Path:
    """A store holding one real ingest of `days` of engine log (one turn every 20 s)."""
    import tomllib

    from test_kill_loop import write_log

    log = folder / "engine.log"
    write_log(log, turns=days * 86400 // 20)
    cfg = parse_config(tomllib.loads(engine_log_toml(log, folder / "template", host="h1")), "bench")
    pipeline = Pipeline(cfg, ManualClock(), DuckDBStore(cfg.store_path()))
    try:
        pipeline.run_until_idle()
    finally:
        pipeline.close()
    return cfg.store_path()


def build(folder: Path, events: int, days: int) -> tuple[Path, dict]:
    """The 10M-event store, copied from the template in SQL, in ts order."""
    started = time.perf_counter()
    source = template(folder, days)
    import duckdb

    DuckDBStore(folder / "state" / "spyglass.duckdb").close()  # the schema; its connection cannot ATTACH

    con = duckdb.connect(str(folder / "state" / "spyglass.duckdb"))
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"ATTACH '{source}' AS t (READ_ONLY)")
    row = con.execute("SELECT count(*), min(ts) FROM t.events").fetchone()
    assert row is not None  # an aggregate has a row
    per_copy, t0 = row
    copies = -(-events // per_copy)
    shift = 20.0 / copies  # the copies interleave inside one turn of the template
    con.execute(f"""
        INSERT INTO events
        SELECT ts + to_microseconds((c * {shift} * 1e6)::BIGINT) + (TIMESTAMPTZ '{START:%Y-%m-%d} 00:00:00+00' - {_ts(t0)}),
               source, kind, instance, host,
               CASE WHEN request_id IS NULL THEN NULL ELSE request_id || '-' || c END,
               CASE WHEN fields->>'conv' IS NULL THEN fields
                    ELSE json_merge_patch(fields, json_object('conv', (fields->>'conv') || '-' || c)) END,
               NULL
        FROM t.events, range({copies}) AS r(c)
        ORDER BY 1 LIMIT {events}""")
    con.execute("UPDATE events SET seq = rowid")  # inserted in ts order: the agent's arrival order
    con.execute("CHECKPOINT")
    row = con.execute("SELECT count(*), min(ts), max(ts) FROM events").fetchone()
    assert row is not None  # an aggregate has a row
    n, first, last = row
    con.close()
    return folder / "state" / "spyglass.duckdb", {"events": n, "copies": copies, "template_events": per_copy,
                                                   "from": first.isoformat(), "to": last.isoformat(),
                                                   "build_s": round(time.perf_counter() - started, 1)}


def _ts(value: datetime) -> str:
    return f"TIMESTAMPTZ '{value.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}+00'"


def publish(db: Path, folder: Path) -> dict:
    started = time.perf_counter()
    store = DuckDBStore(db)
    clock = ManualClock((START + timedelta(days=30)).timestamp())  # every hour closed
    publisher = ParquetPublisher(store, clock, folder, host="h1", interval=60, max_rows=1_000_000)
    try:
        rows = publisher.run_once(everything=True)
    finally:
        store.close()
    files = list(folder.glob("host=*/date=*/hour=*/*.parquet"))
    return {"published": rows, "files": len(files), "bytes": sum(f.stat().st_size for f in files),
            "publish_and_compact_s": round(time.perf_counter() - started, 1),
            "store_bytes": db.stat().st_size}


def median_ms(run, runs: int) -> tuple[float, int]:
    run()  # warm
    times, rows = [], 0
    for _ in range(runs):
        started = time.perf_counter()
        rows = len(run()[1])
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 1), rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reuse", action="store_true", help="keep the store and segments of the last run")
    args = parser.parse_args()
    saved = HERE / "out" / "forensics.json"
    if args.reuse and saved.exists():
        built, published = (json.loads(saved.read_text())[k] for k in ("built", "published"))
    else:
        shutil.rmtree(OUT, ignore_errors=True)
        OUT.mkdir(parents=True)
        db, built = build(OUT, args.events, args.days)
        print("built", built, flush=True)
        published = publish(db, OUT / "pq")
        print("published", published, flush=True)

    import tomllib

    cfg = parse_config(tomllib.loads(engine_log_toml(OUT / "engine.log", OUT / "state", host="h1")), "bench")
    segments = str(OUT / "pq" / "host=*" / "date=*" / "hour=*" / "*.parquet")
    day = START + timedelta(days=args.days // 2)
    window = Window(day + timedelta(hours=14, minutes=45), day + timedelta(hours=15))
    queries = {
        "timeline, 15 min": timeline_query(window),
        "timeline, 15 min, every event": timeline_query(window, limit=100_000),
        # what `spyglass timeline` runs besides: the count of starts in the window, and only if there
        # is one, for its change rows, the deploy records (every start up to the window's end)
        "timeline's start count, 15 min": starts_query(window),
        "timeline's deploys, 15 min": deploys_query(Window(None, window.end)),
        "requests, 15 min": requests_query(window, Filters()),
        "report cache, 1 day": reports.get("cache").query(cfg, Window(day, day + timedelta(days=1))),
    }
    results = []
    for name, q in queries.items():
        counted = Query(f"SELECT count(*) FROM (\n{q.sql}\n)", q.params)
        for where, parquet in (("store", None), ("parquet", segments)):
            try:
                ms, rows = median_ms(lambda q=q, parquet=parquet: query(cfg, q, parquet), args.runs)
                sql_ms, _ = median_ms(lambda c=counted, parquet=parquet: query(cfg, c, parquet), args.runs)
            except QueryError as exc:  # a refused query is a result too (a miss), not the end of the run
                results.append({"query": name, "on": where, "error": str(exc), "met": False})
                print(f"{name:<30} {where:<8} refused: {exc}", flush=True)
                continue
            target = 2000 if "1 day" in name else 100
            results.append({"query": name, "on": where, "median_ms": ms, "sql_ms": sql_ms, "rows": rows,
                            "target_ms": target, "met": ms < target})
            print(f"{name:<30} {where:<8} {ms:>9.1f} ms  sql {sql_ms:>8.1f} ms  {rows:>6} rows"
                  f"  {'met' if ms < target else 'MISSED'}", flush=True)
    (HERE / "out" / "forensics.json").write_text(json.dumps({"built": built, "published": published,
                                                             "queries": results}, indent=2))


if __name__ == "__main__":
    main()
