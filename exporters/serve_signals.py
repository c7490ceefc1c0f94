"""Serve /v1/status snapshots turned into metrics (label: instance).

Counters are the serve's own cumulative values, so an agent restart cannot double them. A key an
old serve build does not report stays unexported ("not measured"); spyglass_serve_measures_escapes
says which lanes run a build with the special-token escape fix (H7: build skew between lanes).
"""
from __future__ import annotations

from collectors.event import Event
from exporters import SignalsBase, signals_for
from exporters.catalogue import spec_maker

INSTANCE = ("instance",)
STATES = ("loading", "ready", "draining")


spec = spec_maker("serve_status", INSTANCE)

SPECS = [
    spec("spyglass_serve_up", "gauge", "1 when the last /v1/status poll answered with a status, else 0."),
    spec("spyglass_serve_poll_errors_total", "counter",
         "Failed /v1/status polls, by kind: timeout, refused, http_NNN, invalid_json, not_an_object.",
         ("error",)),
    spec("spyglass_serve_state", "gauge",
         "1 for the serve's current state (loading, ready, draining), 0 for the others.",
         ("state",)),
    spec("spyglass_serve_slots", "gauge", "Request slots of the engine behind the serve."),
    spec("spyglass_serve_slots_busy", "gauge", "Request slots in use."),
    spec("spyglass_serve_prefill_queue_depth", "gauge", "Requests waiting for prefill, as the serve reports."),
    spec("spyglass_serve_uptime_seconds", "gauge", "Seconds since the serve process started, as it reports.",
         unit="seconds"),
    spec("spyglass_serve_prompt_escape_calls_total", "counter",
         "Prompts in which the serve escaped special-token literals (cumulative, the serve's own count)."),
    spec("spyglass_serve_prompt_escape_literals_total", "counter", "Special-token literals the serve escaped."),
    spec("spyglass_serve_stops_while_reasoning_total", "counter", "Responses that stopped inside reasoning."),
    spec("spyglass_serve_requests_total", "counter", "Requests the serve answered, by HTTP status (its own count).",
         ("status",)),
    spec("spyglass_serve_measures_escapes", "gauge",
         "1 when the serve build reports prompt_escapes (it has the escape fix), 0 when it does not."),
    spec("spyglass_serve_info", "info", "Engine build and serve version the serve reports, value 1.",
         ("build", "serve_version")),
]


@signals_for("serve_status", SPECS)
class ServeSignals(SignalsBase):
    def apply(self, e: Event) -> None:
        s, key = self.state, (e.instance,)
        if e.kind == "poll_error":
            s.set("spyglass_serve_up", key, 0.0)
            s.inc("spyglass_serve_poll_errors_total", key + (str(e.fields["error"]),))
            return
        body = e.fields
        s.set("spyglass_serve_up", key, 1.0)
        s.set_one_hot("spyglass_serve_state", key, STATES, str(body.get("state", "")))
        slots = body.get("slots") or {}
        for metric, value in (("spyglass_serve_slots", slots.get("total")), ("spyglass_serve_slots_busy", slots.get("busy")),
                              ("spyglass_serve_prefill_queue_depth", body.get("prefill_queue")),
                              ("spyglass_serve_uptime_seconds", body.get("uptime_s")),
                              ("spyglass_serve_stops_while_reasoning_total", body.get("stops_while_reasoning"))):
            if isinstance(value, (int, float)):
                s.set(metric, key, value)
        escapes = body.get("prompt_escapes")
        s.set("spyglass_serve_measures_escapes", key, 1.0 if isinstance(escapes, dict) else 0.0)
        if isinstance(escapes, dict):
            for metric, field in (("spyglass_serve_prompt_escape_calls_total", "calls"),
                                  ("spyglass_serve_prompt_escape_literals_total", "literals")):
                if isinstance(escapes.get(field), (int, float)):
                    s.set(metric, key, escapes[field])
        for status, count in ((body.get("requests") or {}).get("by_status") or {}).items():
            if isinstance(count, (int, float)):
                s.set("spyglass_serve_requests_total", key + (str(status),), count)
        s.set_info("spyglass_serve_info", key + (str(body.get("build", "")), str(body.get("serve_version", ""))), 1)
