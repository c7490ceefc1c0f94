"""Issue 29 item 6: an SQL copy taken as the disk filled was served as an empty database ("events
does not exist"): DuckDB's checkpoint at close failed silently, and the copy code kept the main file
and deleted the WAL that held the data. Now the copy is checkpointed where a failure raises, and a
copy that is not whole is refused with a message, never served.

The disk is really full (a size-limited tmpfs, as in test_disk_full.py); what cannot be caused by
timing alone is the moment: the filler is written once the copy's rows are in its WAL, just before
its checkpoint (the `_finish` seam)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from test_disk_full import fill, small_disk  # noqa: F401 - small_disk is a fixture

from spyglass.agent.snapshot import CopyFailed, Snapshots
from spyglass.collectors.event import Event
from spyglass.exporters.store import DuckDBStore

pytestmark = pytest.mark.usefixtures("spawns")


class FillsBeforeCheckpoint(Snapshots):
    filler: Path | None = None

    def _finish(self, out: duckdb.DuckDBPyConnection) -> None:
        self.filler = fill(self.folder.parent)
        super()._finish(out)


def test_a_copy_whose_checkpoint_fails_is_refused_never_served_empty(tmp_path, small_disk):  # noqa: F811
    store = DuckDBStore(tmp_path / "spyglass.duckdb", {})
    try:
        store.commit(
            [Event(1_792_380_000.0 + i, "otlp", "span", "gw", {"name": "x" * 50}, None, "h") for i in range(5000)],
            {},
            {},
        )
        snapshots = FillsBeforeCheckpoint(lambda: store.con, small_disk / "sql-copies", 0.0)
        with pytest.raises(CopyFailed, match="no SQL copy of the store could be written"):
            snapshots.take()
        assert not list((small_disk / "sql-copies").glob("copy-*"))  # nothing left to be served
        assert snapshots.filler is not None
        snapshots.filler.unlink()
        whole = Snapshots(lambda: store.con, small_disk / "sql-copies", 0.0).take()  # space again: whole
        with duckdb.connect(str(whole.path), read_only=True) as con:
            assert con.execute("SELECT count(*) FROM events").fetchall() == [(5000,)]
    finally:
        store.close()
