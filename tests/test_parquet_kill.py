"""`spyglass ingest` with Parquet publication on, killed with SIGKILL at random points (inside
commits, publications and compactions) and restarted: in the end the segments hold exactly the
stored events, each once, and those equal one uninterrupted run's."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from conftest import kill_at_random_until_done
from test_kill_loop import write_log
from test_parquet import COLUMNS, normal, segments

from spyglass.config import engine_log_toml

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier


def write_config(folder: Path, log: Path) -> Path:
    path = folder / "spyglass.toml"
    text = engine_log_toml(log, folder / "state", host="h1", read_budget_bytes=65536, commit_interval_seconds=0)
    path.write_text(
        text.replace(
            "[exporters.store]\nenabled = true",
            f'[exporters.store]\nenabled = true\nparquet_dir = "{folder / "pq"}"\npublish_interval_seconds = 0',
        )
    )
    return path


def stored(folder: Path) -> list[tuple]:
    con = duckdb.connect(str(folder / "state" / "spyglass.duckdb"), read_only=True)
    try:
        return normal(con.execute(f"SELECT {COLUMNS} FROM events ORDER BY seq").fetchall())
    finally:
        con.close()


def pending(folder: Path) -> bool:
    """Whether the store records a publication begun and not finished (the kill landed in it)."""
    con = duckdb.connect(str(folder / "state" / "spyglass.duckdb"), read_only=True)
    try:
        # A kill before the first commit leaves a store file without its tables: nothing pending.
        if not con.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = 'agent_state'").fetchall():
            return False
        rows = con.execute("SELECT state FROM agent_state WHERE name = 'parquet'").fetchall()
    finally:
        con.close()
    return bool(rows) and json.loads(rows[0][0])["pending"] is not None


def ingest(config: Path) -> list[str]:
    return [sys.executable, "-m", "spyglass.cli.app", "ingest", "-c", str(config)]


def test_sigkill_during_publication_loses_and_duplicates_nothing_in_parquet(tmp_path):
    log = tmp_path / "engine.log"
    write_log(log, turns=6_000)  # 33 hours of engine log: many hour partitions, each compacted
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    clean.mkdir()
    killed.mkdir()
    started = time.monotonic()
    subprocess.run(ingest(write_config(clean, log)), check=True, capture_output=True)
    duration = time.monotonic() - started

    landed_in_publication: list[bool] = []
    left_behind: set[Path] = set()  # part files a kill left half written

    def note_publication() -> None:
        landed_in_publication.append((killed / "state" / "spyglass.duckdb").exists() and pending(killed))
        left_behind.update((killed / "pq").rglob(".*.tmp"))

    def writing_a_part() -> bool:  # a part being written now: a publication (or a compaction) under way
        return any(path not in left_behind for path in (killed / "pq").rglob(".*.tmp"))

    kills = kill_at_random_until_done(
        ingest(write_config(killed, log)),
        duration,
        20261201,
        (0.1, 0.4),
        after_kill=note_publication,
        kill_when=writing_a_part,
    )
    in_publication = sum(landed_in_publication)
    assert kills >= 3, f"only {kills} kills landed before ingest finished"
    assert in_publication >= 1, f"none of {kills} kills landed inside a publication"

    expected = stored(clean)
    assert len(expected) > 20_000
    assert segments(clean / "pq") == expected
    actual = segments(killed / "pq")
    seqs = [row[1] for row in actual]
    assert len(seqs) == len(set(seqs)), "an event was published twice"
    assert actual == stored(killed) == expected  # nothing lost, the same seqs and rows as a clean run
