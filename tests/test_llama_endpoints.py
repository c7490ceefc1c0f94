"""Issue 37, item 8: an endpoint llama-server switched off is never a silent failure.

A real HTTP server on 127.0.0.1 answers as llama-server does without `--metrics` (/metrics 501) or on a build
without /props (404), with the real build's /props and /metrics bodies (tests/fixtures/llama/0.3.36/default).
Each poll goes through the real source, its signals, check-log's endpoint line and the agent's /health lines.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from loguru import logger

from spyglass.agent.unreadable import UnreadableWatch
from spyglass.cli.checklog import endpoints
from spyglass.collectors.llama_server import LlamaServerOptions, LlamaServerSource
from spyglass.config import parse_config
from spyglass.config.signals import build_signals, metric_state

KEY = ("llama-a", "")
REAL = Path(__file__).parent / "fixtures" / "llama" / "0.3.36" / "default"


class Server(ThreadingHTTPServer):
    answers: dict[str, tuple[int, bytes]]


class Handler(BaseHTTPRequestHandler):
    server: Server

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        status, body = self.server.answers.get(self.path, (404, b'{"error":"File Not Found"}'))
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server(("127.0.0.1", 0), Handler)
    srv.answers = {
        "/health": (200, b'{"status":"ok"}'),
        "/metrics": (501, b'{"error":{"code":501,"message":"This server does not support metrics endpoint."}}'),
        "/slots": (200, (REAL / "slots.json").read_bytes()),
        "/props": (200, (REAL / "props.json").read_bytes()),
    }
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def wired(srv: Server) -> tuple[LlamaServerSource, object, object]:
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    config = parse_config({"sources": {"metrics-a": {"kind": "llama_server", "url": url, "instance": "llama-a"}}})
    state = metric_state(config)
    source = LlamaServerSource("metrics-a", LlamaServerOptions(url=url, instance="llama-a", timeout_seconds=10))
    return source, state, build_signals(config, state)["llama_server"]


def test_metrics_501_is_a_counted_poll_error_said_once_with_its_fix(server: Server) -> None:
    source, state, signals = wired(server)
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="WARNING")
    try:
        for n in range(3):
            result = source.poll(float(n))
            for event in result.events:
                signals.apply(event)  # type: ignore[attr-defined]
    finally:
        logger.remove(sink)
    assert result.ok and result.events[0].fields["unavailable"] == {"metrics": "http_501"}
    assert state.series("spyglass_llama_poll_errors_total")[KEY + ("metrics_http_501",)] == 3  # type: ignore[attr-defined]
    assert state.series("spyglass_llama_up")[KEY] == 1  # type: ignore[attr-defined]
    assert [line for line in said if "--metrics" in line] == [said[0]] and len(said) == 1
    assert source.problems() == [
        f"source metrics-a: {source.base}/metrics answers HTTP 501: start llama-server with --metrics (its llamacpp:*"
        " counters)"
    ]
    assert "/metrics HTTP 501: start llama-server with --metrics" in endpoints(source.base)
    source.close()


def test_a_build_without_props_says_so_and_the_fix_clears_when_it_answers(server: Server) -> None:
    source, state, signals = wired(server)
    del server.answers["/props"]
    signals.apply(source.poll(1.0).events[0])  # type: ignore[attr-defined]
    assert "/props answers HTTP 404" in source.problems()[1]
    server.answers["/props"] = (200, (REAL / "props.json").read_bytes())
    server.answers["/metrics"] = (200, (REAL / "metrics.txt").read_bytes())
    signals.apply(source.poll(2.0).events[0])  # type: ignore[attr-defined]
    assert source.problems() == []
    assert endpoints(source.base) == "/health ok; /metrics ok; /slots ok; /props ok"
    source.close()


def test_build_info_ready_and_draft_series_follow_the_server(server: Server) -> None:
    source, state, signals = wired(server)
    server.answers["/metrics"] = (200, (REAL / "metrics.txt").read_bytes())
    signals.apply(source.poll(1.0).events[0])  # type: ignore[attr-defined]
    series = state.series  # type: ignore[attr-defined]
    assert series("spyglass_engine_build_info") == {KEY + ("llama.cpp", "1", "b1-0c1e570"): 1.0}
    assert series("spyglass_engine_ready")[KEY] == 1
    # no draft model (/props: speculative.types none): llama-server writes its draft counters as 0; absent here
    assert (
        series("spyglass_llama_draft_tokens_total") == {} and series("spyglass_llama_draft_verifications_total") == {}
    )
    assert series("spyglass_llama_generated_tokens_total")[KEY] > 0
    server.shutdown()  # kill -STOP answers nothing either: the engine is not ready while llama_up is 0
    server.server_close()
    source.options = source.options.model_copy(update={"timeout_seconds": 0.5})
    signals.apply(source.poll(2.0).events[0])  # type: ignore[attr-defined]
    assert series("spyglass_llama_up")[KEY] == 0 and series("spyglass_engine_ready")[KEY] == 0
    source.close()


def test_the_running_agent_says_once_when_a_source_turns_unreadable() -> None:
    said: list[str] = []
    sink = logger.add(lambda m: said.append(str(m)), level="WARNING")
    watch = UnreadableWatch(share=0.5, lines=20)
    try:
        outcomes = {"event": 100}
        assert watch.look("engine-a", outcomes, "hint") is None  # the mark
        outcomes = {"event": 110, "unmatched": 30}  # 30 of 40 since: over half
        assert "30 of 40 lines unreadable (75%" in (watch.look("engine-a", outcomes, "spyglass check-log F") or "")
        outcomes = {"event": 110, "unmatched": 60}
        assert watch.look("engine-a", outcomes, "spyglass check-log F") is None  # still over: said once
        outcomes = {"event": 140, "unmatched": 60}
        assert watch.look("engine-a", outcomes, "h") is None  # read well again
        outcomes = {"event": 140, "unmatched": 90}
        assert watch.look("engine-a", outcomes, "h") is not None  # a second crossing is said again
    finally:
        logger.remove(sink)
    assert len(said) == 2 and "spyglass check-log F" in said[0]
