"""H10: Gateway token estimate far from the engine's count. Incident 6 (four counts: 516,561 estimated, 154,796 counted)."""

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
    Threshold,
    Words,
    probe_sql,
)
from spyglass.alerting.heuristics.promql import ESTIMATE_RATIO, num

GATEWAY_ONLY = "it reads the Strata stack's RAG gateway log (its token estimate and relay); llama-server has no gateway"


def build(d: Deployment) -> Heuristic:
    high, low = 2.0, 0.5
    probe = Probe(
        needs=("gateway_log",),
        alert="GatewayEstimateSkew",
        sql=probe_sql(__name__, high=num(high), low=num(low)),
        summary="On lane {lane} the gateway estimated {estimated_tokens:,} tokens for {characters:,} characters that the"
        " engine counted as {engine_tokens:,}: {ratio:g}x ({requests} requests). The worst request: {worst_characters:,}"
        " characters, {worst_estimated_tokens:,} estimated against {worst_engine_tokens:,} counted, {worst_ratio:g}x.",
        figures=(
            "requests",
            "characters",
            "engine_tokens",
            "estimated_tokens",
            "ratio",
            "worst_characters",
            "worst_engine_tokens",
            "worst_estimated_tokens",
            "worst_ratio",
        ),
    )
    return Heuristic(
        words={"llama_server": Words(not_applicable=GATEWAY_ONLY)},
        evidence=Evidence(
            control="control group",
            text="The gateway's estimate against the engine's count of the same requests.",
            this="{estimated_tokens:,} tokens estimated by the gateway",
            other="{engine_tokens:,} tokens counted by the engine",
            series="requests",
        ),
        id="H10",
        title="Gateway token estimate far from the engine's count",
        incident="6 (four counts: 516,561 estimated, 154,796 counted)",
        symptom="Gateway estimate / engine count of the same prompts far from 1 (English runs about 3.3x).",
        wrong_guess="the relay miscounts",
        check=Check(
            text="Every count names who counted; the engine count is the authority.",
            promql=ESTIMATE_RATIO,
            sql="SELECT request_id, chars, est_tokens AS estimated, count_tokens AS counted"
            " FROM events_gateway_log WHERE kind IN"
            " ('request', 'precheck') ORDER BY ts DESC LIMIT 20",
        ),
        knobs=("the gateway's per-script token ratios (CJK 1.05 / other 0.70)", "use the engine's count_tokens"),
        thresholds=(
            Threshold(name="ratio_high", value=high, unit="ratio", meaning="estimate above this times the count"),
            Threshold(name="ratio_low", value=low, unit="ratio", meaning="estimate below this times the count"),
        ),
        alerts=(
            Alert(
                name="GatewayEstimateSkew",
                severity="warning",
                expr=f"{ESTIMATE_RATIO} > {num(high)} or {ESTIMATE_RATIO} < {num(low)}",
                for_="30m",
                summary=f"The gateway's token estimate on lane {LANE} is far from the engine's count.",
                description=f"On lane {LANE} the gateway estimates {VALUE}x the tokens the engine counts for the same prompts.",
            ),
        ),
        probe=probe,
    )
