"""H1: Throughput collapse against the instance's own baseline. Incident 1 (solo 9.3 tok/s, 2026-10-07)."""

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
from spyglass.alerting.heuristics.promql import (
    DECODE_BASELINE,
    DECODE_BASELINE_OFFSETS,
    DECODE_MEAN,
    HOURLY,
    RECENT,
    num,
    spoken,
    sql_interval,
)


def build(d: Deployment) -> Heuristic:
    drop = 0.25
    before = " or ".join(spoken(off) for off in DECODE_BASELINE_OFFSETS)  # an hour or a day
    probe = Probe(
        needs=("engine_log",),
        alert="EngineThroughputCollapse",
        sql=probe_sql(
            __name__,
            drop=num(drop),
            recent=sql_interval(RECENT),
            baseline_from=sql_interval(HOURLY, DECODE_BASELINE_OFFSETS[0]),
            baseline_to=sql_interval(DECODE_BASELINE_OFFSETS[0]),
        ),
        summary=f"{{instance}} decoded {{decode_tps:g}} tok/s per request over {spoken(RECENT)} against"
        f" {{baseline_decode_tps:g}} {spoken(DECODE_BASELINE_OFFSETS[0])} before ({{requests}} requests under"
        f" {num(drop)}x their baseline).",
        figures=("decode_tps", "baseline_decode_tps", "requests"),
    )
    return Heuristic(
        words={
            "llama_server": Words(
                check="CPU affinity overlap between llama-server and the other processes, and CFS throttling: pinning"
                " (not fewer -t threads) separates contention from capacity. A 2-3x loss smells of capacity, 10x of"
                " contention.",
                knobs=(
                    "taskset or --cpu-range / --cpu-mask per llama-server",
                    "-t / --threads (CPU threads of one instance)",
                    "--n-cpu-moe (MoE experts kept on the CPU)",
                ),
            )
        },
        evidence=Evidence(
            control="hour before",
            text="Decode rate per request now against the same instance's an hour before (the rule's baseline).",
            this="{decode_tps:g} tok/s per request",
            other="{baseline_decode_tps:g} tok/s an hour before",
            series="decode",
            threshold="baseline_decode_tps",
            threshold_factor=drop,
        ),
        id="H1",
        title="Throughput collapse against the instance's own baseline",
        incident="1 (solo 9.3 tok/s, 2026-10-07)",
        symptom=f"Decode throughput per request fell under {num(drop)}x the same instance's {before} before.",
        history="Incident 1 (2026-10-07): strata-a decoded 76.8 tok/s alone and 9.3 tok/s with both engines on CPUs"
        " 0-31; pinning (A 0-15, B 38-53) restored it.",
        wrong_guess="capacity: the experts do not fit on one card",
        check=Check(
            text="CPU affinity overlap between the engine processes and CFS throttling: pinning (not fewer workers)"
            " separates contention from capacity. A 2-3x loss smells of capacity, 10x of contention.",
            promql="max by (host, instance, other) (spyglass_host_shared_cpus) > 0",
            shell="for p in $(pgrep -f strata); do grep Cpus_allowed_list /proc/$p/status; done",
        ),
        knobs=("taskset / CPU pinning per instance (A 0-15, B 38-53)", "--pool-workers"),
        thresholds=(
            Threshold(
                name="drop_ratio",
                value=drop,
                unit="ratio",
                meaning="current mean decode rate below this share of its baseline",
            ),
        ),
        alerts=(
            Alert(
                name="EngineThroughputCollapse",
                severity="critical",
                expr=f"{DECODE_MEAN} < {num(drop)} * {DECODE_BASELINE}",
                for_="10m",
                summary=f"{INSTANCE} decodes at {num(drop)}x its own baseline or less.",
                description=f"{INSTANCE} ({LANE}) decodes {VALUE} tok/s per request, under {num(drop)}x its rate {before}"
                " before.",
                latency=True,
            ),
        ),
        probe=probe,
    )
