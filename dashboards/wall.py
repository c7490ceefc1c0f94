"""The wall: what the on-call engineer reads from across the room, in kiosk mode on a 1080p screen.

Four bands of 24 columns and 30 grid units (about 1080 px at Grafana's 30 px a unit plus gaps):

1. What fires: a large tile with the count of firing alerts by severity (red for a critical,
   orange for a warning) and the list of what fires (severity, alert, instance, since when, summary).
2. What users of vLLM and SGLang dashboards look for first, per engine instance: requests/s,
   generated tokens/s, running and waiting requests, error share, cache use as a share of the
   budget. These are indicators, not alerts: plain numbers, never coloured.
3. The conversation cache per instance, each against its own budget (and the thresholds of the
   eviction-storm and snapshot-size alerts drawn as lines).
4. TTFT per lane against its objective, process state, source health and the alert pipeline.

Only the alerts colour a tile: a tile is red only while a critical alert fires (or the alert
pipeline is dead), so the top of the wall cannot disagree with the pager. Every number drawn as a
threshold comes from the heuristics catalogue (spyglass.alerting.heuristics), as the rules' do.
"""

from __future__ import annotations

import re

from grafana_foundation_sdk.models.common import BigValueColorMode, BigValueGraphMode, BigValueTextMode
from grafana_foundation_sdk.models.dashboard import DynamicConfigValue

from spyglass.alerting.heuristics import EVICTIONS, EVICTIONS_BASELINE, TTFT, Alert, Deployment
from spyglass.alerting.rules import alerts, runbook_url
from spyglass.dashboards.model import links
from spyglass.dashboards.panels import (
    Q,
    dashed,
    fixed_color,
    own_thresholds,
    stat_panel,
    table_panel,
    timeseries_panel,
    value_colors,
)
from spyglass.dashboards.promql import exclude, match, rate, s
from spyglass.dashboards.skeleton import board
from spyglass.dashboards.thresholds import BLUE, GREEN, GREY, ORANGE, RED, below, runbook, steps, threshold

UID = "spyglass-wall"
TITLE = "Spyglass / Wall"
# Instance colours: none of them a state colour (green, orange, red), each instance its own.
INSTANCE_COLORS = ("#5794f2", "#b877d9", "#fade2a", "#8ab8ff", "#ff9ede", "#96d98d")
SEVERITY_COLORS = {"critical": ("CRITICAL", RED), "warning": ("WARNING", ORANGE), "info": ("INFO", BLUE)}
# Process state per program: only FATAL is red (ProgramFatal pages at once); the rest say their state.
PROCESS_STATES = {
    "0": ("RUNNING", GREEN),
    "1": ("STARTING", GREY),
    "2": ("STOPPED", GREY),
    "3": ("FATAL", RED),
    "4": ("NO ANSWER", ORANGE),  # a llama-server without supervisord: its /health did not answer (SpyglassSourceDown)
}
# Source state per source, from the alerts about it: both are warnings.
SOURCE_STATES = {"0": ("OK", GREEN), "1": ("SILENT", ORANGE), "2": ("DOWN", ORANGE)}
LIST_COLUMNS = {
    "severity": "severity",
    "alertname": "alert",
    "instance": "instance",
    "lane": "lane",
    "Value": "active since",
    "summary": "summary",
}


def instances(d: Deployment) -> list[str]:
    """The engine instances of the deployment, in name order."""
    return sorted(set(d.engine_sources.values()))


def instance_color(d: Deployment, instance: str) -> str:
    return INSTANCE_COLORS[instances(d).index(instance) % len(INSTANCE_COLORS)]


# ---------------------------------------------------------------------------------------------
# Band 1: what fires.
# ---------------------------------------------------------------------------------------------


def firing_count(severity: str) -> str:
    return f"count({s('ALERTS', alertstate='firing', severity=severity)}) or vector(0)"


def _promql_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def summary_expr(alert: Alert) -> str:
    """The alert's ALERTS_FOR_STATE series (value: when its condition became true) with a `summary`
    label: the rule's summary, its `{{ $labels.X }}` filled in from the series' own labels."""
    names: list[str] = []
    for name in re.findall(r"\{\{\s*\$labels\.(\w+)\s*\}\}", alert.summary):
        if name not in names:
            names.append(name)
    text = alert.summary.replace("$", "$$")
    text = re.sub(r"\{\{\s*\$\$labels\.(\w+)\s*\}\}", lambda m: f"${{{names.index(m.group(1)) + 1}}}", text)
    text = _promql_string(re.sub(r"\{\{[^}]*\}\}", "", text))
    series = s("ALERTS_FOR_STATE", alertname=alert.name)
    if not names:
        return f'label_replace({series}, "summary", "{text}", "", "")'
    if len(names) == 1:
        return f'label_replace({series}, "summary", "{text}", "{names[0]}", "(.*)")'
    joined = f'label_join({series}, "summary", "|", {", ".join(chr(34) + n + chr(34) for n in names)})'
    pattern = "[|]".join("([^|]*)" for _ in names)
    return f'label_replace({joined}, "summary", "{text}", "summary", "{pattern}")'


def firing_list(d: Deployment) -> str:
    """Every firing alert (the Watchdog left out) with its summary; the value is when it became active,
    in milliseconds (Grafana's time units read milliseconds)."""
    parts = [summary_expr(a) for _, a in alerts(d) if a.name != "Watchdog"]
    return (
        "(\n  "
        + "\n  or ".join(parts)
        + "\n) * 1000\nand ignoring (alertstate, summary) "
        + s("ALERTS", alertstate="firing", alertname=exclude("Watchdog"))
    )


def alert_band(d: Deployment) -> list:
    count = stat_panel(
        "Alerts firing",
        "none",
        Q(firing_count("critical"), "critical", now=True),
        Q(firing_count("warning"), "warning", now=True),
        width=6,
        height=9,
        thresholds=steps(),
        text_mode=BigValueTextMode.VALUE_AND_NAME,
        overrides={"A": [own_thresholds(steps((1, RED)))], "B": [own_thresholds(steps((1, ORANGE)))]},
        description="Alerts firing now, by severity (the Watchdog, always firing, left out): red while a critical"
        " fires, orange while a warning does, green when nothing fires.",
        links=[runbook(d, "Watchdog")],
    )
    fires = table_panel(
        "What fires now",
        "dateTimeFromNow",
        Q(firing_list(d)),
        width=18,
        height=9,
        no_value="Nothing fires",
        columns=LIST_COLUMNS,
        sort_by="severity",
        large=True,
        columns_by_name={
            "severity": [
                value_colors({k: v for k, v in SEVERITY_COLORS.items()}),
                DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-background"}),
            ],
            "summary": [DynamicConfigValue(id_val="custom.cellOptions", value={"type": "auto", "wrapText": True})],
        },
        data_links=[evidence_link(d), runbook_link(d)],
        description="Every alert firing (the Watchdog left out): severity, alert, instance, lane, when its condition"
        " became true (the `for:` wait included) and the rule's summary; each row links to its evidence page"
        " on the agent (the figures, the comparison, the requests) and to its runbook.",
    )
    return [count, fires]


# ---------------------------------------------------------------------------------------------
# Band 2: the vLLM/SGLang first look, per instance. Indicators, not alerts.
# ---------------------------------------------------------------------------------------------


def _errors(series: str) -> str:
    every = rate(series, "instance")
    failed = rate(series, "instance", status=match("[45].."))
    return f"({failed} or {every} * 0)\n/ ({every} > 0)"


def _failed_share() -> str:
    """The serve's 4xx/5xx share (Strata); an instance without a serve (llama-server): its requests ended in error."""
    outcomes = "spyglass_engine_request_outcomes_total"
    every = rate(outcomes, "instance")
    failed = rate(outcomes, "instance", outcome="error")
    return f"{_errors('spyglass_serve_requests_total')}\nor\n({failed} or {every} * 0)\n/ ({every} > 0)"


# What an indicator shows where the engine does not report it, instead of "No data".
UNLOGGED = {"Cache use of its budget": "not logged"}  # llama-server writes its cache's size at -lv 4 only


def first_look(d: Deployment) -> list:
    used = f"max by (host, instance) ({s('spyglass_engine_cache_used_bytes')})"
    budget = f"max by (host, instance) ({s('spyglass_engine_cache_budget_bytes')})"
    indicators = [
        (
            "Requests/s",
            "reqps",
            rate("spyglass_engine_requests_finished_total", "instance"),
            "Requests the engine finished per second.",
        ),
        (
            "Generated tokens/s",
            "suffix: tok/s",
            rate("spyglass_engine_completion_tokens_total", "instance"),
            "Completion tokens of finished requests per second.",
        ),
        (
            "Running requests",
            "none",
            f"max by (host, instance) ({s('spyglass_engine_slots_busy')})",
            "Request slots in use, from the engine's stats line.",
        ),
        (
            "Waiting requests",
            "none",
            # llama-server's first: its log gives a prefill depth too (0), which `or` would keep instead
            f"max by (host, instance) ({s('spyglass_llama_requests_deferred')})\n"
            f"or max by (host, instance) ({s('spyglass_engine_prefill_queue_depth')})",
            "Requests waiting: Strata's global serial prefill queue; llama-server's requests deferred for a free"
            " slot (llamacpp:requests_deferred).",
        ),
        (
            "Error share",
            "percentunit",
            _failed_share(),
            "Share of the serve's answers with a 4xx or 5xx status; where no serve answers (llama-server), of the"
            " requests that ended in error.",
        ),
        (
            "Cache use of its budget",
            "percentunit",
            f"{used}\n/ ({budget} > 0)",
            "Bytes of parked conversation snapshots as a share of the instance's own cache budget.",
        ),
    ]
    return [
        stat_panel(
            f"{title} · indicator",
            unit,
            Q(expr, "{{instance}}"),
            width=4,
            height=5,
            color_mode=BigValueColorMode.NONE,
            graph_mode=BigValueGraphMode.AREA,
            text_mode=BigValueTextMode.VALUE_AND_NAME,
            description=description + " An indicator, not an alert: never coloured.",
            no_value=UNLOGGED.get(title, ""),
        )
        for title, unit, expr, description in indicators
    ]


# ---------------------------------------------------------------------------------------------
# Band 3: the conversation cache, per instance against its own budget.
# ---------------------------------------------------------------------------------------------


def cache_panels(d: Deployment, instance: str, width: int) -> list:
    color = instance_color(d, instance)
    share = threshold(d, "H3", "snapshot_budget_share")
    floor, factor = threshold(d, "H3", "evictions_per_minute"), threshold(d, "H3", "baseline_factor")

    def one(series: str) -> str:
        return f"max by (host, instance) ({s(series, instance=instance)})"

    used, budget = one("spyglass_engine_cache_used_bytes"), one("spyglass_engine_cache_budget_bytes")
    parked = one("spyglass_engine_cache_parked_snapshots")
    cache = timeseries_panel(
        f"{instance} · cache against its budget",
        "bytes",
        Q(used, "parked"),
        Q(budget, "budget"),
        Q(f"{used} / clamp_min({parked}, 1)", "mean snapshot"),
        Q(f"{share:g} * {budget}", f"snapshot alert line ({share:.0%} of budget)"),
        width=width,
        height=8,
        links=[runbook(d, "EngineSnapshotOverBudget")],
        overrides={
            "A": [fixed_color(color)],
            "B": [fixed_color(GREY), dashed()],
            "C": [fixed_color("#ffffff")],
            "D": [fixed_color(ORANGE), dashed()],
        },
        description=f"{instance}'s parked snapshot bytes against its own cache budget; a mean snapshot above"
        f" {share:g} of the budget is EngineSnapshotOverBudget (H3).",
    )
    evictions = timeseries_panel(
        f"{instance} · evictions per minute",
        "suffix:/min",
        Q(f"max by (host, instance) ({s(EVICTIONS, instance=instance)}) * 60", "evictions/min"),
        Q(
            f"{factor:g} * max by (host, instance) ({s(EVICTIONS_BASELINE, instance=instance)}) * 60",
            f"{factor:g}x hourly baseline",
        ),
        width=width,
        height=8,
        thresholds=steps((floor, RED)),
        links=[runbook(d, "EngineEvictionStorm")],
        overrides={"A": [fixed_color(color)], "B": [fixed_color(GREY), dashed()]},
        description=f"Snapshots {instance} evicted per minute over 10 minutes, from the engine's own counter;"
        f" EngineEvictionStorm pages above {floor:g}/min and {factor:g}x the hourly baseline (or"
        " with snapshots over the budget share).",
    )
    return [cache, evictions]


# ---------------------------------------------------------------------------------------------
# Band 4: latency, processes, sources, the pipeline.
# ---------------------------------------------------------------------------------------------


def process_state() -> str:
    """Per program 0 running, 1 starting/backoff/stopping, 2 exited/stopped, 3 FATAL, from supervisord; a
    llama-server no supervisord runs (systemd's) from its poller: 0 ready, 1 loading, 4 no answer from /health."""
    state = "spyglass_supervisord_process_state"
    llama = (
        f"label_replace(max by (host, instance) (1 - {s('spyglass_llama_ready')})\n"
        f"    or max by (host, instance) ({s('spyglass_llama_up')} == 0) * 0 + 4,"
        ' "program", "$1", "instance", "(.*)")'
    )
    return (
        "max by (host, program) (\n"
        f"  ({s(state, state='RUNNING')} == 1) * 0\n"
        f"  or ({s(state, state=match('STARTING|BACKOFF|STOPPING'))} == 1) * 1\n"
        f"  or ({s(state, state=match('EXITED|STOPPED|UNKNOWN'))} == 1) * 2\n"
        f"  or ({s(state, state='FATAL')} == 1) * 3\n)\n"
        f"or on (host, program) {llama}"
    )


def source_state() -> str:
    """Per source 2 while SpyglassSourceDown fires for it, 1 while SpyglassSourceSilent does (it fires
    only where the source should be speaking: an engine log while its process runs, a status endpoint
    due for a poll; both alerts name the source), else 0: a quiet supervisord log is OK."""
    down = s("ALERTS", alertname="SpyglassSourceDown", alertstate="firing")
    silent = s("ALERTS", alertname="SpyglassSourceSilent", alertstate="firing")
    return (
        f"max by (host, source) ({down}) * 2\n"
        f"or max by (host, source) ({silent}) * 1\n"
        f"or max by (host, source) ({s('spyglass_source_up')}) * 0"
    )


def bottom_band(d: Deployment) -> list:
    ttft = []
    for lane in d.lanes:
        p95 = f"max by (host, lane) ({s(f'instance_lane:{TTFT}:p95_rate5m', lane=lane)})"
        objective = threshold(d, "H5", f"ttft_seconds.{lane}")
        ttft += [Q(p95, "{{lane}} p95"), Q(f"{objective:g} + 0 * {p95}", "{{lane}} objective")]
    colors = {chr(65 + 2 * i): [fixed_color(INSTANCE_COLORS[i % len(INSTANCE_COLORS)])] for i in range(len(d.lanes))}
    colors |= {
        chr(66 + 2 * i): [fixed_color(INSTANCE_COLORS[i % len(INSTANCE_COLORS)]), dashed()] for i in range(len(d.lanes))
    }
    return [
        timeseries_panel(
            "TTFT p95 per lane against its objective",
            "s",
            *ttft,
            width=8,
            height=8,
            overrides=colors,
            links=[runbook(d, "EngineTTFTSpike"), runbook(d, "EngineTTFTBudgetFastBurn")],
            description="Engine-measured p95 time to first token over 5 minutes per lane, and the lane's"
            " objective (dashed): EngineTTFTSpike warns when p95 stays above it.",
        ),
        stat_panel(
            "Process state",
            "none",
            Q(process_state(), "{{program}}"),
            width=6,
            height=8,
            mappings=PROCESS_STATES,
            text_mode=BigValueTextMode.VALUE_AND_NAME,
            thresholds=steps(base=GREY),
            description="supervisord's state per program (log and API). Only FATAL is red: ProgramFatal pages"
            " at once; a crash loop is in the alert list.",
            links=[runbook(d, "ProgramCrashLoop"), runbook(d, "ProgramFatal")],
        ),
        stat_panel(
            "Sources",
            "none",
            Q(source_state(), "{{source}}"),
            width=6,
            height=8,
            mappings=SOURCE_STATES,
            text_mode=BigValueTextMode.VALUE_AND_NAME,
            thresholds=steps(base=GREY),
            description="spyglass's own sources, coloured by the alerts about them: DOWN while"
            " SpyglassSourceDown fires, SILENT while SpyglassSourceSilent does (a source silent"
            " where it should be speaking); a quiet source is OK.",
            links=[runbook(d, "SpyglassSourceDown"), runbook(d, "SpyglassSourceSilent")],
        ),
        stat_panel(
            "Alert pipeline",
            "none",
            Q(f"count({s('ALERTS', alertname='Watchdog', alertstate='firing')})", "Watchdog"),
            width=4,
            height=8,
            mappings={"1": ("alive", GREEN)},
            no_value="DEAD",
            thresholds=below(1),
            description="The Watchdog always fires while Prometheus evaluates the rules: no value is a dead"
            " alert pipeline, and then no tile above can be trusted.",
            links=[runbook(d, "Watchdog"), runbook(d, "SpyglassTargetDown")],
        ),
    ]


def build(d: Deployment):
    layout = board(
        UID,
        TITLE,
        "The wall screen: what fires, the first look per instance, the cache against its"
        " budget, latency, processes and sources.",
        refresh="10s",
        time_from="now-3h",
        links_to=links("latency", "cache", "early_stops", "tokens", "lifecycle", "cpu", "agent"),
    )
    layout.add(*alert_band(d))
    layout.add(*first_look(d))
    width = max(3, 24 // (2 * max(1, len(instances(d)))))
    for instance in instances(d):
        layout.add(*cache_panels(d, instance, width))
    layout.add(*bottom_band(d))
    return layout.board


def evidence_link(d: Deployment):
    """The row's alert's evidence page on the agent (an empty label is no label there)."""
    from grafana_foundation_sdk.builders import dashboard

    fields = "&".join(f"{name}=${{__data.fields.{name}}}" for name in ("instance", "lane"))
    url = f"{d.evidence_base_url.rstrip('/')}/evidence/${{__data.fields.alertname}}?{fields}"
    return dashboard.DashboardLink("Evidence").url(url).target_blank(True)


def runbook_link(d: Deployment):
    from grafana_foundation_sdk.builders import dashboard

    return dashboard.DashboardLink("Runbook").url(runbook_url(d, "${__data.fields.alertname}")).target_blank(True)
