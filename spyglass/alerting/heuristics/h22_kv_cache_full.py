"""H22: KV cache full: requests split or refused for lack of KV space. llama-server's log filled with
`decode: failed to find a memory slot for batch of size N` and `failed to find free space in the KV cache,
retrying with smaller batch size` (123 lines in one run), read as log drift, while requests were answered
500 `Context size has been exceeded.` (issue 37)."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import (
    INSTANCE,
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
from spyglass.alerting.heuristics.promql import spoken, sql_interval

PRESSURE = "spyglass_engine_kv_pressure_events_total"


def build(d: Deployment) -> Heuristic:
    splits, window = 20, "10m"
    probe = Probe(
        needs=("engine_log",),
        alert="EngineKVCacheFull",
        sql=probe_sql(__name__, splits=splits, window=sql_interval(window)),
        summary="{instance}'s KV cache was full. Decodes refused at batch size 1: {refused} (requests answered"
        " `Context size has been exceeded.`: {failed}); batches split and retried: {retries}; context shifts:"
        " {shifts}; cached prompts that did not fit back: {restores}.",
        figures=("refused", "failed", "retries", "shifts", "restores"),
    )
    return Heuristic(
        evidence=Evidence(
            control="hour before",
            text="KV-cache pressure lines (memory slot, batch retry, context full), against the hour before.",
            this="{refused} decodes refused, {retries} batches split",
            series="kv_pressure",
        ),
        id="H22",
        title="KV cache full: requests split or refused",
        incident="issue 37: 123 KV-full lines read as drift while requests failed with HTTP 500",
        symptom=f"llama-server finds no room in its KV cache: it halves its batch and retries (at least {splits} times"
        f" in {spoken(window)}), or at batch size 1 gives up and answers every request in the batch 500.",
        wrong_guess="the log format drifted (the lines were unreadable before) / the model is too slow",
        check=Check(
            text="The KV cache's size against what the slots hold: `-c` cells shared by `-np` slots (each gets"
            " -c/-np, or all share one pool with --kv-unified), the prompts' and generations' lengths"
            " (`spyglass requests`), and whether failures follow the bursts (`spyglass requests --outcome error`).",
            promql=f"sum by (instance, event) (increase({PRESSURE}[{window}]))",
            sql="SELECT instance, kind, count(*) AS lines FROM timeline WHERE kind IN"
            " ('kv_no_slot', 'kv_retry', 'decode_failed', 'context_shift', 'cache_restore_failed') GROUP BY ALL",
            shell="grep -cE 'failed to find (a memory slot|free space in the KV cache)' /var/log/llama/llama-a.log",
        ),
        knobs=(
            "-c (more KV cells; memory grows with it)",
            "-np (fewer slots share the cells: each holds more)",
            "--cache-type-k q8_0 / --cache-type-v q8_0 (half the bytes a cell, so more cells fit)",
            "--kv-unified (one pool for all slots: a long request may use an idle slot's share; or off, so"
            " one slot's overflow cannot fail the others)",
            "--cache-ram (host prompt cache: restoring an entry needs free cells too)",
        ),
        thresholds=(
            Threshold(name="kv_splits", value=splits, unit="retries", meaning="batches split and retried for KV space"),
        ),
        alerts=(
            Alert(
                name="EngineKVCacheFull",
                severity="critical",
                expr=f'sum by (host, instance) (increase({PRESSURE}{{event="context_full"}}[{window}])) > 0\n'
                f'  or sum by (host, instance) (increase({PRESSURE}{{event="batch_retry"}}[{window}])) >= {splits}',
                for_="1m",
                summary=f"{INSTANCE}'s KV cache is full: requests are split or refused.",
                description=f"{INSTANCE} logged {VALUE} KV-full events over {spoken(window)}: decodes refused at batch"
                f" size 1 (the requests in the batch answered 500) or at least {splits} batches halved for lack of"
                " KV cells. The cells are -c shared by -np slots.",
            ),
        ),
        probe=probe,
    )
