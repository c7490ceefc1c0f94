"""H2: Engine processes share CPUs, or a cgroup is throttled. Incident 1."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import (
    INSTANCE,
    PERCENT,
    VALUE,
    Alert,
    Check,
    Deployment,
    Evidence,
    Heuristic,
    Probe,
    Threshold,
    Words,
    probe_sql,
)
from spyglass.alerting.heuristics.promql import num, ratio, spoken


def build(d: Deployment) -> Heuristic:
    throttled, shared = 0.25, 0
    window = "10m"  # the share of CFS periods throttled over it
    probe = Probe(
        needs=("engine_log",),
        alert="EngineCPUsShared",
        sql=probe_sql(__name__, shared=num(shared)),
        summary="{instance} may run on CPUs {cpus} and {other} on {other_cpus}: {shared_cpus} CPUs shared; per"
        " request {instance} decoded {decode_tps:g} tok/s and {other} {other_decode_tps:g} in the window.",
        figures=("shared_cpus", "decode_tps", "other_decode_tps", "requests"),
    )
    return Heuristic(
        words={
            "llama_server": Words(
                check="The overlap itself, per pair of processes: llama-server logs no CPU list, the host source reads"
                " each process's affinity (spyglass_host_shared_cpus).",
                knobs=(
                    "taskset or --cpu-range / --cpu-mask per llama-server",
                    "agent.cpus (pin the spyglass agent beside it)",
                    "cpu.cfs_quota_us of the instance's cgroup",
                ),
                unknown={
                    "cpus": "llama-server logs no CPU list: spyglass_host_shared_cpus has the overlap",
                    "other_cpus": "llama-server logs no CPU list: spyglass_host_shared_cpus has the overlap",
                },
            )
        },
        evidence=Evidence(
            control="other instance",
            text="Each engine's decode rate and CPU list: the instance against the one it shares CPUs with.",
            this="{instance}: {decode_tps:g} tok/s per request on CPUs {cpus}",
            other="{other}: {other_decode_tps:g} tok/s per request on CPUs {other_cpus}",
            series="decode",
        ),
        id="H2",
        title="Engine processes share CPUs, or a cgroup is throttled",
        incident="1",
        symptom="Two engine processes' allowed CPU sets overlap, or the cgroup of one is throttled by CFS.",
        wrong_guess="-",
        check=Check(
            text="The overlap itself, per pair of processes.",
            promql="spyglass_host_shared_cpus > 0 or spyglass_engine_shared_cpus > 0",
            sql="SELECT instance, cpus, max(ts) AS last_seen FROM events_engine_log WHERE kind = 'cpus'"
            " GROUP BY ALL ORDER BY last_seen",
        ),
        knobs=("taskset / cpuset per instance", "cpu.cfs_quota_us of the engine's cgroup"),
        thresholds=(
            Threshold(name="throttled_share", value=throttled, unit="ratio", meaning="share of CFS periods throttled"),
        ),
        alerts=(
            Alert(
                name="EngineCPUsShared",
                severity="warning",
                expr="(max by (host, instance) (spyglass_host_shared_cpus) > 0)"
                " or (max by (host, instance) (spyglass_engine_shared_cpus) > 0)",
                for_="5m",
                summary=f"{INSTANCE} shares CPUs with another engine.",
                description=f"{INSTANCE} may run on {VALUE} CPUs that another engine instance (or the spyglass agent"
                ' itself, other="spyglass-agent": set agent.cpus) may also run on.',
            ),
            Alert(
                name="EngineCPUThrottled",
                severity="warning",
                expr=ratio(
                    f"rate(spyglass_host_cgroup_throttled_periods_total[{window}])",
                    f"rate(spyglass_host_cgroup_periods_total[{window}])",
                    "host, instance",
                )
                + f" > {num(throttled)}",
                for_="10m",
                summary=f"{INSTANCE}'s cgroup is throttled.",
                description=f"{INSTANCE} was throttled in {PERCENT} of its CFS periods over {spoken(window)}.",
            ),
        ),
        probe=probe,
    )
