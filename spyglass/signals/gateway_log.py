"""Gateway events turned into metrics (labels: lane, mode, status; never a request or session).

Lane and mode arrive bounded by the collector (configured lists, else `other`); a status
outside 100-599 is exported as `other`, and both are counted in
spyglass_source_unlisted_labels_total. Token counts carry `counted_by`: the gateway's estimate and the engine's count of the same
prompts (incident 6: every count names who counted; the engine is the authority).
"""

from __future__ import annotations

from spyglass.collectors.event import Event
from spyglass.collectors.http_status import HTTP_STATUS_CODES
from spyglass.signals import SignalsBase, signals_for
from spyglass.signals.buckets import LATENCY_SECONDS
from spyglass.signals.catalogue import spec_maker

RATIO_BUCKETS = (0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 8.0)
DROPPED_BUCKETS = (0.0, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0, 400.0, 800.0)


LANE = ("lane",)

spec = spec_maker("gateway_log", LANE)

SPECS = [
    spec(
        "spyglass_gateway_requests_received_total",
        "counter",
        "Requests the gateway received, by lane and mode.",
        ("mode",),
    ),
    spec(
        "spyglass_gateway_requests_total",
        "counter",
        "Requests the gateway answered, by lane and HTTP status.",
        ("status",),
    ),
    spec(
        "spyglass_gateway_assembly_dropped_messages",
        "histogram",
        "Client messages RAG assembly left out of the request sent upstream.",
        buckets=DROPPED_BUCKETS,
    ),
    spec(
        "spyglass_gateway_assembly_dropped_most_total",
        "counter",
        "Assembled requests that dropped more than half of the client's messages (incident 5).",
    ),
    spec(
        "spyglass_gateway_prompt_tokens_total",
        "counter",
        "Prompt tokens of requests, by the layer that counted them: gateway_estimate or engine.",
        ("counted_by",),
        "tokens",
    ),
    spec(
        "spyglass_gateway_estimate_ratio",
        "histogram",
        "Gateway token estimate divided by the engine's count of the same prompt (English runs about 3.3).",
        buckets=RATIO_BUCKETS,
    ),
    spec("spyglass_gateway_clamps_total", "counter", "Requests whose max_tokens the gateway lowered to fit."),
    spec(
        "spyglass_gateway_overfits_total", "counter", "Requests the engine refused with 400 for overfilling its window."
    ),
    spec(
        "spyglass_gateway_blind_retries_total",
        "counter",
        "Retries after a 400 overfit that only clamped max_tokens (incident 6).",
    ),
    spec(
        "spyglass_gateway_concurrency_rejections_total",
        "counter",
        "Requests rejected with 429 because the model's concurrency limit was full.",
    ),
    spec(
        "spyglass_gateway_ttft_seconds",
        "histogram",
        "Time to first token seen by the gateway.",
        unit="seconds",
        buckets=LATENCY_SECONDS,
        exemplars=True,
    ),
    spec(
        "spyglass_gateway_request_duration_seconds",
        "histogram",
        "Whole request duration seen by the gateway.",
        unit="seconds",
        buckets=LATENCY_SECONDS,
        exemplars=True,
    ),
    spec("spyglass_gateway_starts_total", "counter", "Gateway process starts seen in its log.", labels=()),
    spec("spyglass_gateway_info", "info", "Gateway version from its last start line, value 1.", labels=("version",)),
]


@signals_for("gateway_log", SPECS)
class GatewaySignals(SignalsBase):
    no_lane = "unknown"

    def apply(self, e: Event) -> None:
        s, f, lane = self.state, e.fields, str(e.fields.get("lane") or self.no_lane)
        kind = e.kind
        if "status" in f:
            status = s.listed(e.source, "status", str(f["status"]), HTTP_STATUS_CODES)
        if kind == "request":
            for label in f.get("unlisted") or ():
                s.inc("spyglass_source_unlisted_labels_total", (e.source, str(label)))
            s.inc("spyglass_gateway_requests_received_total", (lane, str(f["mode"])))
            dropped = f["client_msgs"] - f["sent_msgs"]
            if f["mode"] == "assembled":
                s.observe("spyglass_gateway_assembly_dropped_messages", (lane,), dropped)
                if dropped * 2 > f["client_msgs"]:
                    s.inc("spyglass_gateway_assembly_dropped_most_total", (lane,))
            s.inc("spyglass_gateway_prompt_tokens_total", (lane, "gateway_estimate"), f["est_tokens"])
        elif kind == "done":
            s.inc("spyglass_gateway_requests_total", (lane, status))
            s.inc("spyglass_gateway_prompt_tokens_total", (lane, "engine"), f["engine_prompt"])
            if f.get("est_tokens") and f["engine_prompt"]:
                s.observe("spyglass_gateway_estimate_ratio", (lane,), f["est_tokens"] / f["engine_prompt"])
            exemplar = (e.request_id, e.ts) if e.request_id else None  # a trace to follow from the bucket
            s.observe("spyglass_gateway_ttft_seconds", (lane,), f["ttft_ms"] / 1000.0, exemplar)
            s.observe("spyglass_gateway_request_duration_seconds", (lane,), f["dur_ms"] / 1000.0, exemplar)
        elif kind == "clamp":
            s.inc("spyglass_gateway_clamps_total", (lane,))
        elif kind == "overfit":
            s.inc("spyglass_gateway_overfits_total", (lane,))
            s.inc("spyglass_gateway_requests_total", (lane, status))
        elif kind == "retry_on_overfit":
            s.inc("spyglass_gateway_blind_retries_total", (lane,))
        elif kind == "reject":
            s.inc("spyglass_gateway_requests_total", (lane, status))
            if f["status"] == 429:
                s.inc("spyglass_gateway_concurrency_rejections_total", (lane,))
        elif kind == "started":
            s.inc("spyglass_gateway_starts_total", ())
            s.set_info("spyglass_gateway_info", (str(f["version"]),), 0)
