"""The kinds of event the agent receives instead of collecting: trace spans (POST /v1/traces, source
`otlp`), Alertmanager's notifications (POST /api/alerts, source `alertmanager`) and smoke-gate runs
(POST /api/smoke, source `smoke`). Their source is fixed, so each source name is its own source kind.
The receivers live in spyglass/ (otlp_receiver, alert_webhook, smoke_event); their events' fields are
declared here, with every other kind's (collectors/fields.py).
"""

from __future__ import annotations

from spyglass.collectors.fields import declare

RECEIVED = {"otlp": "otlp", "alertmanager": "alertmanager", "smoke": "smoke"}  # source name -> source kind

declare(
    "otlp",
    {
        "span": {
            "name": "text",
            "trace_id": "text",
            "span_id": "text",
            "parent_span_id": "text",
            "kind": "text",
            "start": "float",
            "end": "float",
            "status": "text",
            "status_message": "text",
            "service": "text",
            "attributes": "json",
            "events": "json",
            "redacted": "json",
            "dropped_attributes": "int",
        }
    },
)
declare(
    "alertmanager",
    {
        "alert": {
            "alertname": "text",
            "status": "text",
            "labels": "json",
            "severity": "text",
            "heuristic": "text",
            "instance": "text",
            "startsAt": "float",
            "endsAt": "float",
            "fingerprint": "text",
            "annotations": "json",
            "labels_dropped": "int",
        }
    },
)
_SMOKE = {
    "passed": "bool",
    "reason": "text",
    "url": "text",
    "at": "float",
    "waited_seconds": "float",
    "samples_file": "text",
    "samples_sha256": "text",
    "samples": "int",
    "ttft_ms_median": "float",
    "ttft_ms_max": "float",
    "outcomes": "json",
}
declare("smoke", {"smoke_passed": dict(_SMOKE), "smoke_failed": dict(_SMOKE)})  # type: ignore[arg-type]
