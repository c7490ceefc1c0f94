"""Engine-log events of each request, exported as spans of its trace with OTLP.

The pipeline hands every engine event to `EngineSpanExporter.observe`; when a request is done (or
rejected) its phases (signals.spans) go out with their real timestamps, in the trace and under the
serve span whose ids collectors.trace_ids derives from the request id. Open requests are bounded.
"""

from __future__ import annotations

from collections import OrderedDict

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags

from spyglass.collectors.event import Event
from spyglass.collectors.trace_ids import span_id_for, trace_id_for
from spyglass.signals.spans import PhaseSpan, engine_span

FINAL = ("done", "rejected")


def span_provider(endpoint: str, service: str) -> TracerProvider:
    """The agent's spans pushed in batches to an OTLP/HTTP endpoint, never blocking the pipeline. Their trace
    ids come from their parents (collectors.trace_ids), so no id generator of the engine's is needed here."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(
        resource=Resource.create({"service.name": service}), span_limits=SpanLimits(max_attribute_length=256)
    )
    exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=32_768))  # a burst of finished requests
    return provider


class EngineSpanExporter:
    def __init__(self, provider: TracerProvider, kinds: dict[str, str], max_open: int = 10_000) -> None:
        self.tracer = provider.get_tracer("spyglass.engine-log")
        self.provider, self.kinds = provider, kinds  # source name -> source kind
        self.open: OrderedDict[str, list[Event]] = OrderedDict()
        self.max_open = max_open

    def observe(self, events: list[Event]) -> None:
        for e in events:
            if e.request_id is None or self.kinds.get(e.source) != "engine_log":
                continue
            self.open.setdefault(e.request_id, []).append(e)
            if e.kind in FINAL:
                self.emit(e.request_id, self.open.pop(e.request_id))
            elif len(self.open) > self.max_open:
                self.open.popitem(last=False)

    def emit(self, request_id: str, events: list[Event]) -> None:
        span = engine_span(events)
        if span is None:
            return
        parent = SpanContext(
            trace_id_for(request_id),
            span_id_for("serve", request_id),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        self._export(span, trace.set_span_in_context(NonRecordingSpan(parent)), request_id)

    def _export(self, span: PhaseSpan, context, request_id: str) -> None:
        otel = self.tracer.start_span(
            span.name,
            context=context,
            start_time=int(span.start * 1e9),
            attributes={**span.attributes, "spyglass.request.id": request_id},
        )
        if span.error:
            otel.set_status(Status(StatusCode.ERROR, span.error))
        child_context = trace.set_span_in_context(otel)
        for child in span.children:
            self._export(child, child_context, request_id)
        otel.end(end_time=int(span.end * 1e9))
