"""Host samples turned into metrics (label: instance; pairs of instances for shared CPUs).

Two engines whose expert pools share cores lose an order of magnitude of decode throughput to
CFS contention (incident 1): spyglass_host_shared_cpus > 0 is the smoking gun, throttled
periods the confirmation. CPU seconds and OOM kills are the kernel's own cumulative values.
"""

from __future__ import annotations

from spyglass.collectors.event import Event
from spyglass.collectors.host import cpu_set
from spyglass.signals import SignalsBase, signals_for
from spyglass.signals.catalogue import spec_maker

INSTANCE = ("instance",)


spec = spec_maker("host", INSTANCE)

SPECS = [
    spec("spyglass_host_process_up", "gauge", "1 when the instance's process was found at the last sample, else 0."),
    spec("spyglass_host_process_allowed_cpus", "gauge", "CPUs the process may run on (Cpus_allowed_list)."),
    spec(
        "spyglass_host_process_cpu_seconds_total",
        "counter",
        "CPU time of all the process's threads (utime + stime).",
        unit="seconds",
    ),
    spec(
        "spyglass_host_process_runqueue_wait_seconds_total",
        "counter",
        "Time the process's threads waited on a run queue, summed over threads.",
        unit="seconds",
    ),
    spec("spyglass_host_process_resident_bytes", "gauge", "Resident memory of the process.", unit="bytes"),
    spec("spyglass_host_process_threads", "gauge", "Threads of the process."),
    spec(
        "spyglass_host_shared_cpus",
        "gauge",
        "CPUs both processes of a pair may run on: more than 0 means contention.",
        ("other",),
    ),
    spec("spyglass_host_cgroup_periods_total", "counter", "CFS enforcement periods of the process's cgroup."),
    spec("spyglass_host_cgroup_throttled_periods_total", "counter", "CFS periods in which the cgroup was throttled."),
    spec(
        "spyglass_host_cgroup_throttled_seconds_total",
        "counter",
        "Time the cgroup's threads were throttled.",
        unit="seconds",
    ),
    spec("spyglass_host_cgroup_memory_bytes", "gauge", "Memory charged to the process's cgroup.", unit="bytes"),
    spec("spyglass_host_cgroup_oom_kills_total", "counter", "Processes of the cgroup killed by the OOM killer."),
]
FACTS = {
    "cpu_seconds": "spyglass_host_process_cpu_seconds_total",
    "runqueue_wait_seconds": "spyglass_host_process_runqueue_wait_seconds_total",
    "rss_bytes": "spyglass_host_process_resident_bytes",
    "threads": "spyglass_host_process_threads",
    "periods": "spyglass_host_cgroup_periods_total",
    "throttled_periods": "spyglass_host_cgroup_throttled_periods_total",
    "throttled_seconds": "spyglass_host_cgroup_throttled_seconds_total",
    "memory_bytes": "spyglass_host_cgroup_memory_bytes",
    "oom_kills": "spyglass_host_cgroup_oom_kills_total",
}


@signals_for("host", SPECS)
class HostSignals(SignalsBase):
    def apply(self, e: Event) -> None:
        s, key = self.state, (e.instance,)
        if e.kind == "process_missing":
            s.set("spyglass_host_process_up", key, 0.0)
        elif e.kind == "process":
            s.set("spyglass_host_process_up", key, 1.0)
            if "cpus" in e.fields:
                s.set("spyglass_host_process_allowed_cpus", key, len(cpu_set(e.fields["cpus"])))
            for fact, metric in FACTS.items():
                if fact in e.fields:
                    s.set(metric, key, e.fields[fact])
        elif e.kind == "shared_cpus":
            for pair in ((e.instance, e.fields["other"]), (e.fields["other"], e.instance)):
                s.set("spyglass_host_shared_cpus", pair, e.fields["shared"])
