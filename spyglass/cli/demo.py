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
import contextlib
import itertools
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from loguru import logger
from rich.console import Console
from rich.live import Live
from rich.table import Table

from spyglass.agent.runtime import Agent
from spyglass.alerting.heuristics import Deployment, Heuristic, by_id
from spyglass.cli.console import command, shell_lines
from spyglass.config import parse_config, toml_text
from spyglass.engine.emulator.ports import free_port_base
from spyglass.engine.emulator.scenarios import SCENARIOS, run_scenario
from spyglass.engine.emulator.stack import Stack
from spyglass.signals.state import MetricState

# strata-b gets the seed's troubles: a cache too small for its snapshots, an old serve build.
DEMO_ENGINES: dict[str, dict[str, Any]] = {
    "strata-a": {"cache_mib": 65_536},
    "strata-b": {"escape_fix": False, "serve_version": "2026.10.16"},
}
MIX = ("healthy", "eviction-storm", "special-tokens", "plan-then-eos", "assembly-drop", "token-count")
History = deque[tuple[float, float]]  # (monotonic seconds, value), oldest first


class Rule(Protocol):
    def abnormal(self, history: History) -> bool: ...

    def measured(self, history: History) -> str:
        """The value in the terms the rule compares: a rate for a rate threshold, never a running total."""
        ...


@dataclass(frozen=True)
class Above:
    """Abnormal while the value is above `limit`: a count that is zero on a healthy stack."""

    limit: float = 0.0

    def abnormal(self, history: History) -> bool:
        return history[-1][1] > self.limit

    def measured(self, history: History) -> str:
        return f"{history[-1][1]:,.0f}"

    def __str__(self) -> str:
        return f"> {self.limit:g}"


@dataclass(frozen=True)
class Increase:
    """Abnormal when the value grew by at least `by` within the last `seconds` (a rate, for a
    counter that also moves a little on a healthy stack); not before `settle` seconds of
    history, for a counter that a warming stack moves fast."""

    by: float
    seconds: float
    settle: float = 0.0

    def abnormal(self, history: History) -> bool:
        if history[-1][0] - history[0][0] < self.settle:
            return False
        return growth(history, self.seconds) >= self.by

    def measured(self, history: History) -> str:
        return f"+{growth(history, self.seconds):,.0f} in {self.seconds / 60:g} min"

    def __str__(self) -> str:
        return f"+{self.by:g} in {self.seconds / 60:g} min" + (
            f", after {self.settle / 60:g} min" if self.settle else ""
        )


@dataclass(frozen=True)
class Faster:
    """Abnormal when the value grew by more than `per_minute` within the last minute: a heuristic's
    rate floor, as its alert's `rate * 60 > floor` reads it."""

    per_minute: float

    def abnormal(self, history: History) -> bool:
        return growth(history, 60.0) > self.per_minute

    def measured(self, history: History) -> str:
        return f"{growth(history, 60.0):,.0f} a minute"

    def __str__(self) -> str:
        return f"> {self.per_minute:g} a minute"


def growth(history: History, seconds: float) -> float:
    """How much the value grew within the last `seconds` (since the first sample, if younger)."""
    now, value = history[-1]
    past = next((v for t, v in reversed(history) if t <= now - seconds), history[0][1])
    return value - past


@dataclass(frozen=True)
class Held:
    """Abnormal when the value stayed above `limit` for `seconds` in a row (a state that is
    normal for a moment, such as loading)."""

    seconds: float
    limit: float = 0.0

    def abnormal(self, history: History) -> bool:
        now = history[-1][0]
        if now - history[0][0] < self.seconds:
            return False
        return all(v > self.limit for t, v in history if t >= now - self.seconds)

    def measured(self, history: History) -> str:
        return f"{history[-1][1]:,.0f}"

    def __str__(self) -> str:
        return f"> {self.limit:g} for {self.seconds:g} s"


@dataclass(frozen=True)
class Signal:
    label: str  # what the on-call engineer reads
    short: str  # its name on a status line
    metric: str
    labels: dict[str, str] = field(default_factory=dict)
    rule: Rule | None = None  # None: shown for context, never abnormal
    # More (metric, labels) whose value counts too: the signal is the largest of them, as an alert that
    # fires on `a > 0 or b > 0` sees it.
    also: tuple[tuple[str, dict[str, str]], ...] = ()

    def value(self, state: MetricState) -> float:
        return max([state.total(self.metric, **self.labels), *(state.total(m, **labels) for m, labels in self.also)])

    def where(self, state: MetricState) -> str:
        """Which instance, program or lane the value comes from: `strata-b, lane normal`, `strata-b 38, strata-a 2`."""
        names = state.catalogue[self.metric].labels
        fixed = self.labels.get("instance", "")
        label = next((n for n in ("instance", "program", "lane") if n in names and n not in self.labels), None)
        if label is None:
            return fixed
        parts: dict[str, float] = {}
        for key, value in state.series(self.metric).items():
            labels = dict(zip(names, key))
            if value and all(labels.get(k) == v for k, v in self.labels.items()):
                name = f"lane {labels[label]}" if label == "lane" else labels[label]
                parts[name] = parts.get(name, 0.0) + value
        ranked = sorted(parts.items(), key=lambda kv: -kv[1])
        spread = (
            ranked[0][0]
            if len(ranked) == 1
            else ", ".join(f"{n} {v:,.0f}" for n, v in ranked[:3]) + (" ..." if len(ranked) > 3 else "")
        )
        return ", ".join(p for p in (fixed, spread) if p)


def incident_signals(heuristics: dict[str, Heuristic]) -> list[Signal]:
    """The signals the demo shows, one row each, with the heuristics catalogue's thresholds where a
    heuristic watches the same thing: H3's eviction floor, H13's crash loop (its spawns within its
    window, counted here on unexpected exits, since every program's first spawn counts too)."""
    evictions_per_minute = heuristics["H3"].threshold("evictions_per_minute")
    loop = heuristics["H13"]
    crash_loop = Increase(loop.threshold("spawns"), loop.threshold("window_minutes") * 60)
    return [
        Signal(
            "evictions, strata-b (engine's own counter)",
            "evictions-b",
            "spyglass_engine_evictions_total",
            {"instance": "strata-b"},
            Faster(evictions_per_minute),
        ),
        Signal(
            "long prompts restored only from a checkpoint",
            "checkpoint-only",
            "spyglass_engine_long_prompts_checkpoint_only_total",
            rule=Above(0),
        ),
        Signal(
            "thinking-only responses with special tokens",
            "special-tokens",
            "spyglass_infer_thinking_only_total",
            {"special_tokens": "yes"},
            Above(0),
        ),
        Signal("plan, then EOS", "plan-eos", "spyglass_infer_plan_then_stop_total", rule=Above(0)),
        Signal("task anchor dropped by assembly", "anchor-lost", "spyglass_infer_anchor_lost_total", rule=Above(0)),
        Signal("overfit 400s at the gateway", "overfits", "spyglass_gateway_overfits_total", rule=Above(0)),
        Signal(
            "blind retries after an overfit", "blind-retries", "spyglass_gateway_blind_retries_total", rule=Above(0)
        ),
        Signal(
            "unexpected process exits (supervisord)",
            "unexpected-exits",  # a crash loop, before FATAL
            "spyglass_supervisord_exits_total",
            {"expected": "false"},
            crash_loop,
        ),
        Signal("programs that gave up (FATAL)", "fatal", "spyglass_supervisord_fatal_total", rule=Above(0)),
        Signal("engines still loading", "loading", "spyglass_serve_state", {"state": "loading"}, Held(60)),
        Signal(
            "compute-graph rebuilds",
            "rebuilds",  # each new shape once: many while the stack warms up
            "spyglass_engine_graph_rebuilds_total",
            rule=Increase(5, 60, settle=120),
        ),
        # What EngineCPUsShared fires on: the CPUs both processes may run on (host), or their start lines' lists.
        Signal(
            "CPUs the two engines may share",
            "shared-cpus",
            "spyglass_host_shared_cpus",
            {"instance": "strata-a"},
            Above(0),
            also=(("spyglass_engine_shared_cpus", {"instance": "strata-a"}),),
        ),
        Signal("requests answered by the gateway", "requests", "spyglass_gateway_requests_total"),
    ]


SIGNALS = incident_signals(by_id())  # with the default [alerts]


class Board:
    """The signals' recent values, sampled with the caller's clock; says which are abnormal."""

    def __init__(self, signals: list[Signal] = SIGNALS, keep_seconds: float = 1800.0) -> None:
        self.signals, self.keep = signals, keep_seconds
        self.history: list[History] = [deque() for _ in signals]
        self.wheres: list[str] = ["" for _ in signals]
        self.began: float | None = None

    def sample(self, state: MetricState, now: float) -> None:
        with state.lock:
            values = [s.value(state) for s in self.signals]
            self.wheres = [s.where(state) for s in self.signals]
        self.began = now if self.began is None else self.began
        for history, value in zip(self.history, values):
            history.append((now, value))
            while history[0][0] < now - self.keep:
                history.popleft()

    def rows(self) -> list[tuple[Signal, float, bool]]:
        """(signal, latest value, abnormal) for every signal sampled at least once."""
        return [
            (s, h[-1][1], s.rule is not None and s.rule.abnormal(h)) for s, h in zip(self.signals, self.history) if h
        ]

    def status_line(self, elapsed: float) -> str:
        """Every signal's value on one line; `!` marks the abnormal ones."""
        return f"{elapsed:4.0f}s  " + "  ".join(
            f"{s.short} {value:.0f}{'!' if abnormal else ''}" for s, value, abnormal in self.rows()
        )

    def elapsed(self, now: float | None = None) -> float:
        """Seconds since the first sample (to `now`, else to the last sample)."""
        times = next((h for h in self.history if h), None)
        if self.began is None or times is None:
            return 0.0
        return (times[-1][0] if now is None else now) - self.began

    def table(self, now: float | None = None) -> Table:
        """The signals: each one's total, what its rule compares now (a rate for a rate: never a running total
        against "a minute"), where it comes from (instance, program or lane), and whether it is abnormal."""
        minutes, seconds = divmod(int(self.elapsed(now)), 60)
        table = Table(
            "signal",
            "where",
            "total",
            "now",
            "abnormal when",
            "",
            title=f"spyglass demo: incident signals after {minutes} min {seconds:02d} s",
        )
        for (row, value, abnormal), where in zip(self.rows(), self.wheres):
            history = self.history[self.signals.index(row)]
            now_text = row.rule.measured(history) if row.rule is not None else ""
            shown = "" if now_text == f"{value:,.0f}" else f"{value:,.0f}"  # a level: its value once, under "now"
            table.add_row(
                row.label,
                where,
                shown,
                f"[bold red]{now_text}[/]" if abnormal else now_text,
                str(row.rule or "-"),
                "[bold red]abnormal[/]" if abnormal else "",
            )
        return table


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
        _watch(agent, runner, board, console, seconds, config_file, stopping)
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


SQL_KINDS = "SELECT kind, count(*) FROM events GROUP BY ALL"


def sql_words(config: Path, query: str) -> list[str]:
    """`spyglass sql -c CONFIG "QUERY"` as words for shell_lines (the option and its value one word)."""
    plain_double = not any(c in query for c in '"$`\\!')  # a query with 'evict' reads best in "..."
    return [command(), "sql", f"-c {shlex.quote(str(config))}", f'"{query}"' if plain_double else shlex.quote(query)]


def banner(
    mix: tuple[str, ...],
    listen: str,
    config: Path,
    store: Path,
    logs: Path,
    kept: bool,
    time_scale: float = 1.0,
    width: int | None = None,
) -> Any:
    """The demo's first lines (a rich Text: a path with brackets in it prints as written); the command in
    them continued with ` \\` past `width`, never broken by the terminal."""
    from rich.text import Text

    ending = f"keeps {config.parent}" if kept else "removes it all (--keep DIR keeps it)"
    return Text.assemble(
        ("spyglass demo", "bold"),
        (
            f": the emulated Strata stack under supervisord, driven by {', '.join(mix)}\n"
            f"  metrics     http://{listen}/metrics\n  sources     http://{listen}/debug/sources\n"
            f"  SQL (runs as printed):\n{shell_lines(sql_words(config, SQL_KINDS), width, '    ')}\n"
            f"  store       {store}\n  stack logs  {logs}\n  clock       {clock_note(time_scale)}\n"
            f"  Ctrl-C stops it and {ending}."
        ),
    )


def clock_note(time_scale: float) -> str:
    """What the numbers mean: the emulated stack runs faster than the model it imitates, and the durations
    it logs are the model's, while its timestamps are the wall clock."""
    if time_scale >= 1.0:
        return "durations and timestamps are both the wall clock"
    return (
        f"the emulated engines run {1 / time_scale:g}x faster than the model they imitate: the durations"
        f" they and the gateway log (ttft_ms, dur_ms, prompt read ms, load s) are model time, {1 / time_scale:g}"
        " times the wall clock their timestamps and spans keep"
    )


STORM = "EngineEvictionStorm"  # the mix's own incident: strata-b's cache is too small for its snapshots
STORM_RATE_SECONDS = 600.0  # its expression's rate window: evictions a minute over 10 minutes


def storm_needs() -> float:
    """Seconds of evictions before EngineEvictionStorm can fire: its rate window, then its `for:`. A backtest
    of a shorter demo cannot fire it (the other alerts the mix causes it may)."""
    from spyglass.alerting.heuristics import catalogue
    from spyglass.cli.timeinput import parse_duration

    [alert] = [a for h in catalogue() for a in h.alerts if a.name == STORM]
    return STORM_RATE_SECONDS + parse_duration(alert.for_)


def window_commands(config: Path, start: datetime, end: datetime, width: int | None = None) -> list[str]:
    """The diagnose, timeline and backtest commands for the demo's own window [start, end)."""
    spyglass, c = command(), f"-c {shlex.quote(str(config))}"
    first, last = f"{start:%Y-%m-%dT%H:%M:%SZ}", f"{end:%Y-%m-%dT%H:%M:%SZ}"
    rules = Path(__file__).resolve().parents[2] / "alerts"
    with contextlib.suppress(ValueError):
        rules = rules.relative_to(Path.cwd())
    span = [f"--from {first}", f"--to {last}"]
    lines = [
        f"its window, {first} to {last} (UTC):",
        shell_lines([spyglass, "diagnose", c, *span], width),
        shell_lines([spyglass, "timeline", c, *span, "--exclude-kind span"], width),
        shell_lines([spyglass, "backtest", c, *span, "--lookback 30m", f"--rules {rules}"], width),
    ]
    need = storm_needs()
    if (end - start).total_seconds() < need + 120:
        lines.append(
            f"  ({STORM} needs strata-b evicting for {need / 60:g} min, its rate window and its for:;"
            f" this demo ran {(end - start).total_seconds() / 60:.0f} min, so its backtest cannot show it"
            f" (the other alerts the mix caused, it shows): --seconds {int(need) + 300} gives it time)"
        )
    return lines


def print_kept(
    console: Console,
    folder: Path,
    config: Path,
    agent: Agent,
    request: str | None,
    window: tuple[datetime, datetime] | None = None,
    time_scale: float = 1.0,
) -> None:
    spyglass, c = command(), f"-c {shlex.quote(str(config))}"
    width = console.width if console.is_terminal else None
    logs = ", ".join(sorted(p.name for p in (folder / "stack").iterdir() if p.suffix == ".log" or p.name == "infer"))
    lines = [
        f"kept in {folder}:",
        f"  config      {config}",
        f"  store       {agent.config.store_path()}",
        f"  stack logs  {folder / 'stack'} ({logs})",
        "query them:",
        shell_lines(
            sql_words(config, "SELECT source, kind, count(*) AS n FROM events GROUP BY ALL ORDER BY n DESC"), width
        ),
        shell_lines(
            sql_words(config, "SELECT reason, count(*) AS n FROM events_engine_log WHERE kind = 'evict' GROUP BY ALL"),
            width,
        ),
        shell_lines([spyglass, "trace", c, request or "REQUEST_ID"], width),
    ]
    if window:
        lines += window_commands(config, *window, width=width)
    lines.append(f"clock: {clock_note(time_scale)}")
    # the commands are broken where a shell reads them whole; the prose wraps at words (no soft wrap for a
    # terminal, which would break a word); to a pipe, nothing is broken
    console.print("\n".join(lines), soft_wrap=width is None, highlight=False, markup=False)


def finished_request(agent: Agent, settled_seconds: float = 6.0) -> str | None:
    """The id of a request that went all the way through, for the `spyglass trace` hint: the latest
    whose gateway span and serve's main span are both committed to the store, so its trace shows
    every layer. Spans come in batches every 5 s, and the serve's last batch is not in the store when
    the agent stops, so the latest request often has only its gateway's spans and its serve's
    count_tokens span.
    Without any such request (no span pushed yet): one that finished `settled_seconds` ago."""
    cursor = agent.pipeline.store.con.cursor()  # type: ignore[attr-defined]  # the demo always runs the DuckDB store
    try:
        row = cursor.execute(
            "SELECT d.request_id FROM events d WHERE d.source = 'gateway' AND d.kind = 'done'"
            " AND d.request_id IN (SELECT request_id FROM events WHERE kind = 'span' AND instance = 'rag-proxy')"
            " AND d.request_id IN (SELECT request_id FROM events_otlp WHERE kind = 'span' AND instance LIKE 'strata-%'"
            "                      AND name IN ('POST /v1/messages', 'POST /v1/chat/completions'))"
            " ORDER BY d.ts DESC LIMIT 1"
        ).fetchone()
        row = (
            row
            or cursor.execute(
                "SELECT request_id FROM events WHERE source = 'gateway' AND kind = 'done'"
                " AND ts < now() - to_seconds(?) ORDER BY ts DESC LIMIT 1",
                [settled_seconds],
            ).fetchone()
        )
    finally:
        cursor.close()
    return row[0] if row else None


def stop_on_signals() -> threading.Event:
    """An event that SIGINT (Ctrl-C) and SIGTERM set."""
    stopping = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        logger.info("{} received, stopping the stack, then the agent", signal.Signals(signum).name)
        stopping.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stopping


def _watch(
    agent: Agent,
    runner: threading.Thread,
    board: Board,
    console: Console,
    seconds: float,
    config: Path,
    stopping: threading.Event,
) -> None:
    deadline = time.monotonic() + seconds if seconds else None
    hint: list[str] = []  # the trace hint, once a request finished: under the live table, or printed to a pipe
    threading.Thread(
        target=_hint_trace,
        args=(agent, console, config, hint, not console.is_terminal, console.width if console.is_terminal else None),
        name="trace-hint",
        daemon=True,
    ).start()

    def running() -> bool:
        return runner.is_alive() and not stopping.is_set() and (deadline is None or time.monotonic() < deadline)

    board.sample(agent.pipeline.state, time.monotonic())
    if console.is_terminal:
        from rich.console import Group
        from rich.text import Text

        # transient: the final table is printed once, after the stack stopped, with its last numbers. Nothing
        # else prints while it is live (a print from another thread left a stray header): the hint is part of it.
        live_view = lambda: Group(board.table(time.monotonic()), *(Text(h) for h in hint))  # noqa: E731
        with Live(live_view(), console=console, refresh_per_second=1, transient=True) as live, logs_above(console):
            while running():
                stopping.wait(1.0)
                board.sample(agent.pipeline.state, time.monotonic())
                live.update(live_view())
        for line in hint:
            console.print(line, soft_wrap=True, highlight=False, markup=False)
        return
    started = time.monotonic()
    while running():  # a pipe or a log file: every signal on one line, every 10 s
        stopping.wait(10.0)
        board.sample(agent.pipeline.state, time.monotonic())
        if running():
            console.print(board.status_line(time.monotonic() - started), soft_wrap=True, highlight=False)


@contextlib.contextmanager
def logs_above(console: Console) -> Iterator[None]:
    """While the live table shows: log lines go through its console, which prints them above the table (a
    line written to stderr was drawn over it), then back to stderr."""
    from rich.text import Text

    logger.remove()
    sink = logger.add(
        lambda message: console.print(Text(str(message).rstrip("\n")), highlight=False),
        level="INFO",
        format="{time:HH:mm:ss} {level} {message}",
    )
    try:
        yield
    finally:
        logger.remove(sink)
        logger.add(sys.stderr, level="INFO")


def _hint_trace(
    agent: Agent, console: Console, config: Path, hint: list[str], printed: bool, width: int | None = None
) -> None:
    """Once a request has finished and settled, the command that shows its trace: added to `hint`, and
    printed when `printed` (to a pipe; a terminal's live table shows the hint itself)."""
    while not agent.stop.wait(5.0):
        request = finished_request(agent)
        if request:
            words = [command(), "trace", f"-c {shlex.quote(str(config))}", request]
            hint.append(f"  one request's trace:\n{shell_lines(words, width, '    ')}")
            if printed:
                console.print(hint[-1], soft_wrap=True, highlight=False, markup=False)
            return
