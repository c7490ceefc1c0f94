"""`spyglass run` as a real process: serves /metrics and /api/sql, follows a growing log, and
stops cleanly on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import httpx
import pytest
from conftest import FIXTURES, wait_until

from spyglass.config import engine_log_toml
from spyglass.ports import free_port
from spyglass.query.bounded import AgentApi, QueryError, run_readonly

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

FIXTURE = FIXTURES / "engine_log" / "strata-iq3_xxs-b.log"


@pytest.fixture
def agent(tmp_path):
    port = free_port()
    log = tmp_path / "strata-iq3_xxs-b.log"
    log.write_bytes(FIXTURE.read_bytes())
    config = tmp_path / "spyglass.toml"
    config.write_text(engine_log_toml(log, tmp_path / "state", listen=f"127.0.0.1:{port}"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)], stderr=subprocess.PIPE, text=True
    )
    killer = __import__("threading").Timer(60, proc.kill)  # never let a hung agent hang the suite
    killer.start()
    for line in proc.stderr:
        if "metrics at" in line:
            break
    yield {
        "proc": proc,
        "url": f"http://127.0.0.1:{port}",
        "log": log,
        "config": config,
        "store": tmp_path / "state" / "spyglass.duckdb",
    }
    if proc.poll() is None:
        proc.kill()
    proc.communicate()
    killer.cancel()


def metric(url: str, sample: str) -> float | None:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_agent_follows_the_log_and_stops_cleanly_on_sigterm(agent):
    url, key = agent["url"], 'spyglass_engine_evictions_total{instance="strata-b",lane="normal"}'
    wait_until(lambda: metric(url, key) == 1.0, what="the fixture on /metrics (its one evict event)")
    with open(agent["log"], "ab") as log:
        log.write(
            b"2026-10-19 05:21:00.000 I [cache] evict conv=7b7b bytes=76021760 reason=budget parked=0"
            b" used=0 budget=8589934592 evictions=1\n"
        )
    wait_until(lambda: metric(url, key) == 2.0, what="the appended evict line on /metrics")
    assert httpx.get(f"{url}/health").text == "ok\n"
    sources = httpx.get(f"{url}/debug/sources").json()
    assert sources["engine-b"]["last_unmatched"].endswith("rebalanced experts in 12 ms")

    agent["proc"].send_signal(signal.SIGTERM)
    _, err = agent["proc"].communicate(timeout=30)
    assert agent["proc"].returncode == 0
    assert "SIGTERM received" in err and "stopped cleanly" in err


def test_sql_goes_through_the_agent_while_it_holds_the_store(agent):
    url = agent["url"]
    wait_until(lambda: metric(url, "spyglass_store_events_total") == 35.0, what="the fixture stored")
    answer = run_readonly(
        agent["store"], "SELECT count(*) AS n FROM events WHERE kind = 'done'", AgentApi(f"{url}/api/sql")
    )
    assert (answer.columns, answer.rows) == (["n"], [[4]])
    with pytest.raises(QueryError, match="read-only mode"):
        run_readonly(agent["store"], "DELETE FROM ev_other", AgentApi(f"{url}/api/sql"))
    with pytest.raises(QueryError, match="disabled by configuration"):
        run_readonly(agent["store"], "SELECT * FROM read_csv('/etc/passwd')", AgentApi(f"{url}/api/sql"))


def test_sql_cli_reads_the_store_directly_when_no_agent_runs(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(engine_log_toml(FIXTURE, tmp_path))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "spyglass.cli.app", *args, "-c", str(config)], capture_output=True, text=True
        )

    assert run("ingest").returncode == 0
    out = run("sql", "--format", "csv", "SELECT kind, count(*) AS n FROM events WHERE kind = 'park' GROUP BY kind")
    assert out.stdout.splitlines() == ["kind,n", "park,3"]


def test_the_server_binds_ipv6_loopback_too():
    from spyglass import signals
    from spyglass.agent.server import AgentServer
    from spyglass.signals.state import MetricState

    server = AgentServer("[::1]:0", MetricState(signals.full_catalogue()), dict).start()
    try:
        assert server.url.startswith("http://[::1]:")
        assert "spyglass_agent_info" in httpx.get(f"{server.url}/metrics").text
    finally:
        server.stop()


def test_an_agent_that_fails_does_not_say_it_stopped_cleanly(tmp_path, monkeypatch):
    """Finding 13 of issue 9: after a crash the log said "stopped cleanly" before the traceback.
    The fault (a bug escaping the main loop) cannot be caused from outside any more, so the
    loop is replaced by one that raises."""
    import tomllib

    from loguru import logger

    from spyglass.agent.runtime import Agent
    from spyglass.config import parse_config

    log = tmp_path / "engine.log"
    log.write_bytes(FIXTURE.read_bytes())
    config = parse_config(tomllib.loads(engine_log_toml(log, tmp_path / "state")), "test")
    agent = Agent(config)

    def broken(stop, wake):
        raise RuntimeError("a bug in the loop")

    monkeypatch.setattr(agent.pipeline, "run", broken)
    said: list[str] = []
    sink = logger.add(lambda message: said.append(str(message)), level="INFO")
    try:
        with pytest.raises(RuntimeError, match="a bug in the loop"):
            agent.serve()
    finally:
        logger.remove(sink)
    assert not any("stopped cleanly" in line for line in said)
    assert any("stopped by the error below" in line for line in said)


def test_an_agent_closed_without_serve_leaves_no_query_process(tmp_path):
    """An agent driven by its caller (server started, pipeline run until idle) and then closed ends the query
    processes its warm path kept; one left running was collected in a later test as a ResourceWarning (CI)."""
    import tomllib

    from spyglass.agent.runtime import Agent
    from spyglass.config import parse_config

    log, port = tmp_path / "engine.log", free_port()
    log.write_bytes(FIXTURE.read_bytes())
    agent = Agent(
        parse_config(tomllib.loads(engine_log_toml(log, tmp_path / "state", listen=f"127.0.0.1:{port}")), "t")
    )
    agent.server.start()
    try:
        agent.pipeline.run_until_idle()
        answer = run_readonly(agent.config.store_path(), "SELECT 1 AS n", AgentApi(f"http://127.0.0.1:{port}/api/sql"))
        assert answer.rows == [[1]]
        kept = list(agent.warm._idle)
        assert kept and all(session.alive for session in kept)  # the warm path keeps its process between queries
    finally:
        agent.close()
    assert not any(session.alive for session in kept) and not agent.warm._idle


def test_a_server_stopped_twice_leaves_no_socket_behind():
    """Agent.close() stops a server its caller may have stopped already; the second stop once left the socket
    that wakes the reception loop in a queue nobody read (a ResourceWarning in a later test, CI)."""
    import gc
    import warnings

    from spyglass import signals
    from spyglass.agent.server import AgentServer
    from spyglass.signals.state import MetricState

    server = AgentServer("127.0.0.1:0", MetricState(signals.full_catalogue()), dict).start()
    gc.collect()  # what earlier tests in this worker left for the collector is theirs, not this server's (CI)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", ResourceWarning)
        server.stop()
        server.stop()
        del server
        gc.collect()
    assert [str(w.message) for w in said if issubclass(w.category, ResourceWarning)] == []


def test_a_connection_handed_over_while_the_reception_leaves_is_closed():
    """CI found an unclosed socket after a stop: the loop had left (it looks at `closed` every second) before
    the connection, or the socket that woke it, was queued. Whatever is queued by then is closed by close()."""
    from spyglass.agent.server import _Reception

    reception = _Reception(lambda *_: None, seconds=5.0)
    reception.closed.set()
    reception.thread.join(timeout=10)
    assert not reception.thread.is_alive()
    late = socket.socket()
    reception.add(late, ("127.0.0.1", 1))
    reception.close()
    reception.close()
    assert late.fileno() == -1


def test_health_names_a_polled_source_that_does_not_answer(tmp_path):
    """A new user's /health said `ok` with llama-server killed (spyglass_llama_up 0) but `degraded` for its
    /metrics answering 501: a server that does not answer is at least as worth naming."""
    import tomllib

    from spyglass.agent.pipeline import Pipeline
    from spyglass.collectors.clock import ManualClock
    from spyglass.config import parse_config
    from spyglass.exporters.statefile import StateFile

    dead = free_port()  # nothing listens there
    text = (
        f'[agent]\nstate_dir = "{tmp_path / "state"}"\n[exporters.prometheus]\nenabled = false\n'
        f'[exporters.store]\nenabled = false\n[sources.metrics-llama-a]\nkind = "llama_server"\n'
        f'url = "http://127.0.0.1:{dead}"\ninstance = "llama-a"\n'
    )
    pipeline = Pipeline(parse_config(tomllib.loads(text), "t"), ManualClock(), StateFile(tmp_path / "s.json"))
    try:
        for rt in pipeline.polled_sources():
            pipeline.poll(rt)
        pipeline.run_until_idle()
        said = pipeline.problems()
    finally:
        pipeline.close()
    assert [line for line in said if line.startswith("source metrics-llama-a: its last poll failed (")] != [], said
