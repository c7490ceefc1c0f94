"""`spyglass demo`: a live engine log with an eviction storm, and the agent running on it.

Needs nothing outside this process: the log is written by engine.logsynth into a temp folder,
the agent tails it into DuckDB and serves /metrics on 127.0.0.1.
"""
from __future__ import annotations

import shutil
import tempfile
import threading
import time
import tomllib
from pathlib import Path

from rich.console import Console

from engine.logsynth import EngineModel
from spyglass.agent import Agent
from spyglass.config import engine_log_toml, parse_config


def write_log(path: Path, stop: threading.Event, pace_seconds: float = 0.4) -> None:
    """Append engine lines until `stop`: one request turn per `pace_seconds`, stats every 10 s."""
    model = EngineModel(time_scale=0.002, seed=int(time.time()))
    last_stats = 0.0
    with open(path, "ab", buffering=0) as log:
        log.write(b"\n".join(model.start_lines(time.time())) + b"\n")
        while not stop.wait(pace_seconds):
            now = time.time()
            lines = [model.noise(now)] + model.turn(now)
            if now - last_stats >= 10:
                lines.append(model.stats_line(now))
                last_stats = now
            log.write(b"\n".join(lines) + b"\n")


def demo_config(folder: Path, listen: str) -> dict:
    log = folder / "strata-iq3_xxs-b.log"
    return tomllib.loads(engine_log_toml(log, folder / "state", listen=listen, host="demo"))


def summary(agent: Agent) -> str:
    state = agent.pipeline.state
    with state.lock:
        values = state.values
        key = ("strata-b", "normal")
        evictions = values["spyglass_engine_evictions_total"].get(key, 0)
        used = values["spyglass_engine_cache_used_bytes"].get(key, 0)
        long_total = values["spyglass_engine_long_prompts_total"].get(key, 0)
        ckpt_only = values["spyglass_engine_long_prompts_checkpoint_only_total"].get(key, 0)
        lines = sum(v for (src, _), v in values["spyglass_source_lines_total"].items() if src == "engine-b")
    return (f"lines {lines:>6.0f}  evictions {evictions:>4.0f}  parked {used / 2**30:4.1f}/8 GiB"
            f"  ckpt-only {ckpt_only:.0f}/{long_total:.0f} long")


def run_demo(seconds: float = 0.0, listen: str = "127.0.0.1:9464") -> None:
    console = Console()
    folder = Path(tempfile.mkdtemp(prefix="spyglass-demo-"))
    stop_writer = threading.Event()
    writer = threading.Thread(target=write_log, args=(folder / "strata-iq3_xxs-b.log", stop_writer), daemon=True)
    agent = Agent(parse_config(demo_config(folder, listen), "demo"))
    agent.stop_on_signals()
    runner = threading.Thread(target=agent.serve, name="spyglass-agent")
    writer.start()
    runner.start()
    console.print(f"[bold]spyglass demo[/] - an engine with a conversation cache too small for its snapshots\n"
                  f"  engine log  {folder / 'strata-iq3_xxs-b.log'}\n"
                  f"  metrics     http://{listen}/metrics\n"
                  f"  sources     http://{listen}/debug/sources\n"
                  f"  SQL         curl -s http://{listen}/api/sql -d "
                  "'{\"query\": \"SELECT kind, count(*) FROM events GROUP BY kind\"}'\n"
                  "  Ctrl-C stops it.")
    deadline = time.monotonic() + seconds if seconds else None
    try:
        while runner.is_alive() and (deadline is None or time.monotonic() < deadline):
            agent.stop.wait(2.0)
            console.print(summary(agent))
    finally:
        agent.stop.set()
        agent.wake.set()
        stop_writer.set()
        runner.join()
        writer.join()
        shutil.rmtree(folder, ignore_errors=True)
