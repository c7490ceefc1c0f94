"""The llama-server line parser's throughput on the recorded real logs (tests/fixtures/llama/, every build,
verbosity and mode): lines per CPU-second, best of a few runs, for the tree this runs in (or the trees given,
each in its own process, so that their `spyglass` packages do not mix).

    .venv/bin/python bench/llama_parse.py [--trees . /path/to/another/checkout] [--runs 7]

The exact noise catalogue (collectors/llama_noise.py) shapes every line no pattern reads; the verbose runs are
mostly such lines, the default ones mostly signal lines.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "llama"
SETS = {"default": "*/default/server.log", "verbose": "*/verbose/server.log", "all": "*/*/server.log"}


def measure(runs: int) -> dict[str, float]:
    from spyglass.collectors.llama_grammar import LlamaLineParser
    from spyglass.collectors.llama_wrap import unwrap

    parser, found = LlamaLineParser(), {}
    for name, pattern in SETS.items():
        lines = [line for path in sorted(FIXTURES.glob(pattern)) for line in path.read_bytes().splitlines()]
        best = float("inf")
        for _ in range(runs):
            started = time.process_time()
            for line in lines:
                parser.parse(unwrap(line, 1.8e9).payload)
            best = min(best, time.process_time() - started)
        found[name] = round(len(lines) / best) if best > 0 else 0.0
    return found


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--trees", nargs="*", default=[])
    args.add_argument("--runs", type=int, default=7)
    opts = args.parse_args()
    if not opts.trees:
        print(json.dumps(measure(opts.runs)))
        return
    for tree in opts.trees:
        env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
        code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import llama_parse as b; print(b.measure({opts.runs}))"
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd="/"
        )
        print(f"{tree}: lines per CPU-second {done.stdout.strip()}")


if __name__ == "__main__":
    main()
