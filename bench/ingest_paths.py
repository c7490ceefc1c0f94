"""Metrics-only ingest of the benchmark's generated log in one process, both ways the engine log can
be parsed: per line (`columnar = "never"`) and columnar (`"always"`). Interleaved rounds, CPU seconds,
least of the rounds kept, and the ratio columnar / per line.

    .venv/bin/python bench/ingest_paths.py [--lines 400000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.gen_log import generate  # noqa: E402
from spyglass.agent.pipeline import Pipeline  # noqa: E402
from spyglass.agent.runtime import open_store  # noqa: E402
from spyglass.collectors.clock import ManualClock  # noqa: E402
from spyglass.config import engine_log_config, parse_config  # noqa: E402


def ingest_cpu(log: Path, columnar: str) -> float:
    folder = Path(tempfile.mkdtemp(prefix="spyglass-bench-"))
    try:
        raw = engine_log_config(log, folder / "state", store=False)
        raw["sources"]["engine-b"]["columnar"] = columnar
        config = parse_config(raw, "bench")
        pipeline = Pipeline(config, ManualClock(start=1_792_380_000.0 + 86400 * 30), open_store(config))
        started = time.process_time()
        pipeline.run_until_idle()
        spent = time.process_time() - started
        pipeline.close()
        return spent
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    log = HERE / "out" / f"engine-{args.lines}.log"
    if not log.exists():
        log.parent.mkdir(exist_ok=True)
        generate(log, args.lines)
    spent: dict[str, list[float]] = {"never": [], "always": []}
    for _ in range(args.rounds):
        for way, times in spent.items():
            times.append(ingest_cpu(log, way))
    base = min(spent["never"])
    print(f"| parse | CPU s per M lines (least of {args.rounds}) | / per line |\n|---|---|---|")
    for way, times in spent.items():
        print(
            f"| {'columnar' if way == 'always' else 'per line'} | {min(times) / args.lines * 1e6:.2f} |"
            f" {min(times) / base:.2f} |"
        )


if __name__ == "__main__":
    main()
