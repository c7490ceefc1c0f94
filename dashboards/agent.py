"""spyglass itself: lines by outcome, lag, polls, the store, the trace receiver, and every kind of
value it refused (H19)."""

from __future__ import annotations

from spyglass.alerting.heuristics import LOG_SILENCE, Deployment
from spyglass.dashboards.model import links
from spyglass.dashboards.panels import Q, stat_panel, table_panel, timeseries_panel
from spyglass.dashboards.promql import rate, s
from spyglass.dashboards.skeleton import board
from spyglass.dashboards.thresholds import GREEN, RED, above, runbook, steps, threshold

UID = "spyglass-agent"
TITLE = "Spyglass / spyglass itself"

UNREADABLE = '~"unmatched|unprefixed"'  # lines of no known shape or pattern: SpyglassSourceUnreadable


def build(d: Deployment):
    layout = board(
        UID,
        TITLE,
        "The agent's own health: is what the other dashboards show complete and current?",
        links_to=links("wall"),
    )
    unmatched = threshold(d, "H19", "unmatched_share")
    layout.row("Sources")
    layout.add(
        stat_panel(
            "Scrape of spyglass",
            "none",
            Q(f"max by (host, instance, job) ({s('up', job=d.settings.job)})", "{{instance}}"),
            width=4,
            height=6,
            thresholds=steps((1, GREEN), base=RED),
            mappings={"1": ("up", GREEN), "0": ("DOWN", RED)},
            no_value="DOWN",
            links=[runbook(d, "SpyglassTargetDown")],
        ),
        stat_panel(
            "Sources up",
            "none",
            Q(f"max by (host, source) ({s('spyglass_source_up')})", "{{source}}"),
            width=10,
            height=6,
            thresholds=steps((1, GREEN), base=RED),
            mappings={"1": ("up", GREEN), "0": ("DOWN", RED)},
            links=[runbook(d, "SpyglassSourceDown")],
        ),
        timeseries_panel(
            "Engine log silence",
            "s",
            Q(s(LOG_SILENCE), "{{instance}}"),
            width=10,
            height=6,
            thresholds=above(threshold(d, "H19", "silent_seconds")),
            links=[runbook(d, "SpyglassSourceSilent")],
        ),
        timeseries_panel(
            "Lines, by outcome",
            "short",
            Q(rate("spyglass_source_lines_total", "source, outcome"), "{{source}} {{outcome}}"),
            width=8,
        ),
        timeseries_panel(
            "Unmatched and unreadable share of lines (format drift)",
            "percentunit",
            Q(
                f"{rate('spyglass_source_lines_total', 'source', outcome='unmatched')}"
                f" / ({rate('spyglass_source_lines_total', 'source')} > 0)",
                "{{source}} unmatched",
            ),
            Q(
                f"{rate('spyglass_source_lines_total', 'source', outcome=UNREADABLE)}"
                f" / ({rate('spyglass_source_lines_total', 'source')} > 0)",
                "{{source}} unreadable",
            ),
            width=8,
            thresholds=above(unmatched),
            links=[runbook(d, "SpyglassUnparsedLines"), runbook(d, "SpyglassSourceUnreadable")],
        ),
        timeseries_panel(
            "Lag: bytes written not yet read",
            "bytes",
            Q(f"max by (host, source) ({s('spyglass_source_lag_bytes')})", "{{source}}"),
            width=8,
        ),
        timeseries_panel(
            "Newest event against the clock",
            "s",
            Q(f"max by (host, source) ({s('spyglass_source_last_event_timestamp_seconds')}) - time()", "{{source}}"),
            width=8,
            min_=None,
            thresholds=above(threshold(d, "H19", "ahead_seconds")),
            links=[runbook(d, "SpyglassSourceClockAhead")],
        ),
        timeseries_panel(
            "Polls, by result",
            "reqps",
            Q(rate("spyglass_source_polls_total", "source, result"), "{{source}} {{result}}"),
            Q(rate("spyglass_serve_poll_errors_total", "instance, error"), "{{instance}} {{error}}"),
            width=8,
        ),
        timeseries_panel("Bytes read", "Bps", Q(rate("spyglass_source_bytes_total", "source"), "{{source}}"), width=8),
    )
    layout.row("Refused and repaired")
    layout.add(
        timeseries_panel(
            "Values refused",
            "short",
            Q(
                rate("spyglass_source_invalid_fields_total", "source, field", fn="increase"),
                "{{source}} {{field}} invalid",
            ),
            Q(
                rate("spyglass_engine_implausible_values_total", "instance, field", fn="increase"),
                "{{instance}} {{field}} implausible",
            ),
            Q(
                rate("spyglass_source_unlisted_labels_total", "source, label", fn="increase"),
                "{{source}} {{label}} unlisted",
            ),
            Q(
                rate("spyglass_engine_orphan_lines_total", "instance, kind", fn="increase"),
                "{{instance}} orphan {{kind}}",
            ),
            width=12,
        ),
        timeseries_panel(
            "File troubles",
            "short",
            Q(rate("spyglass_source_rotations_total", "source, kind", fn="increase"), "{{source}} {{kind}}"),
            Q(rate("spyglass_source_long_lines_total", "source", fn="increase"), "{{source}} long lines"),
            Q(rate("spyglass_source_nul_bytes_total", "source", fn="increase"), "{{source}} NUL bytes"),
            Q(rate("spyglass_source_lost_files_total", "source", fn="increase"), "{{source}} lost files"),
            Q(rate("spyglass_source_lost_bytes_total", "source", fn="increase"), "{{source}} lost bytes"),
            Q(
                rate("spyglass_source_possibly_lost_total", "source, reason", fn="increase"),
                "{{source}} possibly lost ({{reason}})",
            ),
            width=12,
        ),
        timeseries_panel(
            "Store, traces, dropped series",
            "ops",
            Q(rate("spyglass_store_events_total"), "events committed"),
            Q(rate("spyglass_agent_spans_received_total"), "spans received"),
            Q(rate("spyglass_state_dropped_series_total", "metric"), "{{metric}} series dropped"),
            Q(rate("spyglass_alerts_dropped_total", "reason"), "alerts dropped ({{reason}})"),
            Q(rate("spyglass_alerts_deferred_total"), "alerts deferred (503, retried)"),
            Q(rate("spyglass_received_refused_total", "receiver, reason"), "{{receiver}} refused ({{reason}})"),
            width=12,
        ),
        stat_panel(
            "Store commits",
            "none",
            Q(f"min({s('spyglass_store_healthy')})", "store"),
            width=6,
            thresholds=steps((1, GREEN), base=RED),
            mappings={"1": ("healthy", GREEN), "0": ("FAILING", RED)},
        ),
        timeseries_panel(
            "Failed commits (retried, nothing dropped)",
            "short",
            Q(rate("spyglass_store_commit_failures_total", fn="increase"), "failed commits"),
            Q(rate("spyglass_store_events_refused_total", fn="increase"), "events set aside"),
            Q(rate("spyglass_parquet_publish_failures_total", fn="increase"), "failed Parquet publications"),
            Q(rate("spyglass_parquet_rows_set_aside_total", fn="increase"), "Parquet rows set aside"),
            Q(rate("spyglass_parquet_rows_dropped_unpublished_total", fn="increase"), "rows dropped unpublished"),
            width=6,
        ),
        table_panel("Version", "none", Q(f"max by (host, version) ({s('spyglass_agent_info')})"), width=12),
    )
    return layout.board
