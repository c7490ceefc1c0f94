"""What the demo prints: its banner, the live board while it runs (with the trace hint), and the
commands to query what `--keep` kept."""

from __future__ import annotations

import contextlib
import shlex
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from loguru import logger
from rich.console import Console
from rich.live import Live

from spyglass import resources
from spyglass.agent.runtime import Agent
from spyglass.cli.demo_board import Board
from spyglass.terminal.console import command, shell_lines

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
    from spyglass.terminal.timeinput import parse_duration

    [alert] = [a for h in catalogue() for a in h.alerts if a.name == STORM]
    return STORM_RATE_SECONDS + parse_duration(alert.for_)


def window_commands(config: Path, start: datetime, end: datetime, width: int | None = None) -> list[str]:
    """The diagnose, timeline and backtest commands for the demo's own window [start, end)."""
    spyglass, c = command(), f"-c {shlex.quote(str(config))}"
    first, last = f"{start:%Y-%m-%dT%H:%M:%SZ}", f"{end:%Y-%m-%dT%H:%M:%SZ}"
    rules = Path(str(resources.folder("spyglass", "alerts")))  # the rules for examples/strata.toml, shipped
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


def watch(
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
