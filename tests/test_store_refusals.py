"""Issue 29 item 2 (and issue 31 item 3): any store opens, or says why in one line.

An old store with rows the migration cannot convert migrates the rest and sets those aside (they
made the start fail, every start); a store of a newer schema is refused and left untouched (each
commit added a schema row to it); a SQLite file is refused without DuckDB fetching an extension; a
read-only store folder is one line in `ingest` and `run`, not a 40-line traceback."""

from __future__ import annotations

import gzip
import hashlib
import sqlite3
import subprocess
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from spyglass.cli.app import app
from spyglass.config import engine_log_toml
from spyglass.exporters import event_schema
from spyglass.exporters.duckdb_open import StoreUnusable
from spyglass.exporters.store import SET_ASIDE, DuckDBStore
from spyglass.ports import free_port

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SOURCES = {"engine-b": "engine_log"}
BAD_FIELDS = ["null", "[1, 2]", '"text"', '{"conv": "x", "bytes": 9223372036854775808, "reason": "budget"}']


def v1_store(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.decompress((FIXTURES / "store_v1" / "spyglass.duckdb.gz").read_bytes()))
    return path


def test_rows_the_migration_cannot_convert_are_set_aside_and_counted(tmp_path):
    db = v1_store(tmp_path / "spyglass.duckdb")
    con = duckdb.connect(str(db))
    for n, fields in enumerate(BAD_FIELDS):
        con.execute(
            "INSERT INTO events SELECT ts, source, kind, instance, host, request_id, ?::JSON, ? FROM events"
            " WHERE seq = 14",
            [fields, 100 + n],
        )
    [(total,)] = con.execute("SELECT count(*) FROM events").fetchall()
    con.close()
    store = DuckDBStore(
        db,
        {
            "engine-b": "engine_log",
            "gateway": "gateway_log",
            "supervisord": "supervisord_log",
            "switch": "switch_log",
            "serve-replay": "serve_status",
        },
    )  # migrates
    try:
        assert store.schema_version() == event_schema.SCHEMA_VERSION and store.set_aside == len(BAD_FIELDS)
        [(kept,)] = store.con.execute("SELECT count(*) FROM events").fetchall()
        assert kept == total - len(BAD_FIELDS)
        aside = store.con.execute(f"SELECT seq, fields, reason FROM {SET_ASIDE} ORDER BY seq").fetchall()
        assert [row[0] for row in aside] == [100, 101, 102, 103]
        assert "9223372036854775808" in aside[3][1] and all(row[2] for row in aside)
    finally:
        store.close()


def test_a_store_of_a_newer_schema_is_refused_and_never_written(tmp_path):
    db = tmp_path / "spyglass.duckdb"
    DuckDBStore(db, SOURCES).close()
    con = duckdb.connect(str(db))
    newer = event_schema.SCHEMA_VERSION + 1
    con.execute("INSERT INTO store_schema VALUES (?, now())", [newer])
    con.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with pytest.raises(StoreUnusable, match=f"schema version {newer}, newer than the {newer - 1} this spyglass writes"):
        DuckDBStore(db, SOURCES)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert not db.with_name(db.name + ".wal").exists()


def test_a_sqlite_file_is_refused_without_loading_an_extension(tmp_path):
    db = tmp_path / "spyglass.duckdb"
    sqlite3.connect(db).execute("CREATE TABLE t (a)").connection.commit()
    with pytest.raises(StoreUnusable, match="is a SQLite database, not a spyglass store"):
        DuckDBStore(db, SOURCES)
    # The second line of defence, for any file DuckDB is handed: no extension is fetched or loaded.
    from spyglass.exporters.duckdb_open import connect

    with pytest.raises(duckdb.Error) as refused:
        connect(db)
    assert "autoload" in str(refused.value).lower() or "extension" in str(refused.value).lower()


@pytest.fixture
def read_only_folder(tmp_path, spawns):
    """A folder on a tmpfs remounted read-only (as root, a chmod would not stop the writes)."""
    import os

    if os.geteuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    folder = tmp_path / "ro"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], check=True)
    try:
        (folder / "state").mkdir()
        DuckDBStore(folder / "state" / "spyglass.duckdb", SOURCES).close()
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.mark.parametrize("command", ["ingest", "run"])
def test_a_store_in_a_read_only_folder_is_one_line(tmp_path, read_only_folder, command):
    log = tmp_path / "engine.log"
    log.write_bytes((FIXTURES / "engine_log" / "strata-iq3_xxs-b.log").read_bytes())
    config = tmp_path / "spyglass.toml"
    config.write_text(engine_log_toml(log, read_only_folder / "state", listen=f"127.0.0.1:{free_port()}"))
    result = CliRunner().invoke(app, [command, "-c", str(config)])
    assert result.exit_code == 1 and result.exception is None or isinstance(result.exception, SystemExit), result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "read-only" in lines[0].lower(), result.output


@pytest.fixture
def read_only_v1(tmp_path, spawns):
    """A store of schema 1 on a tmpfs remounted read-only: nothing can migrate it."""
    import os

    if os.geteuid() != 0:
        pytest.skip("remounting a tmpfs read-only needs root; a chmod does not stop root's writes")
    folder = tmp_path / "ro"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)], check=True)
    try:
        v1_store(folder / "state" / "spyglass.duckdb")
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.mark.parametrize("command", ["timeline", "diagnose", "requests"])
def test_a_read_only_store_of_schema_1_is_one_line_naming_the_migration(tmp_path, read_only_v1, command):
    """Round 4: on a read-only v1 store these failed with DuckDB's Binder and Catalog errors."""
    config = tmp_path / "spyglass.toml"
    config.write_text(
        engine_log_toml(tmp_path / "engine.log", read_only_v1 / "state", listen=f"127.0.0.1:{free_port()}")
    )
    result = CliRunner().invoke(app, [command, "-c", str(config)])
    lines = result.output.strip().splitlines()
    assert result.exit_code != 0 and len(lines) == 1, result.output
    assert "is of schema 1" in lines[0] and "spyglass store migrate" in lines[0], result.output
