"""The forensic queries of two versions of the code on the same store, in one run: the ratios of before to
after, for a store too big to build twice in the time a run has.

    nice .venv/bin/python bench/forensics_bench.py --events 20000000 --build-only
    git worktree add --detach /tmp/spyglass-before COMMIT && ln -s "$PWD/bench/out" /tmp/spyglass-before/bench/out
    nice .venv/bin/python bench/forensics_ab.py --before /tmp/spyglass-before [--runs 3]

Both versions read the same store (bench/out/forensics/, migrated first to this version's schema: a version
that predates the per-request rows ignores their tables), each from its own tree (its imports and its
`spyglass diagnose` process), the older first: the commands' queries as bench/forensics_bench.py measures
them (end to end through spyglass.forensics.run.query, the median of `--runs` warm runs; `diagnose` of a
day in process once after a warm run, and as a command once after a warm run; with the Parquet segments of
`forensics_bench.py --parquet-days N` present, `diagnose` of the same day over them in process too). The store's migration (the
rows built from every event) is timed too. Results into bench/out/forensics_ab.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# Run in each tree (PYTHONPATH = that tree): its own functions on the shared store.
MEASURE = """
import json, sys
from datetime import timedelta
from functools import partial
from bench.forensics_bench import OUT, START, bench_config, diagnose_command, findings, median_ms
from spyglass.forensics import reports
from spyglass.forensics.finder import Filters, requests_query
from spyglass.forensics.run import Window, query
from spyglass.forensics.timeline import timeline_query
runs, days = int(sys.argv[1]), int(sys.argv[2])
cfg = bench_config(OUT)
config = OUT / "spyglass.toml"
config.write_text(__import__("bench.forensics_bench", fromlist=["bench_toml"]).bench_toml(OUT))
day = START + timedelta(days=days // 2)
window = Window(day + timedelta(hours=14, minutes=45), day + timedelta(hours=15))
one_day = Window(day, day + timedelta(days=1))
out = {}
for name, q in (("timeline, 15 min", timeline_query(window)), ("requests, 15 min", requests_query(window, Filters())),
                ("report cache, 1 day", reports.get("cache").query(cfg, one_day))):
    out[name] = median_ms(partial(query, cfg, q), runs)
    print(name, out[name], flush=True)
out["diagnose, 1 day (in process)"] = median_ms(partial(findings, cfg, one_day, None), 1)
print(out["diagnose, 1 day (in process)"], flush=True)
out["spyglass diagnose, 1 day (process)"] = [diagnose_command(config, day)["median_ms"], 0]
if list((OUT / "pq").glob("host=*/date=*/hour=*/*.parquet")):  # the segments of forensics_bench.py --parquet-days
    segments = str(OUT / "pq" / "host=*" / "date=*" / "hour=*" / "*.parquet")
    out["diagnose, 1 day, Parquet (in process)"] = median_ms(partial(findings, cfg, one_day, segments), 1)
    print(out["diagnose, 1 day, Parquet (in process)"], flush=True)
print(json.dumps(out))
"""


def migrate() -> dict:
    from bench.forensics_bench import OUT, bench_config
    from spyglass.exporters.store import DuckDBStore

    started = time.perf_counter()
    store = DuckDBStore(OUT / "state" / "spyglass.duckdb", bench_config(OUT).source_kinds())
    try:
        [(rows,)] = store.con.execute("SELECT count(*) FROM requests_engine").fetchall()
    finally:
        store.close()
    return {"migrate_s": round(time.perf_counter() - started, 1), "engine_rows": rows}


def measure(tree: Path, runs: int, days: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(runs), str(days)],
        cwd=tree,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return {name: ms for name, (ms, _) in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the older version")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    built = json.loads((HERE / "out" / "forensics" / "stages.json").read_text())["built"]
    migrated = migrate()
    print("store", built["events"], "events,", built["days"], "days; migrated", migrated, flush=True)
    before = measure(args.before.resolve(), args.runs, built["days"])
    after = measure(HERE.parent, args.runs, built["days"])
    rows = [
        {
            "query": name,
            "before_ms": before[name],
            "after_ms": after[name],
            "speedup": round(before[name] / max(after[name], 0.1), 2),
        }
        for name in after
    ]
    for r in rows:
        print(f"{r['query']:<36} {r['before_ms']:>10.1f} {r['after_ms']:>10.1f} ms  x{r['speedup']}", flush=True)
    (HERE / "out" / "forensics_ab.json").write_text(
        json.dumps({"built": built, "migrated": migrated, "load_average": os.getloadavg(), "queries": rows}, indent=2)
    )


if __name__ == "__main__":
    main()
