"""The agent's read-only copies (spyglass/agent/snapshot.py) carry the per-request rows when the store's rows hold
every stored event, table by table by column name: a table an older agent made, its columns in another order,
is copied whole and right."""

from __future__ import annotations

import duckdb

from spyglass.agent.snapshot import Snapshots
from spyglass.exporters.event_schema import quoted
from spyglass.exporters.store import DuckDBStore


def test_a_copy_holds_the_rows_of_a_table_whose_columns_are_in_another_order(tmp_path) -> None:
    store = DuckDBStore(tmp_path / "spyglass.duckdb", {})
    try:
        con = store.con
        columns = con.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'requests_engine'"
            " ORDER BY column_index"
        ).fetchall()
        assert columns[-1][0] == "reuse_origin"
        older = [columns[-1], *columns[:-1]]  # reuse_origin first, as a table altered since would not have it
        con.execute("DROP TABLE requests_engine")
        con.execute(f"CREATE TABLE requests_engine ({', '.join(f'{quoted(n)} {t}' for n, t in older)})")
        con.execute("INSERT INTO requests_engine (request_id, reuse_origin) VALUES ('r1', 'parked')")
        copy = Snapshots(lambda: store.con, tmp_path / "copies", 5.0).take()
    finally:
        store.close()
    read = duckdb.connect(str(copy.path), read_only=True)
    try:
        assert read.execute("SELECT request_id, reuse_origin FROM requests_engine").fetchall() == [("r1", "parked")]
    finally:
        read.close()
