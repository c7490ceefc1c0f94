"""H14: Engine not ready past its probe budget. Incident upgrade (a 40 s load against a 10 s probe)."""
from __future__ import annotations

from spyglass.heuristics.model import INSTANCE, LANE, SECONDS, VALUE, Alert, Check, Deployment, Heuristic, Probe, Threshold, probe_sql
from spyglass.heuristics.promql import num


def build(d: Deployment) -> Heuristic:
    budget = d.settings.probe_budget_seconds
    window = f"{max(30, int(budget * 3 // 60))}m"  # three loads' worth of time
    spawns = f"max_over_time(spyglass_supervisord_spawns_total[{window}]) - min_over_time(spyglass_supervisord_spawns_total[{window}])"
    # A slow load is news for `hold` seconds after it became ready, not for every day the gauge keeps its value.
    hold = 3600.0
    # A probe kill ends a start that has loaded about the probe budget, by a kill signal; a crash ends it by its
    # own cause (SIGABRT, SIGSEGV, exit_N), at any time: 50 s after start is H13's crash loop, not H14.
    killed_share = 0.5
    kills = "SIGKILL|SIGTERM"
    loaded_longest = (f"max by (host, instance) (max_over_time((time() - spyglass_engine_start_time_seconds)[{window}:]))"
                      f" >= {num(killed_share * budget)}")
    crashed = (f'label_replace(sum by (host, program) (increase(spyglass_supervisord_exits_total{{cause!~"{kills}"}}[{window}]))'
               ' > 0, "instance", "$1", "program", "(.*)")')
    probe = Probe(alert="EngineLoadOverProbeBudget", sql=probe_sql(__file__, budget=num(budget)),
        summary="{instance} took {ready_seconds:g} s to become ready; its probe gives up after {probe_budget_seconds:g} s.",
        figures=("ready_seconds", "probe_budget_seconds"))
    return Heuristic(
        id="H14", title="Engine not ready past its probe budget", incident="upgrade (a 40 s load against a 10 s probe)",
        symptom="The engine is still loading when its probe budget is spent, or its last load took longer than the budget.",
        wrong_guess="the model is broken",
        check=Check(text="Load duration against the probe timeout; a startup phase.",
              promql="spyglass_engine_load_duration_seconds",
              sql="SELECT ts, instance, kind, fields->>'seconds' AS seconds FROM events WHERE kind IN ('start', 'ready')"
                  " ORDER BY ts DESC LIMIT 20"),
        knobs=("the probe's startup budget (alerts.probe_budget_seconds must match it)", "a startup phase that answers 503"),
        thresholds=(Threshold(name="probe_budget_seconds", value=budget, unit="s", meaning="longest load the probe waits for",
                              setting="alerts.probe_budget_seconds"),
                    Threshold(name="slow_load_hold_seconds", value=hold, unit="s",
                              meaning="a load over the budget is reported this long after it became ready"),
                    Threshold(name="probe_kill_share", value=killed_share, unit="ratio",
                              meaning="a restart while loading is a probe kill once a start loaded this share of the budget")),
        alerts=(Alert(name="EngineNotReady", severity="critical",
               expr=f"(time() - spyglass_engine_start_time_seconds > {num(budget)}) and on (host, instance, lane)"
               " (spyglass_engine_ready == 0)\n  and on (host, instance) (spyglass_host_process_up == 1)", for_="0m",
               summary=f"{INSTANCE} has been loading longer than its probe budget.",
               description=f"{INSTANCE} ({LANE}) started {SECONDS} ago and is not ready (probe budget {num(budget)} s).",
               inhibits_latency=True),
         Alert(name="EngineLoadOverProbeBudget", severity="warning",
               expr=f"spyglass_engine_load_duration_seconds > {num(budget)}\n  and on (host, instance, lane)"
               " (time() - spyglass_engine_start_time_seconds - spyglass_engine_load_duration_seconds"
               f" < {num(hold)})", for_="0m",
               summary=f"{INSTANCE}'s last load took longer than the probe budget.",
               description=f"{INSTANCE} ({LANE}) took {SECONDS} to become ready; the probe gives up after {num(budget)} s."),
         Alert(name="EngineRestartedWhileLoading", severity="critical",
               expr=f'label_replace({spawns}, "instance", "$1", "program", "(.*)") >= 2\n'
               f"  and on (host, instance) (max by (host, instance) (max_over_time(spyglass_engine_ready[{window}])) == 0)\n"
               f"  and on (host, instance) ({loaded_longest})\n"
               f"  unless on (host, instance) {crashed}", for_="0m",
               summary=f"{INSTANCE} is restarted before it ever becomes ready: a probe killing a slow load.",
               description=f"supervisord spawned {INSTANCE} {VALUE} times in {window}; no start reached ready, a start"
               f" loaded over {num(killed_share)} of the probe budget ({num(budget)} s) and no exit had a crash's cause.",
               inhibits_latency=True)),
        diagnosis="Load duration per start, and how long a start that never got ready had been loading when it"
                  " ended: `spyglass changes` (load_seconds, ended_loading_after) and `spyglass crashes`.",
        probe=probe)
