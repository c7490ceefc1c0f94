"""H16: Recompile storm. Incident upgrade (p99 20 ms -> 800 ms, CPU busy, GPU idle)."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import (
    INSTANCE,
    LANE,
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
from spyglass.alerting.heuristics.promql import PEAK, RECENT, minutes, num, sql_interval


def build(d: Deployment) -> Heuristic:
    per_minute = 2.0
    probe = Probe(
        needs=("engine_log",),
        alert="EngineRecompileStorm",
        sql=probe_sql(
            __name__,
            per_minute=num(per_minute),
            recent=sql_interval(RECENT),
            recent_minutes=minutes(RECENT),
            peak=sql_interval(PEAK),
        ),
        summary="{instance} rebuilt {rebuilds} compute graphs, up to {rebuilds_per_minute_peak:g} a minute.",
        figures=("rebuilds", "rebuilds_per_minute_peak"),
    )
    return Heuristic(
        words={
            "llama_server": Words(
                not_applicable="llama-server logs how many compute graphs each task reused (`graphs reused`), never a"
                " rebuild"
            )
        },
        evidence=Evidence(
            control="hour before",
            text="Compute-graph rebuilds against the hour before.",
            this="{rebuilds} rebuilds, up to {rebuilds_per_minute_peak:g} a minute",
        ),
        id="H16",
        title="Recompile storm",
        incident="upgrade (p99 20 ms -> 800 ms, CPU busy, GPU idle)",
        symptom="Compute-graph rebuilds every minute, with the CPU busy and the accelerator idle.",
        wrong_guess="the new model is slower",
        check=Check(
            text="The shapes seen; warm-up; bounded shapes.",
            sql="SELECT shape, count(*) AS rebuilds FROM events_engine_log WHERE kind = 'graph_rebuild'"
            " GROUP BY ALL ORDER BY rebuilds DESC",
        ),
        knobs=("bounded request shapes (batch, sequence length)", "a warm-up of the known shapes at start"),
        thresholds=(
            Threshold(name="rebuilds_per_minute", value=per_minute, unit="1/min", meaning="graph rebuilds a minute"),
        ),
        alerts=(
            Alert(
                name="EngineRecompileStorm",
                severity="warning",
                expr=f"sum by (host, instance, lane) (rate(spyglass_engine_graph_rebuilds_total[{RECENT}])) * 60 > {num(per_minute)}",
                for_="10m",
                summary=f"{INSTANCE} rebuilds compute graphs every minute.",
                description=f"{INSTANCE} ({LANE}) rebuilds {VALUE} compute graphs a minute.",
                latency=True,
            ),
        ),
        probe=probe,
    )
