"""H13: Restart loop. Incident upgrade (crashes within minutes; rolling back seemed to fix it)."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import (
    INSTANCE,
    SECONDS,
    VALUE,
    Alert,
    Check,
    Deployment,
    Evidence,
    Heuristic,
    Probe,
    Threshold,
    Words,
    probe_sql,
)


def build(d: Deployment) -> Heuristic:
    s = d.settings
    window = f"{s.crash_loop_window_minutes}m"
    planned = 900  # seconds after an announced restart during which its latency alerts are expected
    probe = Probe(
        needs=("supervisord_log|supervisord_rpc|engine_log",),
        alert="ProgramCrashLoop",
        also=("EngineRestartLoop",),  # the row of an engine that no supervisord watches
        sql=probe_sql(
            __name__, crash_loop_window_minutes=s.crash_loop_window_minutes, crash_loop_spawns=s.crash_loop_spawns
        ),
        summary="{instance} started {spawns} times ({restarts} restarts, {most_spawns_in_window} within"
        f" {window}, {{counted_by}}); {{unexpected_exits}} unexpected exits ({{exit_causes}}); {{fatal}} FATAL.",
        figures=(
            "spawns",
            "restarts",
            "unexpected_exits",
            "core_dumps",
            "fatal",
            "most_spawns_in_window",
            "exit_causes",
        ),
    )
    spawns = f"max_over_time(spyglass_supervisord_spawns_total[{window}]) - min_over_time(spyglass_supervisord_spawns_total[{window}])"
    starts = (
        f"sum by (host, instance) (max_over_time(spyglass_engine_starts_total[{window}])"
        f" - min_over_time(spyglass_engine_starts_total[{window}]))"
    )
    supervised = 'label_replace(spyglass_supervisord_spawns_total, "instance", "$1", "program", "(.*)")'
    return Heuristic(
        words={
            "llama_server": Words(
                symptom=f"llama-server starts {s.crash_loop_spawns}+ times in {window} (its log's start banner, or"
                " supervisord's spawns), or supervisord gives it up (FATAL).",
                wrong_guess="the model file is broken",
                check_query=Check(
                    text="The exit reason and the last log lines before each start: a failed load (`E` lines ending"
                    " in `exiting due to model loading error`), an out-of-memory kill (dmesg), or a signal; then the"
                    " same build with the previous model, and the previous build with this model.",
                    promql=starts,
                    sql="SELECT ts, instance, kind, build, component, message FROM events_engine_log"
                    " WHERE kind IN ('start', 'error') ORDER BY ts DESC LIMIT 30",
                    shell="journalctl -u llama-server -n 200 --no-pager  # or the file given to --log-file",
                ),
                knobs=(
                    "systemd Restart= / StartLimitBurst= (or supervisord startretries / startsecs)",
                    "-m / --model, -c and -ngl: what the load needs in memory",
                    "the build pinned with the model",
                ),
            )
        },
        evidence=Evidence(
            control="hour before",
            text="Spawns of the program against the hour before.",
            this="{spawns} spawns, {restarts} restarts; exits {exit_causes}",
            series="spawns",
        ),
        id="H13",
        title="Restart loop",
        incident="upgrade (crashes within minutes; rolling back seemed to fix it)",
        symptom=f"A program is spawned (or an engine's log shows a start) {s.crash_loop_spawns}+ times in {window},"
        " or enters FATAL.",
        wrong_guess="the new model is broken",
        check=Check(
            text="2x2 old/new model x old/new environment; the exit reason and the last log lines before it.",
            sql="SELECT ts, program, kind, status, signal"
            " FROM events_supervisord_log WHERE kind IN ('spawned', 'exited', 'fatal') ORDER BY ts DESC LIMIT 30",
            shell="tail -n 200 ~/Strata/strata-iq3_xxs-b.log",
        ),
        knobs=("supervisord startretries / startsecs", "the environment (image, libraries) pinned with the model"),
        thresholds=(
            Threshold(
                name="spawns",
                value=s.crash_loop_spawns,
                unit="spawns",
                meaning="spawns in the window",
                setting="alerts.crash_loop_spawns",
            ),
            Threshold(
                name="window_minutes",
                value=s.crash_loop_window_minutes,
                unit="min",
                meaning="crash-loop window",
                setting="alerts.crash_loop_window_minutes",
            ),
            Threshold(
                name="planned_restart_seconds",
                value=planned,
                unit="s",
                meaning="an announced restart silences latency alerts this long",
            ),
        ),
        alerts=(
            Alert(
                name="ProgramCrashLoop",
                severity="critical",
                expr=f'label_replace({spawns}, "instance", "$1", "program", "(.*)") >= {s.crash_loop_spawns}',
                for_="0m",
                summary=f"{INSTANCE} is restarting in a loop.",
                description=f"supervisord spawned {INSTANCE} {VALUE} times in {window}.",
                keep_firing_for="10m",
                inhibits_latency=True,
            ),
            Alert(
                name="EngineRestartLoop",
                severity="critical",
                expr=f"{starts} >= {s.crash_loop_spawns} unless on (host, instance) {supervised}",
                for_="0m",
                summary=f"{INSTANCE} is restarting in a loop (its log shows each start).",
                description=f"{INSTANCE} started {VALUE} times in {window}, by its own log; no supervisord watches"
                " it (systemd, a container, a shell loop), so ProgramCrashLoop cannot.",
                keep_firing_for="10m",
                inhibits_latency=True,
            ),
            Alert(
                name="ProgramFatal",
                severity="critical",
                expr='label_replace(spyglass_supervisord_process_state{state="FATAL"}, "instance", "$1", "program", "(.*)") == 1',
                for_="0m",
                summary=f"{INSTANCE} entered FATAL: supervisord gave up restarting it.",
                description=f"{INSTANCE} is FATAL: it exited too quickly too many times.",
                inhibits_latency=True,
            ),
            Alert(
                name="EnginePlannedRestart",
                severity="info",
                expr=f"time() - spyglass_switch_last_change_timestamp_seconds < {planned}",
                for_="0m",
                summary=f"{INSTANCE} was switched or restarted by an operator (switch log).",
                description=f"The switch log announced a switch or restart of {INSTANCE} {SECONDS} ago; its latency and"
                " throughput alerts are silenced meanwhile.",
                inhibits_latency=True,
            ),
        ),
        probe=probe,
    )
