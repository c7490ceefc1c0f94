"""The catalogue as OpenTelemetry instruments: in memory, and over OTLP/HTTP to a real receiver."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from test_metrics_golden import fixture_config

from spyglass.agent.pipeline import Pipeline
from spyglass.collectors.clock import ManualClock
from spyglass.config import parse_config
from spyglass.exporters.otel import OtelInstruments, otlp_instruments
from spyglass.exporters.statefile import StateFile


def run_fixture(tmp_path, attach):
    pipeline = Pipeline(parse_config(fixture_config(tmp_path), "t"), ManualClock(), StateFile(tmp_path / "state.json"))
    instruments = attach(pipeline.state)
    pipeline.run_until_idle()
    pipeline.close()
    return instruments


def points(data, name):
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    return metric, list(metric.data.data_points)
    raise AssertionError(f"{name} not exported")


def test_instruments_read_the_state(tmp_path):
    reader = InMemoryMetricReader()
    instruments = run_fixture(tmp_path, lambda state: OtelInstruments(state, reader, "h1"))
    data = reader.get_metrics_data()
    _, evictions = points(data, "spyglass.engine.evictions")
    assert [(dict(p.attributes), p.value) for p in evictions] == [
        ({"instance": "strata-b", "lane": "normal"}, 1)
    ]  # the fixture's one evict line
    metric, ttft = points(data, "spyglass.engine.ttft")
    assert metric.unit == "s" and ttft[0].count == 4
    assert ttft[0].explicit_bounds[-1] == 1800.0  # the 30-minute tail survives into OpenTelemetry
    _, restores = points(data, "spyglass.engine.prompt_restores")
    assert sorted((p.attributes["origin"], p.value) for p in restores) == [
        ("checkpoint", 1),
        ("none", 2),
        ("parked", 1),
    ]
    instruments.shutdown()


class Receiver(BaseHTTPRequestHandler):
    requests: list[ExportMetricsServiceRequest] = []
    arrived = threading.Event()

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        Receiver.requests.append(request)
        Receiver.arrived.set()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_otlp_http_push_reaches_a_real_receiver(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    instruments = run_fixture(tmp_path, lambda state: otlp_instruments(state, endpoint, 3600, "h1"))
    instruments.provider.force_flush()
    assert Receiver.arrived.wait(10)
    names = {
        m.name for r in Receiver.requests for rm in r.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    assert {"spyglass.engine.evictions", "spyglass.engine.ttft", "spyglass.source.lines"} <= names
    resource = {a.key: a.value.string_value for a in Receiver.requests[0].resource_metrics[0].resource.attributes}
    assert resource["service.name"] == "spyglass" and resource["host.name"] == "h1"
    instruments.shutdown()
    server.shutdown()
    server.server_close()
