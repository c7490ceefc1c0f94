"""OpenTelemetry instruments declared from the catalogue, pushed with OTLP/HTTP when configured.

Counters and gauges are observable instruments that read the metric state at export time, so a
counter the engine reports cumulatively goes out as the engine's own value. Histograms have no
observable form in OpenTelemetry: while OTLP is on, a state hook records each observation into a
synchronous histogram with the catalogue's bounds (counting from the agent's start).
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from spyglass.signals.catalogue import MetricSpec
from spyglass.signals.state import Key, MetricState


class OtelInstruments:
    """Every catalogue metric as an OpenTelemetry instrument over one MetricState."""

    def __init__(self, state: MetricState, reader: MetricReader, host: str = "", version: str = "") -> None:
        resource = Resource.create({"service.name": "spyglass", "service.version": version, "host.name": host})
        self.provider = MeterProvider(resource=resource, metric_readers=[reader])
        meter = self.provider.get_meter("spyglass", version)
        self.state = state
        self.histograms = {}
        for spec in state.catalogue:
            if spec.type == "histogram":
                self.histograms[spec.name] = (
                    spec,
                    meter.create_histogram(
                        spec.otel_name,
                        unit=spec.otel_unit,
                        description=spec.help,
                        explicit_bucket_boundaries_advisory=list(spec.buckets),
                    ),
                )
            elif spec.type == "counter":
                meter.create_observable_counter(spec.otel_name, [self._observer(spec)], spec.otel_unit, spec.help)
            else:
                meter.create_observable_gauge(spec.otel_name, [self._observer(spec)], spec.otel_unit, spec.help)
        state.histogram_hooks.append(self._record)

    def _observer(self, spec: MetricSpec):
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            with self.state.lock:
                rows = list(self.state.values[spec.name].items())
            return [Observation(value, dict(zip(spec.labels, key))) for key, value in rows]

        return observe

    def _record(self, name: str, key: Key, value: float) -> None:
        spec, histogram = self.histograms[name]
        histogram.record(value, dict(zip(spec.labels, key)))

    def shutdown(self) -> None:
        self.state.histogram_hooks.remove(self._record)
        self.provider.shutdown()


def otlp_instruments(
    state: MetricState, endpoint: str, interval_seconds: float, host: str, version: str = ""
) -> OtelInstruments:
    """Instruments pushed to `endpoint` (an OTLP/HTTP base URL) every `interval_seconds`."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    exporter = OTLPMetricExporter(endpoint=endpoint.rstrip("/") + "/v1/metrics", timeout=10)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=int(interval_seconds * 1000))
    return OtelInstruments(state, reader, host, version)
