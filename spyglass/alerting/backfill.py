"""Stored events replayed through a fresh metric state on their own clock, as timestamped OpenMetrics.

`spyglass backfill` reads the store's `events` of the configured sources in time order, applies
them with the same signals classes the pipeline uses, and samples the whole state every `step`
from `start` to `end`, as a scrape every `step` would have seen it. The output is one OpenMetrics
file that `promtool tsdb create-blocks-from openmetrics` turns into TSDB blocks: each family in
one block with its `# TYPE`, its samples in time order, `# EOF` last.

What a replay cannot know is not invented: the tailer's own health (lines by outcome, bytes,
lag, up) is not in the events, so of spyglass's health only each source's newest event time is
replayed, and the lines a llama log could not read (its `unread` events: the drift alarm). Every series
gets `job` (the `[alerts] job`), and `up` is 1 at every sample, as the
scrape of a running agent gives. A series the live state dropped stays visible to queries for
Prometheus's 5-minute lookback (OpenMetrics text cannot carry a staleness marker). Process state
is derived from supervisord's events and polled series go stale: see spyglass.alerting.replay_state.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import duckdb
import orjson

from spyglass.alerting.replay_state import ReplayState
from spyglass.collectors import reports_unread
from spyglass.collectors.event import Event
from spyglass.config import Config
from spyglass.config.signals import build_signals, metric_state
from spyglass.exporters.duckdb_open import connect
from spyglass.signals.buckets import le_label
from spyglass.signals.state import MetricState
from spyglass.terminal import timeinput

OPENMETRICS_FILE = "spyglass.om"
BATCH = 20_000
EVENT_SECONDS = "spyglass_source_last_event_timestamp_seconds"
LINES = "spyglass_source_lines_total"


class BackfillError(Exception):
    """A replay that cannot run, phrased for the analyst (no store, an empty window, a bad time)."""


class UsageError(BackfillError):
    """A time, duration or window the command refuses (exit 2): not a time, out of range, --to before --from."""


EARLIEST, LATEST = 946_684_800.0, 4_102_444_800.0  # 2000-01-01 and 2100-01-01 UTC


def parse_duration(text: str) -> float:
    """Prometheus durations: 15s, 1m30s, 2h, 1d (spyglass.terminal.timeinput's grammar); UsageError otherwise."""
    try:
        return timeinput.parse_duration(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def parse_time(text: str, now: datetime | None = None) -> float:
    """Seconds since the epoch of a time in spyglass.terminal.timeinput's grammar: RFC 3339 (no offset means UTC),
    epoch seconds, or `now-1h` (counted from `now`, by default the wall clock: the commands' edge);
    between the years 2000 and 2100 (UsageError otherwise)."""
    try:
        seconds = timeinput.parse_time(text, "UTC", now or datetime.now(UTC)).timestamp()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not EARLIEST <= seconds < LATEST:
        raise UsageError(f"{text!r} is out of range: a time between 2000-01-01 and 2100-01-01 UTC")
    return seconds


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat().replace("+00:00", "Z")


def open_store(config: Config) -> duckdb.DuckDBPyConnection:
    path = config.store_path()
    if not path.exists():
        raise BackfillError(f"no store at {path}: run `spyglass ingest` or `spyglass run` first")
    try:
        con = connect(path, read_only=True)
    except duckdb.IOException as exc:
        raise BackfillError(
            f"cannot open {path} read-only ({str(exc).splitlines()[0]}); a running agent holds"
            " it: replay a copy of the file, or stop the agent"
        ) from None
    con.execute("SET TimeZone = 'UTC'")
    return con


def count_events(con: duckdb.DuckDBPyConnection, sources: list[str], start: float, end: float) -> int:
    row = con.execute(
        "SELECT count(*) FROM events WHERE list_contains(?, source)"
        " AND ts >= to_timestamp(?) AND ts <= to_timestamp(?)",
        [sources, start, end],
    ).fetchone()
    return int(row[0]) if row else 0


def stored_events(con: duckdb.DuckDBPyConnection, sources: list[str], end: float) -> Iterator[Event]:
    """Every event of `sources` up to `end`, in time order (ties in the order they were stored)."""
    result = con.execute(
        "SELECT epoch_us(ts), source, kind, instance, host, request_id, fields FROM events"
        " WHERE list_contains(?, source) AND ts <= to_timestamp(?) ORDER BY ts, seq",
        [sources, end],
    )
    while rows := result.fetchmany(BATCH):
        for us, source, kind, instance, host, request_id, fields in rows:
            yield Event(
                us / 1e6, source, kind, instance or "", orjson.loads(fields) if fields else {}, request_id, host or ""
            )


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: tuple[str, ...], values: tuple[str, ...], extra: str) -> str:
    pairs = [f'{n}="{_escape(v)}"' for n, v in zip(names, values)]
    return "{" + ",".join(pairs + [extra]) + "}"


def _number(value: float) -> str:
    return repr(float(value))


class OpenMetricsWriter:
    """Samples of every family of a state, at increasing times, into one OpenMetrics file.

    Guarantees: each family is one contiguous block after its `# TYPE` line; within it the
    samples are in time order (every series of a sample time before the next time); histograms
    as cumulative `_bucket` (with `+Inf`), `_count`, `_sum`; the file ends with `# EOF`. Families
    are buffered in temporary files of their own, so memory does not grow with the window."""

    def __init__(self, state: MetricState, job: str, scratch: Path) -> None:
        self.state, self.job = state, f'job="{_escape(job)}"'
        self.scratch = scratch
        self.files: dict[str, IO[str]] = {}
        self.prefixes: dict[tuple[str, tuple[str, ...]], str] = {}
        self.samples = 0

    def _file(self, name: str) -> IO[str]:
        handle = self.files.get(name)
        if handle is None:
            handle = self.files[name] = open(self.scratch / name, "w", buffering=1 << 16)  # noqa: SIM115 - closed by close()
        return handle

    def _prefix(self, name: str, labels: tuple[str, ...], key: tuple[str, ...]) -> str:
        cached = self.prefixes.get((name, key))
        if cached is None:
            cached = self.prefixes[(name, key)] = name + _labels(labels, key, self.job)
        return cached

    def sample(self, ts: float, stale: set[tuple[str, str]] | None = None) -> None:
        """Every series of the state at `ts`, but those of a polled (source kind, instance) in `stale`."""
        stamp, stale = f"{ts:.3f}", stale or set()
        lines = 0
        stale_kinds = {kind for kind, _ in stale}
        for spec in self.state.catalogue:
            current = (lambda key, k=spec.source: (k, key[0]) not in stale) if spec.source in stale_kinds else None
            if spec.type == "histogram":
                series = self.state.hists[spec.name]
                if current is not None:
                    series = {key: v for key, v in series.items() if key and current(key)}
                if series:
                    lines += self._histogram(spec.name, spec.labels, series, stamp)
                continue
            values = self.state.values[spec.name]
            if current is not None:
                values = {key: v for key, v in values.items() if key and current(key)}
            if not values:
                continue
            out, name = self._file(spec.name), spec.name
            out.writelines(
                f"{self._prefix(name, spec.labels, key)} {_number(value)} {stamp}\n"
                for key, value in sorted(values.items())
            )
            lines += len(values)
        self._file("up").write(f"up{{{self.job}}} 1.0 {stamp}\n")
        self.samples += lines + 1

    def _histogram(self, name: str, labels: tuple[str, ...], series: dict, stamp: str) -> int:
        out, bounds, lines = self._file(name), self.state.bounds[name], 0
        les = [le_label(b) for b in (*bounds, float("inf"))]
        for key, (counts, total) in sorted(series.items()):
            running = 0
            for le, count in zip(les, counts):
                running += count
                out.write(f"{name}_bucket{_labels(labels + ('le',), key + (le,), self.job)} {running} {stamp}\n")
            base = self._prefix(name, labels, key)
            out.write(f"{name}_count{base[len(name) :]} {running} {stamp}\n")
            out.write(f"{name}_sum{base[len(name) :]} {_number(total)} {stamp}\n")
            lines += len(les) + 2
        return lines

    def finish(self, path: Path) -> None:
        kinds = {spec.name: spec for spec in self.state.catalogue}
        with open(path, "w", buffering=1 << 20) as out:
            for name, handle in sorted(self.files.items()):
                handle.close()
                spec = kinds.get(name)
                kind = "gauge" if spec is None or spec.type == "info" else spec.type
                out.write(f"# TYPE {name} {kind}\n")
                if spec is not None:
                    out.write(f"# HELP {name} {_escape(spec.help)}\n")
                with open(self.scratch / name) as part:
                    shutil.copyfileobj(part, out, 1 << 20)
            out.write("# EOF\n")


@dataclass
class BackfillResult:
    path: Path
    events: int  # events applied (including those before the window, for the state they leave)
    events_in_window: int
    samples: int
    times: int


def replay(
    config: Config, start: float, end: float, step: float, out: Path, window: tuple[float, float] | None = None
) -> BackfillResult:
    """Write `out` (an OpenMetrics file): the state the stored events leave, every `step` in [start, end].

    BackfillError if `window` (default: [start, end]) holds no event of the configured sources."""
    if end <= start:
        raise UsageError(f"--to ({iso(end)}) must be after --from ({iso(start)})")
    kinds = {name: options.kind for name, options in config.sources.items()}
    first, last = window or (start, end)
    con = open_store(config)
    try:
        in_window = count_events(con, list(kinds), first, last)
        if not in_window:
            raise BackfillError(
                f"no events of {', '.join(sorted(kinds))} between {iso(first)} and {iso(last)}"
                f" in {config.store_path()}: nothing to replay"
            )
        state = metric_state(config)
        for name, options in config.sources.items():  # counted from 0, so that the first `unread` is an increase
            if reports_unread(options):
                state.set(LINES, (name, "event"), 0)
                state.set(LINES, (name, "unprefixed"), 0)
        signals = build_signals(config, state)
        applies = {name: signals[kind].apply for name, kind in kinds.items() if kind in signals}
        derived = ReplayState.of(config)
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="spyglass-backfill-") as scratch:
            writer = OpenMetricsWriter(state, config.alerts.job, Path(scratch))
            applied, times = _run(
                state, applies, stored_events(con, list(kinds), end), start, end, step, writer, derived
            )
            writer.finish(out)
    finally:
        con.close()
    return BackfillResult(out, applied, in_window, writer.samples, times)


def lines_read(event: Event, state: MetricState) -> None:
    """A source's running count of lines read and unreadable (the llama log's `unread` event), as the
    outcomes of spyglass_source_lines_total that the drift alarm (SpyglassSourceUnreadable) reads."""
    read, unread = event.fields.get("lines"), event.fields.get("unreadable")
    if isinstance(read, int) and isinstance(unread, int) and 0 <= unread <= read:
        state.set(LINES, (event.source, "event"), read - unread)
        state.set(LINES, (event.source, "unprefixed"), unread)


def _run(
    state: MetricState,
    applies: dict,
    events: Iterator[Event],
    start: float,
    end: float,
    step: float,
    writer: OpenMetricsWriter,
    derived: ReplayState,
) -> tuple[int, int]:
    """Apply events up to each sample time (a grid of multiples of `step`), then sample (spyglass.alerting.replay_state:
    process state derived from supervisord, polled series left out once stale)."""
    t = math.ceil(start / step) * step
    applied = times = 0
    last_seen: dict[str, float] = {}
    pending = next(events, None)
    while t <= end:
        while pending is not None and pending.ts <= t:
            apply = applies.get(pending.source)
            try:
                if apply is not None:
                    apply(pending)
                derived.apply(pending, state)
                if pending.kind == "unread":
                    lines_read(pending, state)
                last_seen[pending.source] = max(last_seen.get(pending.source, 0.0), pending.ts)
                applied += 1
            except Exception:  # noqa: BLE001 - the pipeline counts such an event invalid and goes on
                pass
            pending = next(events, None)
        for source, ts in last_seen.items():
            state.set(EVENT_SECONDS, (source,), ts)
        writer.sample(t, derived.stale(t))
        times += 1
        t += step
    return applied, times
