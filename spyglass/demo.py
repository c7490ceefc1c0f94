"""`spyglass demo`: the emulated Strata stack under supervisord, a mix of incident scenarios driving
it, and the agent on every source of it, with a live summary of the signals that moved.

Needs nothing outside this machine: the stack runs on 127.0.0.1 from a temp folder, the agent
serves /metrics and /api/sql and writes its DuckDB store there; Ctrl-C stops and removes it all.
"""
from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
import threading
import time
import tomllib
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from engine.emulator.scenarios import SCENARIOS, run_scenario
from engine.emulator.stack import Stack, free_port_base
from spyglass.agent import Agent
from spyglass.config import parse_config

# strata-b gets the seed's troubles: a cache too small for its snapshots, an old serve build.
DEMO_ENGINES = {"strata-a": {"cache_mib": 65_536},
                "strata-b": {"escape_fix": False, "serve_version": "2026.10.16"}}
MIX = ("healthy", "eviction-storm", "special-tokens", "plan-then-eos", "assembly-drop", "token-count")
SIGNALS = [  # (what the on-call engineer reads, metric, labels)
    ("evictions, strata-b (engine's own counter)", "spyglass_engine_evictions_total", {"instance": "strata-b"}),
    ("long prompts restored only from a checkpoint", "spyglass_engine_long_prompts_checkpoint_only_total", {}),
    ("thinking-only responses with special tokens", "spyglass_infer_thinking_only_total", {"special_tokens": "yes"}),
    ("plan, then EOS", "spyglass_infer_plan_then_stop_total", {}),
    ("task anchor dropped by assembly", "spyglass_infer_anchor_lost_total", {}),
    ("overfit 400s at the gateway", "spyglass_gateway_overfits_total", {}),
    ("blind retries after an overfit", "spyglass_gateway_blind_retries_total", {}),
    ("unexpected process exits (supervisord)", "spyglass_supervisord_exits_total", {"expected": "false"}),
    ("programs that gave up (FATAL)", "spyglass_supervisord_fatal_total", {}),
    ("engines still loading", "spyglass_serve_state", {"state": "loading"}),
    ("compute-graph rebuilds", "spyglass_engine_graph_rebuilds_total", {}),
    ("CPUs the two engines share", "spyglass_engine_shared_cpus", {"instance": "strata-a"}),
    ("requests answered by the gateway", "spyglass_gateway_requests_total", {}),
]


def drive_mix(url: str, stop: threading.Event, mix: tuple[str, ...] = MIX) -> None:
    """Run the scenario mix round after round until `stop`."""
    for name in itertools.cycle(mix):
        if stop.is_set():
            return
        asyncio.run(run_scenario(SCENARIOS[name], url, deadline_seconds=30))


def signal_values(agent: Agent) -> list[tuple[str, float]]:
    state = agent.pipeline.state
    with state.lock:
        return [(label, state.total(metric, **labels)) for label, metric, labels in SIGNALS]


def summary_table(agent: Agent) -> Table:
    table = Table("signal", "value", title="spyglass demo: incident signals")
    for label, value in signal_values(agent):
        table.add_row(label, f"[bold red]{value:.0f}[/]" if value else "0")
    return table


def run_demo(seconds: float = 0.0, listen: str = "127.0.0.1:9464", scenario: str | None = None) -> None:
    """The mix on a troubled stack, or one scenario (`scenario`) on the stack it describes."""
    console = Console()
    if scenario is not None and scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; one of {', '.join(sorted(SCENARIOS))}")
    folder = Path(tempfile.mkdtemp(prefix="spyglass-demo-"))
    traced = {"otlp_endpoint": f"http://{listen}"}  # the stack pushes its spans to the agent
    chosen = SCENARIOS[scenario] if scenario else None
    engines_patch = dict(chosen.engine_patch) if chosen else DEMO_ENGINES
    gateway_patch = dict(chosen.gateway_patch) if chosen else {"assembly_budget_chars": 20_000}
    stack = Stack(folder / "stack", free_port_base(),
                  {name: {**engines_patch.get(name, {}), **traced} for name in ("strata-a", "strata-b")},
                  {**gateway_patch, **traced}, set(chosen.crash_loop) if chosen else set())
    mix = (scenario,) if scenario else MIX
    toml = stack.spyglass_toml(folder / "spyglass").replace("[exporters.prometheus]\nenabled = false",
                                                              f'[exporters.prometheus]\nlisten = "{listen}"')
    config_file = folder / "spyglass.toml"
    config_file.write_text(toml)
    agent = Agent(parse_config(tomllib.loads(toml), str(config_file)))
    agent.stop_on_signals()
    stop_driver = threading.Event()
    stack.start()
    try:
        stack.wait_ready(chosen.ready if chosen else ("strata-a", "strata-b"))
        runner = threading.Thread(target=agent.serve, name="spyglass-agent")
        driver = threading.Thread(target=drive_mix, args=(stack.url, stop_driver, mix), name="load-driver", daemon=True)
        runner.start()
        driver.start()
        console.print(f"[bold]spyglass demo[/]: the emulated Strata stack under supervisord, driven by {', '.join(mix)}\n"
                      f"  metrics     http://{listen}/metrics\n  sources     http://{listen}/debug/sources\n"
                      f"  SQL         curl -s http://{listen}/api/sql -d '{{\"query\": \"SELECT kind, count(*)"
                      f" FROM events GROUP BY ALL\"}}'\n  store       {folder / 'spyglass' / 'spyglass.duckdb'}\n"
                      f"  stack logs  {stack.folder}\n  Ctrl-C stops it.", soft_wrap=True)
        _watch(agent, runner, console, seconds, config_file)
    finally:
        stop_driver.set()
        agent.stop.set()
        agent.wake.set()
        stack.stop()
        console.print(summary_table(agent))
        shutil.rmtree(folder, ignore_errors=True)


def finished_request(agent: Agent) -> str | None:
    """The id of a request that went all the way through, for the `spyglass trace` hint."""
    cursor = agent.pipeline.store.con.cursor()
    try:
        # finished a while ago, so that its spans (batched every 5 s) are in the store too
        row = cursor.execute("SELECT request_id FROM events WHERE source = 'gateway' AND kind = 'done'"
                             " AND ts < now() - INTERVAL 6 SECOND ORDER BY ts DESC LIMIT 1").fetchone()
    finally:
        cursor.close()
    return row[0] if row else None


def _watch(agent: Agent, runner: threading.Thread, console: Console, seconds: float, config: Path) -> None:
    deadline = time.monotonic() + seconds if seconds else None
    hinted = threading.Timer(14.0, lambda: _hint_trace(agent, console, config))
    hinted.daemon = True
    hinted.start()
    running = lambda: runner.is_alive() and (deadline is None or time.monotonic() < deadline)  # noqa: E731
    if console.is_terminal:
        with Live(summary_table(agent), console=console, refresh_per_second=1) as live:
            while running():
                agent.stop.wait(1.0)
                live.update(summary_table(agent))
        return
    while running():
        agent.stop.wait(3.0)
        console.print("  ".join(f"{label.split(' (')[0]}: {value:.0f}" for label, value in signal_values(agent)[:3]))


def _hint_trace(agent: Agent, console: Console, config: Path) -> None:
    request = finished_request(agent)
    if request:
        console.print(f"  one request's trace: .venv/bin/spyglass trace -c {config} {request}", soft_wrap=True)
