"""The agent's peak memory during a catch-up, with the store on (bounded and unbounded DuckDB) and off.

    .venv/bin/python bench/store_memory.py [--lines 4000000]

Writes (once) an engine log of `--lines` lines (bench/gen_log.py), then runs, each in a fresh process,
`spyglass ingest` over all of it with: the store off; the store on with the agent's defaults
(exporters.store.memory_limit_mib, threads); the store on with DuckDB's own defaults (memory_limit
80% of RAM, a thread per core), as before the bound. Prints each run's max RSS (MiB, from
getrusage of the child), wall and CPU seconds, as one JSON object; docs/benchmarks.md records it.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out" / "store_memory"
sys.path.insert(0, str(HERE.parent))

from bench.gen_log import generate  # noqa: E402
from spyglass.config import engine_log_config, toml_text  # noqa: E402

CHILD = (
    "import resource, subprocess, sys, json, time\n"
    "t = time.monotonic(); code = subprocess.run(sys.argv[1:]).returncode\n"
    "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(json.dumps({'code': code, 'max_rss_mib': round(u.ru_maxrss / 1024), 'wall_s': round(time.monotonic() - t, 1),"
    " 'cpu_s': round(u.ru_utime + u.ru_stime, 1)}))"
)


def run(name: str, log: Path, store: bool, bounded: bool, memory_limit_mib: int | None = None) -> dict:
    state = OUT / name
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    config = engine_log_config(log, state, store=store)
    if store and bounded and memory_limit_mib:
        config["exporters"]["store"] = {**config["exporters"].get("store", {}), "memory_limit_mib": memory_limit_mib}
    if store and not bounded:
        config["exporters"]["store"] = {
            **config["exporters"].get("store", {}),
            "memory_limit_mib": 1 << 20,
            "threads": 64,
        }
    path = state / "spyglass.toml"
    path.write_text(toml_text(config))
    spyglass = str(Path(sys.executable).with_name("spyglass"))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, spyglass, "ingest", "--config", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=4_000_000)
    parser.add_argument("--memory-limit-mib", type=int, help="The bounded run's memory_limit (default: the agent's).")
    parser.add_argument("--only", choices=["store_off", "store_bounded", "store_duckdb_defaults"], action="append")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    log = OUT / f"engine-{args.lines}.log"
    if not log.exists():
        generate(log, args.lines)
    result = {"lines": args.lines}
    for name, store, bounded in (
        ("store_off", False, True),
        ("store_bounded", True, True),
        ("store_duckdb_defaults", True, False),
    ):
        if args.only and name not in args.only:
            continue
        result[name] = run(name, log, store, bounded, args.memory_limit_mib)
        print(name, result[name], flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    main()
