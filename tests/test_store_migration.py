"""A store of schema 1 (one `events` table, fields as JSON), written by the release before the typed store
(tests/fixtures/store_v1: `spyglass ingest` of the engine, gateway, supervisord, switch and serve-status
fixtures at da7b144), is migrated once, in one transaction, and loses nothing; a migration killed -9
halfway leaves schema 1 whole, and the next one migrates every event exactly once."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from spyglass.cli.app import app
from spyglass.exporters.event_schema import SCHEMA_VERSION, quoted, source_view
from spyglass.exporters.request_rows import from_events_sql, row_tables
from spyglass.exporters.store import DuckDBStore

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SOURCES = {
    "engine-b": ("engine_log", "engine_log/strata-iq3_xxs-b.log"),
    "gateway": ("gateway_log", "gateway_log/rag-proxy.log"),
    "supervisord": ("supervisord_log", "supervisord_log/supervisord.log"),
    "switch": ("switch_log", "switch_log/switch-engine.log"),
    "serve-replay": ("serve_status", "serve_status/snapshots.jsonl"),
}
# The child migrates in steps of 10 events and, after its third step, says so and waits on stdin: it is
# killed there, mid-transaction, at a point the test sees, not after a sleep.
CHILD = """
import sys
from pathlib import Path
from spyglass.exporters.store import DuckDBStore
store = DuckDBStore(Path(sys.argv[1]))
store.sources.update(dict(arg.split("=") for arg in sys.argv[2:]))
def step(done, total):
    print(f"migrated {done} of {total}", flush=True)
    if done >= 30:
        sys.stdin.readline()
store.migrate(step, rows=10)
print("committed", flush=True)
"""


@pytest.fixture
def v1(tmp_path) -> Path:
    """A config over the fixtures' sources, and the schema-1 store it names (a fresh copy)."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "spyglass.duckdb").write_bytes(
        gzip.decompress((FIXTURES / "store_v1" / "spyglass.duckdb.gz").read_bytes())
    )
    lines = [f'[agent]\nhost = "v1"\nstate_dir = "{state}"\n[exporters.prometheus]\nenabled = false']
    for name, (kind, path) in SOURCES.items():
        lines.append(f'[sources.{name}]\nkind = "{kind}"\npath = "{FIXTURES / path}"')
    config = tmp_path / "spyglass.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def schema_1_events(db: Path) -> dict[int, tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT seq, epoch_us(ts), source, kind, instance, host, request_id, fields::VARCHAR FROM events"
        ).fetchall()
    finally:
        con.close()
    return {row[0]: (*row[1:-1], json.loads(row[-1])) for row in rows}


def migrated_events(db: Path) -> dict[int, tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT seq, epoch_us(ts), source, kind, instance, host, request_id, fields::VARCHAR,"
            " source_kind FROM events"
        ).fetchall()
        assert con.execute("SELECT max(version) FROM store_schema").fetchall() == [(SCHEMA_VERSION,)]
        assert rows_of(con) == rows_from_events(con)
        assert con.execute("SELECT count(*) FROM ev_other").fetchall() == [(0,)]  # every event found its kind
    finally:
        con.close()
    seqs = [row[0] for row in rows]
    assert len(seqs) == len(set(seqs)), "an event was migrated twice"
    assert all(row[-1] for row in rows)
    return {row[0]: (*row[1:-2], json.loads(row[-2])) for row in rows}


def rows_of(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple]]:
    return {name: con.execute(f"SELECT * FROM {quoted(name)} ORDER BY ALL").fetchall() for name in row_tables()}


def rows_from_events(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple]]:
    out = {}
    for name, table in row_tables().items():
        columns = ", ".join(quoted(c[0]) for c in con.execute(f"DESCRIBE {quoted(name)}").fetchall())
        sql = from_events_sql(table, source_view(table.source_kind))
        out[name] = con.execute(f"SELECT {columns} FROM ({sql}) ORDER BY ALL").fetchall()
    return out


def version(db: Path) -> int:
    store = DuckDBStore(db)
    try:
        return store.schema_version()
    finally:
        store.close()


def test_spyglass_store_migrate_keeps_every_event_and_records_the_version(v1):
    db = v1.parent / "state" / "spyglass.duckdb"
    before = schema_1_events(db)
    assert len(before) == 89 and version(db) == 1
    result = CliRunner().invoke(app, ["store", "migrate", "--config", str(v1), "--batch", "25"])
    assert result.exit_code == 0, result.output
    assert f"schema 1 -> {SCHEMA_VERSION}, 89 events migrated" in result.stdout
    assert migrated_events(db) == before
    again = CliRunner().invoke(app, ["store", "migrate", "--config", str(v1)])
    assert f"already at schema {SCHEMA_VERSION}" in again.stdout
    assert migrated_events(db) == before


def test_a_migration_killed_halfway_leaves_schema_1_whole_and_the_next_migrates_once(v1):
    db = v1.parent / "state" / "spyglass.duckdb"
    before = schema_1_events(db)
    sources = [f"{name}={kind}" for name, (kind, _) in SOURCES.items()]
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), *sources],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    ) as child:
        try:
            seen = [child.stdout.readline().strip() for _ in range(3)]  # type: ignore[union-attr]
            assert seen == ["migrated 10 of 89", "migrated 20 of 89", "migrated 30 of 89"]
            os.kill(child.pid, signal.SIGKILL)  # mid-transaction: 30 events written to their kind tables, uncommitted
        finally:
            child.kill()  # already dead, unless an assertion above failed
            child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    assert version(db) == 1 and schema_1_events(db) == before  # the killed transaction left nothing behind
    result = CliRunner().invoke(app, ["store", "migrate", "--config", str(v1), "--batch", "10"])
    assert result.exit_code == 0, result.output
    assert migrated_events(db) == before


# A store of schema 2 (today's release: the kind tables, no per-request rows) is migrated by a child that,
# once it has built the first table of rows, says so and waits: it is killed there, mid-transaction.
CHILD_V2 = """
import sys
from pathlib import Path
from spyglass.exporters.store import DuckDBStore
store = DuckDBStore(Path(sys.argv[1]))
store.sources.update(dict(arg.split("=") for arg in sys.argv[2:]))
def built(table):
    print(f"built {table}", flush=True)
    sys.stdin.readline()
store.migrate(rebuilt=built)
print("committed", flush=True)
"""


def as_schema_2(db: Path) -> None:
    """The store as today's release leaves it: its kind tables and views, no rows, schema 2."""
    con = duckdb.connect(str(db))
    try:
        for name in row_tables():
            con.execute(f"DROP TABLE {quoted(name)}")
        con.execute("DELETE FROM store_schema")
        con.execute("INSERT INTO store_schema VALUES (2, now())")
    finally:
        con.close()


def test_a_store_of_schema_2_killed_while_its_rows_are_built_stays_whole_and_is_migrated_once(v1):
    db = v1.parent / "state" / "spyglass.duckdb"
    before = schema_1_events(db)
    assert CliRunner().invoke(app, ["store", "migrate", "--config", str(v1)]).exit_code == 0
    as_schema_2(db)
    assert version(db) == 2
    sources = [f"{name}={kind}" for name, (kind, _) in SOURCES.items()]
    with subprocess.Popen(
        [sys.executable, "-c", CHILD_V2, str(db), *sources],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    ) as child:
        try:
            assert child.stdout.readline().strip() == f"built {next(iter(row_tables()))}"  # type: ignore[union-attr]
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.kill()
            child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT max(version) FROM store_schema").fetchall() == [(2,)]
        tables = {row[0] for row in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert not tables & set(row_tables())  # the killed transaction left no rows behind
    finally:
        con.close()
    result = CliRunner().invoke(app, ["store", "migrate", "--config", str(v1)])
    assert result.exit_code == 0, result.output
    assert f"schema 2 -> {SCHEMA_VERSION}" in result.stdout
    found = migrated_events(db)  # also: the rows equal the rows of every event, once each
    assert found == before
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert sum(map(len, rows_of(con).values())) > 10
    finally:
        con.close()
