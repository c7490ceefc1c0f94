"""One call, `instrument(app, role=...)`, traces a gateway or serve app end to end.

Built on the OpenTelemetry SDK and its FastAPI and httpx instrumentations: a server span per
request, W3C `traceparent` on every upstream httpx call, GenAI semantic-convention attributes and
metrics. The request id joins everything:

- the gateway makes it (`YYYYMMDD-HHMMSS-hhhhhh`, Beijing time) unless the client sent one, and it
  travels in the `x-request-id` header;
- trace id = the first 16 bytes of sha256("spyglass-trace:" + request id), for a request that
  arrives without a `traceparent`; a server span's id = the first 8 bytes of
  sha256(role + ":" + request id). So spans built later from logs (signals.spans) join the trace
  and hang under the serve's span without ever having seen it.

Every request starts from an empty OpenTelemetry context, whatever the task it runs in inherited:
under uvicorn a keep-alive connection's next request can start in a copy of the previous
request's context (see `instrument`), and the server span would then be that request's child.

No prompt or response text is recorded unless `capture_content=True`; attributes are capped at
256 characters.
"""

from __future__ import annotations

import contextvars
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

from spyglass.collectors.trace_ids import new_request_id, span_id_for, trace_id_for

# OpenTelemetry's advisory heads with a tail to 30 minutes, defined once beside the catalogue's buckets.
from spyglass.signals.buckets import LATENCY_SECONDS as TTFT_BUCKETS
from spyglass.signals.buckets import REQUEST_DURATION_SECONDS as DURATION_BUCKETS
from spyglass.signals.buckets import TIME_PER_OUTPUT_TOKEN_SECONDS as TPOT_BUCKETS
from spyglass.signals.buckets import TOKEN_COUNTS as TOKEN_BUCKETS

REQUEST_ID = "x-request-id"
MAIN_PATHS = ("/v1/messages", "/v1/chat/completions")
# The serve API's routes, as url.template for client span names ({method} {url.template}); they
# have no path parameters, so a path in this list is its own template.
URL_TEMPLATES = frozenset({*MAIN_PATHS, "/v1/messages/count_tokens", "/v1/status", "/health"})
TRACE_HEADERS = (b"traceparent", b"tracestate")
REMEMBERED_IDS = 65_536  # request ids whose main server span took the derived id, per process


@dataclass
class _Hint:
    """One request's: which role and request id the next span id derives from, once.

    Made afresh for every request by `instrument`'s wrapper; tasks the request spawns share it,
    so its server span (the first span of the request) is the only one that takes the id."""

    role: str
    request_id: str
    span_used: bool = False  # True from the start for calls whose server span keeps a random id


_hint: contextvars.ContextVar[_Hint | None] = contextvars.ContextVar("spyglass_id_hint", default=None)


class RequestIdGenerator(RandomIdGenerator):
    """Derives the trace id and the server span's id from the request id when one is in context."""

    def generate_trace_id(self) -> int:
        hint = _hint.get()
        return trace_id_for(hint.request_id) if hint else super().generate_trace_id()

    def generate_span_id(self) -> int:
        hint = _hint.get()
        if hint and not hint.span_used:  # the first span of the request is its server span
            hint.span_used = True
            return span_id_for(hint.role, hint.request_id)
        return super().generate_span_id()


def client_span_name(span: Any, request: Any) -> None:
    """`{method} {url.template}` for a call to a known route (HTTP semantic conventions)."""
    path = request.url.path
    if path in URL_TEMPLATES and span.is_recording():
        method = request.method.decode() if isinstance(request.method, bytes) else str(request.method)
        span.update_name(f"{method} {path}")
        span.set_attribute("url.template", path)


async def _async_client_span_name(span: Any, request: Any) -> None:
    client_span_name(span, request)


def tracer_provider(**kwargs: Any) -> TracerProvider:
    """A TracerProvider with the request-id rule and bounded attributes."""
    return TracerProvider(id_generator=RequestIdGenerator(), span_limits=SpanLimits(max_attribute_length=256), **kwargs)


def otlp_tracing(endpoint: str, service: str) -> TracerProvider:
    """A tracer provider pushing spans in batches to an OTLP/HTTP endpoint; never blocks a request."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = tracer_provider(resource=Resource.create({"service.name": service}))
    # A request makes about ten spans: the default queue (2048) would drop some in a burst of 200.
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces"), max_queue_size=32_768)
    )
    return provider


@dataclass
class RequestFacts:
    """What a handler tells `annotate`, read back for the metrics when the request ends."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    first_chunk: float | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    attributes_on_start: dict[str, Any] = field(default_factory=dict)  # set on the span by annotate


_facts: contextvars.ContextVar[RequestFacts | None] = contextvars.ContextVar("spyglass_facts", default=None)


def request_id() -> str | None:
    hint = _hint.get()
    return hint.request_id if hint else None


def annotate(
    *,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    reasoning_tokens: int | None = None,
    finish: str | None = None,
    model: str | None = None,
    **counted_by: int,
) -> None:
    """GenAI attributes on the current span; token counts by the layer that counted them."""
    span, facts = trace.get_current_span(), _facts.get()
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "strata"}
    if model:
        attributes["gen_ai.request.model"] = model
    if input_tokens is not None:
        attributes["gen_ai.usage.input_tokens"] = input_tokens
    if output_tokens is not None:
        attributes["gen_ai.usage.output_tokens"] = output_tokens
    if reasoning_tokens is not None:
        attributes["gen_ai.usage.reasoning.output_tokens"] = reasoning_tokens
    if finish:
        attributes["gen_ai.response.finish_reasons"] = [finish]
    for layer, tokens in counted_by.items():  # e.g. gateway_estimate=516561, engine=154796
        attributes[f"spyglass.tokens.{layer}"] = tokens
    span.set_attributes(attributes)
    if facts is not None and facts.attributes_on_start:
        span.set_attributes(facts.attributes_on_start)
    if facts is not None:
        facts.input_tokens = input_tokens if input_tokens is not None else facts.input_tokens
        facts.output_tokens = output_tokens if output_tokens is not None else facts.output_tokens
        facts.attributes.update(
            {
                k: v
                for k, v in attributes.items()
                if k.startswith("gen_ai.")
                and k in ("gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model")
            }
        )


def event(name: str, **attributes: int | str | bool) -> None:
    """A span event and a count of it: assembly drops, escapes, stops while reasoning, blind retries."""
    trace.get_current_span().add_event(f"spyglass.{name}", attributes)
    if _events_counter is not None:
        _events_counter.add(1, {"event": name})


_events_counter: Any = None


class _Metrics:
    def __init__(self, meter_provider: Any) -> None:
        global _events_counter
        meter = (meter_provider or metrics.get_meter_provider()).get_meter("spyglass.instrument")
        self.duration = meter.create_histogram(
            "gen_ai.server.request.duration",
            "s",
            "GenAI request duration.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.ttft = meter.create_histogram(
            "gen_ai.server.time_to_first_token",
            "s",
            "Time to the first streamed chunk.",
            explicit_bucket_boundaries_advisory=TTFT_BUCKETS,
        )
        self.tpot = meter.create_histogram(
            "gen_ai.server.time_per_output_token",
            "s",
            "Decode time per output token after the first.",
            explicit_bucket_boundaries_advisory=TPOT_BUCKETS,
        )
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            "{token}",
            "Tokens used, by type.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        _events_counter = meter.create_counter(
            "spyglass.genai.events", "{event}", "Assembly drops, escapes, stops while reasoning, blind retries."
        )

    def record(self, role: str, facts: RequestFacts, started: float, ended: float) -> None:
        attrs = facts.attributes or {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "strata"}
        self.duration.record(ended - started, attrs)
        if facts.first_chunk is not None:
            self.ttft.record(facts.first_chunk - started, attrs)
            if facts.output_tokens and facts.output_tokens > 1:
                self.tpot.record((ended - facts.first_chunk) / (facts.output_tokens - 1), attrs)
        if role == "gateway":
            for kind, tokens in (("input", facts.input_tokens), ("output", facts.output_tokens)):
                if tokens is not None:
                    self.tokens.record(tokens, {**attrs, "gen_ai.token.type": kind})


def _tag_request_id(span: Any, scope: dict) -> None:
    """The request id as an attribute of every server span (it rides in x-request-id)."""
    for key, value in scope.get("headers") or []:
        if key == REQUEST_ID.encode():
            span.set_attribute("spyglass.request.id", value.decode("ascii", "replace")[:64])


Asgi = Callable[[dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


def instrument(app: Any, role: str, tracer_provider: TracerProvider | None = None, meter_provider: Any = None) -> Asgi:
    """The app, traced: returns the ASGI callable to serve.

    Each request runs from an empty OpenTelemetry context, so its server span is a root or the child
    of the caller's `traceparent`, never of a span that happens to be current. Under uvicorn one
    would be: a request body beyond its 64 KiB buffer pauses reading, the request's task resumes
    it (`transport.resume_reading()` from `receive`), and asyncio's reader callback then captures
    that task's context, current span included; the next request on the keep-alive connection is
    parsed in that callback and its task copies the context (CPython issue 140947). The ASGI
    instrumentation then makes the new server span an INTERNAL child of the previous request's.
    """
    # No internal span per ASGI send/receive: a streamed reply would add one per chunk and bury the
    # engine phases in the trace; the first chunk's time is measured below instead.
    FastAPIInstrumentor.instrument_app(
        app,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        excluded_urls="health,v1/status",
        exclude_spans=["receive", "send"],
        server_request_hook=_tag_request_id,
    )
    httpx_instrumentor = HTTPXClientInstrumentor()  # process-wide: the latest provider traces every client
    if httpx_instrumentor.is_instrumented_by_opentelemetry:
        httpx_instrumentor.uninstrument()
    httpx_instrumentor.instrument(
        tracer_provider=tracer_provider, request_hook=client_span_name, async_request_hook=_async_client_span_name
    )
    recorder = _Metrics(meter_provider)
    derived: OrderedDict[str, None] = OrderedDict()  # a retry with the same id must not reuse the span id

    def server_span_keeps_random_id(rid: str, main: bool) -> bool:
        if not main or rid in derived:
            return True
        derived[rid] = None
        if len(derived) > REMEMBERED_IDS:
            derived.popitem(last=False)
        return False

    async def with_request_id(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        token = otel_context.attach(otel_context.Context())  # nothing inherited is this request's parent
        hint_token, facts_token = _hint.set(None), _facts.set(None)
        try:
            if scope["path"] in ("/health", "/v1/status"):
                await app(scope, receive, send)
            else:
                await traced(scope, receive, send)
        finally:
            _facts.reset(facts_token)
            _hint.reset(hint_token)
            otel_context.detach(token)

    async def traced(scope: dict, receive: Callable, send: Callable) -> None:
        headers = dict(scope.get("headers") or [])
        rid = headers.get(REQUEST_ID.encode(), b"").decode() or (new_request_id() if role == "gateway" else "")
        client_context = headers.get(b"traceparent", b"").decode()
        if role == "gateway":
            # The gateway starts the trace of its request id: a client's own traceparent would put it
            # in a trace whose id the agent cannot derive, away from the engine spans built from logs.
            scope = {**scope, "headers": [(k, v) for k, v in scope.get("headers", []) if k not in TRACE_HEADERS]}
        if rid and REQUEST_ID.encode() not in headers:
            scope = {**scope, "headers": [*scope.get("headers", []), (REQUEST_ID.encode(), rid.encode())]}
        facts, started = RequestFacts(), time.monotonic()
        # Only the main call's server span takes the derived id: the gateway's precheck
        # (count_tokens) carries the same request id and must not collide with it.
        main = scope["path"] in MAIN_PATHS
        _hint.set(_Hint(role, rid, span_used=server_span_keeps_random_id(rid, main)) if rid else None)
        _facts.set(facts)
        streaming = False

        async def timed_send(message: dict) -> None:
            nonlocal streaming
            if message["type"] == "http.response.start":
                if role == "gateway" and rid:  # the client learns the id it can trace
                    message = {**message, "headers": [*message.get("headers", []), (REQUEST_ID.encode(), rid.encode())]}
                streaming = any(
                    k == b"content-type" and v.startswith(b"text/event-stream") for k, v in message.get("headers", [])
                )
            elif (
                message["type"] == "http.response.body"
                and streaming
                and facts.first_chunk is None
                and message.get("body")
            ):
                facts.first_chunk = time.monotonic()  # the first streamed chunk: TTFT
            await send(message)

        if client_context and role == "gateway":
            facts.attributes_on_start = {"spyglass.client.traceparent": client_context}
        try:
            await app(scope, receive, timed_send)
        finally:
            recorder.record(role, facts, started, time.monotonic())

    return with_request_id
