"""H14: Engine not ready past its probe budget. Incident upgrade (a 40 s load against a 10 s probe)."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import (
    INSTANCE,
    LANE,
    SECONDS,
    VALUE,
    Alert,
    Check,
    Deployment,
    Evidence,
    Heuristic,
    Probe,
    Threshold,
    probe_sql,
)
from spyglass.alerting.heuristics.promql import num


def build(d: Deployment) -> Heuristic:
    budget = d.settings.probe_budget_seconds
    window = f"{max(30, int(budget * 3 // 60))}m"  # three loads' worth of time
    spawns = f"max_over_time(spyglass_supervisord_spawns_total[{window}]) - min_over_time(spyglass_supervisord_spawns_total[{window}])"
    # A slow load is news for `hold` seconds after it became ready, not for every day the gauge keeps its value.
    hold = 3600.0
    # A probe ends a load from outside, by a signal (SIGKILL, SIGTERM), whatever its own budget (the upgrade's
    # probe killed 40 s loads at 10 s); a crash ends it by its own cause (SIGABRT, SIGSEGV, exit_N): 50 s after
    # start is H13's crash loop, not H14.
    kills = "SIGKILL|SIGTERM"
    # The engine's last start line is stale when supervisord spawned the program since: the new process has
    # not written its own yet (it is not a load running past the budget).
    respawned = (
        'label_replace(spyglass_supervisord_process_start_time_seconds, "instance", "$1", "program", "(.*)")'
        " > on (host, instance) group_left () (max by (host, instance) (spyglass_engine_start_time_seconds) + 60)"
    )
    killed = (
        f'label_replace(sum by (host, program) (increase(spyglass_supervisord_exits_total{{cause=~"{kills}"}}[{window}]))'
        ' > 0, "instance", "$1", "program", "(.*)")'
    )
    crashed = (
        f'label_replace(sum by (host, program) (increase(spyglass_supervisord_exits_total{{cause!~"{kills}"}}[{window}]))'
        ' > 0, "instance", "$1", "program", "(.*)")'
    )
    probe = Probe(
        needs=("engine_log",),
        alert="EngineLoadOverProbeBudget",
        sql=probe_sql(__name__, budget=num(budget)),
        summary="{instance}: {slow_loads} loads longer than the probe budget ({probe_budget_seconds:g} s; the longest"
        " {ready_seconds:g} s), {killed_while_loading} starts killed while loading (after up to {killed_after_seconds:g} s),"
        " none crashing on its own.",
        figures=("slow_loads", "ready_seconds", "killed_while_loading", "killed_after_seconds", "probe_budget_seconds"),
    )
    return Heuristic(
        evidence=Evidence(
            control="hour before",
            text="Loads longer than the probe budget against the hour before.",
            this="{slow_loads} loads over the {probe_budget_seconds:g} s budget, the longest {ready_seconds:g} s",
            series="spawns",
        ),
        id="H14",
        title="Engine not ready past its probe budget",
        incident="upgrade (a 40 s load against a 10 s probe)",
        symptom="The engine is still loading when its probe budget is spent, or its last load took longer than the budget.",
        wrong_guess="the model is broken",
        check=Check(
            text="Load duration against the probe timeout; a startup phase.",
            promql="spyglass_engine_load_duration_seconds",
            sql="SELECT ts, instance, kind, seconds FROM events_engine_log WHERE kind IN ('start', 'ready')"
            " ORDER BY ts DESC LIMIT 20",
        ),
        knobs=(
            "the probe's startup budget (alerts.probe_budget_seconds must match it)",
            "a startup phase that answers 503",
        ),
        thresholds=(
            Threshold(
                name="probe_budget_seconds",
                value=budget,
                unit="s",
                meaning="longest load the probe waits for",
                setting="alerts.probe_budget_seconds",
            ),
            Threshold(
                name="slow_load_hold_seconds",
                value=hold,
                unit="s",
                meaning="a load over the budget is reported this long after it became ready",
            ),
        ),
        alerts=(
            Alert(
                name="EngineNotReady",
                severity="critical",
                expr=f"(time() - spyglass_engine_start_time_seconds > {num(budget)}) and on (host, instance, lane)"
                " (spyglass_engine_ready == 0)\n  and on (host, instance) (spyglass_host_process_up == 1)\n"
                f"  unless on (host, instance) ({respawned})",
                for_="0m",
                summary=f"{INSTANCE} has been loading longer than its probe budget.",
                description=f"{INSTANCE} ({LANE}) started {SECONDS} ago and is not ready (probe budget {num(budget)} s).",
                inhibits_latency=True,
            ),
            Alert(
                name="EngineLoadOverProbeBudget",
                severity="warning",
                expr=f"spyglass_engine_load_duration_seconds > {num(budget)}\n  and on (host, instance, lane)"
                " (time() - spyglass_engine_start_time_seconds - spyglass_engine_load_duration_seconds"
                f" < {num(hold)})",
                for_="0m",
                summary=f"{INSTANCE}'s last load took longer than the probe budget.",
                description=f"{INSTANCE} ({LANE}) took {SECONDS} to become ready; the probe gives up after {num(budget)} s.",
            ),
            Alert(
                name="EngineRestartedWhileLoading",
                severity="critical",
                expr=f'label_replace({spawns}, "instance", "$1", "program", "(.*)") >= 2\n'
                f"  and on (host, instance) (max by (host, instance) (max_over_time(spyglass_engine_ready[{window}])) == 0)\n"
                f"  and on (host, instance) {killed}\n"
                f"  unless on (host, instance) {crashed}",
                for_="0m",
                summary=f"{INSTANCE} is restarted before it ever becomes ready: a probe killing a slow load.",
                description=f"supervisord spawned {INSTANCE} {VALUE} times in {window}; no start reached ready, a start"
                f" was killed by a signal from outside ({kills.replace('|', ' or ')}) and no exit had a crash's cause:"
                f" a probe shorter than the load (alerts.probe_budget_seconds says {num(budget)} s).",
                inhibits_latency=True,
            ),
        ),
        diagnosis="Load duration per start, and how long a start that never got ready had been loading when it"
        " ended: `spyglass changes` (load_seconds, ended_loading_after) and `spyglass crashes`.",
        probe=probe,
    )
