"""The forensic commands as an analyst runs them (a new `spyglass` process each, output to a pipe), on the store
of bench/forensics_bench.py: opening the file themselves (no agent), then answered by a running agent that
serves that store (the warm query path: spyglass/cli/warm.py, POST /api/command), in one run.

    nice .venv/bin/python bench/forensics_bench.py --events 10000000 --build-only   # once
    nice .venv/bin/python bench/warm_commands.py [--runs 5]

The agent runs with the store's config but its sources pointed at empty files (nothing new is stored, as on
an agent whose logs are quiet), on a free port. Each command once to warm (the agent's first query takes
its copy of the store and starts its query process), then the median of `--runs`. Results into
bench/out/warm_commands.json, with the load average before and after (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.forensics_bench import OUT, START, bench_toml  # noqa: E402
from spyglass.config.writing import toml_text  # noqa: E402

SPYGLASS = str(Path(sys.executable).parent / "spyglass")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def quiet_config(port: int) -> Path:
    """The store's config, its logs replaced by empty files and its server on `port`."""
    document = tomllib.loads(bench_toml(OUT))
    empty = OUT / "warm-empty"
    empty.mkdir(exist_ok=True)
    for name, source in document["sources"].items():
        (empty / f"{name}.log").touch()
        source["path"] = str(empty / f"{name}.log")
    document.setdefault("exporters", {})["prometheus"] = {"enabled": True, "listen": f"127.0.0.1:{port}"}
    path = OUT / "warm.toml"
    path.write_text(toml_text(document))
    return path


def commands(config: Path) -> dict[str, list[str]]:
    day = START.replace(day=START.day + 3)  # the middle of the 7 days forensics_bench.py --events 10M stores
    window = ["--from", f"{day:%Y-%m-%d} 14:45", "--to", f"{day:%Y-%m-%d} 15:00"]
    c = ["-c", str(config)]
    return {
        "timeline, 15 min": ["timeline", *c, *window],
        "requests, 15 min": ["requests", *c, *window],
        "report cache, 1 day": ["report", "cache", *c, "--from", f"{day:%Y-%m-%d}", "--to", f"{day:%Y-%m-%d} 23:59:59"],
        "sql SELECT 1": ["sql", *c, "SELECT 1"],
        "diagnose, 1 day": ["diagnose", *c, "--from", f"{day:%Y-%m-%d}", "--to", f"{day:%Y-%m-%d} 23:59:59"],
    }


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run([SPYGLASS, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
    elapsed = (time.perf_counter() - started) * 1000
    # 1: the window holds none (the store has no gateway: `requests` finds none); diagnose: 1 warnings, 2 critical
    if done.returncode not in (0, 1, 2):
        raise SystemExit(f"{argv[0]} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return elapsed


def measure(runs: int, config: Path) -> dict[str, dict[str, int]]:
    out = {}
    for name, argv in commands(config).items():
        first = timed(argv)
        times = [timed(argv) for _ in range(runs)]
        out[name] = {
            "first_ms": round(first),
            "median_ms": round(statistics.median(times)),
            "min_ms": round(min(times)),
        }
        print(f"  {name}: {out[name]}", flush=True)
    return out


def healthy(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET /health HTTP/1.0\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.0 200")
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    port = free_port()
    config = quiet_config(port)
    result: dict = {"load_before": os.getloadavg()}
    print("no agent: each command opens the store", flush=True)
    result["no agent"] = measure(args.runs, config)
    agent = subprocess.Popen([SPYGLASS, "run", "--config", str(config)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not healthy(port):
            if time.monotonic() > deadline or agent.poll() is not None:
                raise SystemExit("the agent did not serve")
            time.sleep(0.2)
        print("a running agent answers", flush=True)
        result["agent"] = measure(args.runs, config)
    finally:
        agent.terminate()
        agent.wait(timeout=60)
    result["load_after"] = os.getloadavg()
    (HERE / "out" / "warm_commands.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
