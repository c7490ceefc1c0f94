"""One request through the instrumented gateway and serve yields one trace: gateway, serve and the
engine phases built from the engine log, with correct parentage, ordered times and every layer's
token counts; the same tree over OTLP/HTTP; and no prompt text anywhere."""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import uvicorn
from conftest import wait_until
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from spyglass.collectors.engine_log import EngineLogOptions, EngineLogSource
from spyglass.engine.emulator.gateway import GatewaySettings
from spyglass.engine.emulator.gateway import create_app as gateway_app
from spyglass.engine.emulator.serve import EngineSettings
from spyglass.engine.emulator.serve import create_app as serve_app
from spyglass.engine.instrument import instrument, otlp_tracing, span_id_for, trace_id_for, tracer_provider
from spyglass.exporters.otel_spans import EngineSpanExporter
from spyglass.ports import free_port, free_port_base

MARKER = "SECRET-MARKER-93d1"


def plain(method: str, url: str, body: dict | None = None, headers: dict | None = None) -> int:
    """A request the httpx instrumentation does not see (the test is not part of the trace)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"content-type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


class Server:
    def __init__(self, app, port: int) -> None:
        # A kept-alive connection is closed after 5 idle seconds by default; a client thread of a
        # loaded test process can take that long to send its next request, and meet a reset.
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=120)
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        wait_until(lambda: self.server.started, what="uvicorn to start")
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    folder = tmp_path_factory.mktemp("traced")
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    provider, meters = tracer_provider(), MeterProvider(metric_readers=[reader])
    provider.add_span_processor(SimpleSpanProcessor(spans))
    serve_port, gateway_port = free_port(), free_port()
    engine = EngineSettings(instance="strata-a", port=serve_port, log=folder / "a.log", load_seconds=1, time_scale=0.01)
    gateway = GatewaySettings(
        port=gateway_port,
        log=folder / "gw.log",
        infer=folder / "infer",
        time_scale=0.01,
        lanes={"fast": f"http://127.0.0.1:{serve_port}"},
        upstreams={"fast": "strata-a"},
    )
    with (
        Server(instrument(serve_app(engine), "serve", provider, meters), serve_port),
        Server(instrument(gateway_app(gateway), "gateway", provider, meters), gateway_port),
    ):
        wait_until(lambda: plain("GET", f"http://127.0.0.1:{serve_port}/health") == 200, what="the engine loaded")
        body = {
            "model": "qwen3.5-397b",
            "max_tokens": 4000,
            "tools": [{"name": "Bash"}],
            "messages": [{"role": "user", "content": f"Task: fix the build. {MARKER} " + "context " * 3000}],
        }
        client_traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        assert (
            plain("POST", f"http://127.0.0.1:{gateway_port}/v1/messages", body, {"traceparent": client_traceparent})
            == 200
        )
    source = EngineLogSource("engine-a", EngineLogOptions(path="x", instance="strata-a"))
    events, _, _ = source.handle_lines((folder / "a.log").read_bytes().splitlines())
    EngineSpanExporter(provider, {"engine-a": "engine_log"}).observe(events)
    request_id = next(e.request_id for e in events if e.kind == "done")
    return {
        "spans": spans.get_finished_spans(),
        "metrics": reader.get_metrics_data(),
        "request_id": request_id,
        "folder": folder,
        "events": events,
    }


def test_one_trace_with_gateway_serve_and_engine_phases(traced):
    rid, spans = traced["request_id"], traced["spans"]
    assert {s.context.trace_id for s in spans} == {trace_id_for(rid)}
    by_id = {s.context.span_id: s for s in spans}
    gateway = by_id[span_id_for("gateway", rid)]
    serve = by_id[span_id_for("serve", rid)]
    engine = next(s for s in spans if s.name == "engine strata-a")
    phases = {s.name: s for s in spans if s.parent and s.parent.span_id == engine.context.span_id}
    assert gateway.attributes["spyglass.request.id"] == serve.attributes["spyglass.request.id"] == rid
    assert gateway.parent is None  # the gateway starts the trace; the client's context is kept aside
    assert gateway.attributes["spyglass.client.traceparent"].startswith("00-0af7651916cd43dd")
    client = by_id[serve.parent.span_id]  # the gateway's httpx call carried traceparent
    assert client.kind.name == "CLIENT" and _root(client, by_id) is gateway
    assert engine.parent.span_id == serve.context.span_id
    assert list(phases) == ["queue", "prefill", "thinking", "decode"]
    starts = [phases[n].start_time for n in ("queue", "prefill", "thinking", "decode")]
    assert starts == sorted(starts) and engine.start_time <= starts[0] and phases["decode"].end_time <= engine.end_time
    assert gateway.attributes["spyglass.tokens.gateway_estimate"] > serve.attributes["gen_ai.usage.input_tokens"]
    assert (
        gateway.attributes["spyglass.tokens.engine"]
        == serve.attributes["spyglass.tokens.engine"]
        == engine.attributes["spyglass.tokens.engine"]
    )
    assert phases["prefill"].attributes["spyglass.prompt.read_tokens"] == serve.attributes["gen_ai.usage.input_tokens"]
    assert serve.attributes["gen_ai.operation.name"] == "chat"
    assert serve.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)


def _root(span, by_id):
    while span.parent is not None:
        span = by_id[span.parent.span_id]
    return span


def test_genai_metrics_have_the_long_tail(traced):
    names = {m.name: m for rm in traced["metrics"].resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"gen_ai.server.request.duration", "gen_ai.client.token.usage"} <= set(names)
    duration = names["gen_ai.server.request.duration"].data.data_points[0]
    assert duration.explicit_bounds[-1] == 1800.0 and duration.count >= 1


def test_no_prompt_text_leaves_the_process(traced):
    exported = (
        json.dumps([json.loads(s.to_json()) for s in traced["spans"]])
        + traced["metrics"].to_json()
        + json.dumps([e.fields for e in traced["events"]])
    )
    assert MARKER not in exported
    assert MARKER not in (traced["folder"] / "gw.log").read_text() + (traced["folder"] / "a.log").read_text()


class Receiver(BaseHTTPRequestHandler):
    requests: list[ExportTraceServiceRequest] = []
    arrived = threading.Event()

    def do_POST(self):  # noqa: N802
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
        Receiver.requests.append(request)
        Receiver.arrived.set()
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_engine_phases_over_otlp_http_decode_to_the_same_tree(traced):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    provider = otlp_tracing(f"http://127.0.0.1:{server.server_address[1]}", "spyglass")
    EngineSpanExporter(provider, {"engine-a": "engine_log"}).observe(traced["events"])
    provider.force_flush()
    assert Receiver.arrived.wait(10)
    spans = [s for r in Receiver.requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]
    rid = traced["request_id"]
    engine = next(s for s in spans if s.name == "engine strata-a")
    assert engine.trace_id == trace_id_for(rid).to_bytes(16, "big")
    assert engine.parent_span_id == span_id_for("serve", rid).to_bytes(8, "big")
    assert sorted(s.name for s in spans if s.parent_span_id == engine.span_id) == [
        "decode",
        "prefill",
        "queue",
        "thinking",
    ]
    provider.shutdown()
    server.shutdown()
    server.server_close()


def test_spyglass_trace_prints_the_tree_from_the_store(spawns, traced, tmp_path):
    import subprocess
    import sys

    folder = traced["folder"]
    config = tmp_path / "spyglass.toml"
    config.write_text(
        f'[agent]\nstate_dir = "{tmp_path}"\n[exporters.prometheus]\nenabled = false\n'
        f'[sources.engine-a]\nkind = "engine_log"\npath = "{folder / "a.log"}"\ninstance = "strata-a"\n'
        f'[sources.gateway]\nkind = "gateway_log"\npath = "{folder / "gw.log"}"\n'
    )
    cli = [sys.executable, "-m", "spyglass.cli.app"]
    assert subprocess.run([*cli, "ingest", "-c", str(config)], capture_output=True).returncode == 0
    out = subprocess.run(
        [*cli, "trace", "-c", str(config), traced["request_id"]],
        capture_output=True,
        text=True,
        env={"COLUMNS": "200", "PATH": ""},
    )
    assert out.returncode == 0, out.stderr
    lines = [line.strip("│├└─ ") for line in out.stdout.splitlines() if not line.startswith("clock: ")]
    assert lines[0].startswith("gateway ") and "gateway_estimate=" in lines[0]
    assert [line.split()[0] for line in lines[2:]] == ["engine", "queue", "prefill", "thinking", "decode"]
    # The trace id names the same request: found among the stored request ids (no span was pushed here).
    trace = format(trace_id_for(traced["request_id"]), "032x")
    assert f"{traced['request_id']} (trace {trace})" in out.stdout
    by_trace = subprocess.run(
        [*cli, "trace", "-c", str(config), trace.upper()],
        capture_output=True,
        text=True,
        env={"COLUMNS": "200", "PATH": ""},
    )
    assert by_trace.returncode == 0 and by_trace.stdout == out.stdout, by_trace.stderr
    unknown = subprocess.run([*cli, "trace", "-c", str(config), "f" * 32], capture_output=True, text=True)
    assert unknown.returncode == 1 and f"no request of trace {'f' * 32} in the store" in unknown.stderr
    bad = subprocess.run([*cli, "trace", "-c", str(config), "'; DROP TABLE events; --"], capture_output=True, text=True)
    assert bad.returncode == 1 and "not a request id or a trace id" in bad.stderr


def test_the_agent_stores_pushed_spans_and_trace_merges_them_with_the_log(spawns, traced, tmp_path):
    import subprocess
    import sys

    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from spyglass.agent.runtime import Agent
    from spyglass.config import load_config

    folder, port = traced["folder"], free_port()
    config_path = tmp_path / "spyglass.toml"
    config_path.write_text(
        f'[agent]\nstate_dir = "{tmp_path}"\n[exporters.prometheus]\nlisten = "127.0.0.1:{port}"\n'
        f'[sources.engine-a]\nkind = "engine_log"\npath = "{folder / "a.log"}"\n'
        f'instance = "strata-a"\n'
    )
    agent = Agent(load_config(config_path))
    agent.server.start()
    try:
        body = encode_spans(traced["spans"]).SerializeToString()
        assert plain_bytes(f"http://127.0.0.1:{port}/v1/traces", body) == 200
        assert plain_bytes(f"http://127.0.0.1:{port}/v1/traces", b"not protobuf \xff\xff") == 400
        agent.pipeline.run_until_idle()
        out = subprocess.run(
            [sys.executable, "-m", "spyglass.cli.app", "trace", "-c", str(config_path), traced["request_id"]],
            capture_output=True,
            text=True,
            env={"COLUMNS": "200", "PATH": ""},
        )
    finally:
        agent.close()
    assert out.returncode == 0, out.stderr
    names = [m.group(1).split(": ", 1)[-1] for m in map(SPAN_LINE.match, out.stdout.splitlines()) if m]
    assert names[0] == "POST /v1/messages"  # the gateway's server span is the root
    assert names.count("engine strata-a") == 1  # pushed by the agent or built from the log, never both
    assert names[names.index("engine strata-a") :] == ["engine strata-a", "queue", "prefill", "thinking", "decode"]
    assert names.index("engine strata-a") > names.index("POST /v1/messages", 1)  # under the serve's span


SPAN_LINE = re.compile(r"^[│├└─\s]*(.*?) \d+\.\d{3} s")


def plain_bytes(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers={"content-type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_spyglass_trace_of_a_request_from_the_running_stack(spawns, tmp_path):
    """The stack under supervisord pushes its spans to the agent; a request sent after others on one
    kept-alive connection prints as gateway -> serve -> engine phases, each with its duration."""
    import http.client
    import subprocess
    import sys
    import tomllib

    from spyglass.agent.runtime import Agent
    from spyglass.config import parse_config
    from spyglass.engine.emulator.stack import Stack

    agent_port = free_port()
    pushed = {"otlp_endpoint": f"http://127.0.0.1:{agent_port}"}
    stack = Stack(
        tmp_path / "stack",
        free_port_base(),
        {name: {"cache_mib": 65_536, **pushed} for name in ("strata-a", "strata-b")},
        pushed,
    )
    toml = stack.spyglass_toml(tmp_path / "spyglass")
    (tmp_path / "spyglass.toml").write_text(toml)  # for `spyglass trace`, which reads the store once the agent ends
    settings = tomllib.loads(toml)
    settings["exporters"]["prometheus"] = {"listen": f"127.0.0.1:{agent_port}"}  # receives /v1/traces
    agent = Agent(parse_config(settings, "agent"))
    agent.server.start()
    try:
        with stack:
            stack.wait_ready()
            connection = http.client.HTTPConnection("127.0.0.1", stack.base_port, timeout=60)
            rids = []
            for i in range(4):  # 90,000-character prompts: past uvicorn's read buffer, as in real use
                body = {
                    "model": "m",
                    "max_tokens": 2000,
                    "stream": i % 2 == 1,
                    "messages": [{"role": "user", "content": f"Task: {i} " + "context " * 11_250}],
                }
                connection.request("POST", "/v1/messages", json.dumps(body), {"x-mode": "passthrough"})
                response = connection.getresponse()
                response.read()
                assert response.status == 200
                rids.append(response.getheader("x-request-id"))
            connection.close()
            rid = rids[-1]
            wait_until(
                lambda: (
                    agent.pipeline.run_until_idle() >= 0 and _stored_services(agent, rid) >= {"rag-proxy", "strata-a"}
                ),
                timeout=30,
                what="the stack's spans (batched every 5 s) in the store",
            )
    finally:
        agent.server.stop()
        agent.pipeline.run_until_idle()
        agent.close()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "spyglass.cli.app",
            "trace",
            "-c",
            str(tmp_path / "spyglass.toml"),
            rid + "\r",
        ],  # as piped from `--format csv`
        capture_output=True,
        text=True,
        env={"COLUMNS": "250", "PATH": ""},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    tree = [
        (len(m.group(1)) // 4, m.group(2), float(m.group(3)))
        for m in map(TREE_LINE.match, out.stdout.splitlines())
        if m
    ]
    assert [(depth, name) for depth, name, _ in tree] == [
        (0, "rag-proxy: POST /v1/messages"),
        (1, "rag-proxy: POST /v1/messages/count_tokens"),
        (2, "strata-a: POST /v1/messages/count_tokens"),
        (1, "rag-proxy: POST /v1/messages"),
        (2, "strata-a: POST /v1/messages"),
        (3, "engine strata-a"),
        (4, "queue"),
        (4, "prefill"),
        (4, "thinking"),
        (4, "decode"),
    ], out.stdout
    gateway, serve, engine, phases = tree[0][2], tree[4][2], tree[5][2], {name: s for _, name, s in tree[6:]}
    assert phases["prefill"] > 0 and engine >= phases["prefill"] + phases["thinking"] + phases["decode"] - 0.002
    assert engine <= serve <= gateway, out.stdout


TREE_LINE = re.compile(r"^([│├└─\s]*)(\S.*?) (\d+\.\d{3}) s")


def _stored_services(agent, request_id: str) -> set[str]:
    rows = agent.pipeline.store.con.execute(
        "SELECT DISTINCT instance FROM events WHERE kind = 'span' AND request_id = ?", [request_id]
    ).fetchall()
    return {instance for (instance,) in rows}
