"""Timestamps from outside are bounded at every edge (issue 21, item 1): a smoke result at 1e300,
Infinity or the year 10000, an alert in 9999, a span from 2554 and a log line from 2099 are refused
where they enter (400, or a counted invalid line), and the records behind them are stored. A
record that reaches the store anyway is set aside and counted; it never blocks a commit."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import duckdb
import httpx
import pytest
from conftest import wait_until
from test_alert_webhook import alert, notification

from spyglass.collectors import timebounds
from spyglass.collectors.event import Event
from spyglass.ports import free_port

NOW = 1_796_000_000.0
GOOD_SMOKE = {
    "instance": "strata-a",
    "url": "http://127.0.0.1:8081",
    "passed": True,
    "reason": "ok",
    "waited_seconds": 1.0,
    "samples_file": "s.jsonl",
    "samples_sha256": "a" * 64,
    "samples": [],
}


@pytest.mark.parametrize(
    "value,unit",
    [
        (1e300, "s"),
        (math.inf, "s"),
        (math.nan, "s"),
        (-math.inf, "s"),
        (9.3e12, "s"),
        (253_402_300_800.0, "s"),
        (946_684_799.0, "s"),
        (NOW + 86_401, "s"),
        (1e300, "ns"),
        (0, "ns"),
        ((NOW + 2 * 86_400) * 1e9, "ns"),
    ],
)
def test_a_timestamp_outside_2000_to_a_day_past_now_is_refused(value: float, unit: str) -> None:
    assert timebounds.problem(value, NOW, unit) is not None
    with pytest.raises(ValueError, match="at: .*timestamps must lie between 2000-01-01 and a day past now"):
        timebounds.check(value, NOW, "at", unit)


@pytest.mark.parametrize("value,unit", [(NOW, "s"), (946_684_800.0, "s"), (NOW + 86_400, "s"), (NOW * 1e9, "ns")])
def test_a_timestamp_inside_the_range_is_kept(value: float, unit: str) -> None:
    assert timebounds.check(value, NOW, "at", unit) == value


@pytest.fixture
def agent(tmp_path: Path):
    """A real Agent serving in a thread with a store and one engine log; stopped at the end."""
    from spyglass.agent.runtime import Agent
    from spyglass.config import load_config

    port = free_port()
    log = tmp_path / "a.log"
    log.write_bytes(b"")
    config = tmp_path / "spyglass.toml"
    config.write_text(
        f'[agent]\nstate_dir = "{tmp_path}"\nhost = "h1"\ncommit_interval_seconds = 0.2\n'
        f'[exporters.prometheus]\nlisten = "127.0.0.1:{port}"\n[exporters.store]\nenabled = true\n'
        f'[sources.engine-a]\nkind = "engine_log"\npath = "{log}"\ninstance = "strata-a"\n'
    )
    running = Agent(load_config(config))
    loop = threading.Thread(target=running.serve, daemon=True)
    loop.start()
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: _answers(url + "/health"), what="the agent serving")

    def stop() -> None:
        running.stop.set()
        running.wake.set()
        loop.join(timeout=60)

    try:
        yield running, url, log, stop
    finally:
        stop()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url).status_code == 200
    except httpx.TransportError:
        return False


def _stored(config, where: str = "true") -> list[tuple]:
    con = duckdb.connect(str(config.store_path()), read_only=True)
    try:
        return con.execute(f"SELECT kind, source, epoch(ts) FROM events WHERE {where} ORDER BY seq").fetchall()
    finally:
        con.close()


def _metric(url: str, line: str) -> float | None:
    for row in httpx.get(url + "/metrics").text.splitlines():
        if row.startswith(line + " "):
            return float(row.rsplit(" ", 1)[1])
    return None


def _span_export(start_ns: int) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    span = Span(
        trace_id=b"\x02" * 16,
        span_id=b"\x01" * 8,
        name="POST /v1/chat",
        kind=2,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=start_ns + 1_000_000,
    )
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])]
    ).SerializeToString()


def test_every_endpoint_refuses_a_poison_timestamp_and_stores_what_follows(agent) -> None:
    running, url, log, stop = agent
    smoke = f"{url}/api/smoke"
    for at in ("1e300", "Infinity", "NaN", "9.3e12", "253402300800", "1.0"):  # raw JSON: Infinity is Python's
        body = json.dumps(GOOD_SMOKE)[:-1] + f', "at": {at}}}'
        answer = httpx.post(smoke, content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code == 400, (at, answer.text)
        assert answer.text.startswith("at:"), answer.text
    late = notification({**alert("firing"), "startsAt": "9999-12-31T23:59:59Z"})
    answer = httpx.post(f"{url}/api/alerts", content=late, headers={"Content-Type": "application/json"})
    assert (answer.status_code, "startsAt" in answer.text) == (400, True), answer.text
    answer = httpx.post(
        f"{url}/v1/traces",
        content=_span_export(18_000_000_000_000_000_000),
        headers={"Content-Type": "application/x-protobuf"},
    )
    assert (answer.status_code, "start_time_unix_nano" in answer.text) == (400, True), answer.text

    at = time.time()
    answer = httpx.post(
        smoke, content=json.dumps({**GOOD_SMOKE, "at": at}), headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 200, answer.text  # stored: the store was never wedged
    with open(log, "ab") as f:  # a line from 2099, then a good one: the first is counted, the second stored
        f.write(b"2099-10-19 04:30:36.004 I [main] Strata 0.9.3 (build 7f3c2e1) starting pid=48211\n")
        f.write(b"2026-10-19 04:30:36.004 I [main] Strata 0.9.3 (build 7f3c2e1) starting pid=48212\n")
    line = 'spyglass_source_invalid_fields_total{field="ts",source="engine-a"}'
    wait_until(lambda: _metric(url, line) == 1.0, what="the 2099 line counted invalid")
    stop()
    rows = _stored(running.config)
    assert [(k, s) for k, s, _ in rows] == [("smoke_passed", "smoke"), ("start", "engine-a")]
    assert rows[0][2] == pytest.approx(at, abs=1e-5)


def test_a_record_the_store_cannot_take_is_set_aside_and_never_blocks_the_rest(agent) -> None:
    """What an edge forgot to bound (here submitted straight to the pipeline) is set aside at the
    commit and counted; the events with it and after it are committed."""
    running, url, _, stop = agent
    now = time.time()
    batch = [
        Event(1e300, "smoke", "smoke_passed", "strata-a", {}),
        Event(now, "smoke", "smoke_passed", "a", {}),
        Event(math.inf, "otlp", "span", "x", {}),
        Event(253_402_300_800.0, "otlp", "span", "x", {}),
    ]
    assert running.pipeline.submit(batch).wait(30)
    assert running.pipeline.submit([Event(now + 1, "smoke", "smoke_failed", "a", {})]).wait(30)
    wait_until(lambda: _metric(url, "spyglass_store_events_refused_total") == 3.0, what="3 set aside, counted")
    assert running.pipeline.committer.healthy
    assert _metric(url, "spyglass_store_events_total") == 2.0
    stop()
    assert [(k, ts) for k, _, ts in _stored(running.config)] == [
        ("smoke_passed", pytest.approx(now, abs=1e-5)),
        ("smoke_failed", pytest.approx(now + 1, abs=1e-5)),
    ]
