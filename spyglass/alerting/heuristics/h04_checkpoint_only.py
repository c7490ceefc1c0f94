"""H4: Long prompts restored only from a checkpoint. Incident 2 (123 of 194 prompts >= 200k reused only 16384)."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import (
    INSTANCE,
    LANE,
    PERCENT,
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
from spyglass.alerting.heuristics.promql import CHECKPOINT_ONLY, HOURLY, LONG_PROMPTS, last, num, spoken, sql_interval


def build(d: Deployment) -> Heuristic:
    share, least = 0.5, 10.0
    probe = Probe(
        needs=("engine_log",),
        alert="EngineLongPromptsCheckpointOnly",
        sql=probe_sql(__name__, share=num(share), least=num(least), hourly=sql_interval(HOURLY)),
        summary="{checkpoint_only} of {instance}'s {long_prompts} long prompts reused only a checkpoint (a multiple of"
        " --prompt-cache-every {prompt_cache_every}): their parked snapshots had been evicted.",
        figures=(
            "long_prompts",
            "checkpoint_only",
            "checkpoint_only_share",
            "prompt_cache_every",
            "most_long_prompts_in_an_hour",
        ),
    )
    return Heuristic(
        words={
            "llama_server": Words(
                not_applicable="llama.cpp has no --prompt-cache-every: its host prompt cache (--cache-ram) keeps whole"
                " prompts, so there is no checkpoint-only reuse to count"
            )
        },
        evidence=Evidence(
            control="hour before",
            text="Long prompts restored only from a checkpoint against the hour before.",
            this="{checkpoint_only} of {long_prompts} long prompts reused only a checkpoint",
            series="ttft",
        ),
        id="H4",
        title="Long prompts restored only from a checkpoint",
        incident="2 (123 of 194 prompts >= 200k reused only 16384)",
        symptom="Long prompts (>= signals.long_prompt_tokens) whose reuse is a positive multiple of --prompt-cache-every:"
        " their parked snapshot was evicted and a checkpoint saved only a fraction.",
        wrong_guess="-",
        check=Check(
            text="Share of long prompts with checkpoint-only reuse, and the reuse values themselves.",
            promql=CHECKPOINT_ONLY,
            sql="SELECT instance, reused, count(*) AS prompts FROM events_engine_log"
            f" WHERE kind = 'prompt' AND prompt >= {d.signals.long_prompt_tokens} GROUP BY ALL ORDER BY prompts DESC",
        ),
        knobs=("--prompt-cache-every", "--conversation-cache-mib"),
        thresholds=(
            Threshold(
                name="checkpoint_only_share",
                value=share,
                unit="ratio",
                meaning="share of long prompts restored only from a checkpoint",
            ),
            Threshold(
                name="min_long_prompts",
                value=least,
                unit="prompts/h",
                meaning=f"at least this many long prompts in {spoken(HOURLY)}",
            ),
        ),
        alerts=(
            Alert(
                name="EngineLongPromptsCheckpointOnly",
                severity="warning",
                expr=f"{CHECKPOINT_ONLY} > {num(share)} and on (host, instance, lane) {LONG_PROMPTS} >= {num(least)}",
                for_="15m",
                summary=f"Long prompts on {INSTANCE} are restored only from checkpoints.",
                description=f"{PERCENT} of the long prompts on {INSTANCE} ({LANE}) in {last(HOURLY)} reused only a checkpoint"
                " multiple of --prompt-cache-every.",
            ),
        ),
        probe=probe,
    )
