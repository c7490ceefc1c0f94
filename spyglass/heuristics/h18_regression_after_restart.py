"""H18: Regression against the baseline after a change. Incident upgrade (no errors, so fine)."""
from __future__ import annotations

from spyglass.heuristics.model import INSTANCE, LANE, SECONDS, Alert, Check, Deployment, Heuristic, Threshold
from spyglass.heuristics.promql import TTFT, num, ttft_quantile


def build(d: Deployment) -> Heuristic:
    factor = 2.0
    baseline = ttft_quantile(0.5, "1h", "1d")
    return Heuristic(
        id="H18", title="Regression against the baseline after a change", incident="upgrade (no errors, so fine)",
        symptom="After an engine restart (a build or model change), median TTFT is worse than the same hour a day before.",
        wrong_guess="no errors, so it is fine",
        check=Check(text="The baseline snapshot itself: the same quantile a day before.",
              promql=f"instance_lane:{TTFT}:p50_rate1h / {baseline}"),
        knobs=("roll back the build; compare builds on the same traffic",),
        thresholds=(Threshold(name="factor", value=factor, unit="ratio", meaning="median TTFT above this times the day-before median"),),
        alerts=(Alert(name="EngineRegressionAfterRestart", severity="warning",
               expr=f"instance_lane:{TTFT}:p50_rate1h > {num(factor)} * {baseline}\n"
               "  and on (host, instance, lane) changes(spyglass_engine_start_time_seconds[6h]) > 0", for_="30m",
               summary=f"{INSTANCE} got slower after its restart.",
               description=f"Median TTFT on {INSTANCE} ({LANE}) is {SECONDS} over the last hour, over {num(factor)}x the same"
               " hour yesterday, since a restart in the last 6 hours.", latency=True),),
        diagnosis="Throughput, p99, queue, rebuilds and memory against the previous steady state need the store's"
                  " history: `spyglass baseline --instance X [--deploy N]`.")
