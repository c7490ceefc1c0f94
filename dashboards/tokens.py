"""Token accounting: each layer's count of the same prompt, the gateway's estimate ratio, overfits,
blind retries, 429s, clamps, and what RAG assembly dropped (H9-H12)."""

from __future__ import annotations

from spyglass.alerting.heuristics import ESTIMATE_RATIO, Deployment
from spyglass.dashboards.model import links
from spyglass.dashboards.panels import Q, heatmap_panel, timeseries_panel
from spyglass.dashboards.promql import rate, s
from spyglass.dashboards.skeleton import board
from spyglass.dashboards.thresholds import GREEN, RED, runbook, steps, threshold

UID = "spyglass-tokens"
TITLE = "Spyglass / Token accounting"


def build(d: Deployment):
    low, high = threshold(d, "H10", "ratio_low"), threshold(d, "H10", "ratio_high")
    layout = board(
        UID,
        TITLE,
        "Who counted which tokens, what the gateway refused, retried and dropped.",
        links_to=links("wall", "early_stops"),
    )
    layout.row("Counts")
    layout.add(
        timeseries_panel(
            "Prompt tokens, by the layer that counted them",
            "suffix: tok/s",
            Q(rate("spyglass_gateway_prompt_tokens_total", "lane, counted_by"), "{{lane}} {{counted_by}}"),
            Q(rate("spyglass_engine_prompt_tokens_total", "instance"), "{{instance}} engine log"),
            width=8,
        ),
        timeseries_panel(
            "Gateway estimate / engine count (1h)",
            "x",
            Q(s(ESTIMATE_RATIO), "{{lane}}"),
            width=8,
            thresholds=steps((low, GREEN), (high, RED), base=RED),
            min_=None,
            links=[runbook(d, "GatewayEstimateSkew")],
        ),
        heatmap_panel(
            "Estimate ratio per request",
            "x",
            f"sum by (le) (rate({s('spyglass_gateway_estimate_ratio_bucket')}[$__rate_interval]))",
            width=8,
        ),
    )
    layout.row("Refusals and retries")
    layout.add(
        timeseries_panel(
            "Overfits, blind retries, clamps",
            "reqps",
            Q(rate("spyglass_gateway_overfits_total", "lane"), "{{lane}} overfit 400"),
            Q(rate("spyglass_gateway_blind_retries_total", "lane"), "{{lane}} blind retry"),
            Q(rate("spyglass_gateway_clamps_total", "lane"), "{{lane}} clamp"),
            width=8,
            links=[runbook(d, "GatewayBlindRetries")],
        ),
        timeseries_panel(
            "429: model concurrency full",
            "reqps",
            Q(rate("spyglass_gateway_concurrency_rejections_total", "lane"), "{{lane}}"),
            width=8,
            links=[runbook(d, "GatewayConcurrencyFull"), runbook(d, "EngineRequestsDeferred")],
        ),
        timeseries_panel(
            "Engine refusals, by status",
            "reqps",
            Q(rate("spyglass_engine_rejections_total", "instance, status"), "{{instance}} {{status}}"),
            width=8,
        ),
        timeseries_panel(
            "Gateway answers, by status",
            "reqps",
            Q(rate("spyglass_gateway_requests_total", "lane, status"), "{{lane}} {{status}}"),
            width=8,
            stack=True,
        ),
        timeseries_panel(
            "Requests received, by lane and mode",
            "reqps",
            Q(rate("spyglass_gateway_requests_received_total", "lane, mode"), "{{lane}} {{mode}}"),
            width=8,
            stack=True,
        ),
        timeseries_panel(
            "Serve answers, by status",
            "reqps",
            Q(rate("spyglass_serve_requests_total", "instance, status"), "{{instance}} {{status}}"),
            width=8,
        ),
    )
    layout.row("Assembly")
    layout.add(
        heatmap_panel(
            "Client messages dropped by assembly",
            "short",
            f"sum by (le) (rate({s('spyglass_gateway_assembly_dropped_messages_bucket')}[$__rate_interval]))",
            width=12,
        ),
        timeseries_panel(
            "Most messages dropped; task anchor lost",
            "reqps",
            Q(rate("spyglass_gateway_assembly_dropped_most_total", "lane"), "{{lane}} dropped most"),
            Q(rate("spyglass_infer_anchor_lost_total", "lane"), "{{lane}} anchor lost"),
            Q(rate("spyglass_infer_bodies_total", "lane"), "{{lane}} bodies read"),
            width=12,
            links=[runbook(d, "AssemblyLostTaskAnchor")],
        ),
    )
    return layout.board
