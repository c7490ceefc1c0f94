"""Issue 29 item 5: publication that cannot get stuck. A span burst made a publication batch (up to
500,000 rows) exceed the store connection's memory limit, and every later publication failed the
same way, also after a restart; with `retain_hours` set the store would then grow without limit,
since retention deletes only published rows. Now a failed batch is abandoned and halved, batches
grow back no further than the memory limit holds, and a publication stuck for `retain_hours` lets
retention delete past the horizon, counted."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from spyglass.collectors.clock import ManualClock
from spyglass.collectors.event import Event
from spyglass.config import engine_log_config, parse_config
from spyglass.config.signals import metric_state
from spyglass.exporters.parquet import ParquetPublisher
from spyglass.exporters.store import DuckDBStore

T0 = 1_792_380_000.0
pytestmark = pytest.mark.usefixtures("spawns")  # DuckDB files and Parquet on disk: the e2e tier


def wide_spans(n: int, start: float = T0) -> list[Event]:
    return [
        Event(
            start + i * 0.001,
            "otlp",
            "span",
            "gw",
            {"name": "x", "attributes": {"spyglass.k": "v" * 600, "n": i}},
            None,
            "h1",
        )
        for i in range(n)
    ]


def state_for(tmp_path: Path):
    return metric_state(parse_config(engine_log_config(tmp_path / "a.log", tmp_path), "test"))


def test_a_burst_past_the_memory_limit_is_published_in_smaller_batches(tmp_path):
    store = DuckDBStore(tmp_path / "state" / "spyglass.duckdb", memory_limit="24MiB", threads=1)
    state = state_for(tmp_path)
    try:
        store.commit(wide_spans(20_000), {}, {})
        clock = ManualClock(T0 + 600)
        publisher = ParquetPublisher(store, clock, tmp_path / "pq", host="h1", interval=1, state=state)
        for _ in range(30):
            publisher.tick()
            clock.advance(2)
            if store.publication().published == store.last_seq():
                break
        assert store.publication().published == store.last_seq() == 19_999
        failures = state.values["spyglass_parquet_publish_failures_total"][()]
        assert 1 <= failures <= 6  # each halves the batch: a few, never one per tick forever
        with duckdb.connect() as con:
            [(count, distinct)] = con.execute(
                f"SELECT count(*), count(DISTINCT seq) FROM"
                f" read_parquet('{tmp_path}/pq/host=*/date=*/hour=*/*.parquet')"
            ).fetchall()
        assert count == distinct == 20_000  # each row once: the abandoned ranges left no file
    finally:
        store.close()


def test_a_stuck_publication_lets_retention_delete_and_count_past_the_horizon(tmp_path):
    store = DuckDBStore(tmp_path / "state" / "spyglass.duckdb")
    state = state_for(tmp_path)
    try:
        clock = ManualClock(T0 + 3 * 3600)
        folder = tmp_path / "pq"
        publisher = ParquetPublisher(store, clock, folder, host="h1", interval=60, retain_hours=1, state=state)
        store.commit(wide_spans(100, T0) + wide_spans(100, T0 + 4 * 3600), {}, {})
        (folder / "host=h1").write_text("not a folder")  # every publication fails
        publisher.tick()
        assert store.con.execute("SELECT count(*) FROM events").fetchall() == [(200,)]  # not stuck long: kept
        clock.advance(3700)  # over an hour of failures
        publisher.tick()
        assert state.values["spyglass_parquet_rows_dropped_unpublished_total"][()] == 100
        assert store.con.execute("SELECT count(*) FROM events").fetchall() == [(100,)]  # the recent ones stay
    finally:
        store.close()
