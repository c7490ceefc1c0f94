"""The `spyglass` command as a user runs it: real processes, real files, the real store."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURES

from spyglass.config import engine_log_config, toml_text

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

FIXTURE = FIXTURES / "engine_log" / "strata-iq3_xxs-b.log"


def spyglass(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spyglass.cli.app", *args], capture_output=True, text=True, timeout=120
    )


def write_config(folder: Path, *logs: Path) -> Path:
    document = engine_log_config(logs[0], folder / "state")
    for n, log in enumerate(logs[1:], start=1):  # more engine logs, as other instances
        document["sources"][f"engine-{n}"] = {"kind": "engine_log", "path": log, "instance": f"strata-{n}"}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spyglass.toml"
    path.write_text(toml_text(document))
    return path


def stored_events(folder: Path) -> int:
    with duckdb.connect(str(folder / "state" / "spyglass.duckdb"), read_only=True) as con:
        return con.execute("SELECT count(*) FROM events").fetchone()[0]


def test_version_is_the_installed_one():
    result = spyglass("--version")
    assert (result.returncode, result.stdout) == (0, f"spyglass {version('spyglass')}\n")


def test_ingest_reports_lines_read_and_events_stored_apart(tmp_path):
    log = tmp_path / "engine.log"
    log.write_bytes(FIXTURE.read_bytes() * 3)  # a log the agent has not seen: 3 x the fixture
    config = write_config(tmp_path, log)
    first = spyglass("ingest", "-c", str(config))
    assert first.returncode == 0, first.stderr
    lines = len(log.read_bytes().splitlines())
    events = stored_events(tmp_path)
    assert 0 < events < lines  # the fixture has debug and continuation lines that are no event
    assert f"read {lines:,} lines from 1 of 1 files; {events:,} events stored" in first.stdout
    with log.open("ab") as out:  # the log grows by one fixture's worth; only that is read again
        out.write(FIXTURE.read_bytes())
    again = spyglass("ingest", "-c", str(config))
    assert f"read {len(FIXTURE.read_bytes().splitlines()):,} lines" in again.stdout
    assert f"{stored_events(tmp_path) - events:,} events stored" in again.stdout
    assert stored_events(tmp_path) > events


def test_ingest_warns_per_missing_file_and_fails_when_none_exists(tmp_path):
    log = tmp_path / "engine.log"
    log.write_bytes(FIXTURE.read_bytes())
    gone_a, gone_b = tmp_path / "gone-a.log", tmp_path / "gone-b.log"
    some = spyglass("ingest", "-c", str(write_config(tmp_path, log, gone_a, gone_b)))
    assert some.returncode == 0, some.stderr
    assert f"sources.engine-1: no file at {gone_a}" in some.stderr
    assert f"sources.engine-2: no file at {gone_b}" in some.stderr
    assert "from 1 of 3 files" in some.stdout
    none = spyglass("ingest", "-c", str(write_config(tmp_path / "none", gone_a)))
    assert none.returncode == 1
    assert f"sources.engine-b: no file at {gone_a}" in none.stderr
    assert "none of the 1 configured files exists" in none.stderr


def test_json_nests_fields_and_a_csv_id_feeds_trace(tmp_path):
    log = tmp_path / "engine.log"
    log.write_bytes(FIXTURE.read_bytes())
    config = str(write_config(tmp_path, log))
    assert spyglass("ingest", "-c", config).returncode == 0
    rows = [
        json.loads(line)
        for line in spyglass(
            "sql",
            "-c",
            config,
            "--format",
            "json",
            "SELECT kind, fields, request_id FROM events WHERE kind = 'queued' ORDER BY ts",
        ).stdout.splitlines()
    ]
    assert rows and all(isinstance(row["fields"], dict) for row in rows)
    assert rows[0]["fields"]["req"] == rows[0]["request_id"]
    out = spyglass(
        "sql", "-c", config, "--format", "csv", "SELECT request_id FROM events WHERE kind = 'done' LIMIT 1"
    ).stdout
    assert "\r" not in out
    request_id = out.splitlines()[1]
    for pasted in (request_id + "\r", f" {request_id}\r\n"):  # as a CRLF csv or a terminal hands it over
        tree = spyglass("trace", "-c", config, pasted)
        assert tree.returncode == 0, tree.stderr
        assert request_id in tree.stdout and "prefill" in tree.stdout and "decode" in tree.stdout


def test_an_unknown_format_is_refused_by_name(tmp_path):
    log = tmp_path / "engine.log"
    log.write_bytes(FIXTURE.read_bytes())
    result = spyglass("sql", "-c", str(write_config(tmp_path, log)), "--format", "xml", "SELECT 1")
    assert result.returncode == 2
    assert "xml" in result.stderr


def test_run_lives_through_a_log_folder_that_appears_later(tmp_path):
    import httpx
    from conftest import wait_until

    from spyglass.ports import free_port

    port, log = free_port(), tmp_path / "not-yet" / "engine.log"
    config = tmp_path / "spyglass.toml"
    config.write_text(toml_text(engine_log_config(log, tmp_path / "state", listen=f"127.0.0.1:{port}")))
    with subprocess.Popen(
        [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)], stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            for line in proc.stderr:
                if "metrics at" in line:
                    break
            log.parent.mkdir()
            log.write_bytes(FIXTURE.read_bytes())
            key = 'spyglass_engine_evictions_total{instance="strata-b",lane="normal"} 1.0'  # its one evict event
            wait_until(lambda: key in httpx.get(f"http://127.0.0.1:{port}/metrics").text, what="the late log read")
            assert proc.poll() is None
        finally:
            proc.terminate()
            proc.communicate(timeout=30)
