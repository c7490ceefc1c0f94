"""Where events and the agent's resumable state go, committed together.

`DuckDBStore`: events (TIMESTAMPTZ, UTC), tailer checkpoints and the metric state in one
transaction, so a kill -9 at any point neither loses nor duplicates a stored event or a count.
`StateFile`: the metrics-only mode; the same checkpoint + metric state, written tmp -> fsync ->
rename -> fsync(dir). The agent is the only writer of either (duckdb-forensics.md §1).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import duckdb
import pyarrow as pa
from loguru import logger

from collectors.event import Event

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    ts TIMESTAMPTZ NOT NULL,
    source VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,
    instance VARCHAR,
    host VARCHAR,
    request_id VARCHAR,
    fields JSON
);
CREATE TABLE IF NOT EXISTS checkpoints (source VARCHAR PRIMARY KEY, state JSON NOT NULL, updated TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS agent_state (name VARCHAR PRIMARY KEY, state JSON NOT NULL, updated TIMESTAMPTZ);
"""

EVENT_SCHEMA = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("source", pa.string()),
                          ("kind", pa.string()), ("instance", pa.string()), ("host", pa.string()),
                          ("request_id", pa.string()), ("fields", pa.string())])


@dataclass
class SavedState:
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: dict[str, Any] | None = None


class Store(Protocol):
    def load(self) -> SavedState: ...

    def commit(self, events: list[Event], checkpoints: dict[str, dict[str, Any]],
               metrics: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def events_table(events: list[Event]) -> pa.Table:
    """Events as an Arrow table: DuckDB inserts it in bulk (executemany is 300x slower)."""
    dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode
    return pa.Table.from_arrays([
        pa.array([round(e.ts * 1_000_000) for e in events], pa.int64()).cast(EVENT_SCHEMA.field("ts").type),
        pa.array([e.source for e in events], pa.string()),
        pa.array([e.kind for e in events], pa.string()),
        pa.array([e.instance for e in events], pa.string()),
        pa.array([e.host for e in events], pa.string()),
        pa.array([e.request_id for e in events], pa.string()),
        pa.array([dumps(e.fields) for e in events], pa.string()),
    ], schema=EVENT_SCHEMA)


class DuckDBStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.con = duckdb.connect(str(path))
        self.con.execute("SET TimeZone = 'UTC'")
        self.con.execute(SCHEMA)
        # Analysts query through this connection (/api/sql): no file access, settings frozen.
        self.con.execute("SET enable_external_access = false")
        self.con.execute("SET lock_configuration = true")

    def load(self) -> SavedState:
        saved = SavedState()
        for source, state in self.con.execute("SELECT source, state FROM checkpoints").fetchall():
            saved.checkpoints[source] = json.loads(state)
        row = self.con.execute("SELECT state FROM agent_state WHERE name = 'metrics'").fetchone()
        saved.metrics = json.loads(row[0]) if row else None
        return saved

    def commit(self, events: list[Event], checkpoints: dict[str, dict[str, Any]],
               metrics: dict[str, Any]) -> None:
        now = time.time()
        con = self.con
        con.begin()
        try:
            if events:
                con.register("batch", events_table(events))
                con.execute("INSERT INTO events SELECT ts, source, kind, instance, host, request_id,"
                            " fields::JSON FROM batch")
                con.unregister("batch")
            for source, state in checkpoints.items():
                con.execute("INSERT OR REPLACE INTO checkpoints VALUES (?, ?, to_timestamp(?))",
                            [source, json.dumps(state), now])
            con.execute("INSERT OR REPLACE INTO agent_state VALUES ('metrics', ?, to_timestamp(?))",
                        [json.dumps(metrics), now])
            con.commit()
        except BaseException:
            con.rollback()
            raise

    def close(self) -> None:
        self.con.close()


class StateFile:
    """Checkpoints and metric state in one JSON file; events are not kept (store disabled)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path

    def load(self) -> SavedState:
        try:
            saved = json.loads(self.path.read_text())
            return SavedState(dict(saved["checkpoints"]), saved.get("metrics"))
        except FileNotFoundError:
            return SavedState()
        except (ValueError, KeyError, TypeError) as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            os.replace(self.path, aside)
            logger.error("state file {} is unreadable ({}); moved to {}; sources start over by their"
                         " start_at policy", self.path, exc, aside)
            return SavedState()

    def commit(self, events: list[Event], checkpoints: dict[str, dict[str, Any]],
               metrics: dict[str, Any]) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump({"checkpoints": checkpoints, "metrics": metrics}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def close(self) -> None:
        pass
