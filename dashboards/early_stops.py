"""Early stops: responses that stop inside reasoning or are thinking-only, the special-token
literals behind them, the serve's escapes and which serve version has the fix (H6, H7, H8)."""

from __future__ import annotations

from spyglass.alerting.heuristics import STOPS_REASONING, THINKING_ONLY, Deployment
from spyglass.dashboards.model import links
from spyglass.dashboards.panels import Q, table_panel, timeseries_panel
from spyglass.dashboards.promql import rate, s
from spyglass.dashboards.skeleton import board
from spyglass.dashboards.thresholds import above, runbook, threshold

UID = "spyglass-early-stops"
TITLE = "Spyglass / Early stops"


def build(d: Deployment):
    share = threshold(d, "H6", "thinking_only_share")
    layout = board(
        UID,
        TITLE,
        "Stops inside reasoning, thinking-only responses, special-token literals and escapes.",
        links_to=links("wall", "tokens"),
    )
    layout.row("Stops")
    layout.add(
        timeseries_panel(
            "Stops while reasoning, share of requests (1h)",
            "percentunit",
            Q(s(STOPS_REASONING), "{{instance}}"),
            width=8,
            thresholds=above(share),
            links=[runbook(d, "StopsWhileReasoning")],
        ),
        timeseries_panel(
            "Thinking-only responses, share (1h)",
            "percentunit",
            Q(s(THINKING_ONLY), "{{lane}}"),
            width=8,
            thresholds=above(share),
            links=[runbook(d, "ThinkingOnlyResponses")],
        ),
        timeseries_panel(
            "Thinking-only by special-token literals",
            "reqps",
            Q(
                rate("spyglass_infer_thinking_only_total", "lane, special_tokens"),
                "{{lane}} special tokens: {{special_tokens}}",
            ),
            width=8,
            links=[runbook(d, "ThinkingOnlyWithSpecialTokens")],
        ),
        timeseries_panel(
            "Reasoning phases ended, by cause",
            "reqps",
            Q(rate("spyglass_engine_thinking_stops_total", "instance, cause"), "{{instance}} {{cause}}"),
            Q(rate("spyglass_engine_thinking_budget_exhausted_total", "instance"), "{{instance}} budget exhausted"),
            width=8,
        ),
        timeseries_panel(
            "Stops while reasoning (serve)",
            "reqps",
            Q(rate("spyglass_serve_stops_while_reasoning_total", "instance"), "{{instance}}"),
            width=8,
        ),
        timeseries_panel(
            "Requests finished, by finish reason",
            "reqps",
            Q(rate("spyglass_engine_requests_finished_total", "instance, finish"), "{{instance}} {{finish}}"),
            Q(rate("spyglass_infer_requests_total", "lane, finish"), "{{lane}} {{finish}} (infer store)"),
            width=8,
        ),
    )
    layout.row("Special tokens and escapes")
    layout.add(
        timeseries_panel(
            "Requests with special-token literals",
            "reqps",
            Q(rate("spyglass_infer_special_token_requests_total", "lane"), "{{lane}} requests"),
            Q(rate("spyglass_infer_special_token_literals_total", "lane"), "{{lane}} literals"),
            width=8,
        ),
        timeseries_panel(
            "Escapes by the serve",
            "reqps",
            Q(rate("spyglass_serve_prompt_escape_calls_total", "instance"), "{{instance}} prompts"),
            Q(rate("spyglass_serve_prompt_escape_literals_total", "instance"), "{{instance}} literals"),
            width=8,
        ),
        table_panel(
            "Serve version and escape fix",
            "none",
            Q(f"max by (host, instance, serve_version, build) ({s('spyglass_serve_info')})"),
            Q(f"max by (host, instance) ({s('spyglass_serve_measures_escapes')})"),
            width=8,
            links=[runbook(d, "ServeBuildSkew")],
            description="measures_escapes 0: this serve build has no escape fix.",
        ),
        timeseries_panel(
            "Plan, then stop; invalid tool arguments",
            "reqps",
            Q(rate("spyglass_infer_plan_then_stop_total", "lane"), "{{lane}} plan then stop"),
            Q(rate("spyglass_infer_invalid_tool_arguments_total", "lane"), "{{lane}} invalid tool JSON"),
            Q(rate("spyglass_engine_tool_calls_total", "instance"), "{{instance}} tool calls"),
            width=12,
            links=[runbook(d, "PlanThenStop")],
        ),
        timeseries_panel(
            "Reasoning tokens",
            "suffix: tok/s",
            Q(rate("spyglass_engine_thinking_tokens_total", "instance"), "{{instance}}"),
            width=12,
        ),
    )
    return layout.board
