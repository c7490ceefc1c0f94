"""The DuckDB store and the state file: events in UTC, idempotent re-ingest, resumable metrics."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import duckdb
import pytest

from spyglass.agent.pipeline import Pipeline
from spyglass.collectors.clock import ManualClock
from spyglass.config import engine_log_toml, parse_config
from spyglass.exporters.prometheus import render
from spyglass.exporters.statefile import StateFile
from spyglass.exporters.store import DuckDBStore

FIXTURE = Path(__file__).parent / "fixtures" / "engine_log" / "strata-iq3_xxs-b.log"


def config(tmp: Path, log: Path, store: bool = True) -> dict:
    return tomllib.loads(engine_log_toml(log, tmp / "state", store=store, host="h1"))


def open_pipeline(tmp: Path, log: Path, store: bool = True) -> Pipeline:
    cfg = parse_config(config(tmp, log, store), "test")
    backend = DuckDBStore(cfg.store_path()) if store else StateFile(cfg.state_dir() / "state.json")
    return Pipeline(cfg, ManualClock(), backend)


def ingest(tmp: Path, log: Path, store: bool = True) -> str:
    pipeline = open_pipeline(tmp, log, store)
    try:
        pipeline.run_until_idle()
        return render(pipeline.state).decode()
    finally:
        pipeline.close()


def test_events_are_stored_with_utc_timestamps(tmp_path):
    ingest(tmp_path, FIXTURE)
    con = duckdb.connect(str(tmp_path / "state" / "spyglass.duckdb"), read_only=True)
    con.execute("SET TimeZone = 'Asia/Shanghai'")  # an analyst's session: rendering changes, instants do not
    kind, ts, req, ttft = con.execute(
        "SELECT kind, ts AT TIME ZONE 'UTC', request_id, fields->>'ttft_ms' FROM events"
        " WHERE kind = 'done' ORDER BY ts LIMIT 1"
    ).fetchone()
    assert (kind, str(ts), req, ttft) == ("done", "2026-10-19 04:49:15.640000", "20261019-124900-7aa82c", "2210")
    assert con.execute("SELECT typeof(ts), count(*) FROM events GROUP BY 1").fetchall() == [
        ("TIMESTAMP WITH TIME ZONE", 35)
    ]


def test_ingesting_again_adds_nothing(tmp_path):
    first = ingest(tmp_path, FIXTURE)
    second = ingest(tmp_path, FIXTURE)
    con = duckdb.connect(str(tmp_path / "state" / "spyglass.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM events").fetchone() == (35,)
    assert first == second


@pytest.mark.parametrize("store", [True, False], ids=["duckdb", "state-file"])
def test_metrics_resume_across_restarts_as_if_read_in_one_pass(tmp_path, store):
    whole = ingest(tmp_path / "one", FIXTURE, store)
    log = tmp_path / "engine.log"
    lines = FIXTURE.read_bytes().splitlines(keepends=True)
    for cut in (7, 15, 16, 30, len(lines)):  # restart after each piece
        log.write_bytes(b"".join(lines[:cut]))
        pieces = ingest(tmp_path / "many", log, store)
    normalize = lambda text: text.replace(str(log), "LOG")  # noqa: E731
    assert normalize(pieces) == normalize(whole)


def test_a_corrupt_state_file_is_moved_aside_and_reading_starts_over(tmp_path):
    ingest(tmp_path, FIXTURE, store=False)
    state = tmp_path / "state" / "state.json"
    state.write_text('{"checkpoints": {"engine-b": ')  # torn write, as after an OOM kill
    again = ingest(tmp_path, FIXTURE, store=False)
    assert list(state.parent.glob("state.json.corrupt-*"))
    assert 'spyglass_source_lines_total{outcome="event",source="engine-b"} 35.0' in again
    assert json.loads(state.read_text())["checkpoints"]["engine-b"]["files"]


def test_store_and_state_file_agree(tmp_path):
    def without_store_series(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("spyglass_store_events_total ")]

    with_store = ingest(tmp_path / "a", FIXTURE, True)
    assert "spyglass_store_events_total 35.0" in with_store
    assert without_store_series(with_store) == without_store_series(ingest(tmp_path / "b", FIXTURE, False))


def test_a_restart_between_queued_and_done_keeps_the_request_id(tmp_path):
    log = tmp_path / "engine.log"
    lines = FIXTURE.read_bytes().splitlines(keepends=True)
    queued = next(i for i, line in enumerate(lines) if b"task 18231 req=" in line)
    log.write_bytes(b"".join(lines[: queued + 1]))
    ingest(tmp_path, log)
    log.write_bytes(b"".join(lines))
    ingest(tmp_path, log)
    con = duckdb.connect(str(tmp_path / "state" / "spyglass.duckdb"), read_only=True)
    assert con.execute(
        "SELECT kind, request_id FROM events WHERE fields->>'task' = '18231' ORDER BY ts"
    ).fetchall() == [(kind, "20261019-124900-7aa82c") for kind in ("queued", "prompt", "thinking", "tool_call", "done")]
