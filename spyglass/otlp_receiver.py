"""OTLP/HTTP traces received by the agent (POST /v1/traces), as `span` events for the store.

On one host with no trace store of its own, the instrumented gateway and serve push their spans
to the agent; each span becomes an event (kind `span`, source `otlp`) with its ids, times,
status and attributes, joined to the rest by its `spyglass.request.id`. Decoding is pure.
"""
from __future__ import annotations

from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collectors.event import Event

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


def any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind) if kind else None


def decode_spans(body: bytes, host: str = "") -> list[Event]:
    """The spans of one ExportTraceServiceRequest as events; ValueError if it is not one."""
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except Exception as exc:  # protobuf's DecodeError
        raise ValueError(f"not an OTLP trace export: {exc}") from None
    events = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: any_value(kv.value) for kv in resource_spans.resource.attributes}
        service = str(resource.get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attributes = {kv.key: any_value(kv.value) for kv in span.attributes}
                fields = {"name": span.name, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                          "parent_span_id": span.parent_span_id.hex() or None, "kind": KINDS.get(span.kind, "?"),
                          "start": span.start_time_unix_nano / 1e9, "end": span.end_time_unix_nano / 1e9,
                          "status": {0: "unset", 1: "ok", 2: "error"}.get(span.status.code, "unset"),
                          "status_message": span.status.message or None, "service": service,
                          "attributes": attributes, "events": [e.name for e in span.events]}
                request_id = attributes.get("spyglass.request.id")
                events.append(Event(fields["start"], "otlp", "span", service, fields,
                                    str(request_id) if request_id else None, host))
    return events
