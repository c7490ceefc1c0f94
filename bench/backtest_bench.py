"""Benchmark: `spyglass backfill` + `spyglass backtest` of one day of the reference deployment's logs.

    .venv/bin/python bench/backtest_bench.py [--out bench/out/backtest] [--step 15s]

The day is written by engine.emulator.logsynth's model for the deployment of examples/strata.toml:
strata-a (fast lane, a roomy cache) and strata-b (normal lane, the seeds' 8 GiB budget, so the
evening's long conversations storm), a request every 20 s on each, a [stats] line every 10 s, and
supervisord's start. It is ingested by the real pipeline into DuckDB (not timed against the
target), then a child process replays it and backtests it; the child reports wall time per phase
and peak RSS of itself and of its largest child (promtool or prometheus).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from spyglass.engine.emulator.logsynth import Conversation, EngineModel  # noqa: E402

DAY = datetime(2026, 10, 7, tzinfo=UTC).timestamp()
H = 3600.0


def engine_day(model: EngineModel, cpus: str, storm: tuple[float, float] | None) -> list[bytes]:
    lines = [raw.replace(b"cpus allowed=38-53", f"cpus allowed={cpus}".encode()) for raw in model.start_lines(DAY)]
    model.convs = [Conversation(f"{model.rng.getrandbits(64):016x}", model.rng.randrange(2000, 8000)) for _ in range(4)]
    t = DAY + 60
    while t < DAY + 24 * H:
        if storm and storm[0] <= t < storm[0] + 20:  # the evening's long-context suite
            model.convs = [Conversation(f"{model.rng.getrandbits(64):016x}", 240_000 + 2000 * k) for k in range(8)]
        if storm and storm[1] <= t < storm[1] + 20:
            model.convs = model.convs[:4]
        lines += model.turn(t)
        t += 20.0
    lines += [model.stats_line(DAY + 10 * k) for k in range(1, 8640)]
    lines.sort(key=lambda raw: raw[:23])
    return lines


def write_day(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    a = engine_day(EngineModel(instance_port=8081, budget_bytes=64 << 30, seed=1), "22-37", None)
    b = engine_day(
        EngineModel(instance_port=8082, budget_bytes=8192 << 20, seed=2), "38-53", (DAY + 15 * H, DAY + 19 * H)
    )
    (folder / "engine-a.log").write_bytes(b"\n".join(a) + b"\n")
    (folder / "engine-b.log").write_bytes(b"\n".join(b) + b"\n")
    stamp = datetime.fromtimestamp(DAY, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    (folder / "supervisord.log").write_text(
        f"{stamp},100 INFO supervisord started with pid 3426001\n"
        + "".join(
            f"{stamp},{200 + n} INFO spawned: '{p}' with pid {3426010 + n}\n"
            for n, p in enumerate(("rag-proxy", "strata-a", "strata-b"))
        )
    )
    text = (
        f'[agent]\nstate_dir = "{folder}"\n[exporters.prometheus]\nenabled = false\n[exporters.store]\nenabled = true\n'
    )
    for name, instance, lane in (("engine-a", "strata-a", "fast"), ("engine-b", "strata-b", "normal")):
        text += (
            f'[sources.{name}]\nkind = "engine_log"\npath = "{folder / name}.log"\ninstance = "{instance}"\n'
            f'lane = "{lane}"\n'
        )
    text += f'[sources.supervisord]\nkind = "supervisord_log"\npath = "{folder / "supervisord.log"}"\ntz = "UTC"\n'
    (folder / "spyglass.toml").write_text(text)
    return folder / "spyglass.toml"


def measure(config: Path, step: float) -> dict:
    """In a fresh process: backfill alone, then the backtest (which backfills again)."""
    from spyglass.alerting.backfill import OPENMETRICS_FILE, replay
    from spyglass.alerting.backtest import backtest
    from spyglass.config import load_config

    cfg = load_config(config)
    started = time.perf_counter()
    filled = replay(cfg, DAY, DAY + 24 * H, step, config.parent / "backfill" / OPENMETRICS_FILE)
    backfill_s = time.perf_counter() - started
    started = time.perf_counter()
    result = backtest(cfg, DAY + 2 * H, DAY + 24 * H, HERE.parent / "alerts", step=step, lookback=2 * H)
    backtest_s = time.perf_counter() - started
    return {
        "events": filled.events,
        "samples": filled.samples,
        "times": filled.times,
        "om_bytes": filled.path.stat().st_size,
        "backfill_seconds": round(backfill_s, 2),
        "backtest_seconds": round(backtest_s, 2),
        "phases": {k: round(v, 2) for k, v in result.seconds.items()},
        "firings": sorted({f.alert for f in result.alerts}),
        "cpu_seconds": round(
            sum(sum(resource.getrusage(who)[:2]) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)), 1
        ),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "peak_child_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=HERE / "out" / "backtest")
    parser.add_argument("--step", default="15s")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    from spyglass.alerting.backfill import parse_duration

    if args.measure:
        print(json.dumps(measure(args.measure, parse_duration(args.step))))
        return
    import shutil

    shutil.rmtree(args.out, ignore_errors=True)
    started = time.perf_counter()
    config = write_day(args.out)
    generated = time.perf_counter() - started
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", "ingest", "--config", str(config)], check=True, capture_output=True
    )
    ingested = time.perf_counter() - started
    child = subprocess.run(
        [sys.executable, __file__, "--measure", str(config), "--step", args.step],
        check=True,
        capture_output=True,
        text=True,
    )
    result = {
        "generate_seconds": round(generated, 2),
        "ingest_seconds": round(ingested, 2),
        **json.loads(child.stdout.splitlines()[-1]),
    }
    (args.out / "results.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
