"""supervisord XML-RPC snapshots turned into metrics (label: program)."""

from __future__ import annotations

from spyglass.collectors.event import Event
from spyglass.signals import SignalsBase, signals_for
from spyglass.signals.catalogue import MetricSpec
from spyglass.signals.supervisord_log import STATES

PROGRAM = ("program",)
SPECS = [
    MetricSpec(
        "spyglass_supervisord_rpc_state",
        "gauge",
        "1 for the program's state as supervisord's API reports it, 0 for the others.",
        PROGRAM + ("state",),
        source="supervisord_rpc",
    ),
    MetricSpec(
        "spyglass_supervisord_rpc_restarts_total",
        "counter",
        "Restarts seen by the API as a new (pid, start), even between two polls.",
        PROGRAM,
        source="supervisord_rpc",
    ),
    MetricSpec(
        "spyglass_supervisord_rpc_start_time_seconds",
        "gauge",
        "Unix time of the program's last spawn attempt, from the API.",
        PROGRAM,
        "seconds",
        source="supervisord_rpc",
    ),
]


@signals_for("supervisord_rpc", SPECS)
class SupervisordRpcSignals(SignalsBase):
    def apply(self, e: Event) -> None:
        key = (e.instance,)
        if e.kind == "process_info":
            self.state.set_one_hot("spyglass_supervisord_rpc_state", key, STATES, str(e.fields.get("statename", "")))
            if e.fields.get("start"):
                self.state.set("spyglass_supervisord_rpc_start_time_seconds", key, e.fields["start"])
        elif e.kind == "restarted":
            self.state.inc("spyglass_supervisord_rpc_restarts_total", key)
