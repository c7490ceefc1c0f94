"""Exemplars: a trace id on the TTFT and request-duration buckets of /metrics when the scraper asks
for OpenMetrics, linking a slow bucket to `spyglass trace`.

Units: the state keeps the latest exemplar per bucket, outside the checkpoint; /metrics shows the
exemplars of the committed state only; content negotiation. End to end: the emulated stack under
supervisord, `spyglass run` as a process, Debian's Prometheus with exemplar storage scraping it;
the exemplars' trace ids are the requests', Prometheus returns them from query_exemplars, and
`spyglass trace TRACE_ID` prints that request's spans.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import IO

import httpx
import pytest
import yaml
from conftest import wait_until
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from test_commit import LINES, open_pipeline

from spyglass import signals
from spyglass.agent.server import AgentServer
from spyglass.collectors.clock import ManualClock
from spyglass.engine.instrument import trace_id_for
from spyglass.exporters.prometheus import CONTENT_TYPE_OPENMETRICS, render, wants_openmetrics
from spyglass.ports import free_port, free_port_base
from spyglass.query.bounded import AgentApi, run_readonly
from spyglass.signals.state import MetricState

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

# What Prometheus 2.42 sends on every scrape (scrape/scrape.go), and what curl sends.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
HISTOGRAMS = (
    "spyglass_engine_ttft_seconds",
    "spyglass_gateway_ttft_seconds",
    "spyglass_gateway_request_duration_seconds",
)
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
    state = MetricState(signals.full_catalogue())
    key = ("strata-a", "normal")
    state.observe(TTFT, key, 0.3, ("20261019-124900-aaaaaa", 100.0))
    state.observe(TTFT, key, 0.4, ("20261019-124901-bbbbbb", 101.0))  # the same bucket (0.25, 0.5]
    state.observe(TTFT, key, 3.0, ("20261019-124902-cccccc", 102.0))
    state.observe(TTFT, key, 0.45)  # no request id: counted, the bucket keeps its exemplar
    bounds = state.bounds[TTFT]
    low, high = bounds.index(0.5), bounds.index(5.0)
    assert state.exemplars[TTFT] == {
        (key, low): ("20261019-124901-bbbbbb", 0.4, 101.0),
        (key, high): ("20261019-124902-cccccc", 3.0, 102.0),
    }
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
            f.writelines(LINES[: done[1] + 1])  # two requests finished
        p.step()
        p.commit_if_due()  # the first lines after a quiet spell: committed at once
        committed = p.exposed.exemplars[TTFT]
        assert len(committed) == 2 and committed == p.state.exemplars[TTFT]
        with open(log, "ab") as f:
            f.writelines(LINES[done[1] + 1 :])  # two more, read but not committed yet
        p.step()
        p.commit_if_due()  # not due: the interval has not passed
        assert p.state.exemplars[TTFT] != committed and p.exposed.exemplars[TTFT] == committed
        om = lambda state: {t for _, t, _ in exemplars_of(_scrape(state, PROMETHEUS_ACCEPT).text)[TTFT]}  # noqa: E731
        assert om(p.exposed) == {hex_of(r) for r, _, _ in committed.values()}
        clock.advance(1.0)
        p.commit_if_due()
        assert p.exposed.exemplars[TTFT] == p.state.exemplars[TTFT]
        for key, index in p.exposed.exemplars[TTFT]:  # each one is of an observation its bucket counts
            assert p.exposed.hists[TTFT][key][0][index] >= 1
        # 41b9e0 (TTFT 0.33 s) and the later 5e5e5e (0.45 s) share a bucket: the latest stays.
        assert om(p.exposed) == {
            hex_of(r) for r in ("20261019-124900-7aa82c", "20261019-125000-0c1d2e", "20261019-132000-5e5e5e")
        }
    finally:
        p.close()


def _scrape(state: MetricState, accept: str | None) -> httpx.Response:
    server = AgentServer("127.0.0.1:0", state, dict).start()
    try:
        return httpx.get(f"{server.url}/metrics", headers={"Accept": accept} if accept else {})
    finally:
        server.stop()


def test_plain_accept_gets_the_classic_text_unchanged_and_prometheus_gets_openmetrics():
    state = MetricState(signals.full_catalogue())
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


SPAN_LINE = re.compile(r"^[│├└─\s]*(\S.*?) \d+\.\d{3} s")


def _prometheus(folder: Path, agent: str, log: IO[str]) -> tuple[subprocess.Popen, str]:
    """Debian's Prometheus with exemplar storage, scraping the agent every second."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: run scripts/setup --test (installs Debian's prometheus package)"
    config = folder / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s"},
                "scrape_configs": [{"job_name": "spyglass", "static_configs": [{"targets": [agent]}]}],
            }
        )
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--enable-feature=exemplar-storage",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    return proc, f"http://127.0.0.1:{port}"


def _stored_exemplars(prometheus: str, metric: str) -> set[str]:
    try:
        body = httpx.get(
            f"{prometheus}/api/v1/query_exemplars",
            params={"query": f"{metric}_bucket", "start": 0, "end": 4_000_000_000},
            timeout=5,
        ).json()
    except (httpx.HTTPError, ValueError):
        return set()
    return {e["labels"]["trace_id"] for series in body.get("data") or [] for e in series["exemplars"]}


def _openmetrics(url: str) -> dict:
    try:
        response = httpx.get(f"{url}/metrics", headers={"Accept": PROMETHEUS_ACCEPT}, timeout=5)
    except httpx.HTTPError:
        return {}
    return exemplars_of(response.text)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """The stack pushing its spans to `spyglass run` (a process), Prometheus scraping the agent,
    and the ids of the requests sent to the gateway."""
    from spyglass.config import parse_config
    from spyglass.engine.emulator.stack import Stack

    folder = tmp_path_factory.mktemp("exemplars")
    agent_port = free_port()
    agent_url = f"http://127.0.0.1:{agent_port}"
    pushed = {"otlp_endpoint": agent_url}
    stack = Stack(
        folder / "stack",
        free_port_base(),
        {name: {"cache_mib": 65_536, **pushed} for name in ("strata-a", "strata-b")},
        pushed,
    )
    settings = tomllib.loads(stack.spyglass_toml(folder / "spyglass"))
    settings["exporters"]["prometheus"] = {"listen": f"127.0.0.1:{agent_port}"}  # /metrics, /v1/traces, /api/sql
    config = folder / "spyglass.toml"
    config.write_text(__import__("tomli_w").dumps(settings))
    parsed = parse_config(settings, "live")
    sources = {Path(o.path).parent for o in parsed.sources.values() if getattr(o, "path", None)}
    logs = [(folder / "prometheus.log").open("w"), (folder / "agent.log").open("w")]
    prometheus, prometheus_url = _prometheus(folder, f"127.0.0.1:{agent_port}", logs[0])
    agent = None
    sent: list[str] = []

    def ask(i: int) -> None:
        body = {
            "model": "m",
            "max_tokens": 1000,
            "stream": i % 2 == 1,
            "messages": [{"role": "user", "content": f"Task: {i} " + "context " * 2000}],
        }
        response = httpx.post(f"{stack.url}/v1/messages", json=body, headers={"x-mode": "passthrough"}, timeout=60)
        assert response.status_code == 200, response.text
        sent.append(response.headers["x-request-id"])

    stack.start()
    try:
        stack.wait_ready()
        ask(0)  # the gateway makes its infer folder on its first record; the agent watches folders that exist
        stack.flush()
        wait_until(lambda: all(f.is_dir() for f in sources), 30, f"the source folders {sorted(map(str, sources))}")
        agent = subprocess.Popen(
            [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=logs[1],
        )
        wait_until(lambda: _health(agent_url), 60, "the agent serving")
        for i in range(1, 7):
            ask(i)
        yield {
            "agent": agent_url,
            "prometheus": prometheus_url,
            "config": config,
            "sent": sent,
            "store": parsed.store_path(),
        }
    finally:
        if agent is not None and agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(timeout=60)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()
        stack.stop()
        prometheus.terminate()
        prometheus.wait(timeout=30)
        for log in logs:
            log.close()


def _health(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.slow
def test_a_scrape_asking_for_openmetrics_carries_the_requests_trace_ids(live):
    sent = {hex_of(r) for r in live["sent"]}
    found = wait_until(
        lambda: (lambda e: e if set(HISTOGRAMS) <= set(e) else None)(_openmetrics(live["agent"])),
        60,
        "exemplars on the TTFT and duration histograms",
    )
    for name in HISTOGRAMS:
        assert {trace for _, trace, _ in found[name]} <= sent, name  # every exemplar is a request sent
        for labels, _, value in found[name]:
            assert value <= float(labels["le"])
    classic = httpx.get(f"{live['agent']}/metrics").text  # what a plain client sees: no exemplar, no # EOF
    assert "spyglass_gateway_ttft_seconds_bucket" in classic and " # {" not in classic and "# EOF" not in classic


@pytest.mark.slow
def test_prometheus_with_exemplar_storage_returns_them(live):
    sent = {hex_of(r) for r in live["sent"]}
    for name in HISTOGRAMS:
        stored = wait_until(
            lambda name=name: _stored_exemplars(live["prometheus"], name), 60, f"Prometheus storing exemplars of {name}"
        )
        assert stored <= sent, name


@pytest.mark.slow
def test_spyglass_trace_resolves_an_exemplars_trace_id_to_the_requests_spans(live):
    by_hex = {hex_of(r): r for r in live["sent"]}
    exemplars = wait_until(
        lambda: _openmetrics(live["agent"]).get("spyglass_gateway_request_duration_seconds"),
        60,
        "a request-duration exemplar",
    )
    trace = max(exemplars, key=lambda e: e[2])[1]  # the slowest bucket's: what an on-call engineer would click
    request = by_hex[trace]
    api = AgentApi(f"{live['agent']}/api/sql")  # the agent holds the store

    def services() -> set[str]:
        rows = run_readonly(
            live["store"], f"SELECT DISTINCT instance FROM events WHERE kind = 'span' AND request_id = '{request}'", api
        ).rows
        return {instance for (instance,) in rows}

    wait_until(
        lambda: "rag-proxy" in services() and services() & {"strata-a", "strata-b"},
        60,
        "the request's gateway and serve spans (batched every 5 s) in the store",
    )
    cli = [sys.executable, "-m", "spyglass.cli.app", "trace", "-c", str(live["config"])]
    out = subprocess.run([*cli, trace], capture_output=True, text=True, env={"COLUMNS": "250", "PATH": ""}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"{request} (trace {trace})" in out.stdout
    names = [m.group(1) for m in map(SPAN_LINE.match, out.stdout.splitlines()) if m]
    engine = [n for n in names if n.startswith("engine strata-")]
    assert names[0] == "rag-proxy: POST /v1/messages" and len(engine) == 1, out.stdout
    instance = engine[0].removeprefix("engine ")
    assert f"{instance}: POST /v1/messages" in names
    assert names[names.index(engine[0]) + 1 :][:2] == ["queue", "prefill"], out.stdout
    unknown = subprocess.run([*cli, "0" * 32], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 1 and f"no request of trace {'0' * 32}" in unknown.stderr
    neither = subprocess.run([*cli, "abc123"], capture_output=True, text=True, timeout=60)
    assert neither.returncode == 1 and "not a request id or a trace id" in neither.stderr
