"""Disk full, for real: `spyglass run` with its state on a size-limited tmpfs that is filled up
while a log grows. The agent stays up, says the store is unhealthy, keeps /metrics moving,
retries, and once space returns has stored every event exactly once."""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import httpx
import pytest
from conftest import wait_until
from test_alert_webhook import alert, notification

from spyglass.config import engine_log_toml
from spyglass.engine.emulator.logsynth import EngineModel
from spyglass.exporters.statefile import StateFile
from spyglass.ports import free_port

JSON_BODY = {"Content-Type": "application/json"}
pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

EVENT_COLUMNS = "ts, source, kind, instance, host, request_id, fields::VARCHAR"


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    folder = tmp_path / "small"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)], check=True)
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=True)


def engine_lines(n_turns: int) -> list[bytes]:
    model, ts = EngineModel(seed=11), 1_792_380_000.0
    lines = model.start_lines(ts)
    for _ in range(n_turns):
        ts += 20
        lines += [model.noise(ts)] + model.turn(ts)
    return [line + b"\n" for line in lines]


def fill(folder: Path) -> Path:
    filler = folder / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


class Agent:
    def __init__(self, tmp: Path, state: Path, log: Path, store: bool) -> None:
        self.port = free_port()
        config = tmp / "spyglass.toml"
        text = engine_log_toml(
            log, state, store=store, host="h1", listen=f"127.0.0.1:{self.port}", commit_interval_seconds=0.2
        )
        config.write_text(text)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)], stderr=subprocess.PIPE, text=True
        )
        self.killer = threading.Timer(120, self.proc.kill)  # a hung agent never hangs the suite
        self.killer.start()
        self.log_lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.log_lines.extend(self.proc.stderr), daemon=True)
        self.reader.start()

    def metric(self, name: str) -> float | None:
        try:
            text = httpx.get(f"http://127.0.0.1:{self.port}/metrics").text
        except httpx.TransportError:
            return None
        values = re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
        return sum(map(float, values)) if values else None

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(60)
        self.killer.cancel()
        self.reader.join()
        self.proc.stderr.close()
        return code


def stored_events(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f"SELECT {EVENT_COLUMNS} FROM events ORDER BY ALL").fetchall()
    finally:
        con.close()


def clean_ingest(tmp: Path, log: Path, store: bool) -> Path:
    config = tmp / "clean.toml"
    config.write_text(engine_log_toml(log, tmp / "clean", store=store, host="h1"))
    subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", "ingest", "-c", str(config)], check=True, capture_output=True
    )
    return tmp / "clean"


@pytest.mark.parametrize("store", [True, False], ids=["duckdb", "state-file"])
def test_disk_full_keeps_the_agent_up_and_loses_nothing_when_space_returns(tmp_path, small_disk, store):
    lines = engine_lines(1500)
    thirds = [lines[: len(lines) // 3], lines[len(lines) // 3 : 2 * len(lines) // 3], lines[2 * len(lines) // 3 :]]
    log = tmp_path / "engine.log"
    log.write_bytes(b"")
    agent = Agent(tmp_path, small_disk / "state", log, store)
    try:

        def append(part: list[bytes]) -> None:
            with open(log, "ab") as f:
                f.write(b"".join(part))

        append(thirds[0])
        wait_until(lambda: agent.metric("spyglass_source_lines_total") == len(thirds[0]), 30, "the first third")
        assert agent.metric("spyglass_store_healthy") == 1.0

        filler = fill(small_disk)
        append(thirds[1])
        wait_until(lambda: agent.metric("spyglass_store_healthy") == 0.0, 30, "the store marked unhealthy")
        wait_until(
            lambda: agent.metric("spyglass_source_lines_total") == len(thirds[0]) + len(thirds[1]),
            30,
            "metrics flowing while the disk is full",
        )
        assert agent.metric("spyglass_store_commit_failures_total") >= 1
        assert agent.proc.poll() is None, "the agent exited on a full disk"
        assert any("store commit failed" in line and "No space left" in line for line in agent.log_lines)
        alerts_url = f"http://127.0.0.1:{agent.port}/api/alerts"
        if store:  # a notification is answered 200 only once committed: now a 503 at once, nothing taken
            for _ in range(3):  # Alertmanager retries: none of them is held, none stored twice later
                answer = httpx.post(alerts_url, content=notification(alert("firing")), timeout=30, headers=JSON_BODY)
                assert answer.status_code == 503 and "the store is failing" in answer.text, answer.text
                assert answer.headers["Retry-After"] == "5"

        filler.unlink()
        wait_until(lambda: agent.metric("spyglass_store_healthy") == 1.0, 40, "the store healthy again")
        if store:  # the retry after recovery is taken and committed
            assert (
                httpx.post(alerts_url, content=notification(alert("firing")), timeout=30, headers=JSON_BODY).status_code
                == 200
            )
        append(thirds[2])
        wait_until(lambda: agent.metric("spyglass_source_lines_total") == len(lines), 30, "the last third")
    finally:
        code = agent.stop()
    assert code == 0, "".join(agent.log_lines[-20:])

    clean = clean_ingest(tmp_path, log, store)
    if store:
        expected = stored_events(clean / "spyglass.duckdb")
        assert len(expected) > 1000
        actual = stored_events(small_disk / "state" / "spyglass.duckdb")
        # the 503'd notifications were not taken; the retry after recovery is stored, once
        assert [e[1:3] for e in actual if e[1] == "alertmanager"] == [("alertmanager", "alert")]
        assert [e for e in actual if e[1] != "alertmanager"] == expected
    saved = StateFile(small_disk / "state" / "state.json").load() if not store else None
    if saved is not None:
        lines_total = sum(v for k, v in saved.metrics["values"]["spyglass_source_lines_total"])
        assert lines_total == len(lines)


def _fill_all_but(folder: Path, room: int) -> Path:
    filler = fill(folder)
    with open(filler, "r+b") as f:
        f.truncate(max(0, filler.stat().st_size - room))
    return filler


def _stored_rows(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f"SELECT {EVENT_COLUMNS} FROM events ORDER BY ts, fields::VARCHAR").fetchall()
    finally:
        con.close()


def test_a_checkpoint_that_fails_on_a_full_disk_reopens_the_store_and_loses_nothing(small_disk, tmp_path, monkeypatch):
    """Issue 21 item 3: when the write that fails is DuckDB's checkpoint, DuckDB invalidates the
    database, and the agent retried on the dead connection until restarted. Here the store's
    checkpoint threshold is lowered (300 KB instead of 16 MB) so that a checkpoint comes while the
    16 MB tmpfs is full but for room for the WAL; the store must reopen itself once space returns,
    resume from its last commit, and end holding every event exactly once."""
    from spyglass.agent.pipeline import Pipeline
    from spyglass.collectors.clock import ManualClock
    from spyglass.config import engine_log_config, parse_config

    connect = duckdb.connect
    monkeypatch.setattr(duckdb, "connect", lambda path, **kw: connect(path, config={"checkpoint_threshold": "300KB"}))
    log, lines = tmp_path / "engine.log", engine_lines(1500)
    config = parse_config(engine_log_config(log, small_disk, host="h1", commit_interval_seconds=0.2), "t")
    clock = ManualClock()
    pipeline = Pipeline(config, clock, open_store_for(config))
    chunks = [lines[i : i + 300] for i in range(0, len(lines), 300)]
    filler = None
    with open(log, "ab") as out:
        for n, chunk in enumerate(chunks):
            out.write(b"".join(chunk))
            out.flush()
            pipeline.step()
            clock.advance(1.0)
            pipeline.commit_if_due()
            if n == 2:
                filler = _fill_all_but(small_disk, 700 * 1024)  # room for WAL appends, not a checkpoint
            if pipeline.store.invalidated:
                break
        assert pipeline.store.invalidated and "checkpoint" in pipeline.store.invalidated.lower()
        assert not pipeline.committer.healthy
        for _ in range(3):  # still full: no retry may succeed on the dead connection
            clock.advance(16.0)
            pipeline.step()
            pipeline.commit_if_due()
        # A retry succeeds only on a reopened connection: the failed checkpoint's batch had reached the WAL,
        # and reopening replays it, so the store may be whole again before space returns.
        assert not pipeline.committer.healthy or pipeline.store.invalidated is None
        assert filler is not None
        filler.unlink()  # space returns
        for chunk in chunks[n + 1 :]:
            out.write(b"".join(chunk))
        out.flush()
    for _ in range(20):
        clock.advance(16.0)
        pipeline.step()
        pipeline.commit_if_due()
        if pipeline.committer.healthy and not pipeline.committer.waiting:
            break
    assert pipeline.committer.healthy and pipeline.store.invalidated is None
    pipeline.run_until_idle()
    pipeline.close()

    reference = tmp_path / "reference"
    clean = parse_config(engine_log_config(log, reference, host="h1"), "t")
    again = Pipeline(clean, ManualClock(), open_store_for(clean))
    again.run_until_idle()
    again.close()
    expected = _stored_rows(clean.store_path())
    assert len(expected) > 3000
    assert _stored_rows(config.store_path()) == expected  # every event, once


def open_store_for(config):
    from spyglass.agent.runtime import open_store

    return open_store(config)
