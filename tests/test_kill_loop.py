"""`spyglass ingest` killed with SIGKILL at random points and restarted until it finishes: the
stored events and the metrics equal one uninterrupted pass, exactly (architecture.md)."""
from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import duckdb

import exporters
from engine.emulator.logsynth import EngineModel
from exporters.prometheus import render
from exporters.state import MetricState
from spyglass.config import engine_log_toml

EVENT_COLUMNS = "ts, source, kind, instance, host, request_id, fields::VARCHAR"


def write_log(path: Path, turns: int) -> None:
    model = EngineModel(seed=3)
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
    path.write_text(engine_log_toml(log, folder / "state", host="h1", read_budget_bytes=65536,
                                    commit_interval_seconds=0))
    return path


def stored(db: Path) -> tuple[list[tuple], str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        events = con.execute(f"SELECT {EVENT_COLUMNS} FROM events ORDER BY ALL").fetchall()
        metrics = con.execute("SELECT state FROM agent_state WHERE name = 'metrics'").fetchone()[0]
    finally:
        con.close()
    return events, metrics


def as_exposition(metrics_json: str) -> str:
    state = MetricState(exporters.full_catalogue())
    state.load_json(json.loads(metrics_json))
    return render(state).decode()


def ingest_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "spyglass.cli", "ingest", "-c", str(config)]


def test_sigkill_at_random_points_loses_and_duplicates_nothing(tmp_path):
    log = tmp_path / "engine.log"
    write_log(log, turns=20_000)
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    clean.mkdir()
    killed.mkdir()

    started = time.monotonic()
    subprocess.run(ingest_command(write_config(clean, log)), check=True, capture_output=True)
    duration = time.monotonic() - started  # kills land inside the time one clean run takes here

    config = write_config(killed, log)
    rng = random.Random(20261019)
    kills = 0
    for _ in range(100):
        proc = subprocess.Popen(ingest_command(config), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _, err = proc.communicate(timeout=rng.uniform(0.1, 0.35) * duration)  # SIGKILL at a random moment
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            kills += 1
            continue
        assert proc.returncode == 0, err.decode()
        break
    else:
        raise AssertionError("ingest never finished within 100 runs")
    assert kills >= 3, f"only {kills} kills landed before ingest finished"

    expected_events, expected_metrics = stored(clean / "state" / "spyglass.duckdb")
    actual_events, actual_metrics = stored(killed / "state" / "spyglass.duckdb")
    assert len(actual_events) == len(expected_events) > 80_000
    assert actual_events == expected_events
    assert as_exposition(actual_metrics) == as_exposition(expected_metrics)
