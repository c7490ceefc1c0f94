"""Serve /v1/status snapshots turned into metrics (label: instance, from configuration).

Counters follow the serve's own cumulative values, and stay monotonic across serve restarts:
when its uptime or a counter goes backwards the serve restarted, spyglass_serve_restarts_total
counts it and the new process's counts are added to what was exported (what Prometheus expects
of a counter; the raw values are in the stored snapshots). While a poll fails, the gauges of
the instance (state, slots, queue, uptime) are dropped, so no stale value is shown as current;
counters keep their value. A key an old serve build does not report stays unexported ("not
measured"); spyglass_serve_measures_escapes says which lanes run a build with the special-token
escape fix (H7: build skew between lanes). State and status labels outside their closed sets
become `other`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from spyglass.collectors.event import Event
from spyglass.collectors.grammar import number_ok
from spyglass.collectors.http_status import HTTP_STATUS_CODES
from spyglass.signals import SavedNumber, SignalsBase, signals_for
from spyglass.signals.catalogue import spec_maker

INSTANCE = ("instance",)
STATES = ("loading", "ready", "draining")
GAUGES = (
    ("spyglass_serve_slots", "slots", "total"),
    ("spyglass_serve_slots_busy", "slots", "busy"),
    ("spyglass_serve_prefill_queue_depth", "prefill_queue", ""),
    ("spyglass_serve_uptime_seconds", "uptime_s", ""),
)
COUNTERS = (
    ("spyglass_serve_prompt_escape_calls_total", "prompt_escapes", "calls"),
    ("spyglass_serve_prompt_escape_literals_total", "prompt_escapes", "literals"),
    ("spyglass_serve_stops_while_reasoning_total", "stops_while_reasoning", ""),
)
REQUESTS = "spyglass_serve_requests_total"


spec = spec_maker("serve_status", INSTANCE)

SPECS = [
    spec("spyglass_serve_up", "gauge", "1 when the last /v1/status poll answered with a status, else 0."),
    spec(
        "spyglass_serve_poll_errors_total",
        "counter",
        "Failed /v1/status polls, by kind: timeout, refused, http_NNN, invalid_json (nested too deeply"
        " too), not_an_object, transport, unexpected (any other error, logged).",
        ("error",),
    ),
    spec(
        "spyglass_serve_state",
        "gauge",
        "1 for the serve's current state (loading, ready, draining), 0 for the others.",
        ("state",),
    ),
    spec("spyglass_serve_slots", "gauge", "Request slots of the engine behind the serve."),
    spec("spyglass_serve_slots_busy", "gauge", "Request slots in use."),
    spec("spyglass_serve_prefill_queue_depth", "gauge", "Requests waiting for prefill, as the serve reports."),
    spec(
        "spyglass_serve_uptime_seconds",
        "gauge",
        "Seconds since the serve process started, as it reports.",
        unit="seconds",
    ),
    spec(
        "spyglass_serve_prompt_escape_calls_total",
        "counter",
        "Prompts in which the serve escaped special-token literals (the serve's own count, continued across its"
        " restarts).",
    ),
    spec("spyglass_serve_prompt_escape_literals_total", "counter", "Special-token literals the serve escaped."),
    spec("spyglass_serve_stops_while_reasoning_total", "counter", "Responses that stopped inside reasoning."),
    spec(
        "spyglass_serve_requests_total",
        "counter",
        "Requests the serve answered, by HTTP status (its own count, continued across its restarts).",
        ("status",),
    ),
    spec(
        "spyglass_serve_restarts_total",
        "counter",
        "Serve restarts seen: its uptime or a counter went backwards between two polls.",
    ),
    spec(
        "spyglass_serve_measures_escapes",
        "gauge",
        "1 when the serve build reports prompt_escapes (it has the escape fix), 0 when it does not.",
    ),
    spec(
        "spyglass_serve_info",
        "info",
        "Engine build and serve version the serve reports, value 1.",
        ("build", "serve_version"),
    ),
]


class ServeSeen(BaseModel):
    """A serve's last uptime and raw counters (metric, or metric|status -> the serve's own count)."""

    model_config = ConfigDict(extra="forbid")

    uptime: SavedNumber | None = None
    raw: dict[str, SavedNumber] = Field(default_factory=dict)


class ServeSaved(BaseModel):
    model_config = ConfigDict(extra="forbid")

    serves: dict[str, ServeSeen] = Field(default_factory=dict)  # instance -> what its last poll said


@signals_for("serve_status", SPECS)
class ServeSignals(SignalsBase):
    mirrored_counters = frozenset({REQUESTS, *(metric for metric, _, _ in COUNTERS)})
    Saved = ServeSaved

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: dict[str, ServeSeen] = {}

    def checkpoint(self) -> ServeSaved:
        return ServeSaved(serves=self.seen)

    def restore(self, saved: ServeSaved) -> None:
        self.seen = dict(saved.serves)

    @staticmethod
    def from_memo(memo: dict[str, Any]) -> dict[str, Any]:
        return {"serves": memo.get("serve_status") or {}}

    def apply(self, e: Event) -> None:
        s, key = self.state, (e.instance,)
        if e.kind == "poll_error":
            s.set("spyglass_serve_up", key, 0.0)
            s.inc("spyglass_serve_poll_errors_total", key + (str(e.fields["error"]),))
            for metric, _, _ in GAUGES:
                s.drop(metric, key)
            s.drop("spyglass_serve_state", key)
            return
        body = e.fields
        for field in body.get("invalid", ()):
            s.inc("spyglass_source_invalid_fields_total", (e.source, str(field)))
        s.set("spyglass_serve_up", key, 1.0)
        s.set_one_hot("spyglass_serve_state", key, STATES, self._listed(e, "state", str(body.get("state", "")), STATES))
        for metric, field, part in GAUGES:
            value = self._number(body, field, part)
            if value is not None:
                s.set(metric, key, value)
        escapes = body.get("prompt_escapes")
        s.set("spyglass_serve_measures_escapes", key, 1.0 if isinstance(escapes, dict) else 0.0)
        self._counters(e, key, body)
        s.set_info("spyglass_serve_info", key + (str(body.get("build", "")), str(body.get("serve_version", ""))), 1)

    def _listed(self, e: Event, label: str, value: str, allowed: Any) -> str:
        """An absent value stays empty; any other is bounded to its closed set (MetricState.listed)."""
        return self.state.listed(e.source, label, value, allowed) if value else value

    @staticmethod
    def _number(body: dict, field: str, part: str) -> float | None:
        value = body.get(field)
        if part:
            value = value.get(part) if isinstance(value, dict) else None
        return value if number_ok(value) else None

    def _counters(self, e: Event, key: tuple[str], body: dict) -> None:
        """The serve's raw counters, exported as increments since the last poll (all of a new
        process's count after a restart), so the exported counter never goes down."""
        raw: dict[str, float] = {}
        for metric, field, part in COUNTERS:
            value = self._number(body, field, part)
            if value is not None:
                raw[metric] = value
        by_status = (body.get("requests") or {}).get("by_status") or {}
        for status, count in by_status.items() if isinstance(by_status, dict) else ():
            if number_ok(count):
                label = f"{REQUESTS}|{self._listed(e, 'status', str(status), HTTP_STATUS_CODES)}"
                raw[label] = raw.get(label, 0) + count
        seen = self.seen.get(e.instance) or ServeSeen()
        last = seen.raw
        uptime, last_uptime = self._number(body, "uptime_s", ""), seen.uptime
        restarted = (uptime is not None and last_uptime is not None and uptime < last_uptime) or any(
            value < last[k] for k, value in raw.items() if k in last
        )
        if restarted:
            self.state.inc("spyglass_serve_restarts_total", key)
        for name, value in raw.items():
            metric, _, status = name.partition("|")
            series = key + ((status,) if status else ())
            if name not in last:  # first sight: the serve's count, never below what was exported
                self.state.set(metric, series, max(self.state.series(metric).get(series, 0.0), value))
            else:
                self.state.inc(metric, series, value if restarted else value - last[name])
        self.seen[e.instance] = ServeSeen.model_construct(
            uptime=uptime if uptime is not None else last_uptime, raw=raw if restarted else {**last, **raw}
        )
