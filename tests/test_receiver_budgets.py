"""Issue 29 item 3: every push input has a budget, and every refusal is counted.

Smoke results were unbounded (about 680 KB each; 200 of them in 13 s made every /api/sql query fail with
DuckDB out of memory), spans had no rate budget, and 32 bodies of 500,000 empty span events peaked at
524 MB. Each is refused now, whole, with 413/429 (Retry-After where retryable), counted in
spyglass_received_refused_total{receiver,reason}, and /api/sql answers throughout."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import httpx
import pytest
from conftest import wait_until
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from test_api_hardening import PROTOBUF_BODY, RSS_BOUND_MB, peak_rss_mb, sql, start_agent, varint  # noqa: F401

from spyglass.agent.budgets import SMOKE_MAX_BYTES, Bucket, ReceiverBudget, Refused

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier
JSON_BODY = {"Content-Type": "application/json"}


def test_a_bucket_takes_its_burst_then_its_rate_and_refuses_whole():
    budget = ReceiverBudget("/x", {"spans": Bucket(100, 10), "bytes": Bucket(1000, 100)}, max_item=50)
    budget.admit({"spans": 50, "bytes": 500}, now=0.0)
    with pytest.raises(Refused) as over:
        budget.admit({"spans": 50, "bytes": 600}, now=0.0)  # spans fit, bytes do not: nothing charged
    assert (over.value.status, over.value.reason, over.value.headers()) == (429, "rate", {"Retry-After": "1"})
    budget.admit({"spans": 50, "bytes": 500}, now=0.0)  # the spans were refunded
    with pytest.raises(Refused) as rate:
        budget.admit({"spans": 20, "bytes": 1}, now=1.0)  # 10 spans came back in a second
    assert rate.value.status == 429 and rate.value.headers() == {"Retry-After": "1"}
    budget.admit({"spans": 20, "bytes": 1}, now=2.0)
    with pytest.raises(Refused) as large:
        budget.admit({"spans": 51, "bytes": 1}, now=100.0)
    assert (large.value.status, large.value.reason) == (413, "too_large")


def span_export(spans: int, events_per_span: int = 0) -> bytes:
    """An ExportTraceServiceRequest of `spans` spans with valid times and `events_per_span` empty span events."""

    def field(number: int, payload: bytes) -> bytes:
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    now = int(datetime.now(UTC).timestamp() * 1e9)
    times = bytes([0x39]) + now.to_bytes(8, "little") + bytes([0x41]) + now.to_bytes(8, "little")  # fields 7, 8
    span = field(2, b"\x01" * 8) + times + field(11, b"") * 0
    body = field(1, b"\x02" * 16) + span + b"\x5a\x00" * events_per_span  # 11: an empty span event
    return field(1, field(2, field(2, body) * spans))


def metric(url: str, sample: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_spans_past_their_rate_are_a_429_with_retry_after_and_counted(start_agent):  # noqa: F811 - the imported fixture
    agent = start_agent(**{})
    url = agent["url"]
    config = agent["config"]
    assert ExportTraceServiceRequest.FromString(span_export(2)).resource_spans[0].scope_spans[0].spans[1].trace_id
    text = config.read_text() + "\n[exporters.traces]\nburst_spans = 3000\nmax_spans_per_second = 10\n"
    agent["proc"].kill()
    agent["proc"].wait()
    config.write_text(text)
    import subprocess
    import sys
    import threading

    proc = subprocess.Popen(
        [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)], stderr=subprocess.DEVNULL
    )
    killer = threading.Timer(90, proc.kill)
    killer.start()
    try:
        wait_until(lambda: _answers(url), what="the agent again")
        answers = [
            httpx.post(f"{url}/v1/traces", content=span_export(1000), headers=PROTOBUF_BODY, timeout=30)
            for _ in range(4)
        ]
        assert [a.status_code for a in answers] == [200, 200, 200, 429], [a.text for a in answers]
        assert int(answers[3].headers["Retry-After"]) >= 1 and "10 spans a second" in answers[3].text
        wait_until(
            lambda: metric(url, 'spyglass_received_refused_total{reason="rate",receiver="/v1/traces"}') == 1,
            what="the refusal counted",
        )
        wait_until(lambda: metric(url, "spyglass_agent_spans_received_total") == 3000, what="3,000 spans stored")
    finally:
        proc.kill()
        proc.wait()
        killer.cancel()


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def smoke(reason: str, samples: int = 1, problem: str = "") -> dict:
    return {
        "instance": "strata-b",
        "url": "http://127.0.0.1:8082",
        "passed": False,
        "reason": reason,
        "at": datetime.now(UTC).timestamp(),
        "waited_seconds": 0.5,
        "samples_file": "s.jsonl",
        "samples_sha256": "0" * 64,
        "samples": [{"name": f"s{n}", "status": 200, "ttft_ms": 12.5, "problem": problem} for n in range(samples)],
    }


def test_smoke_results_are_bounded_in_size_and_rate_and_sql_keeps_answering(start_agent):  # noqa: F811 - the imported fixture
    agent = start_agent()
    url = agent["url"]
    big = smoke("x" * 1000, samples=1000, problem="p" * 500)  # about 680 KB, as the attack sent
    answer = httpx.post(f"{url}/api/smoke", json=big, timeout=30)
    assert answer.status_code == 413 and f"at most {SMOKE_MAX_BYTES:,}" in answer.text, answer.text
    medium = smoke("m", samples=100, problem="p" * 500)  # about 60 KB: taken until the burst is spent
    codes, held = [], 0
    with ThreadPoolExecutor(4) as pool:
        for answer in pool.map(lambda n: httpx.post(f"{url}/api/smoke", json=medium, timeout=30), range(40)):
            codes.append(answer.status_code)
            if answer.status_code == 429:
                assert int(answer.headers["Retry-After"]) >= 1
            # a 503 that says so was taken, its commit slower than half the request timeout (a loaded machine)
            held += answer.status_code == 503 and "held in memory and stored" in answer.text
    # 1 MiB of burst is 17 of them; a 503 is a worker busy waiting for a commit (nothing taken)
    assert set(codes) <= {200, 429, 503} and 10 <= codes.count(200) + held <= 20 and codes.count(429) >= 15, codes
    # /api/sql answers (a query may time out on a loaded machine: asked again, never an out-of-memory)
    assert wait_until(lambda: sql(url, "SELECT 1 AS one").json().get("rows")) == [[1]]
    stored = "SELECT count(*) FROM events WHERE source = 'smoke'"
    wait_until(lambda: sql(url, stored).json().get("rows") == [[codes.count(200) + held]], what="every taken result")
    assert metric(url, 'spyglass_received_refused_total{reason="too_large",receiver="/api/smoke"}') == 1
    # /metrics shows the state as last committed: a 429 answered after the last stored result's commit is
    # counted at the next one (CI saw 20 of 22 when it read at once)
    rate = 'spyglass_received_refused_total{reason="rate",receiver="/api/smoke"}'
    wait_until(lambda: metric(url, rate) == codes.count(429), what=f"{codes.count(429)} refusals on /metrics")


def test_span_event_bombs_are_refused_before_they_are_built(start_agent):  # noqa: F811 - the imported fixture
    """32 bodies of one span with 500,000 empty span events (1 MB each) peaked at 524 MB."""
    agent = start_agent()
    url = agent["url"]
    bomb = span_export(1, events_per_span=500_000)
    assert len(bomb) < 1 << 20
    with ThreadPoolExecutor(32) as pool:
        answers = list(
            pool.map(
                lambda _: httpx.post(f"{url}/v1/traces", content=bomb, timeout=120, headers=PROTOBUF_BODY), range(32)
            )
        )
    assert {a.status_code for a in answers} <= {400, 503} and [a.status_code for a in answers].count(
        400
    ) >= 8  # 8 workers
    assert "parts (spans, attributes, span events, links, values)" in next(
        a.text for a in answers if a.status_code == 400
    )
    peak = peak_rss_mb(agent["proc"])
    assert peak < RSS_BOUND_MB, peak
    print(f"peak RSS under the span event bombs: {peak:.0f} MB")
