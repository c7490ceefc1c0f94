"""Process lifecycle and upgrades: restarts, exits by cause, FATAL, load time against the probe
budget, readiness, builds and models (their changes are annotations: the info series whose build or
model labels took a second value), graph rebuilds and memory growth (H13-H18)."""

from __future__ import annotations

from grafana_foundation_sdk.models.common import BigValueTextMode

from spyglass.alerting.heuristics import Deployment
from spyglass.dashboards.model import links
from spyglass.dashboards.panels import Q, stat_panel, table_panel, timeseries_panel
from spyglass.dashboards.promql import rate, s
from spyglass.dashboards.skeleton import board, change_annotation_queries, with_annotations
from spyglass.dashboards.thresholds import GREEN, ORANGE, RED, above, runbook, steps, threshold

UID = "spyglass-lifecycle"
TITLE = "Spyglass / Process lifecycle and upgrades"


def build(d: Deployment):
    window = f"{threshold(d, 'H13', 'window_minutes'):g}m"
    layout = board(
        UID,
        TITLE,
        "Restarts, exits, loads, builds and models of every supervised program.",
        links_to=links("wall", "cpu"),
    )
    layout.board = with_annotations(layout.board, change_annotation_queries())  # besides every dashboard's
    layout.row("Restarts and exits")
    layout.add(
        timeseries_panel(
            f"Spawns in {window}",
            "short",
            Q(f"sum by (host, program) (increase({s('spyglass_supervisord_spawns_total')}[{window}]))", "{{program}}"),
            width=8,
            thresholds=above(threshold(d, "H13", "spawns")),
            links=[runbook(d, "ProgramCrashLoop")],
        ),
        timeseries_panel(
            "Exits, by cause",
            "short",
            Q(
                rate("spyglass_supervisord_exits_total", "program, expected, cause", fn="increase"),
                "{{program}} {{cause}} expected={{expected}}",
            ),
            width=8,
        ),
        timeseries_panel(
            "Restarts seen by each source",
            "short",
            Q(rate("spyglass_supervisord_rpc_restarts_total", "program", fn="increase"), "{{program}} (API)"),
            Q(rate("spyglass_serve_restarts_total", "instance", fn="increase"), "{{instance}} (serve)"),
            Q(rate("spyglass_engine_starts_total", "instance", fn="increase"), "{{instance}} (engine log)"),
            Q(rate("spyglass_gateway_starts_total", fn="increase"), "gateway"),
            Q(rate("spyglass_supervisord_starts_total", fn="increase"), "supervisord"),
            width=8,
            links=[runbook(d, "EngineRestartLoop")],  # an engine no supervisord watches: its log's starts
        ),
        timeseries_panel(
            "FATAL, SIGKILL escalations, core dumps",
            "short",
            Q(rate("spyglass_supervisord_fatal_total", "program", fn="increase"), "{{program}} FATAL"),
            Q(rate("spyglass_supervisord_stop_kills_total", "program", fn="increase"), "{{program}} SIGKILL"),
            Q(rate("spyglass_supervisord_core_dumps_total", "program", fn="increase"), "{{program}} core"),
            Q(
                rate("spyglass_supervisord_stops_total", "program, signal", fn="increase"),
                "{{program}} stopped by {{signal}}",
            ),
            Q(rate("spyglass_supervisord_spawn_errors_total", fn="increase"), "spawn errors"),
            Q(rate("spyglass_supervisord_event_overflows_total", fn="increase"), "event overflows"),
            width=8,
            links=[runbook(d, "ProgramFatal")],
        ),
        stat_panel(
            "State (API)",
            "none",
            Q(f"max by (host, program, state) ({s('spyglass_supervisord_rpc_state')}) == 1", "{{program}} {{state}}"),
            width=8,
            height=8,
            text_mode=BigValueTextMode.NAME,
        ),
        timeseries_panel(
            "Uptime",
            "s",
            Q(
                f"time() - max by (host, program) ({s('spyglass_supervisord_process_start_time_seconds')})",
                "{{program}} (log)",
            ),
            Q(
                f"time() - max by (host, program) ({s('spyglass_supervisord_rpc_start_time_seconds')})",
                "{{program}} (API)",
            ),
            Q(f"max by (host, instance) ({s('spyglass_serve_uptime_seconds')})", "{{instance}} (serve)"),
            width=8,
        ),
    )
    layout.row("Loads and readiness")
    budget = threshold(d, "H14", "probe_budget_seconds")
    layout.add(
        timeseries_panel(
            "Load duration against the probe budget",
            "s",
            Q(f"max by (host, instance) ({s('spyglass_engine_load_duration_seconds')})", "{{instance}}"),
            Q(
                f"time() - max by (host, instance) ({s('spyglass_engine_start_time_seconds')})"
                f" and on (host, instance) (max by (host, instance) ({s('spyglass_engine_ready')}) == 0)",
                "{{instance}} loading for",
            ),
            width=8,
            thresholds=above(budget),
            links=[
                runbook(d, "EngineNotReady"),
                runbook(d, "EngineLoadOverProbeBudget"),
                runbook(d, "EngineRestartedWhileLoading"),
            ],
        ),
        stat_panel(
            "Engine ready",
            "none",
            Q(f"max by (host, instance) ({s('spyglass_engine_ready')})", "{{instance}}"),
            width=4,
            height=8,
            mappings={"1": ("ready", GREEN), "0": ("loading", ORANGE)},
            thresholds=steps((1, GREEN), base=ORANGE),
            text_mode=BigValueTextMode.VALUE_AND_NAME,
        ),
        stat_panel(
            "Serve state",
            "none",
            Q(f"max by (host, instance, state) ({s('spyglass_serve_state')}) == 1", "{{instance}} {{state}}"),
            Q(f"max by (host, instance) ({s('spyglass_serve_up')}) == 0", "{{instance}} unreachable"),
            width=4,
            height=8,
            text_mode=BigValueTextMode.NAME,
        ),
        timeseries_panel(
            "Switches and operator restarts",
            "short",
            Q(rate("spyglass_switch_switches_total", "instance", fn="increase"), "{{instance}} switch"),
            Q(rate("spyglass_switch_restarts_total", "instance", fn="increase"), "{{instance}} restart"),
            Q(
                f"time() - max by (host, instance) ({s('spyglass_switch_last_change_timestamp_seconds')})"
                f" < {threshold(d, 'H13', 'planned_restart_seconds'):g}",
                "{{instance}} seconds since",
            ),
            width=8,
            links=[runbook(d, "EnginePlannedRestart")],
        ),
    )
    layout.row("Builds and models")
    layout.add(
        table_panel(
            "Engine builds",
            "none",
            Q(f"max by (host, instance, build_name, version, build) ({s('spyglass_engine_build_info')})"),
            Q(f"max by (host, instance, build) ({s('spyglass_switch_engine_build_info')})"),
            Q(f"max by (host, version) ({s('spyglass_gateway_info')})"),
            width=8,
        ),
        table_panel(
            "Models",
            "none",
            Q(f"max by (host, instance, model, md5) ({s('spyglass_engine_model_info')})"),
            Q(f"max by (host, instance) ({s('spyglass_engine_model_bytes')})"),
            width=8,
            links=[runbook(d, "EngineModelChecksumMismatch")],
        ),
        timeseries_panel(
            "Model checksum mismatches",
            "short",
            Q(rate("spyglass_engine_model_checksum_mismatches_total", "instance", fn="increase"), "{{instance}}"),
            width=8,
        ),
        timeseries_panel(
            "Compute-graph rebuilds",
            "suffix:/min",
            Q(rate("spyglass_engine_graph_rebuilds_total", "instance, reason") + " * 60", "{{instance}} {{reason}}"),
            Q(rate("spyglass_engine_graph_rebuild_seconds_total", "instance"), "{{instance}} s/s rebuilding"),
            width=8,
            thresholds=above(threshold(d, "H16", "rebuilds_per_minute")),
            links=[runbook(d, "EngineRecompileStorm")],
        ),
        timeseries_panel(
            "Resident memory and its 4 h prediction",
            "bytes",
            Q(f"max by (host, instance) ({s('spyglass_host_process_resident_bytes')})", "{{instance}}"),
            Q(
                f"max by (host, instance) (predict_linear({s('spyglass_host_process_resident_bytes')}[1h],"
                f" {threshold(d, 'H17', 'horizon_seconds'):g}))",
                "{{instance}} predicted",
            ),
            width=8,
            thresholds=above(threshold(d, "H17", "memory_limit_bytes")),
            links=[runbook(d, "EngineMemoryGrowth")],
        ),
        timeseries_panel(
            "Engine errors, by component",
            "short",
            Q(rate("spyglass_engine_errors_total", "instance, component", fn="increase"), "{{instance}} {{component}}"),
            width=8,
        ),
        stat_panel(
            "Model path (H15)",
            "none",
            Q(f"min by (host, instance) ({s('spyglass_model_path_resolves')})", "{{instance}} resolves"),
            Q(f"max by (host, instance) ({s('spyglass_model_path_mismatch')})", "{{instance}} differs from loaded"),
            width=8,
            thresholds=steps((1, GREEN), base=RED),
            links=[runbook(d, "EngineModelPathDangling"), runbook(d, "EngineModelPathMismatch")],
        ),
        timeseries_panel(
            "Model path changes",
            "short",
            Q(rate("spyglass_model_path_changes_total", "instance", fn="increase"), "{{instance}} changes"),
            Q(
                f"time() - max by (host, instance) ({s('spyglass_model_path_changed_timestamp_seconds')})",
                "{{instance}} s since the last change",
            ),
            width=16,
        ),
    )
    return layout.board
