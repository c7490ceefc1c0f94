"""H15: Dangling model link. Incident upgrade (md5 matched, the link pointed at a deleted file)."""

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
    Words,
    probe_sql,
)
from spyglass.alerting.heuristics.promql import since_path_change


def build(d: Deployment) -> Heuristic:
    probe = Probe(
        needs=("engine_log",),
        alert="EngineModelChecksumMismatch",
        sql=probe_sql(__name__),
        summary="{instance} logged {checksum_mismatches} model checksum mismatches.",
        figures=("checksum_mismatches",),
    )
    return Heuristic(
        words={
            "llama_server": Words(
                metrics_only="llama-server logs no model checksum; the model_path source watches the link"
                " (EngineModelPathDangling)",
                check="Print the path actually read (llama-server's `loading model` line); the blue/green cleanup"
                " timing.",
            )
        },
        evidence=Evidence(
            control="hour before",
            text="Model checksum mismatches against the hour before.",
            this="{checksum_mismatches} checksum mismatches",
        ),
        id="H15",
        title="Dangling model link",
        incident="upgrade (md5 matched, the link pointed at a deleted file)",
        symptom="The configured model path no longer resolves, or resolves elsewhere than at start; a checksum mismatch.",
        wrong_guess="the weights are corrupted",
        check=Check(
            text="Print the path actually read; the blue/green cleanup timing.",
            sql="SELECT ts, instance, path, real, md5"
            " FROM events_engine_log WHERE kind IN ('model', 'checksum_mismatch') ORDER BY ts DESC LIMIT 10",
            shell="readlink -f ~/Strata/current-model.gguf; ls -l ~/Strata/",
        ),
        knobs=("atomic switch: upload, verify, switch the link, clean up only after a rollback period",),
        thresholds=(),
        alerts=(
            Alert(
                name="EngineModelChecksumMismatch",
                severity="warning",
                expr="sum by (host, instance, lane) (increase(spyglass_engine_model_checksum_mismatches_total[1h])) > 0\n"
                # a series born in the hour with its first mismatch counted has no increase to see
                "  or (spyglass_engine_model_checksum_mismatches_total > 0"
                " unless spyglass_engine_model_checksum_mismatches_total offset 1h)",
                for_="0m",
                summary=f"{INSTANCE} read a model file whose md5 does not match.",
                description=f"{INSTANCE} ({LANE}) logged {VALUE} checksum mismatches in the last hour.",
            ),
            Alert(
                name="EngineModelPathDangling",
                severity="critical",
                expr=since_path_change("spyglass_model_path_resolves == 0"),
                for_="1m",
                summary=f"{INSTANCE}'s model path no longer resolves: the next start cannot load.",
                description=f"The configured model path of {INSTANCE} is a dangling link or a missing file; it last changed"
                f" {SECONDS} ago (0: never seen changing). A blue/green cleanup may have raced the switch.",
            ),
            Alert(
                name="EngineModelPathMismatch",
                severity="warning",
                expr=since_path_change("spyglass_model_path_mismatch == 1"),
                for_="10m",
                summary=f"{INSTANCE}'s model path names another file than the running process loaded.",
                description=f"The model path of {INSTANCE} changed {SECONDS} ago and resolves to a different file (path or size)"
                " than the one its running engine loaded; a restart would load another model.",
            ),
        ),
        diagnosis="`spyglass changes` lists the model path, real file and md5 of every start; the model_path"
        " events hold each resolution over time.",
        probe=probe,
    )
