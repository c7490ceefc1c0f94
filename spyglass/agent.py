"""Running the agent: the pipeline in the foreground, /metrics on a thread, inotify as a hint.

inotify events only wake the loop early (spyglass/wake.py); the polling pass runs regardless,
so NFS, missed events or a watch that could not be placed never stall a source (log-tailers.md
F25).
"""
from __future__ import annotations

import signal
import threading
from pathlib import Path

from loguru import logger

from collectors.clock import Clock, SystemClock
from spyglass.server import AgentServer
from exporters.statefile import StateFile, Store
from spyglass import __version__
from spyglass.config import Config
from spyglass.pipeline import Pipeline, SourceRuntime
from spyglass.wake import Wake


def open_store(config: Config) -> Store:
    if config.exporters.store.enabled:
        from exporters.store import DuckDBStore  # duckdb and pyarrow load only when the store is on

        return DuckDBStore(config.store_path())
    return StateFile(config.state_dir() / "state.json")


def source_folders(config: Config) -> set[Path]:
    """The folders of the file sources: where inotify watches."""
    return {Path(o.path).expanduser().parent for o in config.sources.values() if o.path}


class Agent:
    """The pipeline plus its server and watcher; `serve()` runs until `stop` is set."""

    def __init__(self, config: Config, clock: Clock | None = None) -> None:
        self.config = config
        self.stop = threading.Event()
        self.wake = Wake()
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
            self.server = AgentServer(config.exporters.prometheus.listen, self.pipeline.exposed,
                                      self.pipeline.debug_sources, self._query_function(),
                                      self._receive_traces if config.exporters.traces.accept else None)

    def _receive_traces(self, body: bytes) -> None:
        from spyglass.otlp_receiver import decode_spans

        self.pipeline.submit(decode_spans(body, self.config.agent.host))
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
        self.wake.watch(source_folders(self.config))
        pollers = self._pollers()
        for thread in pollers:
            thread.start()
        if self.server:
            self.server.start()
            logger.info("metrics at {}/metrics", self.server.url)
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
