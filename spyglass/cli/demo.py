"""`spyglass demo`: the emulated Strata stack under supervisord, a mix of incident scenarios driving
it, and the agent on every source of it, with a live table of the incident signals that marks the
abnormal ones.

Needs nothing outside this machine: the stack runs on 127.0.0.1, the agent serves /metrics and
/api/sql and writes its DuckDB store beside the stack's logs. Ctrl-C (or `seconds`) stops it all;
the folder is removed, or with `keep` left with the logs, the store and the config that reads
them, and the commands to query them are printed.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import signal
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from loguru import logger
from rich.console import Console

from spyglass.agent.runtime import Agent
from spyglass.alerting.heuristics import Deployment, by_id
from spyglass.cli.demo_board import Board, incident_signals
from spyglass.cli.demo_screen import banner, clock_note, finished_request, print_kept, watch
from spyglass.config import parse_config, toml_text
from spyglass.engine.emulator.scenarios import SCENARIOS, run_scenario
from spyglass.engine.emulator.stack import Stack
from spyglass.ports import free_port_base
from spyglass.signals.state import MetricState

# strata-b gets the seed's troubles: a cache too small for its snapshots, an old serve build.
DEMO_ENGINES: dict[str, dict[str, Any]] = {
    "strata-a": {"cache_mib": 65_536},
    "strata-b": {"escape_fix": False, "serve_version": "2026.10.16"},
}
MIX = ("healthy", "eviction-storm", "special-tokens", "plan-then-eos", "assembly-drop", "token-count")


def drive_mix(url: str, stop: threading.Event, mix: tuple[str, ...] = MIX) -> None:
    """Run the scenario mix round after round until `stop`."""
    for name in itertools.cycle(mix):
        if stop.is_set():
            return
        try:
            asyncio.run(run_scenario(SCENARIOS[name], url, deadline_seconds=30))
        except Exception as exc:  # noqa: BLE001 - e.g. the stack stopping under the last requests
            if stop.is_set():
                return
            logger.warning("load driver: scenario {} failed ({!r}); the next one runs", name, exc)


def demo_folder(keep: Path | None) -> Path:
    if keep is None:
        return Path(tempfile.mkdtemp(prefix="spyglass-demo-"))
    keep = keep.expanduser().resolve()
    if keep.exists() and (not keep.is_dir() or any(keep.iterdir())):
        raise ValueError(f"--keep {keep}: not an empty folder; give a new or empty one")
    keep.mkdir(parents=True, exist_ok=True)
    return keep


def remove_made(folder: Path, existed: bool) -> None:
    """Remove the demo's folder, or only its contents when it was there (empty) before the demo."""
    if not existed:
        shutil.rmtree(folder, ignore_errors=True)
        return
    for child in folder.iterdir():
        shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)


def pinned(engines_patch: dict[str, dict[str, Any]], cpus: list[int]) -> dict[str, dict[str, Any]]:
    """The engines pinned to halves of `cpus` (really, with taskset; their start lines name the same CPUs),
    unless a scenario shares cores on purpose or there is one CPU only. Unpinned, two engines may both run
    on every CPU of the machine: the host source measures that as shared CPUs and EngineCPUsShared fires,
    whatever the start lines say. Pinned, the demo's table, the alert and the banners agree."""
    names = ("strata-a", "strata-b")
    if len(cpus) < 2 or any(
        engines_patch.get(n, {}).get("shares_cores") or "affinity" in engines_patch.get(n, {}) for n in names
    ):
        return engines_patch
    half = len(cpus) // 2
    parts = {"strata-a": cpus[:half], "strata-b": cpus[half:]}
    return {
        n: {**engines_patch.get(n, {}), "affinity": parts[n], "cpus": ",".join(map(str, parts[n]))}
        for n in {*engines_patch, *names}
    }


def build_stack(folder: Path, listen: str, scenario: str | None) -> tuple[Stack, dict[str, Any]]:
    """The stack (the mix's troubled one, or the scenario's) and the agent's config document for it."""
    traced = {"otlp_endpoint": f"http://{listen}"}  # the stack pushes its spans to the agent
    chosen = SCENARIOS[scenario] if scenario else None
    engines_patch = pinned(dict(chosen.engine_patch) if chosen else DEMO_ENGINES, sorted(os.sched_getaffinity(0)))
    gateway_patch = dict(chosen.gateway_patch) if chosen else {"assembly_budget_chars": 20_000}
    stack = Stack(
        folder / "stack",
        free_port_base(),
        {name: {**engines_patch.get(name, {}), **traced} for name in ("strata-a", "strata-b")},
        {**gateway_patch, **traced},
        set(chosen.crash_loop) if chosen else set(),
    )
    document = stack.spyglass_config(folder / "spyglass")
    document["exporters"]["prometheus"] = {"listen": listen}
    return stack, document


class CatchUp:
    """An event hook of the pipeline: `done` is set by the first step that began after `arm()`
    and left no file source with unread bytes."""

    def __init__(self, state: MetricState) -> None:
        self.state, self.steps = state, 0
        self.armed_at: int | None = None
        self.done = threading.Event()

    def arm(self) -> None:
        self.armed_at = self.steps

    def __call__(self, _events: list) -> None:
        self.steps += 1
        if self.armed_at is None or self.steps < self.armed_at + 2:
            return
        with self.state.lock:
            if self.state.total("spyglass_source_lag_bytes") == 0:
                self.done.set()


def run_demo(
    seconds: float = 0.0, listen: str = "127.0.0.1:9464", scenario: str | None = None, keep: Path | None = None
) -> None:
    """The mix on a troubled stack, or one scenario (`scenario`) on the stack it describes."""
    console = Console()
    if scenario is not None and scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; one of {', '.join(sorted(SCENARIOS))}")
    existed = keep is not None and keep.expanduser().exists()
    folder = demo_folder(keep)
    try:
        stack, document = build_stack(folder, listen, scenario)
        config_file = folder / "spyglass.toml"
        note = clock_note(stack.engines["strata-a"].time_scale)
        config_file.write_text(f"# spyglass demo: {note}\n{toml_text(document)}")
        agent = Agent(parse_config(document, str(config_file)))
    except BaseException:  # e.g. the listen port in use: nothing runs yet; remove what was made
        remove_made(folder, existed)
        raise
    stopping = stop_on_signals()  # not the agent's own: it must outlive the stack to read its last lines
    caught_up = CatchUp(agent.pipeline.state)
    agent.pipeline.event_hooks.append(caught_up)
    board = Board(incident_signals(by_id(Deployment.of(agent.config))))  # the agent's own thresholds
    mix = (scenario,) if scenario else MIX
    stop_driver = threading.Event()
    runner = threading.Thread(target=agent.serve, name="spyglass-agent")
    request = None
    began = datetime.now(UTC).replace(microsecond=0)  # the demo's window: its first line is written after this
    stack.start()
    try:
        stack.wait_ready(SCENARIOS[scenario].ready if scenario else ("strata-a", "strata-b"))
        runner.start()
        threading.Thread(target=drive_mix, args=(stack.url, stop_driver, mix), name="load-driver", daemon=True).start()
        width = console.width if console.is_terminal else None
        console.print(
            banner(
                mix,
                listen,
                config_file,
                agent.config.store_path(),
                stack.folder,
                keep is not None,
                stack.engines["strata-a"].time_scale,
                width,
            ),
            soft_wrap=width is None,
            highlight=False,
        )
        watch(agent, runner, board, console, seconds, config_file, stopping)
    finally:
        stop_driver.set()
        stack.stop()
        if runner.is_alive():  # the agent reads what the logs gained while the stack stopped, then stops
            caught_up.arm()
            caught_up.done.wait(15)
            request = finished_request(agent, settled_seconds=0)
        agent.stop.set()
        agent.wake.set()
        if runner.ident is None:  # it never started: nobody else closes the store
            agent.pipeline.close()
        else:
            runner.join(60)
        board.sample(agent.pipeline.state, time.monotonic())
        console.print(board.table())
        if keep:
            ended = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
            print_kept(
                console, folder, config_file, agent, request, (began, ended), stack.engines["strata-a"].time_scale
            )
        else:
            shutil.rmtree(folder, ignore_errors=True)


def stop_on_signals() -> threading.Event:
    """An event that SIGINT (Ctrl-C) and SIGTERM set."""
    stopping = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        logger.info("{} received, stopping the stack, then the agent", signal.Signals(signum).name)
        stopping.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stopping
