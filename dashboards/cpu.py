"""CPU contention: allowed-set sizes and their overlap between engines, CFS throttling, CPU and
run-queue time, threads and the expert pool (H1, H2)."""

from __future__ import annotations

from spyglass.alerting.heuristics import Deployment
from spyglass.dashboards.model import links
from spyglass.dashboards.panels import Q, table_panel, timeseries_panel
from spyglass.dashboards.promql import rate, s
from spyglass.dashboards.skeleton import board
from spyglass.dashboards.thresholds import above, runbook, threshold

UID = "spyglass-cpu"
TITLE = "Spyglass / CPU contention"


def build(d: Deployment):
    layout = board(
        UID,
        TITLE,
        "Which CPUs each engine may use, whom it shares them with, and what that costs.",
        links_to=links("wall", "latency"),
    )
    layout.row("Allowed CPUs")
    layout.add(
        timeseries_panel(
            "CPUs shared with another engine",
            "short",
            Q(f"max by (host, instance, other) ({s('spyglass_host_shared_cpus')})", "{{instance}} & {{other}} (/proc)"),
            Q(
                f"max by (host, instance, other) ({s('spyglass_engine_shared_cpus')})",
                "{{instance}} & {{other}} (start lines)",
            ),
            width=8,
            thresholds=above(1),
            links=[runbook(d, "EngineCPUsShared")],
            description="More than 0 means two engines compete for the same cores (incident 1).",
        ),
        timeseries_panel(
            "Allowed CPUs",
            "short",
            Q(f"max by (host, instance) ({s('spyglass_host_process_allowed_cpus')})", "{{instance}} (/proc)"),
            Q(f"max by (host, instance) ({s('spyglass_engine_allowed_cpus')})", "{{instance}} (engine log)"),
            width=8,
        ),
        table_panel(
            "CPU lists at start",
            "none",
            Q(f"max by (host, instance, cpus) ({s('spyglass_engine_cpus_info')})"),
            width=8,
        ),
    )
    layout.row("Cost")
    throttled = threshold(d, "H2", "throttled_share")
    layout.add(
        timeseries_panel(
            "Throttled share of CFS periods",
            "percentunit",
            Q(
                f"{rate('spyglass_host_cgroup_throttled_periods_total', 'instance')}"
                f" / ({rate('spyglass_host_cgroup_periods_total', 'instance')} > 0)",
                "{{instance}}",
            ),
            width=8,
            thresholds=above(throttled),
            links=[runbook(d, "EngineCPUThrottled")],
        ),
        timeseries_panel(
            "CPU time and run-queue wait",
            "percentunit",
            Q(rate("spyglass_host_process_cpu_seconds_total", "instance"), "{{instance}} CPU (cores)"),
            Q(
                rate("spyglass_host_process_runqueue_wait_seconds_total", "instance"),
                "{{instance}} run-queue wait (threads)",
            ),
            Q(rate("spyglass_host_cgroup_throttled_seconds_total", "instance"), "{{instance}} throttled"),
            width=8,
            links=[runbook(d, "EngineHung")],
        ),
        timeseries_panel(
            "Threads and pool workers",
            "short",
            Q(f"max by (host, instance) ({s('spyglass_host_process_threads')})", "{{instance}} threads"),
            Q(f"max by (host, instance) ({s('spyglass_engine_pool_workers')})", "{{instance}} pool workers"),
            width=8,
        ),
        timeseries_panel(
            "Experts resident of experts",
            "short",
            Q(f"max by (host, instance) ({s('spyglass_engine_experts_resident')})", "{{instance}} resident"),
            Q(f"max by (host, instance) ({s('spyglass_engine_experts')})", "{{instance}} experts"),
            width=8,
        ),
        timeseries_panel(
            "Cgroup memory and OOM kills",
            "bytes",
            Q(f"max by (host, instance) ({s('spyglass_host_cgroup_memory_bytes')})", "{{instance}}"),
            Q(rate("spyglass_host_cgroup_oom_kills_total", "instance", fn="increase"), "{{instance}} OOM kills"),
            width=8,
        ),
        timeseries_panel(
            "Process found",
            "none",
            Q(f"max by (host, instance) ({s('spyglass_host_process_up')})", "{{instance}}"),
            width=8,
        ),
    )
    return layout.board
