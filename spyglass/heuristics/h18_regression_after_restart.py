"""H18: Regression against the baseline after a change. Incident upgrade (no errors, so fine)."""
from __future__ import annotations

from spyglass.heuristics.model import INSTANCE, LANE, SECONDS, Alert, Check, Deployment, Heuristic, Probe, Threshold, probe_sql
from spyglass.heuristics.promql import TTFT, num, ttft_quantile


def build(d: Deployment) -> Heuristic:
    factor = 2.0
    baseline = ttft_quantile(0.5, "1h", "1d")
    least = 20  # requests on each side of the restart: fewer is no steady state
    # The alert has only yesterday's same hour; the stored window has the steady state before the restart.
    probe = Probe(needs=("engine_log",), alert="EngineRegressionAfterRestart",
        sql=probe_sql(__file__, factor=num(factor), least=least),
        summary="Median TTFT on {instance} (lane {lane}) since its start at {started_utc} is {after_p50_ms:g} ms, {ratio:g}x"
        " the {before_p50_ms:g} ms of the steady state before it (start {before_started_utc}); p99 {before_p99_ms:g} ->"
        " {after_p99_ms:g} ms over {before_requests} and {after_requests} requests.",
        figures=("before_p50_ms", "after_p50_ms", "before_p99_ms", "after_p99_ms", "ratio", "before_requests",
                 "after_requests"))
    return Heuristic(
        id="H18", title="Regression against the baseline after a change", incident="upgrade (no errors, so fine)",
        symptom="After an engine restart (a build or model change), median TTFT is worse than the same hour a day before.",
        wrong_guess="no errors, so it is fine",
        check=Check(text="The baseline snapshot itself: the same quantile a day before.",
              promql=f"instance_lane:{TTFT}:p50_rate1h / {baseline}"),
        knobs=("roll back the build; compare builds on the same traffic",),
        thresholds=(Threshold(name="factor", value=factor, unit="ratio", meaning="median TTFT above this times the day-before"
                              " median (alert) or the steady state before the restart (diagnosis)"),
                    Threshold(name="least_requests", value=least, unit="requests",
                              meaning="requests on each side of a restart the diagnosis compares"),),
        alerts=(Alert(name="EngineRegressionAfterRestart", severity="warning",
               expr=f"instance_lane:{TTFT}:p50_rate1h > {num(factor)} * {baseline}\n"
               "  and on (host, instance, lane) changes(spyglass_engine_start_time_seconds[6h]) > 0", for_="30m",
               summary=f"{INSTANCE} got slower after its restart.",
               description=f"Median TTFT on {INSTANCE} ({LANE}) is {SECONDS} over the last hour, over {num(factor)}x the same"
               " hour yesterday, since a restart in the last 6 hours.", latency=True),),
        diagnosis="Throughput, p99, queue, rebuilds and memory against the previous steady state need the store's"
                  " history: `spyglass baseline --instance X [--deploy N]`.",
        probe=probe)
