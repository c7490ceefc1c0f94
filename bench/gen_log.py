"""Writes the benchmark's engine log: N lines, one in four an event (the rest debug noise).

Events come from engine.emulator.logsynth's model (requests, cache park/evict/restore, stats), so the
mix of kinds and field values is the one the parsers see in production.
"""

from __future__ import annotations

import sys
from pathlib import Path

from spyglass.engine.emulator.logsynth import EngineModel


def generate(path: Path, total_lines: int, seed: int = 42) -> int:
    model = EngineModel(seed=seed, conversations=12)
    ts, written, turn = 1_792_380_000.0, 0, 0
    with open(path, "wb", buffering=1 << 20) as out:
        for event_line in model.start_lines(ts):
            out.write(event_line + b"\n")
            written += 1
        while written < total_lines:
            ts += 7.5
            events = model.turn(ts) + ([model.stats_line(ts)] if turn % 4 == 0 else [])
            turn += 1
            for event_line in events:
                out.write(event_line + b"\n")
                for _ in range(3):
                    out.write(model.noise(ts) + b"\n")
                written += 4
    return written


if __name__ == "__main__":
    print(generate(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 2_000_000))
