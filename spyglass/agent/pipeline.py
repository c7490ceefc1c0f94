"""The agent's main loop: tail -> parse -> derive metrics -> commit events, checkpoints and state.

One `step()` polls every source once (bounded bytes each) and applies the events to the live
metric state under one lock; the `Committer` (spyglass/agent/commit.py) commits events + checkpoints +
metric state in one store transaction by time and size, and publishes the committed state to
/metrics.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from loguru import logger

from spyglass import __version__, collectors, signals
from spyglass.agent.affinity import cpu_list
from spyglass.agent.commit import Committer
from spyglass.agent.unreadable import UnreadableWatch
from spyglass.collectors import LineSource, NotesItsParser, PolledSource, PollPolicy, SaysWhatItSamples, timebounds
from spyglass.collectors.clock import Clock
from spyglass.collectors.event import Event
from spyglass.collectors.grammar import split_outcome
from spyglass.collectors.tailer import Tailer
from spyglass.config import Config
from spyglass.config.signals import build_signals, metric_state
from spyglass.exporters.statefile import Store
from spyglass.signals import Signals

UNREAD_SHAPES = 16  # shapes of unread lines /debug/sources lists per source, the most first


def unreadable_watch(config: Config) -> UnreadableWatch:
    """The running agent's warning of an unreadable source, at H19's thresholds for this deployment."""
    from spyglass.alerting.heuristics import Deployment, by_id

    h19 = by_id(Deployment.of(config))["H19"]
    return UnreadableWatch(h19.threshold("unreadable_share"), int(h19.threshold("unreadable_lines")))


@dataclass
class PollSchedule:
    """When a polled source is next due: `interval_seconds` after a poll that answered; after n
    failed polls in a row, interval * 2**n, at most `max_backoff_seconds` (never less than the
    interval). The pipeline owns it; a source only says how its polls went."""

    source: PolledSource
    policy: PollPolicy
    next_due: float = 0.0  # due at once
    failures: int = 0

    def due(self, now: float) -> bool:
        return now >= self.next_due

    def done(self, now: float, ok: bool) -> None:
        self.failures = 0 if ok else self.failures + 1
        interval, cap = self.policy.interval_seconds, self.policy.max_backoff_seconds
        wait = interval * 2 ** min(self.failures, 16)
        self.next_due = now + min(wait, max(cap if cap is not None else interval, interval))


@dataclass(kw_only=True)
class SourceRuntime:
    """What the pipeline keeps per source, whichever way it is read: the kind's signals, and the
    outcomes counted for /metrics and /debug/sources."""

    name: str
    kind: str
    signals: Signals | None  # None for a kind whose events only are stored
    outcomes: dict[str, int] = field(default_factory=dict)
    last_unmatched: bytes = b""
    last_event_ts: float = 0.0


@dataclass(kw_only=True)
class TailedRuntime(SourceRuntime):
    """A source whose file the pipeline tails; its checkpoint is the tailer's, with the source's state."""

    source: LineSource
    tailer: Tailer

    def checkpoint(self) -> dict[str, Any]:
        saved = self.tailer.checkpoint()
        state = self.source.checkpoint()
        if state is not None:
            saved["source"] = state
        return saved

    def parser(self) -> str:
        """Which path parses its blocks (per line, or columnar; why a pattern keeps it per line)."""
        return self.source.parse_note if isinstance(self.source, NotesItsParser) else "per line"

    def close(self) -> None:
        self.tailer.close()
        self.source.close()


@dataclass(kw_only=True)
class PolledRuntime(SourceRuntime):
    """A source the pipeline polls on its schedule, from any thread; `saved` is the source's state
    as of the last poll whose events were taken (the checkpoint committed with them)."""

    source: PolledSource
    schedule: PollSchedule
    saved: dict[str, Any] | None = None
    last_poll: list[tuple[str, str, dict[str, Any]]] | None = None  # what the last poll said, poll_ms aside
    down: str | None = None  # why the last poll failed (its error), None while it answers

    def repeats(self, events: list[Event], ok: bool) -> bool:
        """Whether this poll says what the last one said (an idle server): its events are stored, but
        need not be committed at once (`agent.quiet_commit_seconds`)."""
        said = [(e.kind, e.instance, {k: v for k, v in e.fields.items() if k != "poll_ms"}) for e in events]
        same, self.last_poll = ok and said == self.last_poll, said
        return same

    @property
    def samples_present(self) -> bool:
        """Whether a poll describes the present (most) or imports history (PolledSourceBase)."""
        return self.source.samples_present if isinstance(self.source, SaysWhatItSamples) else True

    def checkpoint(self) -> dict[str, Any]:
        return {"source": self.saved} if self.saved is not None else {}

    def close(self) -> None:
        self.source.close()


Runtime = TailedRuntime | PolledRuntime


class Pipeline:
    """Sources in, metric state and store out; commits through its `Committer`.

    `state` is live: every line read is applied at once. `exposed` is what /metrics serves: the
    state as last committed, so that a restart, which resumes from that commit, never shows a
    counter lower than one already scraped (see `Committer` for why, and for a failing store).
    Exactly once across `kill -9` holds because a commit writes events, the checkpoints after
    them and the state with them applied in one transaction; a crash costs a re-read. A source
    that raises costs its lines or its poll, never the pipeline; polled sources are polled on the
    schedule the pipeline keeps (`PollSchedule`), from any thread, and their events are applied
    at the next step.
    """

    def __init__(self, config: Config, clock: Clock, store: Store) -> None:
        self.config, self.clock, self.store = config, clock, store
        bind = getattr(store, "bind_sources", None)
        if bind is not None:  # the typed store files each event under its source's kind
            bind(config.source_kinds())
        self.state = metric_state(config)
        self.unreadable = unreadable_watch(config)
        saved = store.load()
        if saved.metrics:
            self.state.load_json(saved.metrics)
        self.signals = self._build_signals()
        self._start_known_counters()
        self.sources = [
            self._build_source(name, options, saved.checkpoints.get(name)) for name, options in config.sources.items()
        ]
        self.state.set_info("spyglass_agent_info", (__version__,), 0)
        self.state.set_info("spyglass_agent_allowed_cpus_info", (cpu_list(os.sched_getaffinity(0)),), 0)
        self._polled: queue.Queue[tuple[PolledRuntime, list[Event], bool, Any]] = queue.Queue()
        self.event_hooks: list[Callable[[list[Event]], None]] = []  # after each commit, e.g. span export
        self._submitted: queue.Queue[tuple[list[Event], threading.Event]] = (
            queue.Queue()
        )  # from outside: spans received by OTLP
        agent = config.agent
        self.committer = Committer(
            store,
            self.state,
            clock,
            interval=agent.commit_interval_seconds,
            max_events=agent.commit_max_events,
            checkpoints=self._checkpoints,
            saved_checkpoints=saved.checkpoints,
            hooks=self.event_hooks,
            quiet_interval=agent.quiet_commit_seconds,
            fold_interval=agent.request_rows_seconds,
        )
        self.exposed = self.committer.exposed
        self.publisher = self._build_publisher()

    def _build_publisher(self) -> Any:
        """The Parquet publisher (exporters/parquet.py), if `exporters.store.parquet_dir` is set."""
        options = self.config.exporters.store
        if options.parquet_dir is None or not self.store.keeps_events:
            return None
        from spyglass.exporters.parquet import ParquetPublisher

        return ParquetPublisher(
            cast(Any, self.store),
            self.clock,
            options.parquet_dir.expanduser(),
            host=self.config.agent.host,
            interval=options.publish_interval_seconds,
            retain_hours=options.retain_hours,
            state=self.state,
        )

    def _start_known_counters(self) -> None:
        """Counters of the configured instances and lanes start at 0 (see signals.start_known_counters)."""
        from spyglass.alerting.heuristics.model import engines_of  # the instances' engines, as the rules read them

        instances: dict[str, list[str]] = {}
        for options in self.config.sources.values():
            instances.setdefault(options.kind, []).append(options.instance or "")
        lane_of = self.config.lanes()
        lanes = [*lane_of.values(), *self.config.alerts.lanes]
        signals.start_known_counters(self.state, instances, lanes, lane_of, engines_of(self.config))

    def _build_signals(self) -> dict[str, Signals]:
        return build_signals(self.config, self.state)

    def _build_source(self, name: str, options: Any, checkpoint: dict[str, Any] | None) -> Runtime:
        registration = collectors.load_all()[options.kind]
        agent = self.config.agent
        saved = checkpoint.get("source") if checkpoint else None
        signals = self.signals.get(options.kind)
        runtime: Runtime
        if registration.is_polled(options):
            polled = registration.build_polled(name, options, host=agent.host)
            runtime = PolledRuntime(
                name=name,
                kind=options.kind,
                source=polled,
                saved=saved,
                schedule=PollSchedule(polled, polled.poll_policy()),
                signals=signals,
            )
        else:
            source = registration.build_tailed(
                name, options, host=agent.host
            )  # a bad pattern raises before a file opens
            tailer = Tailer(
                str(options.path),
                self.clock,
                checkpoint=checkpoint,
                rotated=tuple(options.rotated),
                start_at=options.start_at,
                max_line=agent.max_line_bytes,
                grace_seconds=agent.grace_seconds,
                generations=agent.rotated_generations,
            )
            runtime = TailedRuntime(name=name, kind=options.kind, source=source, tailer=tailer, signals=signals)
        if saved is not None:
            runtime.source.restore(saved)
        for (src, outcome), value in self.state.series("spyglass_source_lines_total").items():
            if src == name:
                runtime.outcomes[outcome] = int(value)
        return runtime

    def step(self) -> int:
        """Read every file source once and take what pollers queued; returns lines + polled events.

        Nothing is committed here (see `commit_if_due`). While the store is failing and a full
        batch waits, files are not read: their lines wait in the files, memory stays bounded."""
        paused = self.committer.backlogged()
        batches = [(rt, [] if paused else self._poll_file(rt)) for rt in self.tailed_sources()]
        polled = self._drain_polled()
        stored, waiters = self._drain_submitted()
        now = self.clock.now()
        with self.state.lock:
            for rt, lines in batches:
                parsed, used = self._parse(rt, lines)
                events = self._within_time_bounds(rt, parsed, now)
                self._apply(rt, events, used - (len(parsed) - len(events)))
                self._update_health(rt)
                stored += events
            quiet = 0  # polled events that only repeat their source's last poll
            for poller, events, ok in polled:
                events = self._within_time_bounds(poller, events, now)
                self._apply(poller, events)
                self.state.inc("spyglass_source_polls_total", (poller.name, "ok" if ok else "error"))
                self.state.set("spyglass_source_up", (poller.name,), 1.0 if ok else 0.0)
                failed = (str(e.fields["error"]) for e in events if e.fields.get("error"))
                poller.down = None if ok else next(failed, "the last poll failed")
                quiet += len(events) if poller.repeats(events, ok) else 0
                stored += events
            lines_read = sum(len(lines) for _, lines in batches) + len(stored)
            self.committer.add(stored, lines_read, waiters, quiet=quiet)
        return lines_read

    def commit_if_due(self) -> None:
        """Commit what the steps applied, if the interval passed or enough events wait; publish
        what is committed to Parquet if that is due."""
        self.committer.tick()
        if self.publisher is not None:
            self.publisher.tick()

    def _checkpoints(self) -> dict[str, Any]:
        return {rt.name: rt.checkpoint() for rt in self.sources}

    def _behind(self) -> bool:
        """Whether a file source stopped at its read budget with more to read."""
        return any(rt.tailer.behind for rt in self.tailed_sources())

    def tailed_sources(self) -> list[TailedRuntime]:
        return [rt for rt in self.sources if isinstance(rt, TailedRuntime)]

    def polled_sources(self) -> list[PolledRuntime]:
        return [rt for rt in self.sources if isinstance(rt, PolledRuntime)]

    def poll(self, rt: PolledRuntime, early: float = 0.0) -> float:
        """One poll of a polled source if it is due (or due within `early` seconds: the polls of one
        host share a round), queued for the next step; returns the seconds until it is due again.
        Safe from any thread, one thread per source.

        A source that raises is a bug or a surprise of the host, never a dead agent: it is logged,
        counted as an error poll with up = 0, and retried on the failure schedule."""
        schedule = rt.schedule
        now = self.clock.now()
        if not schedule.due(now + early):
            return schedule.next_due - now
        try:
            result = schedule.source.poll(now)
        except Exception:  # noqa: BLE001 - anything, so that the poller thread survives it
            logger.exception("{}: poll failed; retried on the failure schedule", rt.name)
            schedule.done(now, ok=False)
            self._polled.put((rt, [], False, rt.saved))
            return schedule.next_due - now
        schedule.done(now, result.ok)
        if result.events or not result.ok:
            self._polled.put((rt, result.events, result.ok, schedule.source.checkpoint()))
        return schedule.next_due - now

    def poll_all(self, present: bool = True) -> None:
        """Poll every polled source that is due, on this thread (with `present` off, only those whose polls
        import history rather than sample the present)."""
        for rt in self.polled_sources():
            if present or not rt.samples_present:
                self.poll(rt)

    def _drain_polled(self) -> list[tuple[PolledRuntime, list[Event], bool]]:
        drained: list[tuple[PolledRuntime, list[Event], bool]] = []
        while True:
            try:
                rt, events, ok, saved = self._polled.get_nowait()
            except queue.Empty:
                return drained
            rt.saved = saved
            drained.append((rt, events, ok))

    def submit(self, events: list[Event], stored: threading.Event | None = None) -> threading.Event:
        """Events from outside the sources (spans pushed to /v1/traces, Alertmanager's notifications,
        smoke results), stored at the next step; `stored` (or a new event, returned) is set once they
        are committed."""
        stored = stored or threading.Event()
        self._submitted.put((events, stored))
        return stored

    def _drain_submitted(self) -> tuple[list[Event], list[threading.Event]]:
        drained: list[Event] = []
        waiters: list[threading.Event] = []
        while True:
            try:
                events, stored = self._submitted.get_nowait()
            except queue.Empty:
                spans = sum(1 for e in drained if e.kind == "span")
                if spans:
                    self.state.inc("spyglass_agent_spans_received_total", (), spans)
                return drained, waiters
            drained += events
            waiters.append(stored)

    def _poll_file(self, rt: TailedRuntime) -> list[bytes]:
        tailer = rt.tailer
        lines = tailer.poll(self.config.agent.read_budget_bytes)
        if lines and tailer.live is not None:
            rt.source.file_mtime(tailer.live.mtime_ns / 1e9)  # a date for date-less lines
        return lines

    def run_until_idle(self, poll: bool = True) -> int:
        """Read every file source to its current end, poll every polled source once, commit. With `poll`
        off, only the polled sources that import history (`samples_present` False, the infer store) are
        polled: a poll of the present (an endpoint, /proc) made after the fact would stamp now.

        A commit that fails raises: this is `spyglass ingest`, whose caller reports it."""
        self.poll_all(present=poll)
        total = 0
        while (n := self.step()) > 0:
            total += n
            self.committer.tick(retry=False)
            if self.publisher is not None:
                self.publisher.tick()
        self.committer.commit(fold=True)  # what ingest leaves has its rows whole
        if self.publisher is not None:
            self.publisher.flush()
        return total

    def run(self, stop: threading.Event, wake: Any) -> None:  # spyglass.agent.wake.Wake, or a threading.Event
        """Step until `stop`, then commit what is pending.

        Wakes coalesce: between steps the loop waits for a wake (inotify, a poller, a posted
        span) or the poll interval, and a step never follows the previous one sooner than
        `agent.coalesce_seconds`, so a writer's burst of appends is read in one step rather than
        one step per write. Nor does a step come before the next commit may: /metrics shows only
        what is committed, so a step then reads the writes of the whole interval just before they
        are committed, and reading sooner would add steps (their cost is mostly fixed) and no
        freshness. A step that stopped at its read budget is followed at once."""
        agent = self.config.agent
        try:
            while not stop.is_set():
                began = self.clock.monotonic()
                more = self.step() > 0 and self._behind()
                self.commit_if_due()
                if more:
                    continue
                if not self.committer.waiting:  # else the commit is due soon: no need to be woken
                    wake.wait(agent.poll_interval_seconds)
                commit_due = self.committer.next_commit() or 0.0
                rest = max(began + agent.coalesce_seconds, commit_due) - self.clock.monotonic()
                if rest > 0:
                    stop.wait(rest)
                wake.clear()  # after the rest: what woke us meanwhile is read by the next step
        finally:
            self.committer.flush()
            if self.publisher is not None:
                self.publisher.stop()

    def close(self) -> None:
        for rt in self.sources:
            rt.close()
        self.store.close()

    def _parse(self, rt: TailedRuntime, lines: list[bytes]) -> tuple[list[Event], int]:
        """The batch's events, and how many of its lines made them (the rest are counted by their miss)."""
        try:
            events, misses, unmatched = rt.source.handle_lines(lines)
        except Exception:  # noqa: BLE001 - a parser bug must cost lines, not the agent
            logger.exception("{}: parsing a batch of {} lines failed; they are counted invalid", rt.name, len(lines))
            rt.outcomes["invalid"] = rt.outcomes.get("invalid", 0) + len(lines)
            return [], 0
        for miss, count in misses.items():
            if count:
                outcome, field = split_outcome(miss)
                rt.outcomes[outcome] = rt.outcomes.get(outcome, 0) + count
                if field:
                    self.state.inc("spyglass_source_invalid_fields_total", (rt.name, field), count)
        if unmatched:
            rt.last_unmatched = unmatched
        return events, max(0, len(lines) - sum(misses.values()))

    def _within_time_bounds(self, rt: SourceRuntime, events: list[Event], now: float) -> list[Event]:
        """The events whose timestamp lies between 2000 and a day past `now` (collectors/timebounds.py);
        each other one is counted invalid (field `ts`) and dropped, so it never reaches the store."""
        lo, hi = timebounds.window(now)
        kept = [e for e in events if lo <= e.ts <= hi]
        refused = len(events) - len(kept)
        if refused:
            rt.outcomes["invalid"] = rt.outcomes.get("invalid", 0) + refused
            self.state.inc("spyglass_source_invalid_fields_total", (rt.name, "ts"), refused)
            bad = next(e for e in events if timebounds.problem(e.ts, now) is not None)
            if rt.outcomes["invalid"] <= 10 + refused or rt.outcomes["invalid"] % 1000 < refused:  # loud, not a flood
                logger.warning(
                    "{}: {} event(s) refused for their timestamp, e.g. {} ({})",
                    rt.name,
                    refused,
                    bad.kind,
                    timebounds.problem(bad.ts, now),
                )
        return kept

    def _apply(self, rt: SourceRuntime, events: list[Event], lines: int | None = None) -> None:
        """Apply each event to the signals. Outcome `event` counts, for a file source, the `lines` that made an
        event (less one per event refused here or for its time: the drift alarm's ratio is over lines read, and
        an event no line made, such as a batch's `unread` count, is no line); for a polled source, its events."""
        apply, good, offered = rt.signals.apply if rt.signals is not None else None, [], len(events)
        for event in events:
            try:
                if apply is not None:
                    apply(event)
                good.append(event)
            except Exception as exc:  # noqa: BLE001 - e.g. a pattern override without a field we need
                self._refused(rt, event, exc)
        made = len(good) if lines is None else max(0, lines - (offered - len(good)))
        rt.outcomes["event"] = rt.outcomes.get("event", 0) + made
        events[:] = good
        if good:
            rt.last_event_ts = max(rt.last_event_ts, max(e.ts for e in good))

    @staticmethod
    def _refused(rt: SourceRuntime, event: Event, exc: Exception) -> None:
        rt.outcomes["invalid"] = rt.outcomes.get("invalid", 0) + 1
        if rt.outcomes["invalid"] <= 10 or rt.outcomes["invalid"] % 1000 == 0:  # loud, not a flood
            logger.warning(
                "{}: {} event not usable ({!r}); check sources.{}.patterns", rt.name, event.kind, exc, rt.name
            )

    def _update_health(self, rt: TailedRuntime) -> None:
        preset = getattr(self.config.sources[rt.name], "preset", None)
        self.unreadable.look(
            rt.name, rt.outcomes, f"spyglass check-log {rt.tailer.path}" + (f" --preset {preset}" if preset else "")
        )
        tailer = rt.tailer
        s, key, stats = self.state, (rt.name,), tailer.stats
        s.set("spyglass_source_up", key, 1.0 if tailer.error is None and tailer.live else 0.0)
        for outcome, count in rt.outcomes.items():
            s.set("spyglass_source_lines_total", key + (outcome,), count)
        s.set("spyglass_source_bytes_total", key, stats.bytes)
        s.set("spyglass_source_long_lines_total", key, stats.long_lines)
        s.set("spyglass_source_nul_bytes_total", key, stats.nul_bytes)
        s.set("spyglass_source_lost_files_total", key, stats.lost_files)
        s.set("spyglass_source_lost_bytes_total", key, stats.lost_bytes)
        for reason, count in stats.possibly_lost.items():
            s.set("spyglass_source_possibly_lost_total", key + (reason,), count)
        for kind, count in stats.rotations.items():
            s.set("spyglass_source_rotations_total", key + (kind,), count)
        for kind, count in stats.refused.items():
            s.set("spyglass_source_refused_files_total", key + (kind,), count)
        if rt.last_event_ts:
            s.set("spyglass_source_last_event_timestamp_seconds", key, rt.last_event_ts)
        s.set("spyglass_source_lag_bytes", key, tailer.lag_bytes())

    def problems(self) -> list[str]:
        """What /health names: each file source whose path holds something it refuses to read, what a
        polled source says it cannot read (an endpoint switched off: llama-server's /metrics without --metrics),
        and each polled source whose last poll failed (a server that does not answer: spyglass_source_up 0)."""
        found = [
            f"source {rt.name}: {rt.tailer.path} is {rt.tailer.error}"
            for rt in self.tailed_sources()
            if rt.tailer.error is not None and rt.tailer.error.startswith(("not a regular", "a symlink loop"))
        ]
        for rt in self.polled_sources():
            says = getattr(rt.source, "problems", None)
            found += says() if callable(says) else []
            found += [f"source {rt.name}: its last poll failed ({rt.down})"] if rt.down is not None else []
        return found

    def debug_sources(self) -> dict[str, Any]:
        """Per-source state for /debug/sources: error, outcomes, the last line no pattern matched,
        which path parses its blocks (per line, or columnar; why a pattern keeps it per line), and the
        shapes of the lines it could not read, the most first (a source that keeps them: llama-server's)."""
        return {
            rt.name: {
                "kind": rt.kind,
                "path": rt.tailer.path if isinstance(rt, TailedRuntime) else None,
                "error": rt.tailer.error if isinstance(rt, TailedRuntime) else None,
                "outcomes": dict(rt.outcomes),
                "last_unmatched": rt.last_unmatched.decode("utf-8", "replace"),
                "parser": rt.parser() if isinstance(rt, TailedRuntime) else "per line",
                "unread_shapes": dict(Counter(getattr(rt.source, "shapes", None) or {}).most_common(UNREAD_SHAPES)),
            }
            for rt in self.sources
        }
