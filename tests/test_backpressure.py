"""Issue 29 item 4: back-pressure that holds memory. While the store cannot commit (a full disk, for
real: a size-limited tmpfs), /v1/traces refuses with 503 and Retry-After instead of buffering spans in
the waiting batch; the agent's RSS stays under the documented bound, and posts are taken again once
space returns. Before, /v1/traces kept answering 200 and RSS went from 266 MB to 2,310 MB in 25 s."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import wait_until
from test_api_hardening import PROTOBUF_BODY, peak_rss_mb
from test_disk_full import Agent, engine_lines, fill, small_disk  # noqa: F401 - small_disk is a fixture
from test_receiver_budgets import span_export

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier
RSS_BOUND_MB = 400


def test_a_full_disk_refuses_spans_with_503_and_memory_holds(tmp_path, small_disk):  # noqa: F811 - the imported fixture
    log = tmp_path / "engine.log"
    lines = engine_lines(300)
    log.write_bytes(b"".join(lines[:100]))
    agent = Agent(tmp_path, small_disk / "state", log, store=True)
    url = f"http://127.0.0.1:{agent.port}/v1/traces"
    export = span_export(2000)
    try:
        wait_until(lambda: agent.metric("spyglass_source_lines_total") == 100, 30, "the log read")
        assert httpx.post(url, content=export, headers=PROTOBUF_BODY, timeout=30).status_code == 200
        filler = fill(small_disk)
        with open(log, "ab") as f:
            f.write(b"".join(lines[100:]))
        wait_until(lambda: agent.metric("spyglass_store_healthy") == 0.0, 30, "the store marked unhealthy")

        def post(_: int) -> httpx.Response:
            return httpx.post(url, content=export, headers=PROTOBUF_BODY, timeout=30)

        with ThreadPoolExecutor(4) as pool:  # 400,000 spans offered while the disk is full
            answers = list(pool.map(post, range(200)))
        assert {a.status_code for a in answers} == {503}, {a.status_code for a in answers}
        assert all(a.headers.get("Retry-After") for a in answers)
        assert "the store is failing" in answers[0].text
        assert agent.metric('spyglass_received_refused_total{reason="store_failing",receiver="/v1/traces"}') >= 150
        peak = peak_rss_mb(agent.proc)
        assert peak < RSS_BOUND_MB, peak
        print(f"peak RSS through the outage: {peak:.0f} MB")
        filler.unlink()
        wait_until(lambda: agent.metric("spyglass_store_healthy") == 1.0, 40, "the store healthy again")
        assert httpx.post(url, content=export, headers=PROTOBUF_BODY, timeout=30).status_code == 200
        wait_until(lambda: agent.metric("spyglass_agent_spans_received_total") == 4000, 30, "both exports stored")
    finally:
        code = agent.stop()
    assert code == 0
