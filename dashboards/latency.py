"""Latency: TTFT and request-duration heatmaps with exemplars to the trace store, quantiles per lane,
the prefill queue, prefill read time and decode rate (H5, H1, H18)."""

from __future__ import annotations

from spyglass.alerting.heuristics import DECODE_BASELINE, DECODE_MEAN, SLO_ERRORS, TTFT, Deployment
from spyglass.dashboards.model import links
from spyglass.dashboards.panels import Q, heatmap_panel, timeseries_panel
from spyglass.dashboards.promql import quantile, rate, s
from spyglass.dashboards.skeleton import board
from spyglass.dashboards.thresholds import above, runbook, threshold

UID = "spyglass-latency"
TITLE = "Spyglass / Latency"


def build(d: Deployment):
    layout = board(
        UID,
        TITLE,
        "Time to first token, queueing, prefill and decode; exemplars link to traces.",
        links_to=links("wall", "cache", "cpu"),
    )
    layout.row("Time to first token")
    layout.add(
        heatmap_panel(
            "Engine TTFT (from its slot: the engine's prefill)",
            "s",
            Q(f"sum by (le) (rate({s(f'{TTFT}_bucket')}[$__rate_interval]))", exemplar=True),
            width=12,
        ),
        heatmap_panel(
            "Gateway TTFT",
            "s",
            Q(f"sum by (le) (rate({s('spyglass_gateway_ttft_seconds_bucket')}[$__rate_interval]))", exemplar=True),
            width=12,
        ),
    )
    lanes = max((threshold(d, "H5", f"ttft_seconds.{lane}") for lane in d.lanes), default=40.0)
    layout.add(
        timeseries_panel(
            "Engine TTFT quantiles (5m)",
            "s",
            *[Q(s(f"instance_lane:{TTFT}:p{q}_rate5m"), f"{{{{instance}}}} p{q}") for q in (50, 95, 99)],
            width=8,
            thresholds=above(lanes),
            links=[runbook(d, "EngineTTFTSpike"), runbook(d, "EngineRegressionAfterRestart")],
        ),
        timeseries_panel(
            "TTFT SLO errors (share late), 5m and 1h",
            "percentunit",
            Q(s(f"{SLO_ERRORS}5m"), "{{instance}} {{lane}} 5m"),
            Q(s(f"{SLO_ERRORS}1h"), "{{instance}} {{lane}} 1h"),
            width=8,
            links=[runbook(d, "EngineTTFTBudgetFastBurn"), runbook(d, "EngineTTFTBudgetSlowBurn")],
        ),
        timeseries_panel(
            "Gateway TTFT and request duration p95",
            "s",
            Q(quantile(0.95, "spyglass_gateway_ttft_seconds", "lane"), "{{lane}} TTFT", exemplar=True),
            Q(quantile(0.95, "spyglass_gateway_request_duration_seconds", "lane"), "{{lane}} duration", exemplar=True),
            width=8,
        ),
        heatmap_panel(
            "Gateway request duration",
            "s",
            Q(
                f"sum by (le) (rate({s('spyglass_gateway_request_duration_seconds_bucket')}[$__rate_interval]))",
                exemplar=True,
            ),
            width=24,
        ),
    )
    layout.row("Queue and prefill")
    layout.add(
        timeseries_panel(
            "The client's wait for its first token p95: queue + engine prefill",
            "s",
            Q(
                quantile(0.95, "spyglass_engine_client_wait_seconds", "instance"),
                "{{instance}} client wait",
                exemplar=True,
            ),
            Q(quantile(0.95, "spyglass_engine_queue_wait_seconds", "instance"), "{{instance}} wait for a slot"),
            Q(quantile(0.95, TTFT, "instance"), "{{instance}} engine prefill (engine TTFT)"),
            width=12,
        ),
        timeseries_panel(
            "Requests waiting for a slot (llama-server, polled each second)",
            "short",
            Q(rate("spyglass_llama_queue_seconds_total", "instance"), "{{instance}} share of time with a queue"),
            Q(rate("spyglass_llama_queued_request_seconds_total", "instance"), "{{instance}} mean requests waiting"),
            width=12,
            links=[runbook(d, "EngineRequestsDeferred")],
        ),
    )
    layout.add(
        heatmap_panel(
            "Prefill read time",
            "s",
            f"sum by (le) (rate({s('spyglass_engine_prefill_read_seconds_bucket')}[$__rate_interval]))",
            width=8,
        ),
        timeseries_panel(
            "Prefill queue depth",
            "short",
            Q(f"max by (host, instance) ({s('spyglass_engine_prefill_queue_depth')})", "{{instance}} engine"),
            Q(f"max by (host, instance) ({s('spyglass_serve_prefill_queue_depth')})", "{{instance}} serve"),
            width=8,
        ),
        timeseries_panel(
            "Slots busy of slots",
            "short",
            Q(f"max by (host, instance) ({s('spyglass_engine_slots_busy')})", "{{instance}} busy (engine)"),
            Q(f"max by (host, instance) ({s('spyglass_engine_slots')})", "{{instance}} slots (engine)"),
            Q(f"max by (host, instance) ({s('spyglass_serve_slots_busy')})", "{{instance}} busy (serve)"),
            Q(f"max by (host, instance) ({s('spyglass_serve_slots')})", "{{instance}} slots (serve)"),
            width=8,
        ),
        heatmap_panel(
            "Prompt length",
            "short",
            f"sum by (le) (rate({s('spyglass_engine_request_prompt_tokens_bucket')}[$__rate_interval]))",
            width=12,
        ),
        timeseries_panel(
            "Prefill read p95",
            "s",
            Q(quantile(0.95, "spyglass_engine_prefill_read_seconds", "instance"), "{{instance}}"),
            width=12,
        ),
    )
    layout.row("How requests end, and the KV cache")
    layout.add(
        timeseries_panel(
            "Requests ended, by outcome (a minute)",
            "short",
            Q(
                f"60 * {rate('spyglass_engine_request_outcomes_total', 'instance, outcome')}",
                "{{instance}} {{outcome}}",
            ),
            width=12,
            links=[runbook(d, "EngineRequestsFailing")],
        ),
        timeseries_panel(
            "KV cache full: splits, refusals, shifts (a minute)",
            "short",
            Q(f"60 * {rate('spyglass_engine_kv_pressure_events_total', 'instance, event')}", "{{instance}} {{event}}"),
            width=12,
            links=[runbook(d, "EngineKVCacheFull")],
        ),
    )
    layout.row("Decode")
    drop = threshold(d, "H1", "drop_ratio")
    layout.add(
        timeseries_panel(
            "Decode rate per request against its baseline",
            "suffix: tok/s",
            Q(s(DECODE_MEAN), "{{instance}} now"),
            Q(f"max by (host, instance, lane) ({s(DECODE_BASELINE)})", "{{instance}} baseline"),
            Q(f"{drop:g} * max by (host, instance, lane) ({s(DECODE_BASELINE)})", "{{instance}} collapse line"),
            width=8,
            links=[runbook(d, "EngineThroughputCollapse")],
        ),
        timeseries_panel(
            "Engine-wide decode rate (stats line)",
            "suffix: tok/s",
            Q(f"max by (host, instance) ({s('spyglass_engine_decode_tokens_per_second')})", "{{instance}}"),
            width=8,
        ),
        heatmap_panel(
            "Decode rate of finished requests",
            "suffix: tok/s",
            f"sum by (le) (rate({s('spyglass_engine_request_decode_tokens_per_second_bucket')}[$__rate_interval]))",
            width=8,
        ),
        timeseries_panel(
            "Completion tokens",
            "suffix: tok/s",
            Q(rate("spyglass_engine_completion_tokens_total", "instance"), "{{instance}}"),
            width=24,
        ),
    )
    return layout.board
