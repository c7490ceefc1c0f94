"""The forensic benchmark (bench/forensics_bench.py) of two versions of the code on the same store, in one run:
the ratios of before to after, for a store too big to build twice in the time a run has.

    git worktree add --detach /tmp/spyglass-before COMMIT && ln -s "$PWD/bench/out" /tmp/spyglass-before/bench/out
    nice .venv/bin/python bench/forensics_bench.py --events 20000000 --build-only
    nice .venv/bin/python bench/forensics_ab.py --before /tmp/spyglass-before [--runs 3] [--parquet-days 3]

Both versions read the same files (the store, migrated first to this version's schema: a version that
predates the per-request rows ignores their tables; and the same Parquet segments), each from its own
tree, the older first. The store's migration (the rows built from every event) is timed here too.
Results into bench/out/forensics_ab.json.
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


def run(tree: Path, args: argparse.Namespace) -> dict:
    """The benchmark as that tree has it, its imports from that tree (its commands too)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, str(tree / "bench" / "forensics_bench.py"), "--reuse", "--runs", str(args.runs),
                    "--parquet-days", str(args.parquet_days)], cwd=tree, env=env, check=True)
    return json.loads((HERE / "out" / "forensics.json").read_text())


def ratios(before: dict, after: dict) -> list[dict]:
    old = {(q["query"], q["on"]): q for q in before["queries"] if "median_ms" in q}
    out = []
    for q in after["queries"]:
        was = old.get((q["query"], q["on"]))
        if was and "median_ms" in q:
            out.append({"query": q["query"], "on": q["on"], "before_ms": was["median_ms"], "after_ms": q["median_ms"],
                        "speedup": round(was["median_ms"] / max(q["median_ms"], 0.1), 2), "target_ms": q.get("target_ms")})
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the older version")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--parquet-days", type=int, default=3)
    args = parser.parse_args()
    migrated = migrate()
    print("migrated", migrated, flush=True)
    before = run(args.before.resolve(), args)
    after = run(HERE.parent, args)
    found = ratios(before, after)
    for r in found:
        print(f"{r['query'][:40]:<40} {r['on']:<20} {r['before_ms']:>10.1f} {r['after_ms']:>10.1f} ms  x{r['speedup']}")
    (HERE / "out" / "forensics_ab.json").write_text(json.dumps(
        {"migrated": migrated, "built": after["built"], "load_average": os.getloadavg(), "ratios": found,
         "before": before, "after": after}, indent=2))


if __name__ == "__main__":
    main()
