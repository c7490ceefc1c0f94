"""H6: Responses that stop inside reasoning or are thinking-only. Incident 3 (special-token early stop, 2026-10-17)."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import (
    INSTANCE,
    LANE,
    PERCENT,
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
from spyglass.alerting.heuristics.promql import HOURLY, STOPS_REASONING, THINKING_ONLY, last, num, ratio, spoken

# Incident 3's decisive comparison, per lane over an hour: thinking-only among the prompts with special-token
# literals against among those without (16 of 58 against 0 of 295).
LITERALS = 'spyglass_infer_thinking_only_total{special_tokens="yes"}'
PLAIN = 'spyglass_infer_thinking_only_total{special_tokens="no"}'
WITH_LITERALS = "spyglass_infer_special_token_requests_total"
BODIES = "spyglass_infer_bodies_total"


def _split(share: float, factor: float, least: float) -> str:
    """Thinking-only with literals over `share`, on at least `least` such prompts in the hour, and over
    `factor` times the share without literals (which has no series at all when none was thinking-only)."""
    by = "host, lane"
    with_share = ratio(f"rate({LITERALS}[{HOURLY}])", f"rate({WITH_LITERALS}[{HOURLY}])", by)
    without_share = (
        f"sum by ({by}) (rate({PLAIN}[{HOURLY}]))\n"
        f"  / ((sum by ({by}) (rate({BODIES}[{HOURLY}])) - sum by ({by}) (rate({WITH_LITERALS}[{HOURLY}]))) > 0)"
    )
    return (
        f"({with_share}) > {num(share)}\n"
        f"  and on ({by}) sum by ({by}) (increase({WITH_LITERALS}[{HOURLY}])) >= {num(least)}\n"
        f"  unless on ({by}) ({num(factor)} * {without_share}\n  >= on ({by}) {with_share})"
    )


SERVE_ONLY = (
    "it reads the Strata serve's infer store (its request and response records); llama-server has no serve layer"
)


def build(d: Deployment) -> Heuristic:
    share, factor, least = 0.05, 5.0, 10.0

    def counts(prefix: str, condition: str) -> str:
        return (
            f"count(*) FILTER (WHERE {condition}) AS {prefix}_requests,"
            f" count(*) FILTER (WHERE {condition} AND thinking_only) AS {prefix}_thinking_only,\n"
            f"  count(*) FILTER (WHERE {condition} AND invalid_tool_json > 0) AS {prefix}_broken_tool_json,"
            f" count(*) FILTER (WHERE {condition} AND coalesce(body_content_chars, content_chars) > 0)"
            f" AS {prefix}_visible_content"
        )

    # Beyond the metric: the share among prompts with special-token literals (the 58 / 295 split).
    probe = Probe(
        needs=("infer_store",),
        alert="ThinkingOnlyResponses",
        sql=probe_sql(__name__, share=num(share), least=num(least), factor=num(factor)),
        summary="On lane {lane}, {with_literals_thinking_only} of {with_literals_requests} responses to prompts with"
        " special-token literals were thinking-only, against {without_literals_thinking_only} of"
        " {without_literals_requests} without; visible text {with_literals_visible_content} against"
        " {without_literals_visible_content}.",
        figures=tuple(
            f"{p}_{c}"
            for p in ("with_literals", "without_literals")
            for c in ("requests", "thinking_only", "broken_tool_json", "visible_content")
        )
        + ("thinking_only", "requests"),
    )
    return Heuristic(
        words={"llama_server": Words(not_applicable=SERVE_ONLY)},
        evidence=Evidence(
            control="control group",
            text="Same lane, same window: thinking-only among prompts with special-token literals against among those without.",
            this="{with_literals_thinking_only} of {with_literals_requests} with literals thinking-only",
            other="{without_literals_thinking_only} of {without_literals_requests} without literals",
            series="thinking_only",
        ),
        id="H6",
        title="Responses that stop inside reasoning or are thinking-only",
        incident="3 (special-token early stop, 2026-10-17)",
        symptom="A share of responses have reasoning but no visible text and no tool call, or stopped while reasoning.",
        wrong_guess="long context breaks it",
        history="Incident 3 (2026-10-17): 16 of 58 requests with special-token literals were thinking-only, 0 of 295"
        " without; the lane's share, 16 of 353 (4.5%), hid it. The normal lane got the fix only on 10-19.",
        check=Check(
            text="Same day, same lane: thinking-only among requests with special-token literals against"
            " among those without.",
            sql="SELECT lane, special_literals > 0 AS special_tokens,"
            " count(*) AS requests, count(*) FILTER (thinking_only) AS thinking_only"
            " FROM events_infer_store WHERE kind = 'request_body' GROUP BY ALL ORDER BY ALL",
        ),
        knobs=("the serve's prompt_escapes fix", "lane routing to a fixed serve build"),
        thresholds=(
            Threshold(
                name="thinking_only_share",
                value=share,
                unit="ratio",
                meaning="share of responses that are thinking-only",
            ),
            Threshold(
                name="literals_factor",
                value=factor,
                unit="ratio",
                meaning="thinking-only share with special-token literals above this times the share without",
            ),
            Threshold(
                name="min_literal_prompts",
                value=least,
                unit="prompts/h",
                meaning=f"at least this many prompts with literals in {spoken(HOURLY)}",
            ),
        ),
        alerts=(
            Alert(
                name="ThinkingOnlyWithSpecialTokens",
                severity="critical",
                expr=_split(share, factor, least),
                for_="5m",
                summary=f"Lane {LANE} answers prompts with special-token literals with reasoning only.",
                description=f"{PERCENT} of lane {LANE}'s responses to prompts with special-token literals in {last(HOURLY)}"
                f" were thinking-only, over {num(share)} and over {num(factor)}x the share among prompts without literals:"
                " the serve does not escape them.",
            ),
            Alert(
                name="ThinkingOnlyResponses",
                severity="warning",
                expr=f"{THINKING_ONLY} > {num(share)}",
                for_="15m",
                summary=f"Lane {LANE} answers with reasoning only.",
                description=f"{PERCENT} of lane {LANE}'s responses in {last(HOURLY)} had reasoning but no text and no tool call.",
            ),
            Alert(
                name="StopsWhileReasoning",
                severity="warning",
                expr=f"{STOPS_REASONING} > {num(share)}",
                for_="15m",
                summary=f"{INSTANCE} stops responses inside reasoning.",
                description=f"{PERCENT} of {INSTANCE}'s responses in {last(HOURLY)} stopped while reasoning.",
            ),
        ),
        diagnosis="Which requests carried special-token literals, with their visible text and tool-call JSON, needs"
        " the sent prompts: request_body events.",
        probe=probe,
    )
