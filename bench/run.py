"""spyglass benchmark: throughput against mtail and a bare read loop, memory, live latency.

    .venv/bin/python bench/run.py [--lines 2000000] [--rounds 2] [--samples 0] [--only 'with the store']

Everything is measured in one run on one file, and the comparisons are ratios (these machines
are noisy). Needs Debian's mtail for the mtail row (`apt-get install mtail`); without it that row
says so. Results go to bench/out/results.json and are printed as the table in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
sys.path.insert(0, str(HERE.parent))

from bench.gen_log import generate  # noqa: E402
from spyglass.config import engine_log_toml  # noqa: E402
from spyglass.engine.emulator import logsynth  # noqa: E402
from spyglass.ports import free_port  # noqa: E402


def timed(cmd: list[str], **kwargs) -> tuple[float, int, str, float]:
    """Wall seconds, max RSS in KiB, stdout and CPU seconds (user + system) of one child process."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    assert proc.stdout is not None and proc.stderr is not None  # both piped above
    out = proc.stdout.read().decode()
    err = proc.stderr.read().decode()
    proc.stdout.close()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{cmd[0]} failed: {err[-2000:]}")
    return elapsed, usage.ru_maxrss, out, usage.ru_utime + usage.ru_stime


def config(folder: Path, log: Path, store: bool, listen: str | None = None, source: str = "") -> Path:
    name = ("store" if store else "metrics") + source.replace(" ", "").replace('"', "").replace("=", "-")
    shutil.rmtree(folder / f"state-{name}", ignore_errors=True)
    path = folder / f"spyglass-{name}.toml"
    path.write_text(engine_log_toml(log, folder / f"state-{name}", store=store, listen=listen) + source + "\n")
    return path


def bare_loop(log: Path) -> tuple[float, int, str, float]:
    code = f"n = 0\nfor line in open({str(log)!r}, 'rb'):\n    n += 1\nprint(n)"
    return timed([sys.executable, "-c", code])


def ingest(log: Path, store: bool, source: str = "") -> tuple[float, int, str, float]:
    """`spyglass ingest`; `source` adds keys to the engine source (its section is the last)."""
    return timed(
        [sys.executable, "-m", "spyglass.cli.app", "ingest", "-c", str(config(OUT, log, store, source=source))]
    )


def mtail(log: Path) -> tuple[float, int, str, float] | None:
    if not shutil.which("mtail"):
        return None
    return timed(
        [
            "mtail",
            "--one_shot",
            "--address",
            "127.0.0.1",
            "--port",
            "0",
            "--progs",
            str(HERE / "mtail"),
            "--logs",
            str(log),
            "--logtostderr",
        ]
    )


def live_latency(samples: int) -> list[float]:
    """Seconds from appending an evict line to seeing its evictions= value on /metrics."""
    folder = OUT / "live"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    log = folder / "engine.log"
    log.write_bytes(b"")
    port = free_port()  # two benchmark runs must not collide
    proc = subprocess.Popen(
        [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config(folder, log, True, f"127.0.0.1:{port}"))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None  # piped above
    for line in proc.stderr:
        if "metrics at" in line:
            break
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    url = f"http://127.0.0.1:{port}/metrics"
    key = 'spyglass_engine_evictions_total{instance="strata-b",lane="normal"} '
    latencies = []
    with httpx.Client() as client, open(log, "ab", buffering=0) as out:
        for n in range(1, samples + 1):
            started = time.perf_counter()
            out.write(logsynth.line(time.time(), *logsynth.evict("ab", 1, 0, 0, 8 << 30, n)) + b"\n")
            while f"{key}{float(n)}" not in client.get(url).text:
                pass
            latencies.append(time.perf_counter() - started)
    proc.terminate()
    proc.wait(30)
    return latencies


MTAIL = "mtail --one_shot (Debian 3.0.0~rc50)"
RUNS = {  # name -> (store, extra keys of the engine source)
    "spyglass ingest, metrics only, per line": (False, 'columnar = "never"'),
    "spyglass ingest, metrics only, columnar, 1 thread": (False, ""),
    "spyglass ingest, metrics only, columnar, 2 threads": (False, "columnar_threads = 2"),
    "spyglass ingest, with the store, per line": (True, 'columnar = "never"'),
    "spyglass ingest, with the store, columnar, 1 thread": (True, ""),
    "spyglass ingest, with the store, columnar, 2 threads": (True, "columnar_threads = 2"),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds: every run once per round")
    parser.add_argument("--samples", type=int, default=0, help="single-line latency samples (0: skip)")
    parser.add_argument("--only", default="", help="run only the spyglass rows whose name holds this text")
    args = parser.parse_args()
    runs = {name: run for name, run in RUNS.items() if args.only in name}
    OUT.mkdir(exist_ok=True)
    log, small = OUT / f"engine-{args.lines}.log", OUT / "engine-200000.log"
    for path, n in ((log, args.lines), (small, 200_000)):
        if not path.exists():
            generate(path, n)
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    with open(log, "rb") as counted:
        lines = sum(1 for _ in counted)
    load_before = os.getloadavg()

    measured: dict[str, list[tuple[float, int, str, float]]] = {}
    for _ in range(args.rounds):  # interleaved: a drift of the machine's load hits every run alike
        measured.setdefault("bare Python read loop", []).append(bare_loop(log))
        found = mtail(log)
        if found:
            measured.setdefault(MTAIL, []).append(found)
        for name, (store, source) in runs.items():
            measured.setdefault(name, []).append(ingest(log, store, source))
    small_rss = ingest(small, store=False)[1]
    load_after = os.getloadavg()
    rows = {name: min(runs, key=lambda run: run[3]) for name, runs in measured.items()}  # the least disturbed
    base = rows.get(MTAIL)
    results = {
        "lines": lines,
        "bytes": log.stat().st_size,
        "rounds": args.rounds,
        "rows": {},
        "load_average_before": load_before,
        "load_average_after": load_after,
        "rss_kib_200k_lines_metrics_only": small_rss,
    }
    print(
        f"{lines} lines, {log.stat().st_size / lines:.0f} B/line; load average {load_before[0]:.1f} before,"
        f" {load_after[0]:.1f} after; best of {args.rounds} interleaved rounds by CPU\n"
    )
    print(
        "| run | wall s | lines/s | × mtail wall | CPU s per M lines | × mtail per CPU-second | max RSS MiB |\n"
        "|---|---|---|---|---|---|---|"
    )
    for name, (seconds, rss, _, cpu) in rows.items():
        per_m = cpu / lines * 1e6
        wall_x = f"{base[0] / seconds:.2f}" if base else "n/a"
        cpu_x = f"{base[3] / cpu:.2f}" if base else "n/a"
        results["rows"][name] = {
            "seconds": seconds,
            "lines_per_second": lines / seconds,
            "rss_kib": rss,
            "cpu_seconds": cpu,
            "cpu_seconds_per_million_lines": per_m,
            "x_mtail_wall": base[0] / seconds if base else None,
            "x_mtail_per_cpu_second": base[3] / cpu if base else None,
            "all_runs": [{"seconds": r[0], "cpu_seconds": r[3]} for r in measured[name]],
        }
        print(
            f"| {name} | {seconds:.2f} | {lines / seconds:,.0f} | {wall_x} | {per_m:.2f} | {cpu_x} | {rss / 1024:.0f} |"
        )
    if not base:
        print("(mtail not installed: apt-get install mtail)")
    print(f"\nmax RSS, metrics only: {small_rss / 1024:.0f} MiB at 200k lines")
    if args.samples:
        latencies = sorted(live_latency(args.samples))
        results["latency_ms"] = {
            "p50": statistics.median(latencies) * 1000,
            "p99": latencies[int(0.99 * (len(latencies) - 1))] * 1000,
            "max": latencies[-1] * 1000,
            "samples": len(latencies),
        }
        lat = results["latency_ms"]
        print(
            f"append -> /metrics: p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms, max {lat['max']:.1f} ms"
            f" ({lat['samples']} samples)"
        )
    (OUT / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
