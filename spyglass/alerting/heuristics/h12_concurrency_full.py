"""H12: Model concurrency full (429). Incident 5."""

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
from spyglass.alerting.heuristics.promql import num, spoken


def build(d: Deployment) -> Heuristic:
    share = 0.05
    deferred_window = "5m"
    window = "10m"  # the share of 429 answers over it, and the demand the check shows
    probe = Probe(
        needs=("gateway_log",),
        alert="GatewayConcurrencyFull",
        sql=probe_sql(__name__, share=num(share)),
        summary="{rejected} of {requests} requests (lane {lane}) were answered 429: the model's concurrency was full.",
        figures=("requests", "rejected", "share"),
    )
    return Heuristic(
        words={
            "llama_server": Words(
                metrics_only="llama-server turns no request away with a 429: one with no free slot waits"
                " (spyglass_llama_requests_deferred), and EngineRequestsDeferred pages on it",
                title="Every slot busy: requests deferred",
                symptom="Requests wait for a free slot (llama-server defers them; it answers no 429) at every"
                " poll: every slot is busy.",
                check_query=Check(
                    text="Slots (-np) against demand: the deferred requests and the busy slots over the same window,"
                    " and how long each request waited for its slot.",
                    promql="max by (host, instance) (spyglass_llama_requests_deferred)",
                    sql="SELECT instance, count(*) AS requests, quantile_cont(queue_ms, 0.95) AS queue_p95_ms"
                    " FROM engine_requests WHERE queue_ms IS NOT NULL GROUP BY instance",
                ),
                knobs=("-np (slots)", "-c (context, shared by the slots)", "client retry back-off"),
            )
        },
        evidence=Evidence(
            control="hour before",
            text="Requests turned away with a 429 against the hour before.",
            this="{rejected} of {requests} requests answered 429",
            series="rejected",
        ),
        id="H12",
        title="Model concurrency full (429)",
        incident="5",
        symptom="Requests rejected with 429 because the model's concurrency limit is full.",
        wrong_guess="-",
        check=Check(
            text="Concurrency limit against demand per lane (the gateway's reject line names no lane: the store's"
            " infer rows do).",
            promql=f"sum by (host, lane) (rate(spyglass_gateway_requests_received_total[{window}]))",
            sql="SELECT lane, count(*) AS requests, count(*) FILTER (WHERE status = 429) AS rejected"
            " FROM gateway_requests GROUP BY lane ORDER BY lane",
        ),
        knobs=("the model's concurrency limit", "--slots", "client retry back-off"),
        thresholds=(
            Threshold(name="rejected_share", value=share, unit="ratio", meaning="share of requests answered 429"),
        ),
        # llama-server: spyglass_llama_requests_deferred from its /metrics (docs/llama-server.md).
        # The gateway writes its reject line with no lane and no request line before it, so the 429s are
        # exported under lane "unknown": the ratio is the gateway's, over every lane, of the requests it
        # answered (a 429 is one of them), never one lane's 429s against the same lane's requests.
        alerts=(
            Alert(
                name="GatewayConcurrencyFull",
                engines=("strata",),
                severity="warning",
                expr=f"sum without (lane) (rate(spyglass_gateway_concurrency_rejections_total[{window}]))\n"
                f"  / (sum without (lane, status) (rate(spyglass_gateway_requests_total[{window}])) > 0)"
                f" > {num(share)}",
                for_="5m",
                summary="The gateway turns requests away: model concurrency full.",
                description=f"{PERCENT} of the gateway's answers over {spoken(window)} were 429: model concurrency full.",
            ),
            # llama-server turns nobody away: a request with no free slot waits (deferred). A queue that
            # never drained over the whole window is the same condition seen from the engine.
            Alert(
                name="EngineRequestsDeferred",
                engines=("llama_server",),
                severity="warning",
                expr=f"min_over_time(spyglass_llama_requests_deferred[{deferred_window}]) > 0",
                for_="0m",
                summary=f"{INSTANCE} has had requests waiting for a free slot without a break.",
                description=f"{INSTANCE} has had at least {VALUE} request(s) waiting for a slot at"
                f" every poll for {spoken(deferred_window)}: every slot busy, concurrency full (llama-server defers, it"
                " does not answer 429).",
            ),
        ),
        probe=probe,
    )
