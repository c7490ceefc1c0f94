"""H20: Engine hung while /health answers. Incident vLLM 39863: a proxy kept a hung backend in rotation for 85 minutes."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import (
    INSTANCE,
    SECONDS,
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
from spyglass.alerting.heuristics.promql import PROGRESS_SILENCE, busy


def build(d: Deployment) -> Heuristic:
    minutes = d.settings.hung_minutes
    probe = Probe(
        needs=("engine_log", "serve_status"),
        alert="EngineHung",
        sql=probe_sql(__name__, minutes=minutes),
        summary="{instance} finished no request and wrote no [stats] line for {silent_minutes:g} minutes while its"
        " serve said ready with {queued} queued and {busy} slots busy; it logged {queued_lines} requests queued"
        " meanwhile.",
        figures=("silent_minutes", "queued", "busy", "queued_lines"),
    )
    return Heuristic(
        words={
            "llama_server": Words(
                not_applicable="it reads the Strata serve's ready state and the [stats] heartbeat; a hung llama-server"
                " stops answering /health (spyglass_llama_up 0: SpyglassSourceDown)"
            )
        },
        evidence=Evidence(
            control="hour before",
            text="Time without a finished request while work waited, against the hour before.",
            this="{silent_minutes:g} minutes with nothing finished and {queued} queued",
            series="decode",
        ),
        id="H20",
        title="Engine hung while /health answers",
        incident="vLLM 39863: a proxy kept a hung backend in rotation for 85 minutes",
        symptom=f"Requests queued or slots busy, but no request finished and no [stats] line for {minutes} minutes, while the"
        " process runs and the serve says ready.",
        wrong_guess="just slow: long prompts",
        check=Check(
            text="The engine log's last [stats] and done times against the queue; a prompt far from the window"
            " limit; the process CPU time (flat = hung, rising = working).",
            promql="rate(spyglass_host_process_cpu_seconds_total[5m])",
            shell="tail -n 5 ~/Strata/strata-iq3_xxs-b.log; grep -E 'State|ctxt' /proc/$(pgrep -f 'port 8082')/status",
        ),
        knobs=("restart the instance (take it out of rotation first)", "a liveness probe on the stats heartbeat"),
        thresholds=(
            Threshold(
                name="hung_minutes",
                value=minutes,
                unit="min",
                meaning="no finished request and no [stats] line",
                setting="alerts.hung_minutes",
            ),
        ),
        alerts=(
            Alert(
                name="EngineHung",
                severity="critical",
                expr=f"{PROGRESS_SILENCE} > {minutes * 60}\n  and on (host, instance) ({busy()})\n"
                "  and on (host, instance) (spyglass_host_process_up == 1)\n"
                '  and on (host, instance) (spyglass_serve_state{state="ready"} == 1)\n'
                "  unless on (host, instance)"
                f" (sum by (host, instance) (increase(spyglass_engine_requests_finished_total[{minutes}m])) > 0)",
                for_="1m",
                summary=f"{INSTANCE} is hung: work waiting, nothing finishing, no [stats] line.",
                description=f"{INSTANCE} has finished no request and written no [stats] line for {SECONDS} with requests"
                " queued or slots busy, while its process runs and its serve says ready (queued lines are no sign of life).",
            ),
        ),
        probe=probe,
    )
