"""OTLP/HTTP traces received by the agent (POST /v1/traces), as `span` events for the store.

On one host with no trace store of its own, the instrumented gateway and serve push their spans
to the agent; each span becomes an event (kind `span`, source `otlp`) with its ids, times,
status and attributes, joined to the rest by its `spyglass.request.id`. Decoding is pure.

What a span may bring is bounded (`SpanLimits`): spans per export, attributes per span, the
length of every name and value, the depth and length of arrays and maps. Unless `keep_content`
says otherwise, only the attributes of an allow-list (KEPT_KEYS: ids, measurements, closed-set
names) are kept, and status messages (which echo exceptions) are dropped: prompt and completion
text cannot hide under an unforeseen key. The span keeps the names of what was dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from spyglass.collectors import timebounds
from spyglass.collectors.event import Event

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
# What may be kept without `keep_content`: an allow-list, since text can hide under any key
# (traceloop.entity.input, retrieval.documents.0.document.content, llm.prompt_template.variables).
# Measurements, ids and closed-set names only; every other attribute is dropped on receipt and
# named in `redacted`. A map value is kept only under keep_content (its keys are not vetted).
KEPT_KEYS = frozenset(
    {
        "service.name",
        "service.version",
        "service.instance.id",
        "host.name",
        "process.pid",
        "telemetry.sdk.name",
        "telemetry.sdk.language",
        "telemetry.sdk.version",
        "otel.scope.name",
        "http.request.method",
        "http.response.status_code",
        "http.route",
        "url.template",
        "url.scheme",
        "server.address",
        "server.port",
        "network.protocol.version",
        "error.type",
        "rpc.system",
        "rpc.method",
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.system",
        "gen_ai.request.model",
        "gen_ai.response.model",
        "gen_ai.response.id",
        "gen_ai.response.finish_reasons",
        "gen_ai.request.max_tokens",
        "gen_ai.request.temperature",
        "gen_ai.request.top_p",
        "gen_ai.conversation.id",
    }
)
KEPT_PREFIXES = ("spyglass.", "gen_ai.usage.", "llm.token_count.")
MAX_EVENTS = 64
MESSAGES_PER_SPAN = 40  # protobuf messages an export may hold, per span it may hold (see count_messages)
MAX_DEPTH = 3


@dataclass(frozen=True)
class SpanLimits:
    keep_content: bool = False
    max_spans: int = 5000
    max_attributes: int = 64
    max_value_chars: int = 1024


def may_keep(key: str) -> bool:
    """Whether an attribute may be kept without keep_content (see KEPT_KEYS)."""
    return key in KEPT_KEYS or key.startswith(KEPT_PREFIXES)


def any_value(value: Any, limits: SpanLimits = SpanLimits(), depth: int = 0) -> Any:
    kind = value.WhichOneof("value")
    if kind in ("array_value", "kvlist_value") and depth >= MAX_DEPTH:
        return "[too deep]"
    if kind == "array_value":
        return [any_value(v, limits, depth + 1) for v in value.array_value.values[: limits.max_attributes]]
    if kind == "kvlist_value":
        return {
            kv.key[: limits.max_value_chars]: any_value(kv.value, limits, depth + 1)
            for kv in value.kvlist_value.values[: limits.max_attributes]
        }
    if kind == "bytes_value":
        return value.bytes_value[: limits.max_value_chars // 2].hex()
    if kind == "string_value":
        return value.string_value[: limits.max_value_chars]
    return getattr(value, kind) if kind else None


def attributes_of(pairs: Any, limits: SpanLimits) -> tuple[dict[str, Any], list[str], int]:
    """Kept attributes, the keys dropped as content, and how many were dropped over the limit."""
    kept: dict[str, Any] = {}
    redacted: list[str] = []
    for kv in pairs[: limits.max_attributes]:
        key = kv.key[: limits.max_value_chars]
        if limits.keep_content or (may_keep(key) and kv.value.WhichOneof("value") != "kvlist_value"):
            kept[key] = any_value(kv.value, limits)
        else:
            redacted.append(key)
    return kept, redacted, max(0, len(pairs) - limits.max_attributes)


def _varint(data: memoryview, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("not an OTLP trace export: a truncated or overlong varint")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if byte < 0x80:
            return value, at


def _fields(data: memoryview) -> Any:
    """(field number, payload) of each length-delimited field of one protobuf message; others skipped."""
    at = 0
    while at < len(data):
        tag, at = _varint(data, at)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, at = _varint(data, at)
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
        elif wire == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise ValueError("not an OTLP trace export: a field runs past the body")
            yield number, data[at : at + size]
            at += size
        else:
            raise ValueError(f"not an OTLP trace export: wire type {wire}")


# The message fields of an export, by message: (message, field number) -> the field's message. What
# the wire walk counts before protobuf builds anything (spans, their attributes, events, links, and
# the values nested in attributes: each costs an object, 2 bytes of body can make one).
MESSAGES = {
    ("export", 1): "resource_spans",
    ("resource_spans", 1): "resource",
    ("resource_spans", 2): "scope_spans",
    ("resource", 1): "key_value",
    ("scope_spans", 1): "scope",
    ("scope_spans", 2): "span",
    ("scope", 3): "key_value",
    ("span", 9): "key_value",
    ("span", 11): "event",
    ("span", 13): "link",
    ("event", 3): "key_value",
    ("link", 4): "key_value",
    ("key_value", 2): "any_value",
    ("any_value", 5): "array",
    ("any_value", 6): "kv_list",
    ("array", 1): "any_value",
    ("kv_list", 1): "key_value",
}
MAX_NESTING = 24  # messages within messages: an export is 7 deep, an attribute value a few more


def count_messages(body: bytes, limit: int) -> int:
    """The messages an ExportTraceServiceRequest would build (spans, attributes, span events, links,
    values), counted on the wire; stops counting past `limit`. Each takes 2 bytes or more, so a body
    under 2 x `limit` bytes is not walked. ValueError for a body that is no export, or nested deeper
    than MAX_NESTING."""
    if len(body) <= 2 * limit:
        return len(body) // 2
    try:
        return _walk(body, limit)
    except IndexError:
        raise ValueError("not an OTLP trace export: a field runs past the body") from None


def _varint_at(body: bytes, at: int) -> tuple[int, int]:
    value = body[at]
    at += 1
    if value < 0x80:
        return value, at
    value, shift = value & 0x7F, 7
    while shift < 64:
        byte = body[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    raise ValueError("not an OTLP trace export: an overlong varint")


def _walk(body: bytes, limit: int) -> int:
    count, stack, inner_of = 0, [("export", 0, len(body), 0)], MESSAGES.get
    while stack:
        message, at, end, depth = stack.pop()
        if depth > MAX_NESTING:
            raise ValueError(f"not an OTLP trace export one can take: nested over {MAX_NESTING} deep")
        while at < end:
            tag, at = _varint_at(body, at)
            wire = tag & 7
            if wire == 2:
                size, at = _varint_at(body, at)
                if at + size > end:
                    raise ValueError("not an OTLP trace export: a field runs past its message")
                inner = inner_of((message, tag >> 3))
                if inner is not None:
                    count += 1
                    if count > limit:
                        return count
                    stack.append((inner, at, at + size, depth + 1))
                at += size
            elif wire == 0:
                _, at = _varint_at(body, at)
            elif wire in (1, 5):
                at += 8 if wire == 1 else 4
            else:
                raise ValueError(f"not an OTLP trace export: wire type {wire}")
    return count


def count_spans(body: bytes, limit: int) -> int:
    """The spans of an ExportTraceServiceRequest, counted on the wire without building any (parsing
    1 MiB of empty spans builds about 86 MB of objects); stops counting past `limit`."""
    count = 0
    for number, resource in _fields(memoryview(body)):
        if number != 1:  # resource_spans
            continue
        for inner, scope in _fields(resource):
            if inner != 2:  # scope_spans
                continue
            for kind, _ in _fields(scope):
                count += kind == 2  # spans
                if count > limit:
                    return count
    return count


def decode_spans(body: bytes, host: str = "", limits: SpanLimits = SpanLimits(), *, now: float) -> list[Event]:
    """The spans of one ExportTraceServiceRequest as events; ValueError if it is not one, too big,
    or a span's start or end lies outside 2000 to a day past `now` (collectors/timebounds.py)."""
    if count_spans(body, limits.max_spans) > limits.max_spans:  # before a single span is built
        raise ValueError(f"over {limits.max_spans} spans in one export; at most {limits.max_spans} are accepted")
    most = limits.max_spans * MESSAGES_PER_SPAN
    if count_messages(body, most) > most:  # 500,000 empty span events in 1 MiB built 500,000 objects
        raise ValueError(
            f"over {most} parts (spans, attributes, span events, links, values) in one export;"
            f" at most {MESSAGES_PER_SPAN} per span accepted"
        )
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError, whose module differs by backend
        raise ValueError(f"not an OTLP trace export: {exc}") from None
    count = sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)
    if count > limits.max_spans:
        raise ValueError(f"{count} spans in one export; at most {limits.max_spans} are accepted")
    events = []
    for resource_spans in request.resource_spans:
        resource, _, _ = attributes_of(resource_spans.resource.attributes, limits)
        service = str(resource.get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            events += [_event(span, service, host, limits, now) for span in scope_spans.spans]
    return events


def _event(span: Any, service: str, host: str, limits: SpanLimits, now: float) -> Event:
    timebounds.check(span.start_time_unix_nano, now, "span start_time_unix_nano", "ns")
    timebounds.check(span.end_time_unix_nano, now, "span end_time_unix_nano", "ns")
    attributes, redacted, over = attributes_of(span.attributes, limits)
    message = span.status.message or None
    if message and not limits.keep_content:
        redacted.append("status.message")
        message = None
    fields = {
        "name": span.name[: limits.max_value_chars],
        "trace_id": span.trace_id.hex()[:32],
        "span_id": span.span_id.hex()[:16],
        "parent_span_id": span.parent_span_id.hex()[:16] or None,
        "kind": KINDS.get(span.kind, "?"),
        "start": span.start_time_unix_nano / 1e9,
        "end": span.end_time_unix_nano / 1e9,
        "status": {0: "unset", 1: "ok", 2: "error"}.get(span.status.code, "unset"),
        "status_message": message and message[: limits.max_value_chars],
        "service": service[: limits.max_value_chars],
        "attributes": attributes,
        "events": [e.name[: limits.max_value_chars] for e in span.events[:MAX_EVENTS]],
    }
    if redacted:
        fields["redacted"] = redacted
    if over or span.dropped_attributes_count:
        fields["dropped_attributes"] = over + span.dropped_attributes_count
    request_id = attributes.get("spyglass.request.id")
    return Event(
        fields["start"], "otlp", "span", fields["service"], fields, str(request_id)[:64] if request_id else None, host
    )
