"""`spyglass ingest`, and `spyglass run` with a writer appending, killed with SIGKILL at random
points and restarted: the stored events and the metrics equal one uninterrupted pass, exactly
(architecture.md), and a restart never exposes a counter lower than one already scraped."""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import httpx
import pytest
from conftest import kill_at_random_until_done, wait_until

from spyglass import signals
from spyglass.config import engine_log_toml
from spyglass.engine.emulator.logsynth import EngineModel
from spyglass.exporters.prometheus import render
from spyglass.exporters.request_rows import row_tables
from spyglass.ports import free_port
from spyglass.signals.state import MetricState

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

EVENT_COLUMNS = "ts, source, kind, instance, host, request_id, fields::VARCHAR"


def write_log(path: Path, turns: int, seed: int = 3) -> None:
    model = EngineModel(seed=seed)
    ts = 1_792_380_000.0
    lines = model.start_lines(ts)
    for i in range(turns):
        ts += 20
        lines += [model.noise(ts), model.noise(ts)] + model.turn(ts)
        if i % 5 == 0:
            lines.append(model.stats_line(ts))
    path.write_bytes(b"\n".join(lines) + b"\n")


def write_config(folder: Path, log: Path) -> Path:
    path = folder / "spyglass.toml"
    # A small read budget and no commit interval make many small commits, so kills land between
    # and inside them.
    path.write_text(
        engine_log_toml(log, folder / "state", host="h1", read_budget_bytes=65536, commit_interval_seconds=0)
    )
    return path


def stored(db: Path) -> tuple[list[tuple], str, list[list[tuple]]]:
    """The events, the metric state and the per-request rows (exporters/request_rows.py) of a store."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        events = con.execute(f"SELECT {EVENT_COLUMNS} FROM events ORDER BY ALL").fetchall()
        metrics = con.execute("SELECT state FROM agent_state WHERE name = 'metrics'").fetchone()[0]
        rows = [con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall() for table in row_tables()]
    finally:
        con.close()
    return events, metrics, rows


def as_exposition(metrics_json: str) -> str:
    state = MetricState(signals.full_catalogue())
    state.load_json(json.loads(metrics_json))
    return render(state).decode()


def ingest_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "spyglass.cli.app", "ingest", "-c", str(config)]


def test_sigkill_at_random_points_loses_and_duplicates_nothing(tmp_path):
    log = tmp_path / "engine.log"
    write_log(log, turns=20_000)
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    clean.mkdir()
    killed.mkdir()

    started = time.monotonic()
    subprocess.run(ingest_command(write_config(clean, log)), check=True, capture_output=True)
    duration = time.monotonic() - started  # kills land inside the time one clean run takes here
    # (windows of 5-25% of it: a clean run timed on a loaded machine must not make kills rare)

    # SIGKILL at a random moment in 5-25% of a clean run
    kills = kill_at_random_until_done(ingest_command(write_config(killed, log)), duration, 20261019, (0.05, 0.25))
    assert kills >= 3, f"only {kills} kills landed before ingest finished"

    expected_events, expected_metrics, expected_rows = stored(clean / "state" / "spyglass.duckdb")
    actual_events, actual_metrics, actual_rows = stored(killed / "state" / "spyglass.duckdb")
    assert len(actual_events) == len(expected_events) > 80_000
    assert actual_events == expected_events
    assert len(actual_rows[0]) > 1_000 and actual_rows == expected_rows
    assert as_exposition(actual_metrics) == as_exposition(expected_metrics)


COUNTER_SAMPLE = re.compile(r"^(spyglass_\w+(?:_total|_count|_bucket)(?:\{[^}]*\})?) (\S+)$", re.M)


def counters(url: str) -> dict[str, float] | None:
    """Every counter, histogram count and bucket on /metrics; None while the agent is not serving."""
    try:
        text = httpx.get(url, timeout=5).text
    except httpx.TransportError:
        return None
    return {name: float(value) for name, value in COUNTER_SAMPLE.findall(text)}


class Writer(threading.Thread):
    """Appends `lines` to `path` in writes of 50 lines, 5,000 lines a second."""

    def __init__(self, path: Path, lines: list[bytes]) -> None:
        super().__init__(daemon=True)
        self.path, self.lines = path, lines
        self.pace = threading.Event()  # never set: its wait() paces the writes

    def run(self) -> None:
        with open(self.path, "ab", buffering=0) as out:
            for i in range(0, len(self.lines), 50):
                out.write(b"".join(self.lines[i : i + 50]))
                self.pace.wait(0.01)


def test_sigkill_of_the_live_agent_while_a_writer_appends(tmp_path):
    """`spyglass run` killed at random points while the log grows: in the end the stored events
    and the metrics equal one clean ingest of the final file, and no restart ever exposed a
    counter lower than one scraped before the kill (Prometheus would count a false reset)."""
    source = tmp_path / "source.log"
    write_log(source, turns=3_000)
    lines = source.read_bytes().splitlines(keepends=True)
    log = tmp_path / "engine.log"
    log.write_bytes(b"")
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    config = tmp_path / "live.toml"
    config.write_text(engine_log_toml(log, tmp_path / "state", host="h1", listen=f"127.0.0.1:{port}"))
    run = [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)]
    rng, pause = random.Random(20261201), threading.Event()
    writer = Writer(log, lines)
    writer.start()
    kills, regressions = 0, []
    scraped: dict[str, float] = {}  # the last scrape before a kill
    while writer.is_alive() or kills < 5:
        proc = subprocess.Popen(run, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            first = wait_until(lambda: counters(url), 30, "the restarted agent's /metrics")
            if kills:
                regressions += [(k, v, first.get(k)) for k, v in scraped.items() if first.get(k, 0.0) < v]
            pause.wait(rng.uniform(0.2, 1.5))  # the kill lands at a random point of the run
            scraped = counters(url) or first
        finally:
            proc.kill()
            proc.wait()
        kills += 1
    assert not regressions, f"counters lower after a restart than scraped before: {regressions[:5]}"

    proc = subprocess.Popen(run, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(
            lambda: (counters(url) or {}).get('spyglass_source_lines_total{outcome="event",source="engine-b"}', 0) > 0,
            30,
            "the agent serving",
        )
        wait_until(
            lambda: (
                sum(v for k, v in (counters(url) or {}).items() if k.startswith("spyglass_source_lines_total"))
                == len(lines)
            ),
            30,
            "the last agent caught up with the file",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0

    clean = tmp_path / "clean"
    clean.mkdir()
    subprocess.run(ingest_command(write_config(clean, log)), check=True, capture_output=True)
    expected_events, expected_metrics, expected_rows = stored(clean / "state" / "spyglass.duckdb")
    actual_events, actual_metrics, actual_rows = stored(tmp_path / "state" / "spyglass.duckdb")
    assert len(actual_events) == len(expected_events) > 10_000
    assert actual_events == expected_events
    assert len(actual_rows[0]) > 100 and actual_rows == expected_rows
    assert as_exposition(actual_metrics) == as_exposition(expected_metrics)
