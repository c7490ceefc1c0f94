"""The agent's CPU against llama-server's own while it serves: one real llama-server (the cached build, the
tiny model, `-np 2 --cache-ram 1`), the spyglass agent reading its log (llama_server preset) and polling its
/metrics every second, and the load driver's conversations for `--seconds`. CPU seconds of each process
are read from /proc before and after the load, in the same run.

    .venv/bin/python -m bench.llama_serve --seconds 60
    .venv/bin/python -m bench.llama_serve --seconds 0 --idle-seconds 60 --py-spy   # idle only, profiled

With `--py-spy`, the idle window is also sampled by py-spy (bench/pyspy.py) and its summary printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import tomli_w

from bench.pyspy import Profile
from spyglass.engine.llama.build import ensure_built
from spyglass.engine.llama.load import LlamaDriver
from spyglass.engine.llama.model import ensure_model
from spyglass.engine.llama.stack import Instance
from spyglass.ports import free_port

OUT = Path(__file__).resolve().parent / "out"


def report_idle(args: argparse.Namespace, idle: tuple[float, float]) -> None:
    print(
        f"idle {args.idle_seconds:.0f} s, poll every {args.interval:g} s, store {'off' if args.no_store else 'on'},"
        f" load average {os.getloadavg()[0]:.1f}: llama-server {100 * idle[0] / args.idle_seconds:.2f}% of a core,"
        f" agent {100 * idle[1] / args.idle_seconds:.2f}% of a core"
    )


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(url)


async def load(url: str, seconds: float) -> int:
    driver = LlamaDriver(url, concurrency=2, deadline_seconds=seconds, n_predict=16)
    round_ = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        await driver.conversations([f"r{round_}-{i}" for i in range(6)], 4, 600)
        round_ += 1
    return len(driver.statuses)  # made in the loop asyncio.run(load(...)) runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="first, the same with no load")
    parser.add_argument("--interval", type=float, default=1.0, help="the agent's poll interval of llama-server")
    parser.add_argument("--no-store", action="store_true", help="the agent with its store off")
    parser.add_argument("--py-spy", action="store_true", help="profile the agent during the idle window")
    args = parser.parse_args()
    build, model = ensure_built(), ensure_model()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        log = folder / "llama.log"
        inst = Instance("llama-bench", free_port(), model, slots=2, cache_ram_mib=1)
        server = subprocess.Popen(
            inst.argv(build, log), env=build.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder
        )
        listen = f"127.0.0.1:{free_port()}"
        config = folder / "spyglass.toml"
        config.write_text(
            tomli_w.dumps(
                {
                    "agent": {"state_dir": str(folder / "state")},
                    "exporters": {"prometheus": {"listen": listen}, "store": {"enabled": not args.no_store}},
                    "sources": {
                        "engine": {
                            "kind": "engine_log",
                            "preset": "llama_server",
                            "path": str(log),
                            "instance": "llama-bench",
                        },
                        "metrics": {
                            "kind": "llama_server",
                            "url": f"http://127.0.0.1:{inst.port}",
                            "instance": "llama-bench",
                            "interval_seconds": args.interval,
                        },
                    },
                }
            )
        )
        try:
            wait(f"http://127.0.0.1:{inst.port}/health")
            agent = subprocess.Popen(
                [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                wait(f"http://{listen}/health")
                time.sleep(2.0)  # start-up is not what is measured
                profile = Profile(agent.pid, OUT / "llama_idle.pyspy") if args.py_spy else contextlib.nullcontext()
                with profile:
                    idle_before = cpu_seconds(server.pid), cpu_seconds(agent.pid)
                    time.sleep(args.idle_seconds)  # the idle cost: polls, commits, nothing to read
                    idle = cpu_seconds(server.pid) - idle_before[0], cpu_seconds(agent.pid) - idle_before[1]
                if isinstance(profile, Profile):
                    print(profile.summary())
                if args.seconds <= 0:
                    return report_idle(args, idle)
                before = cpu_seconds(server.pid), cpu_seconds(agent.pid)
                started = time.monotonic()
                requests = asyncio.run(load(f"http://127.0.0.1:{inst.port}", args.seconds))
                time.sleep(2.0)  # the agent's last read and commit of the load's lines (it polls every 0.25 s)
                wall = time.monotonic() - started
                engine, spyglass = cpu_seconds(server.pid) - before[0], cpu_seconds(agent.pid) - before[1]
                lines = sum(1 for _ in log.open("rb"))
            finally:
                agent.send_signal(signal.SIGTERM)
                agent.wait(timeout=60)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
    print(f"idle {args.idle_seconds:.0f} s: llama-server {idle[0]:.2f} CPU-s, agent {idle[1]:.2f} CPU-s")
    print(
        f"{requests} requests in {wall:.0f} s, {lines} log lines; llama-server {engine:.1f} CPU-s, "
        f"agent {spyglass:.2f} CPU-s: agent/engine = {spyglass / engine:.3f}"
    )


if __name__ == "__main__":
    main()
