"""H17: Memory growth toward the limit. Incident upgrade."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import BYTES, INSTANCE, Alert, Check, Deployment, Heuristic, Threshold, Words
from spyglass.alerting.heuristics.promql import num


def build(d: Deployment) -> Heuristic:
    limit, horizon = d.settings.memory_limit_bytes, 4 * 3600
    return Heuristic(
        words={
            "llama_server": Words(
                knobs=(
                    "--cache-ram (the host prompt cache grows up to it)",
                    "-c and -np (the KV cache)",
                    "alerts.memory_limit_bytes",
                )
            )
        },
        id="H17",
        title="Memory growth toward the limit",
        incident="upgrade",
        symptom="Resident memory of an engine rising toward the limit.",
        wrong_guess="-",
        check=Check(
            text="Time to the limit by linear prediction.",
            promql=f"predict_linear(spyglass_host_process_resident_bytes[1h], {horizon})",
        ),
        knobs=("the preprocessing cache", "log buffers", "alerts.memory_limit_bytes"),
        thresholds=(
            Threshold(
                name="memory_limit_bytes",
                value=limit,
                unit="bytes",
                meaning="the limit",
                setting="alerts.memory_limit_bytes",
            ),
            Threshold(name="horizon_seconds", value=horizon, unit="s", meaning="how far ahead the prediction looks"),
        ),
        alerts=(
            Alert(
                name="EngineMemoryGrowth",
                severity="warning",
                expr=f"predict_linear(spyglass_host_process_resident_bytes[1h], {horizon}) > {num(limit)}",
                for_="15m",
                summary=f"{INSTANCE}'s memory will reach the limit within {num(horizon / 3600)} hours.",
                description=f"{INSTANCE}'s resident memory is on course for {BYTES} in {num(horizon / 3600)} hours"
                f" (limit {num(limit)} bytes).",
            ),
        ),
    )
