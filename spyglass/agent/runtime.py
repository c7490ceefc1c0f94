"""Running the agent: the pipeline in the foreground, /metrics on a thread, inotify as a hint.

inotify events only wake the loop early (spyglass/agent/wake.py); the polling pass runs regardless,
so NFS, missed events or a watch that could not be placed never stall a source (log-tailers.md
F25).
"""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from loguru import logger

from spyglass import __version__
from spyglass.agent.affinity import settle
from spyglass.agent.pipeline import Pipeline, PolledRuntime
from spyglass.agent.wake import Wake
from spyglass.collectors.clock import Clock, SystemClock
from spyglass.config import Config
from spyglass.exporters.statefile import StateFile, Store

if TYPE_CHECKING:
    from spyglass.agent.server import AgentServer
    from spyglass.agent.snapshot import Snapshots
    from spyglass.agent.warm_queries import WarmQueries


SHARED_ROUND_SECONDS = 0.05  # polls of one host due this close together are made in one round


class StoreBusy(Exception):
    """Another process (a running agent, a demo, an ingest) holds the store: DuckDB lets one writer open it."""


def open_store(config: Config) -> Store:
    """The store the config names; StoreBusy when another process holds its DuckDB file."""
    if config.exporters.store.enabled:
        import duckdb  # duckdb and pyarrow load only when the store is on

        from spyglass.exporters.store import DuckDBStore

        try:
            store = config.exporters.store
            return DuckDBStore(config.store_path(), memory_limit=f"{store.memory_limit_mib}MiB", threads=store.threads)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower():
                raise
            holder = re.search(r"\(PID (\d+)\)", str(exc))
            raise StoreBusy(
                f"{config.store_path()} is held by another process"
                f"{f' (pid {holder.group(1)})' if holder else ''}, most likely a running agent"
                " (`spyglass run` or `spyglass demo`)"
            ) from None
    return StateFile(config.state_dir() / "state.json")


def polled_host(options: object) -> str:
    """The host a polled source asks (its url's), or "local" for one that reads this host (/proc, a socket)."""
    url = getattr(options, "url", None)
    return (urlsplit(str(url)).hostname or "local") if url else "local"


def source_folders(config: Config) -> set[Path]:
    """The folders of the file sources: where inotify watches."""
    return {Path(o.path).expanduser().parent for o in config.sources.values() if o.path}


class Agent:
    """The pipeline plus its server and watcher; `serve()` runs until `stop` is set."""

    def __init__(
        self,
        config: Config,
        clock: Clock | None = None,
        config_path: Path | None = None,
        commands: Callable[[list[str]], None] | None = None,
    ) -> None:
        settle(config.agent.cpus, config.agent.nice)  # before the store's and the server's threads start
        self.config = config
        self.config_path = config_path  # the file `config` was read from: /api/command runs commands for it only
        self.commands = commands  # what runs a client's command (the CLI hands it in: the agent imports no CLI)
        self.stop = threading.Event()
        self.wake = Wake()
        self.pipeline = Pipeline(config, clock or SystemClock(), open_store(config))
        self.server: AgentServer | None = None
        self.otel = None
        otlp = config.exporters.otlp
        if otlp.endpoint:
            from spyglass.exporters.otel import otlp_instruments

            self.otel = otlp_instruments(
                self.pipeline.state, otlp.endpoint, otlp.interval_seconds, config.agent.host, __version__
            )
            from spyglass.exporters.otel_spans import EngineSpanExporter, span_provider

            self.tracing = span_provider(otlp.endpoint, "spyglass")
            kinds = {name: options.kind for name, options in config.sources.items()}
            self.pipeline.event_hooks.append(EngineSpanExporter(self.tracing, kinds).observe)
        self.snapshots: Snapshots | None = None
        self.warm: WarmQueries | None = None
        self._decoding = threading.Lock()
        from spyglass.agent.alert_webhook import AlertBudget, Replays

        self._alert_replays = Replays()
        self._alert_budget = AlertBudget()
        from spyglass.agent.budgets import smoke_budget, spans_budget

        traces = config.exporters.traces
        self._span_budget = spans_budget(
            traces.max_spans_per_second, traces.burst_spans, traces.max_bytes_per_second, traces.burst_bytes
        )
        self._smoke_budget = smoke_budget()
        if config.exporters.prometheus.enabled:
            from spyglass.agent.server import AgentServer, ServerLimits  # here: `spyglass ingest` serves nothing

            server = config.exporters.prometheus
            limits = ServerLimits(
                server.workers,
                server.request_timeout_seconds,
                server.max_body_bytes,
                server.bearer_token(),
                tuple(server.open_paths),
            )
            query = self._query_function()
            try:
                self.server = AgentServer(
                    server.listen,
                    self.pipeline.exposed,
                    self.pipeline.debug_sources,
                    query,
                    self._counted("/v1/traces", self._receive_traces) if config.exporters.traces.accept else None,
                    limits,
                    self._counted("/api/alerts", self._receive_alerts),
                    self._counted("/api/smoke", self._receive_smoke) if self.pipeline.store.keeps_events else None,
                    metrics_listen=server.metrics_listen,
                    problems=self.pipeline.problems,
                    pages=self._pages(query),
                )
            except Exception:  # e.g. ListenError: the store was opened, and nobody else closes it
                self.close_unstarted()
                raise

    def close(self) -> None:
        """Stop the server and release the store, the sources and the query processes: the end of an agent
        driven without serve() (its server started by the caller, its pipeline run with run_until_idle)."""
        if self.server:
            self.server.stop()
        self.close_unstarted()

    def close_unstarted(self) -> None:
        """Release what the constructor opened (the store, the sources), for an agent that never served."""
        self.pipeline.close()
        self._close_queries()

    def _close_queries(self) -> None:
        if self.warm is not None:
            self.warm.close()
        if self.snapshots is not None:
            self.snapshots.close()

    def _counted(self, receiver: str, receive: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
        """`receive`, with each body a budget refuses counted in spyglass_received_refused_total."""
        from spyglass.agent.budgets import Refused

        def counted(body: bytes) -> Any:
            try:
                return receive(body)
            except Refused as exc:
                with self.pipeline.state.lock:
                    self.pipeline.state.inc("spyglass_received_refused_total", (receiver, exc.reason))
                    self.pipeline.committer.dirty = True  # shown at the next commit, even if nothing is stored
                self.wake.set()  # an idle loop waits a poll interval for a wake: that commit comes now
                raise

        return counted

    def _receive_traces(self, body: bytes) -> None:
        """Spans stored at the next step; refused whole (Refused) while the store cannot commit or past
        the spans' budget (spyglass.agent.budgets): nothing is buffered that the store cannot take."""
        from spyglass.agent.otlp_receiver import SpanLimits, decode_spans

        self._refuse_while_failing()
        traces = self.config.exporters.traces
        limits = SpanLimits(
            traces.keep_content, traces.max_spans_per_export, traces.max_attributes, traces.max_value_chars
        )
        with self._decoding:  # one export decoded at a time: its memory is bounded by the body limit
            events = decode_spans(body, self.config.agent.host, limits, now=self.pipeline.clock.now())
        self._span_budget.admit({"spans": len(events), "bytes": len(body)}, self.pipeline.clock.monotonic())
        self.pipeline.submit(events)
        self.wake.set()

    def _receive_alerts(self, body: bytes) -> str | None:
        """Stores a notification's alerts once each, and returns (a 200) only once every one of them is
        committed: a replay (the same fingerprint, labels, status and times, as Alertmanager repeats)
        is not stored again, and one that arrives while the first is still being stored waits for
        that commit (spyglass.agent.alert_webhook.Replays). A flood is bounded (AlertBudget): alerts past
        MAX_ALERTS in one notification or past their own budget are dropped and counted, said in the
        200's text; alerts past the total rate are deferred with a 503, which the sender retries."""
        from spyglass.agent.alert_webhook import read_notification
        from spyglass.agent.server import NotYetStored

        note = read_notification(body, self.config.agent.host, now=self.pipeline.clock.now())
        self._refuse_while_failing()  # before anything is marked taken: nothing to undo
        stored = threading.Event()
        refused: dict[str, list] = {"dropped": [], "deferred": []}

        def admit(new: list) -> list:  # of the alerts not taken before, those the budget takes
            kept, refused["dropped"], refused["deferred"] = self._alert_budget.admit(
                new, self.pipeline.clock.monotonic()
            )
            return kept

        kept, others = self._alert_replays.claim(note.events, stored, admit)
        dropped, deferred = refused["dropped"], refused["deferred"]
        self._count_alerts(note.over_cap, note.truncated, len(dropped), len(deferred))
        if kept:
            try:
                self.pipeline.submit(kept, stored)
            except BaseException:
                self._alert_replays.forget(kept)
                raise
            self.wake.set()
        self._wait_committed(([stored] if kept else []) + others)
        self._alert_replays.settle(kept)
        if deferred:
            raise NotYetStored(
                f"{len(deferred)} of {len(note.events)} alerts deferred: the agent stores at most"
                f" {self._alert_budget.rate:g} alerts a second; the rest are stored, retry",
                taken=True,
            )
        if note.over_cap or dropped:
            return (
                f"stored; not stored: {note.over_cap} alerts past the first {len(note.events)} of the"
                f" notification, {len(dropped)} over their alert's budget"
                f" ({self._alert_budget.per_alert} per {self._alert_budget.per_alert_seconds:g} s)\n"
            )
        return None

    def _count_alerts(self, over_cap: int, truncated: int, dropped: int, deferred: int) -> None:
        state = self.pipeline.state
        with state.lock:
            for reason, count in (
                ("notification_cap", over_cap),
                ("sender_truncated", truncated),
                ("alert_budget", dropped),
            ):
                if count:
                    state.inc("spyglass_alerts_dropped_total", (reason,), count)
            if deferred:
                state.inc("spyglass_alerts_deferred_total", (), deferred)
            if over_cap or truncated or dropped or deferred:
                self.pipeline.committer.dirty = True  # shown at the next commit, even if nothing is stored
        self.wake.set()

    def _receive_smoke(self, body: bytes) -> None:
        import orjson

        from spyglass.upgrades.smoke_event import decode_result

        event = decode_result(body, self.config.agent.host, now=self.pipeline.clock.now())
        self._refuse_while_failing()
        self._smoke_budget.admit({"bytes": len(orjson.dumps(event.fields))}, self.pipeline.clock.monotonic())
        self._store_now([event])

    def _store_now(self, events: list) -> None:
        """Submit `events` and wait for their commit, so a 200 means stored: a kill -9 after it loses
        nothing. NotYetStored (a 503) at once while the store is failing, with nothing taken (the
        sender retries, and retries pile up neither in memory nor as duplicates), or if the commit
        does not succeed within half the request timeout (then they are held and stored later)."""
        self._refuse_while_failing()
        stored = self.pipeline.submit(events)
        self.wake.set()
        self._wait_committed([stored], retry="a retry may store it twice")

    def _refuse_while_failing(self) -> None:
        """Refused (503) while the store cannot commit, or while a full batch waits for its commit:
        back-pressure, so that what the store cannot take yet waits at the sender, not in memory."""
        from spyglass.agent.budgets import Refused

        committer = self.pipeline.committer
        if not committer.healthy:
            raise Refused(
                503,
                "store_failing",
                "the store is failing (see spyglass_store_healthy); nothing was taken, retry later",
                retry_after=5,
            )
        if len(committer.pending) >= committer.max_events:
            raise Refused(
                503,
                "backlog",
                f"{len(committer.pending):,} events wait for the next commit; nothing was taken, retry",
                retry_after=1,
            )

    def _wait_committed(self, commits: list[threading.Event], retry: str = "a retry is answered once it is") -> None:
        """Return once every one of `commits` is set; NotYetStored (taken) if that takes over half the
        request timeout: what they hold is stored when the store recovers (`retry` says what a retry does)."""
        import time

        from spyglass.agent.server import NotYetStored

        wait = self.config.exporters.prometheus.request_timeout_seconds / 2
        deadline = time.monotonic() + wait
        for commit in commits:
            if not commit.wait(max(0.0, deadline - time.monotonic())):
                raise NotYetStored(
                    f"not committed within {wait:g} s (the store is failing?); held in memory and"
                    f" stored when the store recovers; {retry}",
                    taken=True,
                )

    def _pages(self, query):
        """GET /evidence/... and /trace/...: pages read from the store through `query` (/api/sql's bounded path)."""
        if query is None:
            return None
        from functools import partial

        from spyglass.agent import evidence_route
        from spyglass.query.bounded import Answer

        def ask(text: str) -> Answer:
            got = query(text)
            return Answer(got["columns"], got["rows"], got.get("truncated"), got.get("as_of"))

        from spyglass.agent import command_route

        return {
            ("GET", evidence_route.EVIDENCE): partial(evidence_route.evidence, self.config, ask),
            ("GET", evidence_route.TRACE): partial(evidence_route.trace, self.config, ask),
            ("POST", command_route.COMMAND): partial(command_route.command, self.config_path, self.commands, ask),
        }

    def _query_function(self):
        """/api/sql: a bounded query on a read-only copy of the store, a few at a time."""
        store = self.pipeline.store
        if not store.keeps_events:
            return None
        import time

        from spyglass.agent.snapshot import Snapshots
        from spyglass.agent.warm_queries import WarmQueries
        from spyglass.query.bounded import Limits, QueryError

        server = self.config.exporters.prometheus
        snapshots = self.snapshots = Snapshots(
            lambda: store.con,
            self.config.state_dir() / "sql-copies",
            server.sql_snapshot_seconds,
            stored=lambda: store.next_seq,
        )
        limits = Limits(server.sql_timeout_seconds, server.sql_memory_mb, server.sql_max_rows, server.sql_max_bytes)
        warm = self.warm = WarmQueries(limits)  # query processes kept between queries (the warm query path)
        turns = threading.BoundedSemaphore(server.sql_workers)

        def query(text: str) -> dict:
            deadline = time.monotonic() + limits.timeout_seconds
            if not turns.acquire(timeout=limits.timeout_seconds):
                raise QueryError(
                    f"the agent is busy: {server.sql_workers} queries ran for all of {limits.timeout_seconds:g} s"
                )
            try:
                with snapshots.lease() as copy:
                    answer = warm.ask(copy.path, text, deadline)
                    answer.as_of = copy.as_of
                    return answer.to_json()
            finally:
                turns.release()

        return query

    def _pollers(self) -> list[threading.Thread]:
        """One thread per host polled (polled_host): the polls of one host's sources share a schedule,
        one wake of the loop for them all; a slow host delays only its own polls, never the tailing."""

        def loop(group: list[PolledRuntime]) -> None:
            while not self.stop.is_set():
                # the pipeline keeps each schedule; a poll due within SHARED_ROUND joins this round
                wait = min([self.pipeline.poll(rt, early=SHARED_ROUND_SECONDS) for rt in group])
                self.wake.set()
                self.stop.wait(max(0.05, wait))

        groups: dict[str, list[PolledRuntime]] = {}
        for rt in self.pipeline.polled_sources():
            groups.setdefault(polled_host(self.config.sources[rt.name]), []).append(rt)
        return [
            threading.Thread(target=loop, args=(group,), name=f"poll-{host}", daemon=True)
            for host, group in groups.items()
        ]

    def serve(self) -> None:
        self.wake.watch(source_folders(self.config))
        pollers = self._pollers()
        for thread in pollers:
            thread.start()
        if self.server:
            self.server.start()
            logger.info("metrics at {}/metrics", self.server.metrics_url or self.server.url)
        clean = False
        try:
            self.pipeline.run(self.stop, self.wake)
            clean = True
        finally:
            self.stop.set()  # the pollers end too when the loop ended by an error
            for thread in pollers:
                thread.join(timeout=30)
            if self.server:
                self.server.stop()
            if self.otel is not None:
                self.otel.shutdown()  # flushes the last export
                self.tracing.shutdown()
            self.pipeline.close()
            self.wake.close()
            self._close_queries()
            if clean:
                logger.info("stopped cleanly")
            else:
                logger.error("stopped by the error below")

    def stop_on_signals(self) -> None:
        def handler(signum: int, _frame: object) -> None:
            logger.info("{} received, stopping", signal.Signals(signum).name)
            self.stop.set()
            self.wake.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
