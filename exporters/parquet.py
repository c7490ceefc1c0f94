"""Parquet segments for many hosts: what the store holds, published every interval, each closed
hour compacted into one ts-sorted file, and the store kept to a recent horizon.

Layout (hive partitions; any reader globs `<dir>/host=*/date=*/hour=*/*.parquet`):

    <dir>/host=<host>/date=YYYY-MM-DD/hour=HH/part-<first>-<last>.parquet   a publication
    <dir>/host=<host>/date=YYYY-MM-DD/hour=HH/hour-<first>-<last>.parquet   a compacted hour

The partition values come from the event (its `host`, its UTC `ts`), the numbers in the names
are store seqs (exporters/store.py): of the whole publication for a part, of the rows in the
file for a compacted hour. Each file holds the store's typed columns as one wide table
(exporters/segment_schema.py: the common columns, `source_kind`, a typed column per declared field,
`extra` JSON), sorted by (ts, seq). An hour holding a file of the JSON schema (`fields`, written
before the typed store) is rewritten typed as the first compaction after a start, in the same one
step for readers, closed or not (`legacy`); its rows and seqs do not change, so publication's
argument below is untouched.

Why a reader never sees half a file: a file is written under a dot name that no `*.parquet`
glob matches, fsynced, and renamed into place; a rename is atomic.

Why every stored event is published exactly once, whatever instant a `kill -9` lands on. The
store keeps the watermark `published` (every seq at or below it is in Parquet) and `pending`
(the seq range of a publication begun and not finished), each recorded in a store transaction:
1. Record `pending = (published + 1, last)`, `last` at most the last committed seq.
2. Write one part per (host, date, hour) of those rows, named by the range, renamed into place.
3. Record `published = last`, no pending.
A kill before 1 wrote nothing. A kill between 1 and 3 leaves some of the range's parts; the
next start redoes the *same* range (`pending` says which): the same committed rows (retention
deletes nothing above `published`), so the same partitions and the same names, and each rename
replaces the earlier attempt's file (identical rows) instead of adding a second copy. A kill
after 3 left it done. Seqs above `published` are never in a file except as such a redo's own
range, so nothing is published twice; nothing at or below it is missing, so nothing is lost.

Why compaction is safe. It runs only with no publication pending, on an hour whose end has
passed, when the hour holds more than one file (a late event reopens a compacted hour: its part
lands beside the compacted file, and the next pass merges them again). The merged file is
written into a staging folder outside the glob (`<dir>/.staging/`), fsynced, and the staging
folder and the hour folder are swapped by one `renameat2(RENAME_EXCHANGE)`: a reader lists the
hour folder either before (all the parts) or after (the one merged file), never both nor
neither. The old parts end in the staging folder and are removed; a kill leaves only staging
leftovers, removed at the next start. Compaction moves rows between files, never changes which
rows are published. (A query whose glob listed the parts just before the swap can fail to open
one after it: DuckDB lists before it opens. It fails loudly and is re-run; it never reads a
mix.) On a filesystem without RENAME_EXCHANGE hours are left uncompacted, with a warning.

Why a publication cannot get stuck. A batch that fails (a burst of wide rows past the store
connection's memory limit, say) is abandoned: every file named by its range is removed (only that
attempt, or a killed one, wrote them: compaction never runs while a range is pending), `pending`
is cleared, and the next attempt takes half as many rows, down to MIN_ROWS; each success lets the
batch grow back, by at most double, and never past what about a quarter of the memory limit holds
at the bytes per row last seen. A redo after a kill keeps its range while it succeeds.

Retention: rows older than `retain_hours` are deleted from the store only at or below
`published`, so they are in Parquet first. If no publication has succeeded for `retain_hours`
(publication is stuck: a full disk under the Parquet folder, say), rows past the horizon are
deleted unpublished too, so the store never grows without bound, and counted
(`spyglass_parquet_rows_dropped_unpublished_total`) and logged: never silently. A pending range is
never touched.

One bad row never stops publication: a row whose timestamp no partition can name (before 1970 or
past the year 9999: a store written before the edges bounded timestamps) is set aside in
`<dir>/.set-aside/<host>/part-<first>-<last>.parquet` (outside the glob, named by the same range,
so a redo replaces it) and counted in `spyglass_parquet_rows_set_aside_total`; the rest of its
range is published. A publication that fails (disk full, a bug) is logged, counted in
`spyglass_parquet_publish_failures_total` and retried the next interval.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from loguru import logger

from spyglass.collectors.clock import Clock
from spyglass.exporters.event_schema import kind_tables
from spyglass.exporters.segment_schema import COMMON, arrow, conform, from_json_segment, rows_sql
from spyglass.exporters.store import LAST_STORABLE_SECONDS, DuckDBStore, Publication
from spyglass.signals.state import MetricState

# The segments before the typed store: the base columns, then every field as JSON text.
JSON_SEGMENT_SCHEMA = pa.schema([*((c, arrow(t)) for c, t in COMMON[:-1]), ("fields", pa.string())])
ROW_GROUP = 122_880  # DuckDB's own row group: a 15-minute window reads a few, not the hour
SORT = [("ts", "ascending"), ("seq", "ascending")]
MIN_ROWS = 1_000  # the smallest batch a failing publication shrinks to
RENAME_EXCHANGE = 2
AT_FDCWD = -100


def part_name(first: int, last: int) -> str:
    return f"part-{first:012d}-{last:012d}.parquet"


def hour_name(first: int, last: int) -> str:
    return f"hour-{first:012d}-{last:012d}.parquet"


def partition(folder: Path, host: str, hour: datetime) -> Path:
    return folder / f"host={quote(host, safe='')}" / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"


def hour_start(hour_dir: Path) -> float:
    """Epoch seconds of the hour a `.../date=D/hour=H` folder holds."""
    day = hour_dir.parent.name.removeprefix("date=")
    return (
        datetime.strptime(f"{day} {hour_dir.name.removeprefix('hour=')}", "%Y-%m-%d %H").replace(tzinfo=UTC).timestamp()
    )


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(table: pa.Table, path: Path) -> None:
    """`table` as `path`, which readers see whole or not at all."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as out:
        pq.write_table(table, out, compression="zstd", row_group_size=ROW_GROUP)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def exchange(a: Path, b: Path) -> None:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno), str(b))


def is_typed(path: Path) -> bool:
    """Whether a segment has the typed columns (else it is of the JSON schema, from before them)."""
    return "source_kind" in pq.read_schema(path).names


def read_segment(path: Path, sources: Mapping[str, str]) -> pa.Table:
    """A segment in the current typed columns: a typed one as it is (a column declared since it was
    written is NULL), one of the JSON schema typed as the store types its events."""
    table = pq.ParquetFile(path).read()
    if "source_kind" in table.column_names:
        return conform(table)
    return from_json_segment(table.cast(JSON_SEGMENT_SCHEMA), sources)


def segment_rows(store: DuckDBStore, first: int, last: int) -> pa.Table:
    """The committed events with first <= seq <= last, in the segments' columns, ordered by (ts, seq)."""
    return conform(store.con.sql(rows_sql(list(kind_tables().values())), params=[first, last]).to_arrow_table())


def memory_bytes(store: DuckDBStore) -> int | None:
    """The store connection's memory limit in bytes, if DuckDB says."""
    try:
        [(limit,)] = store.con.execute("SELECT current_setting('memory_limit')").fetchall()
        number, unit = str(limit).split()
        return int(
            float(number)
            * {
                "KiB": 1 << 10,
                "MiB": 1 << 20,
                "GiB": 1 << 30,
                "TiB": 1 << 40,
                "KB": 10**3,
                "MB": 10**6,
                "GB": 10**9,
                "TB": 10**12,
            }[unit]
        )
    except Exception:  # noqa: BLE001 - an unknown format: batches are sized by failures alone
        return None


class ParquetPublisher:
    """Publishes the store's events as hive-partitioned Parquet, exactly once (see the module's
    argument), compacts closed hours and applies retention. Runs on the thread that commits
    (it reads the store's connection); `tick` never raises, `flush` does."""

    def __init__(
        self,
        store: DuckDBStore,
        clock: Clock,
        folder: Path,
        *,
        host: str,
        interval: float,
        retain_hours: float | None = None,
        max_rows: int = 500_000,
        state: MetricState | None = None,
    ) -> None:
        self.store, self.clock, self.folder, self.state = store, clock, folder, state
        self.interval, self.retain_hours, self.max_rows = interval, retain_hours, max_rows
        self.staging = folder / ".staging" / quote(host, safe="")
        self.set_aside = folder / ".set-aside" / quote(host, safe="")
        folder.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.staging, ignore_errors=True)  # a kill's leftovers: outside every glob
        own = folder / f"host={quote(host, safe='')}"
        self.touched: set[Path] = set(own.glob("date=*/hour=*")) if own.is_dir() else set()
        # hours with a segment of the JSON schema: rewritten typed, first thing (`upgrade`)
        self.legacy = {hour for hour in self.touched if not all(is_typed(f) for f in hour.glob("*.parquet"))}
        self.can_exchange = True
        self._due = clock.monotonic()  # at once: a pending publication is redone first
        self.batch_rows = max_rows  # shrinks after a failure, grows back after successes (see the module)
        self.memory_bytes = memory_bytes(store)
        self._published_at = clock.monotonic()  # the last publication that succeeded (or found nothing to do)

    def tick(self) -> None:
        """Publish, compact and retain if the interval passed; a failure is logged and retried."""
        now = self.clock.monotonic()
        if now < self._due:
            return
        self._due = now + self.interval
        try:
            self.run_once()
        except Exception as exc:  # noqa: BLE001 - disk full, a bug: the agent lives on, retried
            self._count("spyglass_parquet_publish_failures_total", 1)
            logger.error(
                "parquet publication failed ({}); retried in {:.0f} s with batches of at most {:,} rows,"
                " nothing is lost",
                str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__,
                self.interval,
                self.batch_rows,
            )

    def flush(self) -> None:
        """Publish everything committed, compact what is closed, apply retention; raises."""
        self.run_once(everything=True)

    def stop(self) -> None:
        """At a clean stop: publish what is committed; a failure waits for the next start."""
        try:
            self.flush()
        except Exception as exc:  # noqa: BLE001
            logger.error("the last parquet publication failed ({}); the next start publishes it", exc)

    def run_once(self, everything: bool = False) -> int:
        try:
            published = self.publish()
            while everything and self.store.publication().published < self.store.last_seq():
                published += self.publish()
            self.compact_closed()
        except Exception:
            self._shrink()  # before retention, which never touches a pending range
            raise
        finally:
            self.retain()  # also while publication fails: see the module on a stuck publication
        return published

    def publish(self) -> int:
        """One publication (at most `max_rows` seqs), or the redo of one a kill interrupted."""
        store = self.store
        done = store.publication()
        if done.pending:
            first, last = done.pending
        else:
            first, last = done.published + 1, min(store.last_seq(), done.published + self.batch_rows)
            if last < first:
                self._published_at = self.clock.monotonic()
                return 0
            store.record_publication(Publication(done.published, (first, last)))
        rows = self._publishable(segment_rows(store, first, last), first, last)
        for hour_dir, part in self._partitions(rows):
            hour_dir.mkdir(parents=True, exist_ok=True)
            write_atomically(part, hour_dir / part_name(first, last))
            self.touched.add(hour_dir)
        store.record_publication(Publication(last, None))
        self._published_at = self.clock.monotonic()
        self._grow(rows)
        return rows.num_rows

    def _grow(self, rows: pa.Table) -> None:
        """After a success: at most double the batch, and no more rows than a quarter of the memory
        limit holds at this batch's bytes per row."""
        fits = self.max_rows
        if self.memory_bytes and rows.num_rows:
            fits = max(MIN_ROWS, self.memory_bytes // 4 // max(1, rows.nbytes // rows.num_rows))
        self.batch_rows = max(MIN_ROWS, min(self.max_rows, fits, 2 * self.batch_rows))

    def _shrink(self) -> None:
        """After a failure: abandon the pending range (remove what it wrote) and halve the batch."""
        try:
            done = self.store.publication()
            if done.pending:
                name = part_name(*done.pending)
                for written in [*self.folder.glob(f"host=*/date=*/hour=*/{name}"), self.set_aside / name]:
                    written.unlink(missing_ok=True)
                self.store.record_publication(Publication(done.published, None))
                self.batch_rows = max(MIN_ROWS, min(self.batch_rows, (done.pending[1] - done.pending[0] + 1) // 2))
        except Exception as exc:  # noqa: BLE001 - the store itself fails: the range is kept, and redone
            logger.error("the failed parquet publication's range could not be abandoned ({}); it is redone", exc)

    def _publishable(self, rows: pa.Table, first: int, last: int) -> pa.Table:
        """The rows a partition can name; the others written aside, counted and logged."""
        seconds = pc.divide(rows["ts"].cast(pa.int64()), 1_000_000)
        good = pc.and_(pc.greater_equal(seconds, 0), pc.less(seconds, int(LAST_STORABLE_SECONDS)))
        bad = rows.filter(pc.invert(good))
        if bad.num_rows == 0:
            return rows
        self.set_aside.mkdir(parents=True, exist_ok=True)
        write_atomically(bad, self.set_aside / part_name(first, last))
        self._count("spyglass_parquet_rows_set_aside_total", bad.num_rows)
        logger.error(
            "{} row(s) of seqs {}-{} have a timestamp no partition can name (e.g. seq {}); set aside"
            " in {}, the rest is published",
            bad.num_rows,
            first,
            last,
            bad["seq"][0].as_py(),
            self.set_aside,
        )
        return rows.filter(good)

    def _count(self, name: str, n: int) -> None:
        if self.state is not None:
            with self.state.lock:
                self.state.inc(name, (), n)

    def _partitions(self, rows: pa.Table) -> list[tuple[Path, pa.Table]]:
        hours = pc.floor_temporal(rows["ts"], unit="hour")
        keys = pa.table({"host": rows["host"], "hour": hours}).group_by(["host", "hour"]).aggregate([])
        out = []
        for host, hour in zip(keys["host"].to_pylist(), keys["hour"].to_pylist()):
            mask = pc.and_(pc.equal(rows["host"], host), pc.equal(hours, pa.scalar(hour, hours.type)))
            out.append((partition(self.folder, host, hour), rows.filter(mask)))
        return out

    def compact_closed(self) -> int:
        """Compact every touched hour whose end has passed, and every hour holding a segment of the
        JSON schema (`legacy`), closed or not; returns how many were merged."""
        if self.store.publication().pending:
            return 0
        now = self.clock.now()
        merged = 0
        for hour_dir in sorted(self.legacy):
            if self.can_exchange and self.compact(hour_dir, typed_only=True):
                merged += 1
            self.legacy.discard(hour_dir)
        for hour_dir in sorted(self.touched):
            if hour_start(hour_dir) + 3600 > now:
                continue
            if self.can_exchange and self.compact(hour_dir):
                merged += 1
            self.touched.discard(hour_dir)
        return merged

    def compact(self, hour_dir: Path, typed_only: bool = False) -> bool:
        """Replace the hour's files with one ts-sorted file of the typed columns, in one step for
        readers; with `typed_only` also a single file, when it is of the JSON schema."""
        files = sorted(hour_dir.glob("*.parquet"))
        if len(files) <= 1 and not (typed_only and files and not is_typed(files[0])):
            return False
        table = pa.concat_tables([read_segment(f, self.store.sources) for f in files]).sort_by(SORT)
        seqs = pc.min_max(table["seq"])
        stage = self.staging / f"{hour_dir.parent.name}-{hour_dir.name}"
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir(parents=True)
        write_atomically(table, stage / hour_name(seqs["min"].as_py(), seqs["max"].as_py()))
        try:
            exchange(stage, hour_dir)
        except OSError as exc:
            self.can_exchange = False
            shutil.rmtree(stage, ignore_errors=True)
            logger.warning("{}: cannot swap folders atomically ({}); hours stay uncompacted", self.folder, exc)
            return False
        fsync_dir(hour_dir.parent)
        shutil.rmtree(stage, ignore_errors=True)
        return True

    def retain(self) -> int:
        """Delete stored events older than the horizon that are already in Parquet."""
        if self.retain_hours is None:
            return 0
        cutoff = self.clock.now() - self.retain_hours * 3600
        done = self.store.publication()
        deleted = self.store.delete_published(cutoff, done.published)
        stuck = self.clock.monotonic() - self._published_at > self.retain_hours * 3600
        if stuck and done.pending is None:
            dropped = self.store.delete_unpublished(cutoff, done.published)
            if dropped:
                self._count("spyglass_parquet_rows_dropped_unpublished_total", dropped)
                logger.error(
                    "no Parquet publication has succeeded for retain_hours ({:g} h): {:,} stored row(s)"
                    " past the horizon were deleted unpublished, so that the store does not grow without"
                    " bound (counted in spyglass_parquet_rows_dropped_unpublished_total)",
                    self.retain_hours,
                    dropped,
                )
        return deleted
