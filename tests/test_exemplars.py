"""Exemplars: a trace id on the TTFT and request-duration buckets of /metrics when the scraper asks
for OpenMetrics: the state keeps the latest exemplar per bucket, outside the checkpoint; /metrics
shows the exemplars of the committed state only; content negotiation.
"""
from __future__ import annotations

import json

import httpx
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from test_commit import LINES, open_pipeline

import exporters
from collectors.clock import ManualClock
from engine.instrument import trace_id_for
from exporters.prometheus import CONTENT_TYPE_OPENMETRICS, render, wants_openmetrics
from exporters.state import MetricState
from spyglass.server import AgentServer

# What Prometheus 2.42 sends on every scrape (scrape/scrape.go), and what curl sends.
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
HISTOGRAMS = ("spyglass_engine_ttft_seconds", "spyglass_gateway_ttft_seconds", "spyglass_gateway_request_duration_seconds")
TTFT = "spyglass_engine_ttft_seconds"


def hex_of(request_id: str) -> str:
    return format(trace_id_for(request_id), "032x")


def exemplars_of(text: str) -> dict[str, list[tuple[dict[str, str], str, float]]]:
    """Per histogram: (bucket labels, trace id, value) of each exemplar of an OpenMetrics body."""
    found: dict[str, list[tuple[dict[str, str], str, float]]] = {}
    for family in parse_openmetrics(text):
        for s in family.samples:
            if s.exemplar:
                found.setdefault(family.name, []).append((s.labels, s.exemplar.labels["trace_id"], s.exemplar.value))
    return found


def test_the_state_keeps_the_latest_exemplar_per_bucket_and_not_in_the_checkpoint():
    state = MetricState(exporters.full_catalogue())
    key = ("strata-a", "normal")
    state.observe(TTFT, key, 0.3, ("20261019-124900-aaaaaa", 100.0))
    state.observe(TTFT, key, 0.4, ("20261019-124901-bbbbbb", 101.0))  # the same bucket (0.25, 0.5]
    state.observe(TTFT, key, 3.0, ("20261019-124902-cccccc", 102.0))
    state.observe(TTFT, key, 0.45)  # no request id: counted, the bucket keeps its exemplar
    bounds = state.bounds[TTFT]
    low, high = bounds.index(0.5), bounds.index(5.0)
    assert state.exemplars[TTFT] == {(key, low): ("20261019-124901-bbbbbb", 0.4, 101.0),
                                     (key, high): ("20261019-124902-cccccc", 3.0, 102.0)}
    assert sum(state.hists[TTFT][key][0]) == 4
    assert "20261019" not in json.dumps(state.to_json())  # in memory only
    copy = state.copy_exemplars()
    state.observe(TTFT, key, 0.3, ("20261019-124903-dddddd", 103.0))
    assert copy[TTFT][key, low][0] == "20261019-124901-bbbbbb"  # a copy, not a view


def test_metrics_show_only_the_exemplars_of_the_committed_state(tmp_path):
    log, clock = tmp_path / "engine.log", ManualClock()
    log.write_bytes(b"")
    p = open_pipeline(tmp_path, log, clock, commit_interval_seconds=1.0)
    try:
        done = [i for i, line in enumerate(LINES) if b" done finish=" in line]
        with open(log, "ab") as f:
            f.writelines(LINES[:done[1] + 1])  # two requests finished
        p.step()
        p.commit_if_due()  # the first lines after a quiet spell: committed at once
        committed = p.exposed.exemplars[TTFT]
        assert len(committed) == 2 and committed == p.state.exemplars[TTFT]
        with open(log, "ab") as f:
            f.writelines(LINES[done[1] + 1:])  # two more, read but not committed yet
        p.step()
        p.commit_if_due()  # not due: the interval has not passed
        assert p.state.exemplars[TTFT] != committed and p.exposed.exemplars[TTFT] == committed
        om = lambda state: {t for _, t, _ in exemplars_of(_scrape(state, PROMETHEUS_ACCEPT).text)[TTFT]}  # noqa: E731
        assert om(p.exposed) == {hex_of(r) for r, _, _ in committed.values()}
        clock.advance(1.0)
        p.commit_if_due()
        assert p.exposed.exemplars[TTFT] == p.state.exemplars[TTFT]
        for (key, index) in p.exposed.exemplars[TTFT]:  # each one is of an observation its bucket counts
            assert p.exposed.hists[TTFT][key][0][index] >= 1
        # 41b9e0 (TTFT 0.33 s) and the later 5e5e5e (0.45 s) share a bucket: the latest stays.
        assert om(p.exposed) == {hex_of(r) for r in ("20261019-124900-7aa82c", "20261019-125000-0c1d2e",
                                                    "20261019-132000-5e5e5e")}
    finally:
        p.close()


def _scrape(state: MetricState, accept: str | None) -> httpx.Response:
    server = AgentServer("127.0.0.1:0", state, dict).start()
    try:
        return httpx.get(f"{server.url}/metrics", headers={"Accept": accept} if accept else {})
    finally:
        server.stop()


def test_plain_accept_gets_the_classic_text_unchanged_and_prometheus_gets_openmetrics():
    state = MetricState(exporters.full_catalogue())
    state.observe("spyglass_gateway_ttft_seconds", ("fast",), 1.4, ("20261020-075950-aa0001", 1792454405.0))
    state.inc("spyglass_gateway_requests_total", ("fast", "200"))
    for accept in (None, "*/*", "text/plain", "text/plain;version=0.0.4", "application/json"):
        plain = _scrape(state, accept)
        assert plain.headers["content-type"] == "text/plain; version=1.0.0; charset=utf-8", accept
        assert plain.content == render(state) and "# EOF" not in plain.text and " # {" not in plain.text
    for accept in (PROMETHEUS_ACCEPT, "application/openmetrics-text", "application/openmetrics-text; version=1.0.0"):
        om = _scrape(state, accept)
        assert om.headers["content-type"] == CONTENT_TYPE_OPENMETRICS, accept
        assert om.text.endswith("# EOF\n")
        assert "# TYPE spyglass_gateway_requests counter" in om.text
        assert 'spyglass_gateway_requests_total{lane="fast",status="200"} 1.0' in om.text
        bucket = 'spyglass_gateway_ttft_seconds_bucket{lane="fast",le="2.5"} 1.0'
        assert f'{bucket} # {{trace_id="{hex_of("20261020-075950-aa0001")}"}} 1.4 1792454405.0\n' in om.text
    assert not wants_openmetrics("application/openmetrics-text;version=2.0.0")  # not what this serves
    assert not wants_openmetrics("text/plain;q=1,application/openmetrics-text;q=0.5")
    assert not wants_openmetrics("application/openmetrics-text;q=0")

