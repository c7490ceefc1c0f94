"""Conversation cache: parked bytes and snapshots against the budget, snapshot sizes, evictions,
restores by origin and the share of long prompts only a checkpoint saved (H3, H4)."""

from __future__ import annotations

from spyglass.alerting.heuristics import (
    CHECKPOINT_ONLY,
    EVICTIONS,
    EVICTIONS_BASELINE,
    LONG_PROMPTS,
    SNAPSHOT_SHARE,
    Deployment,
)
from spyglass.dashboards.model import links
from spyglass.dashboards.panels import Q, heatmap_panel, timeseries_panel
from spyglass.dashboards.promql import rate, s
from spyglass.dashboards.skeleton import board
from spyglass.dashboards.thresholds import above, runbook, threshold

UID = "spyglass-cache"
TITLE = "Spyglass / Conversation cache"


def build(d: Deployment):
    layout = board(
        UID,
        TITLE,
        "Conversation cache per engine instance: budget, snapshots, evictions, restores.",
        links_to=links("wall", "latency"),
    )
    layout.row("Budget")
    layout.add(
        timeseries_panel(
            "Parked bytes and budget",
            "bytes",
            Q(f"max by (host, instance) ({s('spyglass_engine_cache_used_bytes')})", "{{instance}} parked"),
            Q(f"max by (host, instance) ({s('spyglass_engine_cache_budget_bytes')})", "{{instance}} budget"),
            Q(
                f"max by (host, instance) ({s('spyglass_engine_cache_largest_snapshot_bytes')})",
                "{{instance}} largest entry (llama-server's listing)",
            ),
            width=8,
        ),
        timeseries_panel(
            "Parked snapshots",
            "short",
            Q(f"max by (host, instance) ({s('spyglass_engine_cache_parked_snapshots')})", "{{instance}}"),
            width=8,
        ),
        timeseries_panel(
            "Mean parked snapshot, share of the budget",
            "percentunit",
            Q(s(SNAPSHOT_SHARE), "{{instance}}"),
            width=8,
            thresholds=above(threshold(d, "H3", "snapshot_budget_share")),
            links=[runbook(d, "EngineSnapshotOverBudget")],
        ),
        heatmap_panel(
            "Snapshot sizes",
            "bytes",
            f"sum by (le) (rate({s('spyglass_engine_cache_snapshot_bytes_bucket')}[$__rate_interval]))",
            width=12,
        ),
        timeseries_panel(
            "Checkpoint interval (--prompt-cache-every)",
            "short",
            Q(f"max by (host, instance) ({s('spyglass_engine_prompt_cache_every_tokens')})", "{{instance}}"),
            width=12,
        ),
    )
    layout.row("Evictions")
    layout.add(
        timeseries_panel(
            "Evictions per minute against the hourly baseline",
            "suffix:/min",
            Q(f"{s(EVICTIONS)} * 60", "{{instance}} now"),
            Q(f"{s(EVICTIONS_BASELINE)} * 60", "{{instance}} baseline"),
            Q(f"{threshold(d, 'H3', 'baseline_factor'):g} * {s(EVICTIONS_BASELINE)} * 60", "{{instance}} storm line"),
            width=8,
            thresholds=above(threshold(d, "H3", "evictions_per_minute")),
            links=[runbook(d, "EngineEvictionStorm")],
        ),
        timeseries_panel(
            "Evict lines by reason",
            "suffix:/min",
            Q(rate("spyglass_engine_evicted_snapshots_total", "instance, reason") + " * 60", "{{instance}} {{reason}}"),
            width=8,
        ),
        timeseries_panel(
            "Evicted bytes", "Bps", Q(rate("spyglass_engine_evicted_bytes_total", "instance"), "{{instance}}"), width=8
        ),
    )
    layout.row("Restores")
    layout.add(
        timeseries_panel(
            "Prompts by where their prefix came from",
            "reqps",
            Q(rate("spyglass_engine_prompt_restores_total", "instance, origin"), "{{instance}} {{origin}}"),
            width=8,
            stack=True,
        ),
        timeseries_panel(
            "Long prompts restored only from a checkpoint",
            "percentunit",
            Q(s(CHECKPOINT_ONLY), "{{instance}}"),
            width=8,
            thresholds=above(threshold(d, "H4", "checkpoint_only_share")),
            links=[runbook(d, "EngineLongPromptsCheckpointOnly")],
        ),
        timeseries_panel(
            "Long prompts in the last hour",
            "short",
            Q(s(LONG_PROMPTS), "{{instance}}"),
            width=8,
            thresholds=above(threshold(d, "H4", "min_long_prompts")),
        ),
        timeseries_panel(
            "Prompt tokens reused and read",
            "suffix: tok/s",
            Q(rate("spyglass_engine_prompt_tokens_total", "instance, part"), "{{instance}} {{part}}"),
            width=12,
            stack=True,
        ),
        timeseries_panel(
            "Long and checkpoint-only prompts",
            "reqps",
            Q(rate("spyglass_engine_long_prompts_total", "instance"), "{{instance}} long"),
            Q(rate("spyglass_engine_long_prompts_checkpoint_only_total", "instance"), "{{instance}} checkpoint only"),
            width=12,
        ),
    )
    return layout.board
