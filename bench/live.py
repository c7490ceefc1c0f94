"""The live benchmark: a writer appends engine-log lines; spyglass `run` (store on, and metrics
only) and mtail tail the same file at the same time; CPU of each, and append -> /metrics latency.

    .venv/bin/python bench/live.py [--rate 2000] [--seconds 30] [--latency-seconds 15]

Phase 0 (idle): CPU of each for `--idle-seconds` with nothing written. Phase 1 (CPU): the writer
appends `--rate` lines a second (20 per write, every 10 ms, from the
benchmark's generated log: one line in four an event) for `--seconds`; every process is scraped
every 5 s, as Prometheus would; CPU is user + system time from /proc over the window. Phase 2
(latency): the same writer for `--latency-seconds` while each spyglass /metrics is scraped 20
times a second; the latency of a write is the time until `spyglass_source_lines_total` counts
its lines (so it includes up to 50 ms of scrape spacing). Results go to bench/out/live.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
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
from bench.pyspy import Profile  # noqa: E402
from spyglass.config import engine_log_toml  # noqa: E402
from spyglass.ports import free_port  # noqa: E402

LINES_SERIES = re.compile(rb'^spyglass_source_lines_total\{[^}]*source="engine-b"[^}]*\} (\S+)$', re.M)
TICKS = os.sysconf("SC_CLK_TCK")


def max_rss_mib(pid: int) -> float:
    """VmHWM: the process's peak resident set so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


class Process:
    def __init__(self, name: str, cmd: list[str], url: str) -> None:
        self.name, self.url = name, url
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_ready(self, client: httpx.Client, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                if client.get(self.url).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}")
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def spyglass(folder: Path, log: Path, store: bool, coalesce_seconds: float | None = None, agent: str = "") -> Process:
    """`spyglass run` on `log`; `agent` ("key=value, ...") sets [agent] keys, and names the process by them."""
    name = ("store" if store else "metrics") + ("-" + agent.replace(" ", "").replace(",", "-") if agent else "")
    port = free_port()
    config = folder / f"spyglass-{name}.toml"
    text = engine_log_toml(log, folder / f"state-{name}", store=store, listen=f"127.0.0.1:{port}")
    if coalesce_seconds is not None:  # agent.coalesce_seconds instead of its default
        text = text.replace("[agent]\n", f"[agent]\ncoalesce_seconds = {coalesce_seconds}\n", 1)
    for setting in filter(None, (part.strip() for part in agent.split(","))):
        text = text.replace("[agent]\n", f"[agent]\n{setting.replace('=', ' = ', 1)}\n", 1)
    config.write_text(text)
    return Process(
        f"spyglass run, {'with the store' if store else 'metrics only'}{f' ({agent})' if agent else ''}",
        [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)],
        f"http://127.0.0.1:{port}/metrics",
    )


def mtail(log: Path) -> Process | None:
    if not shutil.which("mtail"):
        return None
    port = free_port()
    return Process(
        "mtail (Debian 3.0.0~rc50)",
        [
            "mtail",
            "--progs",
            str(HERE / "mtail"),
            "--logs",
            str(log),
            "--address",
            "127.0.0.1",
            "--port",
            str(port),
            "--logtostderr",
        ],
        f"http://127.0.0.1:{port}/metrics",
    )


class Writer(threading.Thread):
    """Appends `rate` lines a second in writes of 20 lines; records (time, lines written so far)."""

    def __init__(self, log: Path, source: list[bytes], rate: int, seconds: float) -> None:
        super().__init__(daemon=True)
        self.log, self.source, self.rate, self.seconds = log, source, rate, seconds
        self.writes: list[tuple[float, int]] = []
        self.written = 0

    def run(self) -> None:
        per_write = 20
        period = per_write / self.rate
        started = time.monotonic()
        with open(self.log, "ab", buffering=0) as out:
            while time.monotonic() < started + self.seconds:
                i = self.written % (len(self.source) - per_write)
                out.write(b"".join(self.source[i : i + per_write]))
                self.written += per_write
                self.writes.append((time.monotonic(), self.written))
                next_at = started + len(self.writes) * period
                time.sleep(max(0.0, next_at - time.monotonic()))


def lines_counted(client: httpx.Client, url: str) -> int:
    return int(sum(float(v) for v in LINES_SERIES.findall(client.get(url).content)))


def idle_phase(processes: list[Process], seconds: float) -> dict[str, float]:
    """CPU while nothing is written (and nothing scrapes)."""
    before = {p.name: cpu_seconds(p.proc.pid) for p in processes}
    time.sleep(seconds)
    return {p.name: 100 * (cpu_seconds(p.proc.pid) - before[p.name]) / seconds for p in processes}


def cpu_phase(processes: list[Process], client: httpx.Client, writer: Writer) -> dict[str, float]:
    before = {p.name: cpu_seconds(p.proc.pid) for p in processes}
    started = time.monotonic()
    writer.start()
    while writer.is_alive():
        writer.join(5)
        for p in processes:
            client.get(p.url)  # a Prometheus-like scrape
    elapsed = time.monotonic() - started
    return {p.name: 100 * (cpu_seconds(p.proc.pid) - before[p.name]) / elapsed for p in processes}


def caught_up(processes: list[Process], client: httpx.Client, lines: int, deadline: float) -> None:
    """Wait until every process's /metrics counts `lines` lines."""
    while any(lines_counted(client, p.url) < lines for p in processes):
        if time.monotonic() > deadline:
            raise RuntimeError("spyglass did not catch up with the writer")
        time.sleep(0.1)


def latency_phase(
    processes: list[Process], client: httpx.Client, writer: Writer, before: int
) -> dict[str, list[float]]:
    seen: dict[str, list[tuple[float, int]]] = {p.name: [] for p in processes}
    caught_up(processes, client, before, time.monotonic() + 60)
    base = {p.name: before for p in processes}
    writer.start()
    while writer.is_alive() or any(seen[p.name][-1][1] - base[p.name] < writer.written for p in processes):
        for p in processes:
            seen[p.name].append((time.monotonic(), lines_counted(client, p.url)))
        time.sleep(0.05)
    latencies = {}
    for p in processes:
        scrapes, out, j = seen[p.name], [], 0
        for t, n in writer.writes:
            while scrapes[j][1] - base[p.name] < n:
                j += 1
            out.append(max(0.0, scrapes[j][0] - t))
        latencies[p.name] = sorted(out)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--latency-seconds", type=float, default=15)
    parser.add_argument("--idle-seconds", type=float, default=10)
    parser.add_argument(
        "--events-only",
        action="store_true",
        help="write only the log's event lines (no debug lines): every line an event",
    )
    parser.add_argument("--no-metrics-only", action="store_true", help="leave out the metrics-only agent")
    parser.add_argument("--py-spy", action="store_true", help="profile the agent with the store in the CPU window")
    parser.add_argument(
        "--coalesce-seconds",
        type=float,
        default=None,
        help="agent.coalesce_seconds of both agents (default: the config's default)",
    )
    parser.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="KEY=VALUE,...",
        help="one more agent with the store, these [agent] settings (e.g. commit_interval_seconds=5); repeatable",
    )
    args = parser.parse_args()
    folder = OUT / "live-run"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    source_log = OUT / "engine-200000.log"
    if not source_log.exists():
        generate(source_log, 200_000)
    source = source_log.read_bytes().splitlines(keepends=True)
    if args.events_only:
        source = [line for line in source if line[23:26] != b" D "]
    log = folder / "engine.log"
    log.write_bytes(b"")

    ours = [spyglass(folder, log, True, args.coalesce_seconds)]
    ours += [spyglass(folder, log, True, args.coalesce_seconds, agent) for agent in args.also]
    if not args.no_metrics_only:
        ours.append(spyglass(folder, log, False, args.coalesce_seconds))
    theirs = mtail(log)
    everyone = ours + ([theirs] if theirs else [])
    try:
        with httpx.Client(timeout=10) as client:
            for p in everyone:
                p.wait_ready(client, time.monotonic() + 60)
            time.sleep(2)  # start-up is not what is measured
            idle = idle_phase(everyone, args.idle_seconds)
            loaded = Writer(log, source, args.rate, args.seconds)
            profile = Profile(ours[0].proc.pid, OUT / "live.pyspy") if args.py_spy else contextlib.nullcontext()
            with profile:
                cpu = cpu_phase(everyone, client, loaded)
            if isinstance(profile, Profile):
                print(profile.summary())
            rss = {p.name: max_rss_mib(p.proc.pid) for p in everyone}
            latencies = latency_phase(
                ours, client, Writer(log, source, args.rate, args.latency_seconds), loaded.written
            )
    finally:
        for p in everyone:
            p.stop()
    report(args, cpu, latencies, theirs.name if theirs else None, idle)
    print(f"load average {os.getloadavg()[0]:.1f}; peak RSS MiB: " + ", ".join(f"{k} {v:.0f}" for k, v in rss.items()))


def report(
    args, cpu: dict[str, float], latencies: dict[str, list[float]], base: str | None, idle: dict[str, float]
) -> None:
    results = {
        "rate": args.rate,
        "seconds": args.seconds,
        "cpu_percent": cpu,
        "idle_cpu_percent": idle,
        "latency_ms": {},
    }
    print(f"{args.rate} lines/s for {args.seconds:.0f} s\n")
    print(
        "| process | CPU % of a core | x mtail | idle CPU % | append -> /metrics p50 ms | p99 ms |\n"
        "|---|---|---|---|---|---|"
    )
    for name, percent in cpu.items():
        ratio = f"{percent / cpu[base]:.1f}" if base and cpu[base] else "n/a"
        lat = latencies.get(name)
        p50 = p99 = None
        if lat:
            p50, p99 = statistics.median(lat) * 1000, lat[int(0.99 * (len(lat) - 1))] * 1000
            results["latency_ms"][name] = {"p50": p50, "p99": p99, "max": lat[-1] * 1000, "samples": len(lat)}
        cells = f"{p50:.0f} | {p99:.0f}" if lat else "- | -"
        print(f"| {name} | {percent:.1f} | {ratio} | {idle[name]:.2f} | {cells} |")
    if not base:
        print("(mtail not installed: apt-get install mtail)")
    (OUT / "live.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
