"""spyglass benchmark: throughput against mtail and a bare read loop, memory, live latency.

    .venv/bin/python bench/run.py [--lines 2000000] [--samples 200]

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
from engine.emulator import logsynth  # noqa: E402
from spyglass.config import engine_log_toml  # noqa: E402


def timed(cmd: list[str], **kwargs) -> tuple[float, int, str]:
    """Wall seconds, max RSS in KiB, and stdout of one child process."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    out = proc.stdout.read().decode()
    err = proc.stderr.read().decode()
    proc.stdout.close()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{cmd[0]} failed: {err[-2000:]}")
    return elapsed, usage.ru_maxrss, out


def config(folder: Path, log: Path, store: bool, listen: str | None = None) -> Path:
    name = "store" if store else "metrics"
    shutil.rmtree(folder / f"state-{name}", ignore_errors=True)
    path = folder / f"spyglass-{name}.toml"
    path.write_text(engine_log_toml(log, folder / f"state-{name}", store=store, listen=listen))
    return path


def bare_loop(log: Path) -> tuple[float, int, str]:
    code = f"n = 0\nfor line in open({str(log)!r}, 'rb'):\n    n += 1\nprint(n)"
    return timed([sys.executable, "-c", code])


def ingest(log: Path, store: bool) -> tuple[float, int, str]:
    return timed([sys.executable, "-m", "spyglass.cli", "ingest", "-c", str(config(OUT, log, store))])


def mtail(log: Path) -> tuple[float, int, str] | None:
    if not shutil.which("mtail"):
        return None
    return timed(["mtail", "--one_shot", "--address", "127.0.0.1", "--port", "0", "--progs",
                  str(HERE / "mtail"), "--logs", str(log), "--logtostderr"])


def live_latency(samples: int) -> list[float]:
    """Seconds from appending an evict line to seeing its evictions= value on /metrics."""
    folder = OUT / "live"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    log = folder / "engine.log"
    log.write_bytes(b"")
    port = 19470
    proc = subprocess.Popen([sys.executable, "-m", "spyglass.cli", "run", "-c",
                             str(config(folder, log, True, f"127.0.0.1:{port}"))],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    log, small = OUT / f"engine-{args.lines}.log", OUT / "engine-200000.log"
    for path, n in ((log, args.lines), (small, 200_000)):
        if not path.exists():
            generate(path, n)
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    with open(log, "rb") as counted:
        lines = sum(1 for _ in counted)

    rows = {"bare Python read loop": bare_loop(log),
            "spyglass ingest, metrics only": ingest(log, store=False),
            "spyglass ingest, with DuckDB store": ingest(log, store=True)}
    measured_mtail = mtail(log)
    if measured_mtail:
        rows["mtail --one_shot (Debian 3.0.0~rc50)"] = measured_mtail
    small_rss = ingest(small, store=False)[1]
    latencies = sorted(live_latency(args.samples))

    base = rows.get("mtail --one_shot (Debian 3.0.0~rc50)")
    results = {"lines": lines, "bytes": log.stat().st_size, "rows": {}, "rss_kib_200k_lines_metrics_only": small_rss,
               "latency_ms": {"p50": statistics.median(latencies) * 1000,
                              "p99": latencies[int(0.99 * (len(latencies) - 1))] * 1000,
                              "max": latencies[-1] * 1000, "samples": len(latencies)}}
    print(f"{lines} lines, {log.stat().st_size / lines:.0f} B/line\n")
    print("| run | wall s | lines/s | x mtail | max RSS MiB |\n|---|---|---|---|---|")
    for name, (seconds, rss, _) in rows.items():
        ratio = f"{base[0] / seconds:.2f}" if base else "n/a"
        results["rows"][name] = {"seconds": seconds, "lines_per_second": lines / seconds, "rss_kib": rss,
                                 "x_mtail": base[0] / seconds if base else None}
        print(f"| {name} | {seconds:.2f} | {lines / seconds:,.0f} | {ratio} | {rss / 1024:.0f} |")
    if not base:
        print("(mtail not installed: apt-get install mtail)")
    metrics_rss = rows["spyglass ingest, metrics only"][1]
    print(f"\nmax RSS, metrics only: {small_rss / 1024:.0f} MiB at 200k lines, {metrics_rss / 1024:.0f} MiB at"
          f" {lines} lines")
    lat = results["latency_ms"]
    print(f"append -> /metrics: p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms, max {lat['max']:.1f} ms"
          f" ({lat['samples']} samples)")
    (OUT / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
