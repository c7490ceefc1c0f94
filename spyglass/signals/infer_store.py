"""Infer-store rows and bodies turned into metrics (label: lane, and bounded outcomes).

These are the incident tables as counters: special-token requests vs thinking-only responses
(incident 3: 58 vs 295), plan-then-stop (incidents 4 and 5), a lost task anchor (incident 5).
"""

from __future__ import annotations

from spyglass.collectors.event import Event
from spyglass.signals import SignalsBase, signals_for
from spyglass.signals.catalogue import MetricSpec, spec_maker

LANE = ("lane",)

spec = spec_maker("infer_store", LANE)


def counter(name: str, help_: str, extra: tuple[str, ...] = ()) -> MetricSpec:
    return spec(name, "counter", help_, extra)


SPECS = [
    counter(
        "spyglass_infer_requests_total",
        "Requests recorded in the infer store, by lane, status and finish reason.",
        ("status", "finish"),
    ),
    counter("spyglass_infer_bodies_total", "Request bodies read from the infer store's segments."),
    counter(
        "spyglass_infer_special_token_requests_total",
        "Requests whose sent prompt contains special-token literals (incident 3).",
    ),
    counter("spyglass_infer_special_token_literals_total", "Special-token literals in sent prompts."),
    counter(
        "spyglass_infer_thinking_only_total",
        "Responses with reasoning but no visible text and no tool call.",
        ("special_tokens",),
    ),
    counter("spyglass_infer_invalid_tool_arguments_total", "Tool calls whose arguments are not valid JSON."),
    counter(
        "spyglass_infer_plan_then_stop_total",
        "Responses that stopped with short text and no tool call although tools were offered (H8).",
    ),
    counter(
        "spyglass_infer_anchor_lost_total",
        "Requests whose client's first user message (the task anchor) was dropped by assembly (H9).",
    ),
]


@signals_for("infer_store", SPECS)
class InferSignals(SignalsBase):
    no_lane = "unknown"

    def apply(self, e: Event) -> None:
        s, f = self.state, e.fields
        lane = (str(f.get("lane") or self.no_lane),)
        if e.kind == "request":
            s.inc("spyglass_infer_requests_total", lane + (str(f.get("status")), str(f.get("finish") or "none")))
        elif e.kind == "request_body":
            s.inc("spyglass_infer_bodies_total", lane)
            if f["special_literals"]:
                s.inc("spyglass_infer_special_token_requests_total", lane)
                s.inc("spyglass_infer_special_token_literals_total", lane, f["special_literals"])
            if f["thinking_only"]:
                s.inc("spyglass_infer_thinking_only_total", lane + ("yes" if f["special_literals"] else "no",))
            if f["invalid_tool_json"]:
                s.inc("spyglass_infer_invalid_tool_arguments_total", lane, f["invalid_tool_json"])
            if f["plan_then_stop"]:
                s.inc("spyglass_infer_plan_then_stop_total", lane)
            if f["anchor_survived"] is False:
                s.inc("spyglass_infer_anchor_lost_total", lane)
