"""The serve-status poller against a real HTTP server on 127.0.0.1 that changes its answers."""

from __future__ import annotations

import json
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import duckdb
import pytest

from spyglass.agent.pipeline import Pipeline
from spyglass.collectors.clock import ManualClock
from spyglass.collectors.serve_status import ServeStatusOptions, ServeStatusReplay, ServeStatusSource
from spyglass.config import parse_config
from spyglass.exporters.store import DuckDBStore
from spyglass.signals import full_catalogue
from spyglass.signals.serve_status import ServeSignals
from spyglass.signals.state import MetricState

READY = {
    "engine": "strata-a",
    "build": "Strata 0.9.3 (build 7f3c2e1)",
    "serve_version": "2026.10.18",
    "state": "ready",
    "uptime_s": 8123.4,
    "slots": {"total": 20, "busy": 3},
    "prefill_queue": 2,
    "prompt_escapes": {"calls": 365, "literals": 1603},
    "stops_while_reasoning": 16,
    "requests": {"total": 5120, "by_status": {"200": 5101, "400": 12, "429": 7}},
}


class FakeServe(BaseHTTPRequestHandler):
    mode = "ready"
    release = threading.Event()

    def do_GET(self):  # noqa: N802
        mode = FakeServe.mode
        if mode == "slow":
            FakeServe.release.wait(5)  # longer than the poller's timeout, released at teardown
        if mode == "404":
            self._send(404, b"not found")
        elif mode == "garbage":
            self._send(200, b"<html>oops</html>")
        else:
            body = dict(READY, state="loading") if mode == "loading" else READY
            self._send(200, json.dumps(body).encode())

    def _send(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def serve():
    FakeServe.release.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeServe)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    FakeServe.release.set()
    server.shutdown()
    server.server_close()


def test_up_tells_the_truth_and_counters_stay_monotonic(serve):
    url = f"http://127.0.0.1:{serve.server_address[1]}/v1/status"
    source = ServeStatusSource(
        "serve-a",
        ServeStatusOptions(
            url=url, instance="strata-a", interval_seconds=5, timeout_seconds=0.5, max_backoff_seconds=40
        ),
    )
    state = MetricState(full_catalogue())
    signals = ServeSignals(state)
    seen, now = [], 0.0
    for mode in ("ready", "loading", "404", "garbage", "slow", "gone", "ready"):
        if mode == "gone":
            serve.shutdown()
            serve.server_close()
        FakeServe.mode = mode
        if mode == "ready" and seen:  # the endpoint is back: restart it on the same port
            port = int(url.split(":")[2].split("/")[0])
            serve.__init__(("127.0.0.1", port), FakeServe)
            threading.Thread(target=serve.serve_forever, daemon=True).start()
        now += 5
        result = source.poll(now)
        (event,) = result.events
        signals.apply(event)
        requests = state.values["spyglass_serve_requests_total"].get(("strata-a", "200"))
        seen.append(
            (
                mode,
                event.kind,
                event.fields.get("error"),
                result.ok,
                state.values["spyglass_serve_up"][("strata-a",)],
                requests,
            )
        )
    assert seen == [
        ("ready", "status", None, True, 1.0, 5101.0),
        ("loading", "status", None, True, 1.0, 5101.0),
        ("404", "poll_error", "http_404", False, 0.0, 5101.0),  # the last value stays, never reset
        ("garbage", "poll_error", "invalid_json", False, 0.0, 5101.0),
        ("slow", "poll_error", "timeout", False, 0.0, 5101.0),
        ("gone", "poll_error", "refused", False, 0.0, 5101.0),
        ("ready", "status", None, True, 1.0, 5101.0),
    ]
    assert state.values["spyglass_serve_poll_errors_total"] == {
        ("strata-a", "http_404"): 1,
        ("strata-a", "invalid_json"): 1,
        ("strata-a", "timeout"): 1,
        ("strata-a", "refused"): 1,
    }
    source.close()


def test_an_absent_key_is_not_measured_rather_than_zero():
    state = MetricState(full_catalogue())
    old = {k: v for k, v in READY.items() if k not in ("prompt_escapes", "stops_while_reasoning")}
    source = ServeStatusReplay("s", ServeStatusOptions(path="x", instance="strata-b"))
    ServeSignals(state).apply(source.handle(json.dumps({"ts": 1.0, "body": dict(old, engine="strata-b")}).encode()))
    assert ("strata-b",) not in state.values["spyglass_serve_prompt_escape_calls_total"]
    assert ("strata-b",) not in state.values["spyglass_serve_stops_while_reasoning_total"]
    assert state.values["spyglass_serve_measures_escapes"][("strata-b",)] == 0.0


def test_ingest_polls_once_and_stores_the_raw_snapshot(serve, tmp_path):
    FakeServe.mode = "ready"
    url = f"http://127.0.0.1:{serve.server_address[1]}/v1/status"
    config = parse_config(
        tomllib.loads(
            f'[agent]\nstate_dir = "{tmp_path}"\n[sources.serve-a]\n'
            f'kind = "serve_status"\nurl = "{url}"\ninstance = "strata-a"\n'
        ),
        "t",
    )
    pipeline = Pipeline(config, ManualClock(), DuckDBStore(config.store_path()))
    assert pipeline.run_until_idle() == 1
    pipeline.close()
    con = duckdb.connect(str(config.store_path()), read_only=True)
    body = json.loads(con.execute("SELECT fields FROM events WHERE kind = 'status'").fetchone()[0])
    assert body == READY


def test_a_recorded_snapshot_nested_five_thousand_deep_is_one_invalid_line():
    """Round 4: RecursionError escaped the decoder and cost the whole batch; now the line is counted invalid."""
    source = ServeStatusReplay("s", ServeStatusOptions(path="x", instance="strata-b"))
    deep = b'{"ts": 1.0, "body": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    assert source.handle(deep) == "invalid:json"
