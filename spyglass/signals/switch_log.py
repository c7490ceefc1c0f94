"""Switch-log events turned into metrics: the engine build each instance runs, and operator actions."""

from __future__ import annotations

from spyglass.collectors.event import Event
from spyglass.signals import SignalsBase, signals_for
from spyglass.signals.catalogue import MetricSpec

SPECS = [
    MetricSpec(
        "spyglass_switch_engine_build_info",
        "info",
        "Engine build an instance was last switched to, value 1.",
        ("instance", "build"),
        source="switch_log",
    ),
    MetricSpec(
        "spyglass_switch_switches_total",
        "counter",
        "Engine build switches by an operator.",
        ("instance",),
        source="switch_log",
    ),
    MetricSpec(
        "spyglass_switch_restarts_total",
        "counter",
        "Engine restarts by an operator.",
        ("instance",),
        source="switch_log",
    ),
    MetricSpec(
        "spyglass_switch_last_change_timestamp_seconds",
        "gauge",
        "Unix time of the last switch or operator restart of an instance.",
        ("instance",),
        "seconds",
        source="switch_log",
    ),
]


@signals_for("switch_log", SPECS)
class SwitchSignals(SignalsBase):
    def apply(self, e: Event) -> None:
        key = (e.instance,)  # a configured instance, or `other` (collectors/switch_log.py)
        if e.fields.get("unlisted_instance"):
            self.state.inc("spyglass_source_unlisted_labels_total", (e.source, "instance"))
        if e.kind == "switch":
            self.state.inc("spyglass_switch_switches_total", key)
            self.state.set_info("spyglass_switch_engine_build_info", key + (str(e.fields["to_build"]),), 1)
        elif e.kind == "restart":
            self.state.inc("spyglass_switch_restarts_total", key)
        self.state.set("spyglass_switch_last_change_timestamp_seconds", key, e.ts)
