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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa
from loguru import logger

from spyglass.collectors.event import Event
from spyglass.collectors.received import RECEIVED
from spyglass.exporters import event_schema, request_rows
from spyglass.exporters.duckdb_open import StoreUnusable, connect, foreign_format
from spyglass.exporters.statefile import SavedState

SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (source VARCHAR PRIMARY KEY, state JSON NOT NULL, updated TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS agent_state (name VARCHAR PRIMARY KEY, state JSON NOT NULL, updated TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS store_schema (version INTEGER NOT NULL, migrated TIMESTAMPTZ);
"""
MIGRATION_ROWS = 50_000
# A fold's memory grows with its events (a 750k-event fold of a catch-up ran out of 64 MiB): they are folded
# in steps of at most this many, and at once when this many wait, whatever agent.request_rows_seconds says.
FOLD_MAX_EVENTS = 100_000  # events read, typed and written per step of a migration
SET_ASIDE = "migration_set_aside"  # rows of an old store a migration could not convert, kept as they were
UNCONVERTIBLE = (TypeError, ValueError, OverflowError, AttributeError, pa.ArrowException, orjson.JSONDecodeError)


LAST_STORABLE_SECONDS = 253_402_300_800.0  # 10000-01-01T00:00:00Z: past it no Python date, no Parquet partition


def storable(event: Event) -> bool:
    """Whether the store (and Parquet after it) can take the event's timestamp: 1970 to the year 9999."""
    return 0.0 <= event.ts < LAST_STORABLE_SECONDS  # false for NaN too


def storable_tables(
    events: list[Event], first_seq: int, sources: Mapping[str, str]
) -> tuple[dict[str, pa.Table], list[Event]]:
    """The events as Arrow tables by kind table (event_schema.split), less those that will not encode
    (returned): one bad record never blocks the ones behind it. Timestamps are checked before
    (`storable`, in the committer, and at the edges: collectors/timebounds.py); this is the store's
    own last guard."""
    try:
        return event_schema.split(events, first_seq, sources), []
    except (TypeError, ValueError, OverflowError, pa.ArrowException):
        pass
    kept, refused = [], []
    for event in events:
        try:
            event_schema.split([event], 0, sources)
        except (TypeError, ValueError, OverflowError, pa.ArrowException):
            refused.append(event)
        else:
            kept.append(event)
    return event_schema.split(kept, first_seq, sources), refused


@dataclass(frozen=True)
class Publication:
    published: int = -1  # every event with seq <= this is in Parquet
    pending: tuple[int, int] | None = None  # (first, last) seq of a publication under way


class DuckDBStore:
    """Events, checkpoints and the metric state in one DuckDB file. Guarantees: a `commit` is one
    transaction (all of its events, checkpoints and metric state, or none); `load` returns what the
    last finished commit wrote; timestamps are stored as UTC; each event lands in its kind's typed
    table (exporters/event_schema.py), and is folded into its request's row in the same transaction
    (exporters/request_rows.py); a store of the JSON schema (version 1), or of the typed schema before
    the rows (version 2), is migrated once, in one transaction, losing nothing (`migrate`); the
    connection analysts query through cannot read or write other files nor change its settings.

    `sources` maps each configured source name to its source kind (the kind tables are per source
    kind); the pipeline gives it (`bind_sources`) before its first commit."""

    keeps_events = True

    def __init__(
        self,
        path: Path,
        sources: Mapping[str, str] | None = None,
        *,
        memory_limit: str | None = None,
        threads: int | None = None,
    ) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnusable(f"cannot make the store's folder {path.parent}: {exc.strerror or exc}") from None
        _probe_writable(path.parent)
        self.path = path
        self.settings: dict[str, Any] = {
            k: v for k, v in (("memory_limit", memory_limit), ("threads", threads)) if v is not None
        }
        self.sources: dict[str, str] = {**RECEIVED, **(sources or {})}
        self.invalidated: str | None = None  # why DuckDB invalidated the connection, until it is reopened
        self.set_aside = 0  # rows the migration could not convert (kept in SET_ASIDE)
        self._open()
        if sources is not None:
            self.migrate()

    def _open(self) -> None:
        self.con = self._connect()
        self.con.execute("SET TimeZone = 'UTC'")
        self._refuse_newer()
        self.con.execute(SCHEMA)
        if self.schema_version() == event_schema.SCHEMA_VERSION:
            self.con.begin()
            try:
                self._ensure_typed()  # kinds declared since the store was made get their tables
                self.con.commit()
            except BaseException:
                _rollback(self.con)
                raise
        self.next_seq = self._first_free_seq()
        self._load_rows_state()
        # Analysts query through this connection (/api/sql): no file access, settings frozen.
        self.con.execute("SET enable_external_access = false")
        self.con.execute("SET lock_configuration = true")
        self._written: dict[str, str] = {}  # checkpoint JSON per source as committed: unchanged ones are not rewritten
        self._has_metrics = False
        self._typed = False  # the schema is known to be the typed one (checked at the first commit)

    def _connect(self) -> duckdb.DuckDBPyConnection:
        """The connection, or StoreUnusable in one line: not a DuckDB file, or one this process cannot
        write (a read-only file or folder). A lock held by another process is raised as it is."""
        foreign = foreign_format(self.path)
        if foreign is not None:
            raise StoreUnusable(f"{self.path} is {foreign}, not a spyglass store; point agent.state_dir elsewhere")
        try:
            return connect(self.path, settings=self.settings)
        except duckdb.IOException as exc:
            text = str(exc)
            if "lock" in text.lower() and "Permission denied" not in text and "Read-only" not in text:
                raise
            raise StoreUnusable(f"cannot open the store {self.path} for writing: {_first_line(text)}") from None
        except duckdb.Error as exc:
            raise StoreUnusable(f"cannot open the store {self.path}: {_first_line(str(exc))}") from None

    def _refuse_newer(self) -> None:
        """A store written by a newer spyglass is never written to: StoreUnusable naming both versions."""
        has = self.con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'store_schema' AND table_schema = 'main'"
        ).fetchall()[0][0]
        version = self.schema_version() if has else 0
        if version > event_schema.SCHEMA_VERSION:
            self.con.close()
            raise StoreUnusable(
                f"the store {self.path} has schema version {version}, newer than the"
                f" {event_schema.SCHEMA_VERSION} this spyglass writes; it is left untouched:"
                f" run a spyglass as new as the one that wrote it"
            )

    def schema_version(self) -> int:
        """3 for the typed schema with the per-request rows; 2 for the typed schema before them; 1 for a store
        of one JSON `events` table; 0 for a new file."""
        rows = self.con.execute("SELECT max(version) FROM store_schema").fetchall()
        if rows[0][0] is not None:
            return int(rows[0][0])
        tables = self.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_name = 'events' AND table_type = 'BASE TABLE'"
        ).fetchall()
        return 1 if tables else 0

    def _ensure_typed(self) -> None:
        """Create what the typed schema lacks: a table for a kind declared since, a column for a field
        declared since, the views when anything changed (in the caller's transaction, if any)."""
        con, quoted = self.con, event_schema.quoted
        have: dict[str, set[str]] = {}
        for table, column in con.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'main'"
        ).fetchall():
            have.setdefault(table, set()).add(column)
        changed = False
        for table in event_schema.kind_tables().values():
            if table.name not in have:
                con.execute(table.create_sql())
                changed = True
                continue
            for column, type_ in table.columns():
                if column not in have[table.name]:
                    con.execute(
                        f"ALTER TABLE {quoted(table.name)} ADD COLUMN {quoted(column)} {type_.replace(' NOT NULL', '')}"
                    )
                    changed = True
        if event_schema.OTHER not in have:
            con.execute(event_schema.other_create_sql())
            changed = True
        for statement in request_rows.create_statements():
            con.execute(statement)
        for table in request_rows.row_tables().values():  # a column added since: NULL in the rows folded before it
            for column in table.columns:
                if table.name in have and column.name not in have[table.name]:
                    con.execute(f"ALTER TABLE {quoted(table.name)} ADD COLUMN {quoted(column.name)} {column.type}")
        views = ["events", *map(event_schema.source_view, event_schema.source_kinds())]
        if changed or not all(view in have for view in views):
            for statement in event_schema.view_statements():
                con.execute(statement)

    def bind_sources(self, sources: Mapping[str, str]) -> None:
        """The configured sources' kinds (name -> source kind); migrates a store of the JSON schema."""
        self.sources = {**RECEIVED, **sources}
        self.migrate()

    def migrate(
        self,
        progress: Callable[[int, int], None] | None = None,
        rows: int = MIGRATION_ROWS,
        rebuilt: Callable[[str], None] | None = None,
    ) -> int:
        """Bring the store to the typed schema in one transaction: a new file gets its tables; a store of
        version 1 has every event read back in seq order and written to its kind table as a commit would
        (a field that is not declared or not of its type kept in `extra`), its `events` table replaced by
        the view, and the version recorded; the per-request rows are then built from every event (all a
        store of version 2 needs). A kill at any point leaves the old version whole: the transaction
        never committed. `progress(done, total)` is called after each step of `rows` events, `rebuilt(table)`
        after each table of rows is built. Returns how
        many events were migrated (0 when nothing was to do)."""
        version = self.schema_version()
        if version == event_schema.SCHEMA_VERSION:
            self.fold_rows()
            return 0
        con = self.con
        con.begin()
        try:
            moved = self._migrate_v1(progress, rows) if version == 1 else 0
            self._ensure_typed()
            self._rebuild_rows(rebuilt)
            con.execute("DELETE FROM agent_state WHERE name = ?", [request_rows.STATE])
            con.execute("INSERT INTO store_schema VALUES (?, now())", [event_schema.SCHEMA_VERSION])
            con.commit()
        except BaseException:
            _rollback(con)
            raise
        self.rows_behind, self.rows_through = False, self.next_seq - 1
        if moved:
            logger.info(
                "the store {} was migrated to schema {}: {} events", self.path, event_schema.SCHEMA_VERSION, moved
            )
        return moved

    def _rebuild_rows(self, rebuilt: Callable[[str], None] | None = None) -> None:
        """The per-request rows (exporters/request_rows.py) from every stored event: a store made before them."""
        for table, statement in zip(request_rows.row_tables(), request_rows.rebuild_statements(), strict=True):
            self.con.execute(f"DELETE FROM {event_schema.quoted(table)}")
            self.con.execute(statement)
            if rebuilt is not None:
                rebuilt(table)

    def _migrate_v1(self, progress: Callable[[int, int], None] | None, rows: int) -> int:
        con = self.con
        con.execute("ALTER TABLE events ADD COLUMN IF NOT EXISTS seq BIGINT")
        con.execute("UPDATE events SET seq = rowid WHERE seq IS NULL")  # a store from before `seq`
        con.execute("ALTER TABLE events RENAME TO events_v1")
        for statement in event_schema.create_statements()[: -len(event_schema.view_statements())]:
            con.execute(statement)  # the tables; the views once the old table is gone
        [(total,)] = con.execute("SELECT count(*) FROM events_v1").fetchall()
        done, after = 0, -1
        while True:
            batch = con.execute(
                "SELECT seq, epoch_us(ts), source, kind, instance, host, request_id, fields::VARCHAR"
                " FROM events_v1 WHERE seq > ? ORDER BY seq LIMIT ?",
                [after, rows],
            ).fetchall()
            if not batch:
                break
            self._migrate_rows(batch)
            done += len(batch)
            after = batch[-1][0]
            if progress is not None:
                progress(done, total)
        con.execute("DROP TABLE events_v1")
        if self.set_aside:
            logger.warning(
                "the migration of {} set aside {} event(s) it cannot convert (fields not an object, an"
                " integer past 2^63, ...): they are kept, as they were, in the table {}",
                self.path,
                self.set_aside,
                SET_ASIDE,
            )
        return done

    def _migrate_rows(self, batch: list[tuple[Any, ...]]) -> None:
        """Write one step's rows to their kind tables; a row that cannot be converted is set aside in
        SET_ASIDE with the reason (and counted in `set_aside`), never failing the migration."""
        try:
            converted = [(first, event_schema.split(events, first, self.sources)) for first, events in _runs(batch)]
        except UNCONVERTIBLE:
            good = []
            for row in batch:
                try:
                    [(_, [event])] = _runs([row])
                    event_schema.split([event], 0, self.sources)
                    good.append(row)
                except UNCONVERTIBLE as exc:
                    self._set_aside(row, exc)
            converted = [(first, event_schema.split(events, first, self.sources)) for first, events in _runs(good)]
        for _, tables in converted:
            for name, table in tables.items():
                self.con.from_arrow(table).insert_into(name)

    def _set_aside(self, row: tuple[Any, ...], exc: BaseException) -> None:
        self.con.execute(
            f"CREATE TABLE IF NOT EXISTS {SET_ASIDE} (seq BIGINT, ts_us BIGINT, source VARCHAR, kind VARCHAR,"
            " instance VARCHAR, host VARCHAR, request_id VARCHAR, fields VARCHAR, reason VARCHAR)"
        )
        self.con.execute(
            f"INSERT INTO {SET_ASIDE} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [*row, f"{type(exc).__name__}: {exc}"[:300]]
        )
        self.set_aside += 1

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
        logger.warning(
            "the store {} is reopened after '{}'; it resumes from its last commit", self.path, self.invalidated
        )
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

    def commit(
        self,
        events: list[Event],
        checkpoints: dict[str, dict[str, Any]],
        metrics: dict[str, Any],
        *,
        fold: bool = True,
    ) -> list[Event]:
        """One transaction: the events appended from Arrow, the checkpoints that changed in one
        UPDATE (new sources in one INSERT), the metric state in one UPDATE, and with `fold` every
        event stored since the last fold folded into its request's row (request_rows.maintain;
        without, the store records once that its rows are behind). INSERT OR REPLACE
        cost 3-4 times an UPDATE of the same row, and register + INSERT ... SELECT 3 times
        `from_arrow().insert_into` (profiled: docs/benchmarks.md). Returns the events set aside as
        unstorable (`storable_table`); the rest are committed."""
        if self.invalidated is not None and self._reopen():
            return []  # the batch landed before the checkpoint that failed: nothing to write twice
        if not self._typed:  # asked once per connection: the agent is the only writer
            self.migrate()
            self._typed = True
        now = time.time()
        tables, refused = storable_tables(events, self.next_seq, self.sources) if events else ({}, [])
        stored = sum(t.num_rows for t in tables.values())
        changed = {source: json.dumps(state) for source, state in checkpoints.items()}
        changed = {source: state for source, state in changed.items() if self._written.get(source) != state}
        con = self.con
        con.begin()
        try:
            for name, table in tables.items():
                con.from_arrow(table).insert_into(name)
            behind = self._fold_or_mark(fold, self.next_seq + stored - 1, now, tables)
            self._write_checkpoints(changed, now)
            if self._has_metrics:
                con.execute(
                    "UPDATE agent_state SET state = ?, updated = to_timestamp(?) WHERE name = 'metrics'",
                    [json.dumps(metrics), now],
                )
            else:
                # the first commit of this connection: another writer (a crashed run's replay) may have saved one
                con.execute(
                    "INSERT OR REPLACE INTO agent_state VALUES ('metrics', ?, to_timestamp(?))",
                    [json.dumps(metrics), now],
                )
            con.commit()
        except duckdb.FatalException as exc:  # "database has been invalidated": this connection is dead
            self.invalidated = str(exc).split("\n", 1)[-1][:300]
            logger.error(
                "the store {} was invalidated by DuckDB ({}); it is reopened from disk at the next"
                " attempt, resuming from the last commit",
                self.path,
                self.invalidated,
            )
            raise
        except BaseException:
            _rollback(con)
            raise
        self._written.update(changed)
        self._has_metrics = True
        self.next_seq += stored
        self.rows_behind = behind
        if not behind:
            self.rows_through = self.next_seq - 1
        return refused

    def _load_rows_state(self) -> None:
        """Whether the per-request rows wait for a fold, and through which seq they hold every event."""
        rows = self.con.execute("SELECT state FROM agent_state WHERE name = ?", [request_rows.STATE]).fetchall()
        saved = json.loads(rows[0][0]) if rows else {}
        self.rows_behind = bool(saved.get("behind"))
        self.rows_through = int(saved["through"]) if self.rows_behind else self.next_seq - 1

    def _fold_or_mark(self, fold: bool, last: int, now: float, written: Mapping[str, Any] | None = None) -> bool:
        """Inside a commit (which wrote the kind tables `written`): fold the events through seq `last` not yet
        folded, or record that the rows are behind (once: until the next fold). Returns whether they are
        behind after it. Events no row reads (polls, host samples) leave caught-up rows caught up."""
        relevant = written is None or not request_rows.read_tables().isdisjoint(written)
        if last <= self.rows_through or not (self.rows_behind or relevant):
            return self.rows_behind
        fold = fold or last - self.rows_through > FOLD_MAX_EVENTS
        if fold:
            for first in range(self.rows_through + 1, last + 1, FOLD_MAX_EVENTS):
                request_rows.maintain(self.con, first, min(last, first + FOLD_MAX_EVENTS - 1))
        if fold == self.rows_behind:  # the recorded state changes: behind from now, or caught up
            self.con.execute(
                "INSERT OR REPLACE INTO agent_state VALUES (?, ?, to_timestamp(?))",
                [
                    request_rows.STATE,
                    json.dumps({"through": last if fold else self.rows_through, "behind": not fold}),
                    now,
                ],
            )
        return not fold

    def fold_rows(self) -> None:
        """Fold, in a transaction of its own, what a killed agent stored without folding."""
        if not self.rows_behind:
            return
        self.con.begin()
        try:
            self._fold_or_mark(True, self.next_seq - 1, time.time())
            self.con.commit()
        except BaseException:
            _rollback(self.con)
            raise
        self.rows_behind, self.rows_through = False, self.next_seq - 1

    def _write_checkpoints(self, changed: dict[str, str], now: float) -> None:
        old = [(source, state) for source, state in changed.items() if source in self._written]
        new = [(source, state) for source, state in changed.items() if source not in self._written]
        if old:
            values = ", ".join(["(?, ?)"] * len(old))
            self.con.execute(
                f"UPDATE checkpoints SET state = v.state::JSON, updated = to_timestamp(?)"
                f" FROM (VALUES {values}) v(source, state) WHERE checkpoints.source = v.source",
                [now, *(x for pair in old for x in pair)],
            )
        if new:
            values = ", ".join(["(?, ?::JSON, to_timestamp(?))"] * len(new))
            self.con.execute(
                f"INSERT OR REPLACE INTO checkpoints VALUES {values}",
                [x for source, state in new for x in (source, state, now)],
            )

    def _first_free_seq(self) -> int:
        version = self.schema_version()
        if version == 0:
            last = None
        else:
            column = "coalesce(seq, rowid)" if version == 1 else "seq"
            [(last,)] = self.con.execute(f"SELECT max({column}) FROM events").fetchall()
        publication = self.publication()
        return (
            max(
                last if last is not None else -1,
                publication.published,
                publication.pending[1] if publication.pending else -1,
            )
            + 1
        )

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
        self.con.execute(
            "INSERT OR REPLACE INTO agent_state VALUES ('parquet', ?, to_timestamp(?))",
            [
                json.dumps(
                    {
                        "published": publication.published,
                        "pending": list(publication.pending) if publication.pending else None,
                    }
                ),
                time.time(),
            ],
        )

    def last_seq(self) -> int:
        """The seq of the last committed event (-1 if none was ever stored)."""
        return self.next_seq - 1

    def delete_published(self, before: float, upto_seq: int) -> int:
        """Delete the events older than `before` (epoch seconds) whose seq <= `upto_seq`; how many."""
        deleted = 0
        for name in event_schema.table_names():
            [(n,)] = self.con.execute(
                f"DELETE FROM {event_schema.quoted(name)} WHERE seq <= ? AND ts < to_timestamp(?)", [upto_seq, before]
            ).fetchall()
            deleted += n
        return int(deleted)

    def delete_unpublished(self, before: float, published: int) -> int:
        """Delete the events older than `before` whose seq is past `published` (never published); how many."""
        deleted = 0
        for name in event_schema.table_names():
            [(n,)] = self.con.execute(
                f"DELETE FROM {event_schema.quoted(name)} WHERE seq > ? AND ts < to_timestamp(?)", [published, before]
            ).fetchall()
            deleted += n
        return int(deleted)

    def close(self) -> None:
        self.con.close()


def _runs(rows: list[tuple[Any, ...]]) -> list[tuple[int, list[Event]]]:
    """Stored rows (seq, epoch us, source, kind, instance, host, request_id, fields JSON) as events, in runs
    of consecutive seqs (each run is numbered from its first seq, as `split` numbers)."""
    runs: list[tuple[int, list[Event]]] = []
    for seq, us, source, kind, instance, host, request_id, fields in rows:
        parsed = orjson.loads(fields) if fields else {}
        if not isinstance(parsed, dict):
            raise TypeError(f"fields is a JSON {type(parsed).__name__}, not an object")
        event = Event(us / 1e6, source, kind, instance, parsed, request_id, host or "")
        if runs and runs[-1][0] + len(runs[-1][1]) == seq:
            runs[-1][1].append(event)
        else:
            runs.append((seq, [event]))
    return runs


def _probe_writable(folder: Path) -> None:
    """StoreUnusable unless a file can be made in `folder`: DuckDB writes its WAL there at the first
    commit, which would otherwise fail only then, with a traceback."""
    import os
    import tempfile

    try:
        fd, name = tempfile.mkstemp(prefix=".spyglass-probe-", dir=folder)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise StoreUnusable(
            f"the store's folder {folder} is not writable ({exc.strerror or exc}); give"
            f" agent.state_dir a writable folder"
        ) from None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:300] if text.strip() else "no reason given"


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back if a transaction is still open: a failed COMMIT (disk full) has ended it already."""
    with contextlib.suppress(duckdb.TransactionException):
        con.rollback()
