"""150 requests through the traced gateway and both serves under uvicorn, the way real clients
send them: one keep-alive client in a row, then 20 clients at once, half of them streamed, some
with a `traceparent` of their own, prompts on both sides of uvicorn's 64 KiB read buffer. Every
request must get exactly its own trace, in memory and as stored by the agent from OTLP:

    POST /v1/messages                      gateway SERVER, the root
      POST /v1/messages/count_tokens       gateway CLIENT
        POST /v1/messages/count_tokens     serve SERVER
      POST /v1/messages                    gateway CLIENT
        POST /v1/messages                  serve SERVER (its id derived from the request id)
          engine strata-x                  from the engine log
            queue, prefill, thinking, decode
"""

from __future__ import annotations

import http.client
import json
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass

import pytest
from conftest import wait_until
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_tracing import Server, plain

from spyglass.collectors.engine_log import EngineLogOptions, EngineLogSource
from spyglass.engine.emulator.gateway import GatewaySettings
from spyglass.engine.emulator.gateway import create_app as gateway_app
from spyglass.engine.emulator.serve import EngineSettings
from spyglass.engine.emulator.serve import create_app as serve_app
from spyglass.engine.instrument import instrument, otlp_tracing, span_id_for, trace_id_for
from spyglass.exporters.otel_spans import EngineSpanExporter
from spyglass.ports import free_port

IN_A_ROW, CONCURRENT, CLIENTS = 60, 90, 20  # the concurrent part still keeps 20 clients in flight
FILLER = "the expert pool reads the arena and the cache parks the snapshot "
CLIENT_TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
PHASES = ["queue", "prefill", "thinking", "decode"]


@dataclass(frozen=True)
class Sent:
    request_id: str
    lane: str
    streamed: bool
    status: int


def body_of(i: int, streamed: bool) -> dict:
    chars = 90_000 if i % 3 == 0 else 2_000 + 150 * (i % 40)  # every third beyond uvicorn's 64 KiB buffer
    text = f"Task: request {i}. " + (FILLER * (chars // len(FILLER) + 1))[:chars]
    return {
        "model": "qwen3.5-397b",
        "max_tokens": 2000,
        "stream": streamed,
        "messages": [{"role": "user", "content": text}],
    }


def send(connection: http.client.HTTPConnection, i: int, streamed: bool) -> Sent:
    """One request on a kept-alive connection (http.client: not traced, so not part of any trace)."""
    lane = ("fast", "normal")[i % 2]
    headers = {"content-type": "application/json", "x-lane": lane, "x-mode": "passthrough"}
    if i % 7 == 0:
        headers["traceparent"] = CLIENT_TRACEPARENT
    connection.request("POST", "/v1/messages", json.dumps(body_of(i, streamed)), headers)
    response = connection.getresponse()
    content_type, reply = response.getheader("content-type", ""), response.read()
    assert response.getheader("connection", "keep-alive") != "close"
    if response.status == 200:
        assert content_type.startswith("text/event-stream" if streamed else "application/json"), content_type
        assert (b"event: message_stop" in reply) if streamed else json.loads(reply)["type"] == "message"
    return Sent(response.getheader("x-request-id"), lane, streamed, response.status)


def in_a_row(port: int, first: int, count: int, streamed: bool | None = None) -> list[Sent]:
    """`count` requests on one connection: all streamed, all whole, or (None) every other one."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        return [send(connection, i, i % 2 == 1 if streamed is None else streamed) for i in range(first, first + count)]
    finally:
        connection.close()


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    from spyglass.agent.runtime import Agent
    from spyglass.config import load_config

    folder = tmp_path_factory.mktemp("traffic")
    agent_port, serve_ports, gateway_port = free_port(), (free_port(), free_port()), free_port()
    config = folder / "spyglass.toml"
    config.write_text(
        f'[agent]\nstate_dir = "{folder / "state"}"\n'
        f'[exporters.prometheus]\nlisten = "127.0.0.1:{agent_port}"\n'
        f'[sources.engine-a]\nkind = "engine_log"\npath = "{folder / "a.log"}"\ninstance = "strata-a"\n'
    )
    agent = Agent(load_config(config))
    agent.server.start()
    memory = InMemorySpanExporter()
    provider = otlp_tracing(f"http://127.0.0.1:{agent_port}", "traffic")  # to the agent's /v1/traces
    provider.add_span_processor(SimpleSpanProcessor(memory))
    engines = [
        EngineSettings(
            instance=name, port=port, log=folder / f"{name[-1]}.log", load_seconds=1, time_scale=0.001, seed=n
        )
        for n, (name, port) in enumerate(zip(("strata-a", "strata-b"), serve_ports))
    ]
    gateway = GatewaySettings(
        port=gateway_port,
        log=folder / "gw.log",
        infer=folder / "infer",
        time_scale=0.001,
        concurrency_limit=64,
        lanes={"fast": f"http://127.0.0.1:{serve_ports[0]}", "normal": f"http://127.0.0.1:{serve_ports[1]}"},
    )
    sent: list[Sent] = []
    try:
        with (
            Server(instrument(serve_app(engines[0]), "serve", provider), serve_ports[0]),
            Server(instrument(serve_app(engines[1]), "serve", provider), serve_ports[1]),
            Server(instrument(gateway_app(gateway), "gateway", provider), gateway_port),
        ):
            for port in serve_ports:
                health = f"http://127.0.0.1:{port}/health"
                wait_until(lambda url=health: plain("GET", url) == 200, what="the engine loaded")
            sent += in_a_row(gateway_port, 0, IN_A_ROW)
            results: list[list[Sent]] = [[] for _ in range(CLIENTS)]
            per_client = CONCURRENT // CLIENTS  # clients 0-9 send one more; the odd ones stream
            threads = [
                threading.Thread(
                    target=lambda k=k: results[k].extend(
                        in_a_row(
                            gateway_port,
                            IN_A_ROW + k * 100,
                            per_client + (k < CONCURRENT % CLIENTS),
                            streamed=k % 2 == 1,
                        )
                    )
                )
                for k in range(CLIENTS)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(300)
            sent += [s for r in results for s in r]
        events = []
        for engine in engines:
            source = EngineLogSource(engine.instance, EngineLogOptions(path="x", instance=engine.instance))
            events += source.handle_lines(engine.log.read_bytes().splitlines())[0]
        EngineSpanExporter(provider, {e.instance: "engine_log" for e in engines}).observe(events)
        assert provider.force_flush(60_000)
        spans = [_Span.of_sdk(s) for s in memory.get_finished_spans()]
        wait_until(
            lambda: agent.pipeline.run_until_idle() >= 0 and _stored_count(agent) >= len(spans),
            timeout=60,
            what="the agent to store every pushed span",
        )
        stored = [
            _Span.of_stored(json.loads(f))
            for (f,) in agent.pipeline.store.con.execute(
                "SELECT fields::VARCHAR FROM events WHERE kind = 'span'"
            ).fetchall()
        ]
    finally:
        provider.shutdown()
        agent.close()
    return {"sent": sent, "memory": spans, "stored": stored}


def _stored_count(agent) -> int:
    return agent.pipeline.store.con.execute("SELECT count(*) FROM events WHERE kind = 'span'").fetchone()[0]


@dataclass(frozen=True)
class _Span:
    name: str
    kind: str
    trace_id: int
    span_id: int
    parent_id: int | None
    request_id: str | None

    @classmethod
    def of_sdk(cls, s) -> _Span:
        return cls(
            s.name,
            s.kind.name,
            s.context.trace_id,
            s.context.span_id,
            s.parent.span_id if s.parent else None,
            s.attributes.get("spyglass.request.id"),
        )

    @classmethod
    def of_stored(cls, f: dict) -> _Span:
        return cls(
            f["name"],
            f["kind"],
            int(f["trace_id"], 16),
            int(f["span_id"], 16),
            int(f["parent_span_id"], 16) if f.get("parent_span_id") else None,  # NULL: absent
            f["attributes"].get("spyglass.request.id"),
        )


def expected_tree(sent: Sent) -> list[tuple[str, str, str | None]]:
    """(name, kind, parent's name) of every span a request's trace must hold, and nothing else."""
    engine = f"engine strata-{'a' if sent.lane == 'fast' else 'b'}"
    return sorted(
        [
            ("POST /v1/messages", "SERVER", None),
            ("POST /v1/messages/count_tokens", "CLIENT", "POST /v1/messages"),
            ("POST /v1/messages/count_tokens", "SERVER", "POST /v1/messages/count_tokens"),
            ("POST /v1/messages", "CLIENT", "POST /v1/messages"),
            ("POST /v1/messages", "SERVER", "POST /v1/messages"),
            (engine, "INTERNAL", "POST /v1/messages"),
            *((p, "INTERNAL", engine) for p in PHASES),
        ],
        key=str,
    )


def check_traces(sent: list[Sent], spans: list[_Span]) -> None:
    assert len(sent) == IN_A_ROW + CONCURRENT and all(s.status == 200 and s.request_id for s in sent)
    assert len({s.request_id for s in sent}) == len(sent)
    assert Counter(s.streamed for s in sent) == {True: len(sent) // 2, False: len(sent) // 2}
    by_trace: dict[int, list[_Span]] = defaultdict(list)
    for span in spans:
        by_trace[span.trace_id].append(span)
    assert not [s for s in spans if s.parent_id == s.span_id], "a span is its own parent"
    assert len({s.span_id for s in spans}) == len(spans), "two spans share an id"
    assert set(by_trace) == {trace_id_for(s.request_id) for s in sent}  # as many traces as requests
    for request in sent:
        trace = by_trace[trace_id_for(request.request_id)]
        ids = {s.span_id: s for s in trace}
        assert not [s for s in trace if s.parent_id is not None and s.parent_id not in ids], (
            f"{request.request_id}: a parent in another trace"
        )
        shape = sorted([(s.name, s.kind, ids[s.parent_id].name if s.parent_id else None) for s in trace], key=str)
        assert shape == expected_tree(request), request
        root = next(s for s in trace if s.parent_id is None)
        assert root.span_id == span_id_for("gateway", request.request_id) and root.kind == "SERVER"
        serve = ids[span_id_for("serve", request.request_id)]
        assert serve.kind == "SERVER" and ids[ids[serve.parent_id].parent_id] is root
        assert {s.request_id for s in trace} <= {request.request_id, None}


def test_every_request_gets_exactly_its_own_trace(traffic):
    check_traces(traffic["sent"], traffic["memory"])


def test_the_agent_stores_the_same_traces_from_otlp(traffic):
    assert len(traffic["stored"]) == len(traffic["memory"])
    check_traces(traffic["sent"], traffic["stored"])


def test_a_blind_retry_stays_in_its_trace_with_its_own_span_ids(tmp_path):
    """An overfit and the gateway's retry with the same request id, on one kept-alive connection:
    two serve spans in the request's trace, neither its own parent, no id shared."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor as Simple

    from spyglass.engine.instrument import tracer_provider

    memory, provider = InMemorySpanExporter(), tracer_provider()
    provider.add_span_processor(Simple(memory))
    serve_port, gateway_port = free_port(), free_port()
    engine = EngineSettings(
        instance="strata-a", port=serve_port, log=tmp_path / "a.log", load_seconds=1, time_scale=0.001, window=4_000
    )
    gateway = GatewaySettings(
        port=gateway_port,
        log=tmp_path / "gw.log",
        infer=tmp_path / "infer",
        window=4_000,
        time_scale=0.001,
        lanes={lane: f"http://127.0.0.1:{serve_port}" for lane in ("fast", "normal")},
    )
    with (
        Server(instrument(serve_app(engine), "serve", provider), serve_port),
        Server(instrument(gateway_app(gateway), "gateway", provider), gateway_port),
    ):
        wait_until(lambda: plain("GET", f"http://127.0.0.1:{serve_port}/health") == 200, what="the engine loaded")
        connection = http.client.HTTPConnection("127.0.0.1", gateway_port, timeout=60)
        sent = [send(connection, 3 * i, streamed=False) for i in range(6)]  # 90,000 chars: past the window
        connection.close()
    source = EngineLogSource("strata-a", EngineLogOptions(path="x", instance="strata-a"))
    EngineSpanExporter(provider, {"strata-a": "engine_log"}).observe(
        source.handle_lines(engine.log.read_bytes().splitlines())[0]
    )
    spans = [_Span.of_sdk(s) for s in memory.get_finished_spans()]
    assert {s.status for s in sent} == {400} and "retry_on_overfit" in (tmp_path / "gw.log").read_text()
    assert not [s for s in spans if s.parent_id == s.span_id] and len({s.span_id for s in spans}) == len(spans)
    assert {s.trace_id for s in spans} == {trace_id_for(s.request_id) for s in sent}
    for request in sent:
        trace = [s for s in spans if s.trace_id == trace_id_for(request.request_id)]
        ids = {s.span_id: s for s in trace}
        assert [s.span_id for s in trace if s.parent_id is None] == [span_id_for("gateway", request.request_id)]
        assert all(s.parent_id in ids for s in trace if s.parent_id is not None)
        serves = [s for s in trace if s.kind == "SERVER" and s.name == "POST /v1/messages" and s.parent_id]
        assert len(serves) == 2 and span_id_for("serve", request.request_id) in {s.span_id for s in serves}
        assert all(
            ids[s.parent_id].kind == "CLIENT" and ids[ids[s.parent_id].parent_id].parent_id is None for s in serves
        )
