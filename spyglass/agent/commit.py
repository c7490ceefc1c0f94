"""When the pipeline commits, what it exposes, and what it does while the store cannot commit.

Lines are applied to the live metric state as soon as they are read; the events they made, the
checkpoints after them and the state with them applied are committed together, in one store
transaction, at most once per `agent.commit_interval_seconds` (sooner once
`agent.commit_max_events` wait). A DuckDB commit costs milliseconds whatever its size, so
committing per wake (about 100 a second under a busy writer) was most of the agent's CPU; for the same
reason the per-request rows are folded at most once per `agent.request_rows_seconds` (and at a clean
stop), in the commit then due.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from loguru import logger

from spyglass.collectors.clock import Clock
from spyglass.collectors.event import Event
from spyglass.exporters.statefile import Store
from spyglass.signals.state import MetricState

MAX_BACKOFF_SECONDS = 15.0


class Committer:
    """Batches commits by time and size; publishes the committed state; survives a failing store.

    Guarantees:
    - Exactly once across `kill -9`: what one commit writes is consistent (events, the
      checkpoints just after them, the state with them applied), so a crash costs the re-read of
      at most one interval of lines, never a loss or a double count.
    - No false resets: `exposed` (what /metrics serves) is a copy of the state *as last
      committed*, not the live state. A restart resumes from that same commit, so a counter
      Prometheus has scraped is never seen lower afterwards (it would read the drop as a reset
      and count the whole value again). The price is freshness: /metrics trails the log by up to
      one commit interval. The histograms' exemplars are copied with the state in the same
      hold of the lock, so an exemplar on /metrics is always of an observation its counts hold.
    - A store that fails (disk full, a read-only remount) does not end the agent:
      `spyglass_store_healthy` goes to 0, `spyglass_store_commit_failures_total` counts, the
      error is logged, and the same batch is retried with back-off (interval x 2^n, at most
      15 s) until it goes in; nothing is dropped. Meanwhile `exposed` follows the live state
      (metrics keep flowing; only then can a kill -9 show a counter lower after the restart),
      and reading pauses once `commit_max_events` wait, so memory stays bounded and the unread
      lines wait in their files.
    - A record the store cannot take (a timestamp past the year 9999, say) never blocks the
      ones behind it: the store sets it aside, the rest commits, and
      `spyglass_store_events_refused_total` counts it.
    """

    def __init__(
        self,
        store: Store,
        state: MetricState,
        clock: Clock,
        *,
        interval: float,
        max_events: int,
        checkpoints: Callable[[], dict[str, Any]],
        saved_checkpoints: dict[str, Any],
        hooks: list[Callable[[list[Event]], None]],
        quiet_interval: float = 0.0,
        fold_interval: float = 0.0,
    ) -> None:
        self.store, self.state, self.clock = store, state, clock
        self.interval, self.max_events = interval, max_events
        self.checkpoints, self.hooks = checkpoints, hooks
        self.pending: list[Event] = []
        self.waiters: list[threading.Event] = []  # set once the pending events are committed
        self.dirty = False  # lines or events applied since the last commit
        self.quiet = False  # only repeated polls applied since the last commit
        self.quiet_interval = max(interval, quiet_interval)
        self._committed_at = clock.monotonic()
        self.fold_interval = fold_interval
        self._fold_due = self._committed_at + fold_interval  # the store folded what it held when it opened
        self.failures = 0  # consecutive failed commits
        self._last_checkpoints = saved_checkpoints
        self._due = clock.monotonic()  # the next commit (or retry) may not start before this
        self._published_at = float("-inf")
        self.exposed = MetricState(state.catalogue)
        state.set("spyglass_store_healthy", (), 1.0)
        with state.lock:
            self._publish(state.to_json(), state.copy_exemplars())

    @property
    def healthy(self) -> bool:
        return self.failures == 0

    def add(
        self, events: list[Event], lines: int, waiters: list[threading.Event] | None = None, quiet: int = 0
    ) -> None:
        """Events (and lines) applied to the live state, to go into the next commit; each of
        `waiters` is set when the commit holding them succeeded (at once if no store keeps events).
        `quiet` of the events (and as many of the lines) only repeat what their source said at its
        last poll: alone, they wait up to `quiet_interval` for a commit, not `interval`."""
        if self.store.keeps_events or self.hooks:  # else nothing would ever read them
            self.pending += events
        if len(events) > quiet or lines > quiet:
            self.dirty = True
        elif events:
            self.quiet = True
        if waiters and not self.store.keeps_events:
            for waiter in waiters:
                waiter.set()
        elif waiters:
            self.waiters += waiters

    @property
    def waiting(self) -> bool:
        """Whether anything applied waits for a commit due at the interval (repeated polls alone wait longer)."""
        return self.dirty or bool(self.pending) and not self.quiet

    def next_commit(self) -> float | None:
        """When the next commit may come (clock.monotonic(); in the past once the interval has
        passed), or None while the store is failing (then retries set the pace, not the interval)."""
        return self._due if self.healthy else None

    def backlogged(self) -> bool:
        """Whether reading should pause: the store is failing and a full batch waits."""
        return not self.healthy and len(self.pending) >= self.max_events

    def tick(self, *, retry: bool = True) -> None:
        """Commit if due (by time or size). On failure, with `retry`: count, log and schedule a
        retry; without (`spyglass ingest`): raise."""
        now = self.clock.monotonic()
        if now < self._due and (not self.healthy or len(self.pending) < self.max_events):
            if not self.healthy and now - self._published_at >= self.interval:
                self._publish_live()
            return
        if (
            self.healthy
            and self.quiet
            and not self.dirty
            and not self.waiters
            and now < self._committed_at + self.quiet_interval
            and len(self.pending) < self.max_events
        ):
            return  # repeated polls alone: committed with the next news, or after quiet_interval
        try:
            self.commit()
        except Exception as exc:  # noqa: BLE001 - disk full, a remount, a bug: the agent lives on
            if not retry:
                raise
            self._failed(exc)

    def commit(self, *, fold: bool = False) -> None:
        """Commit now if anything changed (or, with `fold`, the store's rows wait for one), folding the
        per-request rows if `fold` or their interval passed; raises what the store raised (`spyglass ingest`)."""
        now = self.clock.monotonic()
        fold = fold or now >= self._fold_due
        with self.state.lock:
            checkpoints = self.checkpoints()
            if not (
                self.pending or self.dirty or checkpoints != self._last_checkpoints or fold and self.store.rows_behind
            ):
                return  # still due: a line after a quiet spell is committed (and shown) at once
            events, waiters = self.pending, self.waiters
            if self.store.keeps_events and events:
                self.pending = events = self._storable(events)  # set aside once, not again at a retry
                self.state.inc("spyglass_store_events_total", (), len(events))
            self.state.set("spyglass_store_healthy", (), 1.0)
            snapshot, exemplars = self.state.to_json(), self.state.copy_exemplars()
        try:
            refused = self.store.commit(events, checkpoints, snapshot, fold=fold)
        except BaseException:
            with self.state.lock:
                if self.store.keeps_events and events:
                    self.state.inc("spyglass_store_events_total", (), -len(events))
            raise
        if self.failures:
            logger.info("store commits again after {} failed attempts; nothing was lost", self.failures)
        self.failures, self.dirty, self.quiet = 0, False, False
        self._committed_at = now
        if fold:
            self._fold_due = now + self.fold_interval
        self.pending, self.waiters = [], []
        for waiter in waiters:
            waiter.set()
        if refused:
            self._set_aside(refused, committed=True)
        self._last_checkpoints = checkpoints
        self._due = now + self.interval
        self._publish(snapshot, exemplars)
        for hook in self.hooks:
            hook(events)

    def flush(self) -> None:
        """The last commit at a clean stop, rows folded; if it fails, the lines are read again at the next start."""
        try:
            self.commit(fold=True)
        except Exception as exc:  # noqa: BLE001
            logger.error("the last commit failed ({}); what it held is read again at the next start", exc)

    def _storable(self, events: list[Event]) -> list[Event]:
        """The events whose timestamp the store can take; the others are set aside (under the lock)."""
        from spyglass.exporters.store import storable

        kept = [e for e in events if storable(e)]
        if len(kept) < len(events):
            self._set_aside([e for e in events if not storable(e)], committed=False)
        return kept

    def _set_aside(self, refused: list[Event], *, committed: bool) -> None:
        """Events the store cannot take: counted, logged, never retried, so one bad record never
        blocks the ones behind it. Found before the commit (a timestamp) they are not counted in
        `spyglass_store_events_total`; found by the store (fields that will not encode) they were."""
        if committed:
            with self.state.lock:
                self.state.inc("spyglass_store_events_refused_total", (), len(refused))
        else:
            self.state.inc("spyglass_store_events_refused_total", (), len(refused))
        logger.error(
            "{} event(s) the store cannot take were set aside (e.g. {} from {} at ts={!r});"
            " the rest of the batch is committed",
            len(refused),
            refused[0].kind,
            refused[0].source,
            refused[0].ts,
        )

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        delay = min(MAX_BACKOFF_SECONDS, max(self.interval, 0.5) * 2 ** (self.failures - 1))
        self._due = self.clock.monotonic() + delay
        with self.state.lock:
            self.state.set("spyglass_store_healthy", (), 0.0)
            self.state.inc("spyglass_store_commit_failures_total", ())
        if self.failures == 1 or self.failures % 20 == 0:
            logger.error(
                "store commit failed ({}); {} events wait, retrying every {:.0f} s at most; metrics go on from memory",
                exc,
                len(self.pending),
                MAX_BACKOFF_SECONDS,
            )
        self._publish_live()

    def _publish_live(self) -> None:
        with self.state.lock:
            snapshot, exemplars = self.state.to_json(), self.state.copy_exemplars()
        self._publish(snapshot, exemplars)

    def _publish(self, snapshot: dict[str, Any], exemplars: dict[str, Any]) -> None:
        fresh = MetricState(self.state.catalogue)
        fresh.load_json(snapshot)
        with self.exposed.lock:
            self.exposed.values, self.exposed.hists, self.exposed.exemplars = fresh.values, fresh.hists, exemplars
        self._published_at = self.clock.monotonic()
