"""Read-only copies of the agent's store, for the queries of /api/sql.

The agent's own connection is its only write path to the store, so no query runs on it. Each
copy is a new DuckDB file written once, from one read-only transaction of the store (events,
checkpoints and state as of one commit), and never changed again; a query opens it read-only in
a process of its own (spyglass.query.bounded.run_bounded).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb

from spyglass.exporters import event_schema, request_rows
from spyglass.exporters.duckdb_open import connect
from spyglass.exporters.store import SCHEMA

BATCH_ROWS = 20_000


class CopyFailed(Exception):
    """A copy could not be written whole (the disk filled?): refused, never served in part."""


def copy_exclusive(source: Path, target: Path) -> None:
    """Copy `source` to a new file `target`, created O_EXCL | O_NOFOLLOW: never through a link."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with open(fd, "wb") as out, open(source, "rb") as data:
        shutil.copyfileobj(data, out, 1 << 20)


@dataclass
class Copy:
    path: Path
    as_of: float  # epoch seconds at which it was taken
    next_seq: int = 0  # events with a seq from here on are not in it yet
    users: int = 0
    retired: bool = False


class Snapshots:
    """Copies of the store at most `max_age` seconds older than the query that reads them.

    A copy is taken when a query finds the newest too old, one at a time (a query that arrives
    meanwhile reads the previous copy, if there is one); a copy no longer newest is deleted when
    its last query ends. Taking one reads the store beside the writer (MVCC): it never blocks or
    fails an ingest commit."""

    def __init__(
        self,
        connection: Callable[[], duckdb.DuckDBPyConnection],
        folder: Path,
        max_age: float,
        clock: Callable[[], float] = time.time,
        stored: Callable[[], int] | None = None,
    ) -> None:
        # `connection()` is the store's connection now: the store reopens it after DuckDB invalidated it
        self.connection, self.folder, self.max_age, self.clock = connection, folder, max_age, clock
        self.stored = stored  # the store's next seq: while it stays a copy's, no event came, and the copy is fresh
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("copy-*.duckdb*"):  # left by an agent that was killed
            old.unlink()
        for old in folder.glob(".partial-*"):
            shutil.rmtree(old, ignore_errors=True)
        self._serial = itertools.count(1)
        self._lock = threading.Lock()  # guards _newest and the users of every copy
        self._taking = threading.Lock()  # one copy at a time
        self._newest: Copy | None = None

    @contextmanager
    def lease(self) -> Iterator[Copy]:
        """A copy fresh enough to read, kept on disk until the block ends."""
        copy = self._fresh()
        try:
            yield copy
        finally:
            with self._lock:
                copy.users -= 1
                drop = copy.retired and copy.users == 0
            if drop:
                copy.path.unlink(missing_ok=True)

    def _fresh(self) -> Copy:
        with self._lock:
            newest = self._newest
            if newest is not None and self._current(newest):
                newest.users += 1
                return newest
        if self._taking.acquire(blocking=newest is None):
            try:
                return self._replace()
            finally:
                self._taking.release()
        assert newest is not None  # only a query that has a previous copy does not wait for a new one
        with self._lock:  # another query is taking a copy: read the previous one meanwhile
            newest = self._newest or newest
            newest.users += 1
            return newest

    def _current(self, copy: Copy) -> bool:
        """Whether `copy` may answer a query now: young enough, or no event was stored since it was taken
        (then it is as of now: a copy of an idle store, however large, is not taken again; its
        checkpoints and metric state may be older, the events the commands read are not)."""
        now = self.clock()
        if now - copy.as_of <= self.max_age:
            return True
        if self.stored is not None and self.stored() == copy.next_seq:
            copy.as_of = now
            return True
        return False

    def _replace(self) -> Copy:
        with self._lock:
            newest = self._newest
            if newest is not None and self._current(newest):
                newest.users += 1  # taken while this query waited for its turn
                return newest
        copy = self.take()
        with self._lock:
            old, self._newest = self._newest, copy
            copy.users += 1
            drop = old is not None and old.users == 0
            if old is not None:
                old.retired = True
        if drop and old is not None:
            old.path.unlink(missing_ok=True)
        return copy

    def take(self) -> Copy:
        """Copy the store as of now into a new file, through a read-only transaction.

        Events are only ever appended, in seq order, so a copy starts from the previous one (a file
        copy) and adds the events past its last seq, table by table; checkpoints and state are copied
        whole."""
        path = self.folder / f"copy-{next(self._serial)}.duckdb"
        # Written in a folder of its own, made new (0700): a symlink planted at a predictable name
        # is never followed, so no other file is overwritten. Renamed into place when whole.
        work = Path(tempfile.mkdtemp(prefix=".partial-", dir=self.folder))
        try:
            return self._take_into(work / "copy.duckdb", path)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _take_into(self, partial: Path, path: Path) -> Copy:
        previous = self._newest
        start = 0
        if previous is not None and previous.path.exists():
            copy_exclusive(previous.path, partial)
            start = previous.next_seq
        cursor = self.connection().cursor()
        try:
            cursor.execute("BEGIN TRANSACTION READ ONLY")
            as_of = self.clock()
            end = cursor.execute("SELECT coalesce(max(seq) + 1, 0) FROM events").fetchall()[0][0]
            if end < start:  # events were removed: start over
                partial.unlink(missing_ok=True)
                start = 0
            out = connect(partial)
            try:
                if start == 0:  # a new file: the schema first, in one transaction (a copy's copy has it)
                    out.begin()
                    out.execute(SCHEMA)
                    for statement in event_schema.create_statements():
                        out.execute(statement)
                    out.commit()
                out.execute("DELETE FROM checkpoints; DELETE FROM agent_state; DELETE FROM store_schema")
                events = [
                    (event_schema.quoted(name), f"WHERE seq >= {start} AND seq < {end}")
                    for name in event_schema.table_names()
                ]
                whole = [("checkpoints", ""), ("agent_state", ""), ("store_schema", "")]
                for table, where in (*events, *whole, *self._rows(cursor, out)):
                    out.register("batch", cursor.sql(f"SELECT * FROM {table} {where}").to_arrow_reader(BATCH_ROWS))
                    out.execute(
                        f"INSERT INTO {table} BY NAME SELECT * FROM batch"
                    )  # a table altered since may order its columns otherwise
                    out.unregister("batch")
                self._finish(out)
            finally:
                out.close()
            cursor.execute("ROLLBACK")
        finally:
            cursor.close()
        wal = partial.with_name(partial.name + ".wal")
        if wal.exists() and wal.stat().st_size > 0:  # its data is in the WAL only: the file alone is empty
            raise CopyFailed(
                "no SQL copy of the store could be written whole (its checkpoint did not finish:"
                " is the disk full?); retry later"
            )
        partial.rename(path)
        return Copy(path, as_of, end)

    @staticmethod
    def _rows(cursor: duckdb.DuckDBPyConnection, out: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
        """The per-request row tables to copy whole, emptied in `out`: all of them when the store's rows hold
        every stored event (an idle agent's, after its fold), so the commands read them as from the file; none
        while they wait for a fold (the copy's agent_state says so, and its readers compute them from events)."""
        state = cursor.execute("SELECT state FROM agent_state WHERE name = ?", [request_rows.STATE]).fetchall()
        if state and json.loads(state[0][0]).get("behind"):
            return []
        names = [
            t
            for t in request_rows.row_tables()
            if cursor.execute(f"SELECT 1 FROM duckdb_tables() WHERE table_name = '{t}'").fetchall()
        ]
        for statement in request_rows.create_statements():
            out.execute(statement)
        for name in names:
            out.execute(f"DELETE FROM {event_schema.quoted(name)}")
        return [(event_schema.quoted(name), "") for name in names]

    @staticmethod
    def _finish(out: duckdb.DuckDBPyConnection) -> None:
        """Write the copy's WAL into its file now, where a failure raises: DuckDB's checkpoint at close
        fails silently, and would leave a file that looks like an empty database."""
        try:
            out.execute("CHECKPOINT")
        except duckdb.Error as exc:
            raise CopyFailed(
                f"no SQL copy of the store could be written ({str(exc).splitlines()[0][:200]}); retry later"
            ) from None

    def close(self) -> None:
        for work in self.folder.glob(".partial-*"):
            shutil.rmtree(work, ignore_errors=True)
        for copy in self.folder.glob("copy-*.duckdb*"):
            copy.unlink(missing_ok=True)
