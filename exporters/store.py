"""The DuckDB store: events (TIMESTAMPTZ, UTC), tailer checkpoints and the metric state in one
transaction, so a kill -9 at any point neither loses nor duplicates a stored event or a count.
The agent is the only writer (duckdb-forensics.md §1); analysts go through spyglass sql.

Every event gets a `seq`, its position in the stream of stored events: strictly increasing in
commit order, never reused (not even after retention deleted every row: the Parquet watermark
is a floor), the same on every run that reads the same lines. Parquet publication
(exporters/parquet.py) keeps its watermark here and reads by seq; retention deletes only rows
at or below the watermark.
"""
from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa
from loguru import logger

from collectors.event import Event
from exporters.statefile import SavedState

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    ts TIMESTAMPTZ NOT NULL,
    source VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    instance VARCHAR,
    host VARCHAR,
    request_id VARCHAR,
    fields JSON,
    seq BIGINT
);
ALTER TABLE events ADD COLUMN IF NOT EXISTS seq BIGINT;
CREATE TABLE IF NOT EXISTS checkpoints (source VARCHAR PRIMARY KEY, state JSON NOT NULL, updated TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS agent_state (name VARCHAR PRIMARY KEY, state JSON NOT NULL, updated TIMESTAMPTZ);
"""

EVENT_SCHEMA = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("source", pa.string()),
                          ("kind", pa.string()), ("instance", pa.string()), ("host", pa.string()),
                          ("request_id", pa.string()), ("fields", pa.string())])


def _json_column(events: list[Event]) -> pa.Array:
    """The fields of every event as one Arrow string column, built from a single buffer."""
    blobs = [orjson.dumps(e.fields, default=str) for e in events]
    offsets = pa.py_buffer(pa.array([0, *accumulate(map(len, blobs))], pa.int32()).buffers()[1])
    return pa.StringArray.from_buffers(len(blobs), offsets, pa.py_buffer(b"".join(blobs)))


def events_table(events: list[Event]) -> pa.Table:
    """Events as an Arrow table: DuckDB inserts it in bulk (executemany is 300x slower)."""
    return pa.Table.from_arrays([
        pa.array([round(e.ts * 1_000_000) for e in events], pa.int64()).cast(EVENT_SCHEMA.field("ts").type),
        pa.array([e.source for e in events], pa.string()),
        pa.array([e.kind for e in events], pa.string()),
        pa.array([e.instance for e in events], pa.string()),
        pa.array([e.host for e in events], pa.string()),
        pa.array([e.request_id for e in events], pa.string()),
        _json_column(events),
    ], schema=EVENT_SCHEMA)


LAST_STORABLE_SECONDS = 253_402_300_800.0  # 10000-01-01T00:00:00Z: past it no Python date, no Parquet partition


def storable(event: Event) -> bool:
    """Whether the store (and Parquet after it) can take the event's timestamp: 1970 to the year 9999."""
    return 0.0 <= event.ts < LAST_STORABLE_SECONDS  # false for NaN too


def storable_table(events: list[Event]) -> tuple[pa.Table, list[Event]]:
    """The events as a table, less those whose fields will not encode (returned): one bad record
    never blocks the ones behind it. Timestamps are checked before (`storable`, in the committer,
    and at the edges: collectors/timebounds.py); this is the store's own last guard."""
    try:
        return events_table(events), []
    except (TypeError, ValueError, OverflowError, pa.ArrowException):
        pass
    kept, refused = [], []
    for event in events:
        try:
            events_table([event])
        except (TypeError, ValueError, OverflowError, pa.ArrowException):
            refused.append(event)
        else:
            kept.append(event)
    return events_table(kept), refused


@dataclass(frozen=True)
class Publication:
    published: int = -1  # every event with seq <= this is in Parquet
    pending: tuple[int, int] | None = None  # (first, last) seq of a publication under way


class DuckDBStore:
    """Events, checkpoints and the metric state in one DuckDB file. Guarantees: a `commit` is one
    transaction (all of its events, checkpoints and metric state, or none); `load` returns what the
    last finished commit wrote; timestamps are stored as UTC; the connection analysts query through
    cannot read or write other files nor change its settings."""

    keeps_events = True

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.invalidated: str | None = None  # why DuckDB invalidated the connection, until it is reopened
        self._open()

    def _open(self) -> None:
        self.con = duckdb.connect(str(self.path))
        self.con.execute("SET TimeZone = 'UTC'")
        self.con.execute(SCHEMA)
        # A store from before `seq`: its rows keep their storage order.
        self.con.execute("UPDATE events SET seq = rowid WHERE seq IS NULL")
        self.next_seq = self._first_free_seq()
        # Analysts query through this connection (/api/sql): no file access, settings frozen.
        self.con.execute("SET enable_external_access = false")
        self.con.execute("SET lock_configuration = true")
        self._written: dict[str, str] = {}  # checkpoint JSON per source as committed: unchanged ones are not rewritten
        self._has_metrics = False

    def _reopen(self) -> bool:
        """Reopen the file after DuckDB invalidated the connection (a checkpoint that failed, on a
        full disk): the reopened store holds the last commit that landed. Returns whether the batch
        that failed landed anyway (its events are there: seqs past ours); raises while the file
        cannot be opened (the disk is still full), and is tried again at the next commit."""
        with contextlib.suppress(duckdb.Error):
            self.con.close()
        before = self.next_seq
        self._open()
        self.load()  # what was committed: unchanged checkpoints are not rewritten
        logger.warning("the store {} is reopened after '{}'; it resumes from its last commit", self.path,
                       self.invalidated)
        self.invalidated = None
        return self.next_seq > before

    def load(self) -> SavedState:
        saved = SavedState()
        for source, state in self.con.execute("SELECT source, state FROM checkpoints").fetchall():
            saved.checkpoints[source] = json.loads(state)
            self._written[source] = state
        row = self.con.execute("SELECT state FROM agent_state WHERE name = 'metrics'").fetchone()
        saved.metrics = json.loads(row[0]) if row else None
        self._has_metrics = row is not None
        return saved

    def commit(self, events: list[Event], checkpoints: dict[str, dict[str, Any]],
               metrics: dict[str, Any]) -> list[Event]:
        """One transaction: the events appended from Arrow, the checkpoints that changed in one
        UPDATE (new sources in one INSERT), the metric state in one UPDATE. INSERT OR REPLACE
        cost 3-4 times an UPDATE of the same row, and register + INSERT ... SELECT 3 times
        `from_arrow().insert_into` (profiled: docs/benchmarks.md). Returns the events set aside as
        unstorable (`storable_table`); the rest are committed."""
        if self.invalidated is not None and self._reopen():
            return []  # the batch landed before the checkpoint that failed: nothing to write twice
        now = time.time()
        table, refused = storable_table(events) if events else (None, [])
        changed = {source: json.dumps(state) for source, state in checkpoints.items()}
        changed = {source: state for source, state in changed.items() if self._written.get(source) != state}
        con = self.con
        con.begin()
        try:
            if table is not None and table.num_rows:
                batch = table.append_column(
                    "seq", pa.array(range(self.next_seq, self.next_seq + table.num_rows), pa.int64()))
                con.from_arrow(batch).insert_into("events")
            self._write_checkpoints(changed, now)
            if self._has_metrics:
                con.execute("UPDATE agent_state SET state = ?, updated = to_timestamp(?) WHERE name = 'metrics'",
                            [json.dumps(metrics), now])
            else:
                # the first commit of this connection: another writer (a crashed run's replay) may have saved one
                con.execute("INSERT OR REPLACE INTO agent_state VALUES ('metrics', ?, to_timestamp(?))",
                            [json.dumps(metrics), now])
            con.commit()
        except duckdb.FatalException as exc:  # "database has been invalidated": this connection is dead
            self.invalidated = str(exc).split("\n", 1)[-1][:300]
            logger.error("the store {} was invalidated by DuckDB ({}); it is reopened from disk at the next"
                         " attempt, resuming from the last commit", self.path, self.invalidated)
            raise
        except BaseException:
            _rollback(con)
            raise
        self._written.update(changed)
        self._has_metrics = True
        self.next_seq += table.num_rows if table is not None else 0
        return refused

    def _write_checkpoints(self, changed: dict[str, str], now: float) -> None:
        old = [(source, state) for source, state in changed.items() if source in self._written]
        new = [(source, state) for source, state in changed.items() if source not in self._written]
        if old:
            values = ", ".join(["(?, ?)"] * len(old))
            self.con.execute(f"UPDATE checkpoints SET state = v.state::JSON, updated = to_timestamp(?)"
                             f" FROM (VALUES {values}) v(source, state) WHERE checkpoints.source = v.source",
                             [now, *(x for pair in old for x in pair)])
        if new:
            values = ", ".join(["(?, ?::JSON, to_timestamp(?))"] * len(new))
            self.con.execute(f"INSERT OR REPLACE INTO checkpoints VALUES {values}",
                             [x for source, state in new for x in (source, state, now)])

    def _first_free_seq(self) -> int:
        [(last,)] = self.con.execute("SELECT max(seq) FROM events").fetchall()
        publication = self.publication()
        return max(last if last is not None else -1, publication.published,
                   publication.pending[1] if publication.pending else -1) + 1

    # Parquet publication (exporters/parquet.py says why this is exactly once).

    def publication(self) -> Publication:
        """The watermark: every event with seq <= `published` is in Parquet; `pending` is the
        seq range of a publication that began and has not been recorded as done."""
        # fetchall: in DuckDB 2.0 a result not fetched to its end holds the connection
        rows = self.con.execute("SELECT state FROM agent_state WHERE name = 'parquet'").fetchall()
        if not rows:
            return Publication()
        saved = json.loads(rows[0][0])
        return Publication(saved["published"], tuple(saved["pending"]) if saved.get("pending") else None)

    def record_publication(self, publication: Publication) -> None:
        self.con.execute("INSERT OR REPLACE INTO agent_state VALUES ('parquet', ?, to_timestamp(?))",
                         [json.dumps({"published": publication.published,
                                      "pending": list(publication.pending) if publication.pending else None}),
                          time.time()])

    def last_seq(self) -> int:
        """The seq of the last committed event (-1 if none was ever stored)."""
        return self.next_seq - 1

    def events_between(self, first: int, last: int) -> pa.Table:
        """The committed events with first <= seq <= last, ordered by (ts, seq), `fields` as text."""
        return self.con.sql(
            "SELECT ts, seq, source, kind, instance, host, request_id, fields::VARCHAR AS fields"
            " FROM events WHERE seq BETWEEN ? AND ? ORDER BY ts, seq", params=[first, last]).to_arrow_table()

    def delete_published(self, before: float, upto_seq: int) -> int:
        """Delete the events older than `before` (epoch seconds) whose seq <= `upto_seq`; how many."""
        [(deleted,)] = self.con.execute("DELETE FROM events WHERE seq <= ? AND ts < to_timestamp(?)",
                                        [upto_seq, before]).fetchall()
        return int(deleted)

    def close(self) -> None:
        self.con.close()


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back if a transaction is still open: a failed COMMIT (disk full) has ended it already."""
    with contextlib.suppress(duckdb.TransactionException):
        con.rollback()
