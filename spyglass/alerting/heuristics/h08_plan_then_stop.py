"""H8: Plan, then end of turn. Incident 4, 5 (session bd7e62ed)."""

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
from spyglass.alerting.heuristics.promql import HOURLY, last, num, spoken, sql_interval

SERVE_ONLY = (
    "it reads the Strata serve's infer store (its request and response records); llama-server has no serve layer"
)


def build(d: Deployment) -> Heuristic:
    least = 3.0
    probe = Probe(
        needs=("infer_store",),
        alert="PlanThenStop",
        sql=probe_sql(__name__, least=num(least), hourly=sql_interval(HOURLY)),
        summary="{plan_then_stop} responses on lane {lane} ({sessions} sessions) ended the turn after a short plan, tools"
        " offered and none called (up to {most_in_an_hour} in an hour); the first, {trace_request_id}, with"
        " {content_chars} characters of text. Completions of {least_completion} to {most_completion} tokens against"
        " max_tokens {max_tokens}: not truncation.",
        figures=(
            "plan_then_stop",
            "sessions",
            "most_in_an_hour",
            "content_chars",
            "least_completion",
            "most_completion",
            "max_tokens",
        ),
    )
    return Heuristic(
        words={"llama_server": Words(not_applicable=SERVE_ONLY)},
        evidence=Evidence(
            control="hour before",
            text="Turns ended after a plan against the hour before.",
            this="{plan_then_stop} responses in {sessions} sessions ended after a plan",
            series="requests",
        ),
        id="H8",
        title="Plan, then end of turn",
        incident="4, 5 (session bd7e62ed)",
        symptom="Responses with finish=stop, no tool call and a short visible text, on requests that offered tools.",
        wrong_guess="truncation / max_tokens",
        check=Check(
            text="The raw record: prompt grew, finish_reason, tool_calls, completion far below max_tokens.",
            sql="SELECT ts, request_id, finish, tool_calls, content_chars FROM events_infer_store"
            " WHERE kind = 'request_body' AND plan_then_stop ORDER BY ts DESC LIMIT 20",
        ),
        knobs=("the client's stop handling", "the model's tool-call prompt template"),
        thresholds=(
            Threshold(
                name="per_hour",
                value=least,
                unit="responses/h",
                meaning=f"plan-then-stop responses in {spoken(HOURLY)}",
            ),
        ),
        alerts=(
            Alert(
                name="PlanThenStop",
                severity="warning",
                expr=f"sum by (host, lane) (increase(spyglass_infer_plan_then_stop_total[{HOURLY}])) >= {num(least)}",
                for_="5m",
                summary=f"Lane {LANE} ends turns after a plan, without the tool call.",
                description=f"{VALUE} responses on lane {LANE} in {last(HOURLY)} stopped with a short text and no tool call although"
                " tools were offered.",
            ),
        ),
        diagnosis="Whether the prompt grew across the session's turns needs the session's request bodies.",
        probe=probe,
    )
