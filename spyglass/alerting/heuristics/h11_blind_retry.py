"""H11: Blind retry after an overfit 400. Incident 6 (three 400s at 14:14:58, 14:15:04, 14:15:10)."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import (
    LANE,
    VALUE,
    Alert,
    Check,
    Deployment,
    Evidence,
    Heuristic,
    Probe,
    Words,
    probe_sql,
)
from spyglass.alerting.heuristics.promql import spoken

GATEWAY_ONLY = "it reads the Strata stack's RAG gateway log (its token estimate and relay); llama-server has no gateway"


def build(d: Deployment) -> Heuristic:
    window = "15m"  # retries counted over it
    probe = Probe(
        needs=("gateway_log",),
        alert="GatewayBlindRetries",
        sql=probe_sql(__name__),
        summary="{blind_retries} requests on lane {lane} were retried after a 400 overfit with only max_tokens clamped; the"
        " relay said {relayed_prompt_tokens:,} > {relayed_window:,}, the engine {engine_prompt_tokens:,} >"
        " {engine_window:,}.",
        figures=(
            "blind_retries",
            "overfits",
            "relayed_prompt_tokens",
            "relayed_window",
            "engine_prompt_tokens",
            "engine_window",
        ),
    )
    return Heuristic(
        words={"llama_server": Words(not_applicable=GATEWAY_ONLY)},
        evidence=Evidence(
            control="other instance",
            text="What the gateway relayed against what the engine answered for the same requests.",
            this="the gateway relayed {relayed_prompt_tokens} prompt tokens for a window of {relayed_window}",
            other="the engine counted {engine_prompt_tokens} against its window of {engine_window}",
            series="rejected",
        ),
        id="H11",
        title="Blind retry after an overfit 400",
        incident="6 (three 400s at 14:14:58, 14:15:04, 14:15:10)",
        symptom="A retry after a 400 that only clamps max_tokens; bursts of 400 overfit.",
        wrong_guess="-",
        check=Check(
            text="The 400's own text and the precheck.",
            sql="SELECT ts, request_id, prompt, upstream FROM events_gateway_log"
            " WHERE kind IN ('overfit', 'retry_on_overfit') ORDER BY ts",
        ),
        knobs=("the gateway's precheck with the engine's count", "shrink the prompt, not max_tokens"),
        thresholds=(),
        alerts=(
            Alert(
                name="GatewayBlindRetries",
                severity="warning",
                expr=f"sum by (host, lane) (increase(spyglass_gateway_blind_retries_total[{window}])) > 0",
                for_="0m",
                summary=f"The gateway retries overfits on lane {LANE} blindly.",
                description=f"{VALUE} retries on lane {LANE} in {spoken(window)} followed a 400 overfit and only clamped max_tokens.",
            ),
        ),
        probe=probe,
    )
