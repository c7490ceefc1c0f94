"""H7: Serve build skew between lanes. Incident 3 (the normal lane got the fix only at 10-19 18:58)."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import (
    INSTANCE,
    Alert,
    Check,
    Deployment,
    Evidence,
    Heuristic,
    Probe,
    Words,
    probe_sql,
)


def build(d: Deployment) -> Heuristic:
    hold_minutes = 30  # as long as ServeBuildSkew waits
    probe = Probe(
        needs=("serve_status",),
        alert="ServeBuildSkew",
        sql=probe_sql(__name__, hold_minutes=hold_minutes),
        summary="{instance}'s serve ({serve_version}) reported no prompt_escapes for {minutes_without_fix:g}"
        " minutes ({polls_without_fix} polls) while {fixed_instance}'s ({fixed_version}) did: its lane runs"
        " without the special-token escape fix.",
        figures=("polls_without_fix", "minutes_without_fix"),
    )
    return Heuristic(
        words={
            "llama_server": Words(
                not_applicable="it compares the Strata serve's build per lane; llama-server has no serve layer (its build"
                " is spyglass_llama_build_info, from /props)"
            )
        },
        evidence=Evidence(
            control="other instance",
            text="The serve build without the escape fix against the instance that reports it.",
            this="{instance}: serve {serve_version}, no prompt_escapes for {minutes_without_fix:g} minutes",
            other="{fixed_instance}: serve {fixed_version}",
        ),
        id="H7",
        title="Serve build skew between lanes",
        incident="3 (the normal lane got the fix only at 10-19 18:58)",
        symptom="One lane runs a serve build without the escape fix (no prompt_escapes in its status) while another has it.",
        wrong_guess="-",
        check=Check(
            text="Build and version per lane, side by side.",
            promql="spyglass_serve_info or spyglass_serve_measures_escapes",
            shell="curl -s http://127.0.0.1:8081/v1/status; curl -s http://127.0.0.1:8082/v1/status",
        ),
        knobs=("deploy the fixed serve build to every lane",),
        thresholds=(),
        alerts=(
            Alert(
                name="ServeBuildSkew",
                severity="warning",
                expr="spyglass_serve_measures_escapes == 0 and on (host) (max by (host) (spyglass_serve_measures_escapes) == 1)",
                for_=f"{hold_minutes}m",
                summary=f"{INSTANCE} runs a serve build without the special-token escape fix.",
                description=f"{INSTANCE}'s serve does not report prompt_escapes while another lane's does.",
            ),
        ),
        probe=probe,
    )
