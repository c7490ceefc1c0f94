"""Where the columnar path starts paying for its fixed cost: CPU per line of both engine-log paths
by block size, on the benchmark's generated log (one line in four an event).

    .venv/bin/python bench/crossover.py [--sizes 20,50,100,200,500,1000,2000,8000]

Sizes are measured interleaved (line path, block path, line path, ...) so load drifts hit both.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.gen_log import generate  # noqa: E402
from spyglass.collectors.engine_log import EngineLogOptions, EngineLogSource  # noqa: E402


def per_line_us(lines: list[bytes], size: int, block: bool, rounds: int) -> float:
    source = EngineLogSource("engine-b", EngineLogOptions(path="x", instance="strata-b", lane="normal"))
    handle = source.handle_block if block else source.handle_each
    blocks = [lines[i : i + size] for i in range(0, len(lines) - size + 1, size)][:rounds]
    started = time.process_time()
    for chunk in blocks:
        handle(chunk)
    return (time.process_time() - started) / (len(blocks) * size) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="20,50,100,200,500,1000,2000,8000")
    parser.add_argument("--lines", type=int, default=40_000, help="lines per measurement")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    log = HERE / "out" / "engine-200000.log"
    if not log.exists():
        log.parent.mkdir(exist_ok=True)
        generate(log, 200_000)
    lines = log.read_bytes().splitlines()
    print("| lines per block | per-line path µs/line | columnar µs/line | columnar / per-line |\n|---|---|---|---|")
    for size in map(int, args.sizes.split(",")):
        rounds = max(1, args.lines // size)
        line_us = min(per_line_us(lines, size, False, rounds) for _ in range(args.repeats))
        block_us = min(per_line_us(lines, size, True, rounds) for _ in range(args.repeats))
        print(f"| {size} | {line_us:.2f} | {block_us:.2f} | {block_us / line_us:.2f} |", flush=True)


if __name__ == "__main__":
    main()
