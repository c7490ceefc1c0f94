"""The request-path cost of instrument(): bare, plain OpenTelemetry FastAPI instrumentation, spyglass.

    .venv/bin/python bench/instrument_bench.py [--trivial 3000] [--streamed 150]

(a) a trivial endpoint, (b) a streamed 200-token completion from the emulated serve. Each variant
is a fresh app served by uvicorn on 127.0.0.1; the three run at once and are measured in
alternating batches by keep-alive http.client loops (which make no spans of their own); spans go through a BatchSpanProcessor to an
exporter that drops them, so span creation and queueing are counted but no network is.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import uvicorn
from fastapi import FastAPI
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spyglass.engine.emulator.serve import EngineSettings, create_app  # noqa: E402
from spyglass.engine.instrument import instrument, tracer_provider  # noqa: E402
from spyglass.ports import free_port_base  # noqa: E402


class Drop(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


def trivial_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/messages")
    async def ping() -> dict[str, bool]:
        return {"ok": True}

    return app


def serve_app(port: int) -> FastAPI:
    settings = EngineSettings(
        instance="strata-a", port=port, log=Path("/dev/null"), load_seconds=0.1, time_scale=0.01, decode_tps=90.0
    )
    return create_app(settings)


def variant(app: FastAPI, how: str):
    provider = tracer_provider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    if how == "plain OTel":
        FastAPIInstrumentor.instrument_app(app, tracer_provider=provider, meter_provider=MeterProvider())
        return app
    if how == "spyglass instrument()":
        return instrument(app, "serve", provider, MeterProvider())
    return app


class Running:
    """One variant served by uvicorn in a thread, and a keep-alive client connection to it."""

    def __init__(self, asgi, port: int, body: dict) -> None:
        self.server = uvicorn.Server(uvicorn.Config(asgi, host="127.0.0.1", port=port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        self.connection = http.client.HTTPConnection("127.0.0.1", port)
        self.payload = json.dumps(body).encode()
        self.latencies: list[float] = []
        while self.call() != 200:  # the emulated engine loads first
            time.sleep(0.01)

    def call(self) -> int:
        self.connection.request(
            "POST",
            "/v1/messages",
            self.payload,
            {"content-type": "application/json", "x-request-id": "20261019-124900-7aa82c"},
        )
        response = self.connection.getresponse()
        response.read()
        return response.status

    def batch(self, count: int) -> None:
        for _ in range(count):
            started = time.perf_counter()
            self.call()
            self.latencies.append(time.perf_counter() - started)

    def stop(self) -> None:
        self.connection.close()
        self.server.should_exit = True
        self.thread.join(10)


def interleaved(make, body: dict, count: int, batch: int) -> dict[str, float]:
    """Mean latency per variant, the variants' batches alternating so drift hits all alike."""
    running = {}
    for how in VARIANTS:
        port = free_port_base(1)
        running[how] = Running(variant(make(port), how), port, body)
    for _ in range(max(1, count // batch)):
        for run in running.values():
            run.batch(batch)
    for run in running.values():
        run.stop()
    return {how: statistics.mean(run.latencies) for how, run in running.items()}


VARIANTS = ("bare", "plain OTel", "spyglass instrument()")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trivial", type=int, default=3000)
    parser.add_argument("--streamed", type=int, default=150)
    args = parser.parse_args()
    streamed = {
        "model": "m",
        "max_tokens": 210,
        "stream": True,
        "thinking": {"budget_tokens": 1},
        "messages": [{"role": "user", "content": "2+2?"}],
    }
    results = {}
    for case, make, body, count, batch in (
        ("trivial", lambda port: trivial_app(), {"x": 1}, args.trivial, 100),
        ("streamed completion", serve_app, streamed, args.streamed, 10),
    ):
        for how, mean in interleaved(make, body, count, batch).items():
            results[(case, how)] = mean
    print("| case | variant | mean latency ms | requests/s | added vs bare |\n|---|---|---|---|---|")
    for (case, how), mean in results.items():
        bare = results[(case, "bare")]
        print(f"| {case} | {how} | {mean * 1000:.3f} | {1 / mean:,.0f} | {(mean - bare) / bare * 100:+.1f}% |")
    added = {
        how: results[("trivial", how)] - results[("trivial", "bare")] for how in ("plain OTel", "spyglass instrument()")
    }
    print(
        f"\ntrivial: spyglass overhead / plain OTel overhead = {added['spyglass instrument()'] / added['plain OTel']:.2f}"
    )
    s = results[("streamed completion", "spyglass instrument()")] / results[("streamed completion", "bare")] - 1
    print(f"streamed: spyglass adds {s * 100:.1f}% latency")


if __name__ == "__main__":
    main()
