"""The wall: what the on-call engineer reads from across the room, in kiosk mode on a 1080p screen.

Three bands of 24 columns and 27 grid units (about 1000 px at Grafana's 30 px a unit plus gaps):
per-lane TTFT and budget burn with process and alert state; throughput, evictions and the cache
budget; the prefill queue, what fires now and spyglass's own sources. Big tiles, few lines.
"""
from __future__ import annotations

from grafana_foundation_sdk.models.common import BigValueTextMode

from dashboards.model import links
from dashboards.panels import (
    GREEN,
    ORANGE,
    RED,
    Q,
    above,
    below,
    board,
    exclude,
    match,
    runbook,
    s,
    stat_panel,
    steps,
    table_panel,
    threshold,
    timeseries_panel,
)
from spyglass.heuristics import DECODE_BASELINE, DECODE_MEAN, EVICTIONS, SLO_ERRORS, TTFT, Deployment
from spyglass.rules import runbook_url

UID = "spyglass-wall"
TITLE = "Spyglass / Wall"
PROCESS_STATES = {"0": ("RUNNING", GREEN), "1": ("STARTING", ORANGE), "2": ("DOWN", RED)}
SOURCE_DOWN, SOURCE_POLLED = -1, -2  # tiles for a source that cannot be read, and one up with no event time


def process_state() -> str:
    """Per program 0 running, 1 starting/backoff/stopping, 2 down (exited, fatal, stopped)."""
    state = "spyglass_supervisord_process_state"
    return ("max by (host, program) (\n"
            f'  ({s(state, state="RUNNING")} == 1) * 0\n'
            f'  or ({s(state, state=match("STARTING|BACKOFF|STOPPING"))} == 1) * 1\n'
            f'  or ({s(state, state=match("EXITED|FATAL|STOPPED|UNKNOWN"))} == 1) * 2\n)')


def source_health() -> str:
    """Seconds since each source's newest event; -1 (DOWN) for a source that cannot be read, -2 (UP)
    for one that answers but stamps no events of its own (a poll)."""
    return (f'max by (host, source) (time() - {s("spyglass_source_last_event_timestamp_seconds")})\n'
            f'  unless on (host, source) (max by (host, source) ({s("spyglass_source_up")}) == 0)\n'
            f'or on (host, source) (max by (host, source) ({s("spyglass_source_up")}) == 0) * 0 + ({SOURCE_DOWN})\n'
            f'or on (host, source) (max by (host, source) ({s("spyglass_source_up")}) == 1) * 0 + ({SOURCE_POLLED})')


def lane_tiles(d: Deployment) -> list:
    panels = []
    for lane, _objective in d.lanes.items():
        ttft = threshold(d, "H5", f"ttft_seconds.{lane}")
        panels.append(stat_panel(
            f"TTFT p95 · {lane}", "s", Q(f'max({s(f"instance_lane:{TTFT}:p95_rate5m", lane=lane)})', lane),
            width=4, height=7, thresholds=above(ttft, warn=ttft / 2),
            description=f"Engine-measured p95 time to first token over 5 minutes; lane objective {ttft:g} s.",
            links=[runbook(d, "EngineTTFTSpike")]))
    for lane, _objective in d.lanes.items():
        budget = 1 - threshold(d, "H5", f"objective.{lane}")
        panels.append(stat_panel(
            f"SLO burn 1h · {lane}", "x",
            Q(f'max({s(f"{SLO_ERRORS}1h", lane=lane)}) / {budget:g}', lane),
            width=4, height=7, thresholds=above(threshold(d, "H5", "fast_burn_1h_5m"),
                                                warn=threshold(d, "H5", "fast_burn_6h_30m")),
            description="Share of first tokens later than the lane's objective over 1 h, as a multiple of the"
                        " error budget: 6x and 14.4x page (with their short windows).",
            links=[runbook(d, "EngineTTFTBudgetFastBurn")]))
    return panels


def build(d: Deployment):
    layout = board(UID, TITLE, "The wall screen: per-lane latency, throughput, cache and process state at a glance.",
                   refresh="10s", time_from="now-3h",
                   links_to=links("latency", "cache", "early_stops", "tokens", "lifecycle", "cpu", "agent"))
    drop = threshold(d, "H1", "drop_ratio")
    layout.add(*lane_tiles(d))
    layout.add(stat_panel("Process state", "none", Q(process_state(), "{{program}}"), width=8, height=7,
                          mappings=PROCESS_STATES, text_mode=BigValueTextMode.VALUE_AND_NAME,
                          thresholds=steps((1, ORANGE), (2, RED)),
                          description="supervisord's state per program (log and API): a red tile is exited, FATAL"
                                      " or stopped; orange is starting or backing off.",
                          links=[runbook(d, "ProgramCrashLoop"), runbook(d, "ProgramFatal")]))
    layout.add(
        timeseries_panel("Decode tok/s against its own baseline", "suffix: tok/s",
                         Q(s(DECODE_MEAN), "{{instance}} now"),
                         Q(f"max by (host, instance, lane) ({s(DECODE_BASELINE)})", "{{instance}} baseline"),
                         Q(f"{drop:g} * max by (host, instance, lane) ({s(DECODE_BASELINE)})", "{{instance}} collapse line"),
                         width=8, height=10, links=[runbook(d, "EngineThroughputCollapse")],
                         description=f"Mean decode rate per request over 10 minutes against the same instance an hour"
                                     f" or a day before; under {drop:g}x the baseline is a collapse (H1)."),
        timeseries_panel("Evictions per minute", "suffix:/min", Q(f"{s(EVICTIONS)} * 60", "{{instance}}"),
                         width=8, height=10, thresholds=above(threshold(d, "H3", "evictions_per_minute")),
                         links=[runbook(d, "EngineEvictionStorm")],
                         description="Conversation snapshots evicted, from the engine's own evictions= counter."),
        timeseries_panel("Parked bytes against the budget", "bytes",
                         Q(f'max by (host, instance) ({s("spyglass_engine_cache_used_bytes")})', "{{instance}} parked"),
                         Q(f'max by (host, instance) ({s("spyglass_engine_cache_budget_bytes")})', "{{instance}} budget"),
                         width=8, height=10, links=[runbook(d, "EngineSnapshotOverBudget")],
                         description="Bytes of parked conversation snapshots and the cache's byte budget."),
    )
    layout.add(
        timeseries_panel("Prefill queue", "short",
                         Q(f'max by (host, instance) ({s("spyglass_engine_prefill_queue_depth")})', "{{instance}}"),
                         width=8, height=10, description="Requests waiting in the global serial prefill queue.",
                         links=[runbook(d, "EngineHung")]),
        table_panel("Alerts firing now", "none",
                    Q(f'max by (host, alertname, severity, instance) ({s("ALERTS", alertstate="firing", alertname=exclude("Watchdog"))})'),
                    width=8, height=10, no_value="none firing",
                    data_links=[runbook_link(d)],
                    description="Every alert firing (the Watchdog left out); each row links to its runbook."),
        stat_panel("Alert pipeline", "none",
                   Q(f'count({s("ALERTS", alertname="Watchdog", alertstate="firing")})', "Watchdog"),
                   width=3, height=10, mappings={"1": ("alive", GREEN)}, no_value="DEAD",
                   thresholds=below(1),
                   description="The Watchdog always fires while Prometheus evaluates the rules: no value is a dead"
                               " alert pipeline.", links=[runbook(d, "Watchdog")]),
        stat_panel("Sources: seconds since last event", "s", Q(source_health(), "{{source}}"),
                   width=5, height=10, thresholds=steps((0, GREEN), (threshold(d, "H19", "silent_seconds"), RED),
                                                        base=RED),
                   mappings={str(SOURCE_DOWN): ("DOWN", RED), str(SOURCE_POLLED): ("UP", GREEN)}, text_mode=BigValueTextMode.VALUE_AND_NAME,
                   description="spyglass's own sources: a source that cannot be read is DOWN, one silent longer"
                               " than the engine-log silence threshold is red.",
                   links=[runbook(d, "SpyglassSourceDown"), runbook(d, "SpyglassSourceSilent")]),
    )
    return layout.board


def runbook_link(d: Deployment):
    from grafana_foundation_sdk.builders import dashboard

    return dashboard.DashboardLink("Runbook").url(runbook_url(d, "${__data.fields.alertname}")).target_blank(True)
