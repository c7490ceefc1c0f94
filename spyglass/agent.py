"""Running the agent: the pipeline in the foreground, /metrics on a thread, inotify as a hint.

watchdog events only wake the loop early; the polling pass runs regardless, so NFS, missed
events or a watch that could not be placed never stall a source (log-tailers.md F25).
"""
from __future__ import annotations

import signal
import threading
from pathlib import Path

from loguru import logger
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from collectors.clock import Clock, SystemClock
from spyglass.server import AgentServer
from exporters.statefile import StateFile, Store
from spyglass import __version__
from spyglass.config import Config
from spyglass.pipeline import Pipeline, SourceRuntime


def open_store(config: Config) -> Store:
    if config.exporters.store.enabled:
        from exporters.store import DuckDBStore  # duckdb and pyarrow load only when the store is on

        return DuckDBStore(config.store_path())
    return StateFile(config.state_dir() / "state.json")


class _Wake(FileSystemEventHandler):
    def __init__(self, wake: threading.Event) -> None:
        self.wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        self.wake.set()


def watch_dirs(config: Config, wake: threading.Event) -> Observer | None:
    """An inotify observer on the folders of the file sources, or None if none could be watched."""
    observer = Observer()
    folders = {Path(o.path).expanduser().parent for o in config.sources.values() if o.path}
    watched = 0
    for folder in folders:
        try:
            observer.schedule(_Wake(wake), str(folder), recursive=False)
            watched += 1
        except OSError as exc:
            logger.info("no inotify watch on {} ({}); polling covers it", folder, exc)
    if not watched:
        return None
    observer.daemon = True
    observer.start()
    return observer


class Agent:
    """The pipeline plus its server and watcher; `serve()` runs until `stop` is set."""

    def __init__(self, config: Config, clock: Clock | None = None) -> None:
        self.config = config
        self.stop = threading.Event()
        self.wake = threading.Event()
        self.pipeline = Pipeline(config, clock or SystemClock(), open_store(config))
        self.server: AgentServer | None = None
        self.otel = None
        otlp = config.exporters.otlp
        if otlp.endpoint:
            from exporters.otel import otlp_instruments

            self.otel = otlp_instruments(self.pipeline.state, otlp.endpoint, otlp.interval_seconds,
                                         config.agent.host, __version__)
            from engine.instrument import otlp_tracing
            from engine.span_export import EngineSpanExporter

            self.tracing = otlp_tracing(otlp.endpoint, "spyglass")
            kinds = {name: options.kind for name, options in config.sources.items()}
            self.pipeline.event_hooks.append(EngineSpanExporter(self.tracing, kinds).observe)
        if config.exporters.prometheus.enabled:
            self.server = AgentServer(config.exporters.prometheus.listen, self.pipeline.state,
                                      self.pipeline.debug_sources, self._query_function(),
                                      self._receive_traces if config.exporters.traces.accept else None,
                                      self._receive_alerts)

    def _receive_traces(self, body: bytes) -> None:
        from spyglass.otlp_receiver import decode_spans

        self.pipeline.submit(decode_spans(body, self.config.agent.host))
        self.wake.set()

    def _receive_alerts(self, body: bytes) -> None:
        from spyglass.alert_webhook import decode_notification

        self.pipeline.submit(decode_notification(body, self.config.agent.host))
        self.wake.set()

    def _query_function(self):
        store = self.pipeline.store
        if not store.keeps_events:
            return None
        from spyglass.query import execute, jsonable

        def query(text: str) -> tuple[list[str], list]:
            cursor = store.con.cursor()  # one cursor per request thread
            try:
                columns, rows = execute(cursor, text)
                return columns, [[jsonable(v) for v in row] for row in rows]
            finally:
                cursor.close()

        return query

    def _pollers(self) -> list[threading.Thread]:
        """One thread per polled source: a slow endpoint delays only itself, never the tailing."""

        def loop(rt: SourceRuntime) -> None:
            while not self.stop.is_set():
                wait = self.pipeline.poll(rt)  # the pipeline keeps the schedule: interval, or backoff
                self.wake.set()
                self.stop.wait(max(0.05, wait))

        return [threading.Thread(target=loop, args=(rt,), name=f"poll-{rt.name}", daemon=True)
                for rt in self.pipeline.polled_sources()]

    def serve(self) -> None:
        observer = watch_dirs(self.config, self.wake)
        pollers = self._pollers()
        for thread in pollers:
            thread.start()
        if self.server:
            self.server.start()
            logger.info("metrics at {}/metrics", self.server.url)
        try:
            self.pipeline.run(self.stop, self.wake)
        finally:
            for thread in pollers:
                thread.join(timeout=30)
            if observer is not None:
                observer.stop()
            if self.server:
                self.server.stop()
            if self.otel is not None:
                self.otel.shutdown()  # flushes the last export
                self.tracing.shutdown()
            self.pipeline.close()
            logger.info("stopped cleanly")

    def stop_on_signals(self) -> None:
        def handler(signum: int, _frame: object) -> None:
            logger.info("{} received, stopping", signal.Signals(signum).name)
            self.stop.set()
            self.wake.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
