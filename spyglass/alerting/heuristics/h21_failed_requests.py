"""H21: Requests failing or abandoned. llama-server answered 4 requests HTTP 500 (`send_error: task id = N,
error: Context size has been exceeded.`) and a client closed its stream (`stop: cancel task`), and nothing
counted either (issue 37)."""

from __future__ import annotations

from spyglass.alerting.heuristics.model import (
    INSTANCE,
    PERCENT,
    Alert,
    Check,
    Deployment,
    Evidence,
    Heuristic,
    Probe,
    Threshold,
    probe_sql,
)
from spyglass.alerting.heuristics.promql import num, spoken, sql_interval

OUTCOMES = "spyglass_engine_request_outcomes_total"
FAILED = 'outcome=~"error|cancelled"'


def failed_share(window: str, offset: str = "") -> str:
    """The share of an instance's requests that ended in an error or a cancel over `window`."""
    at = f" offset {offset}" if offset else ""
    return (
        f"sum by (host, instance) (increase({OUTCOMES}{{{FAILED}}}[{window}]{at}))\n"
        f"  / (sum by (host, instance) (increase({OUTCOMES}[{window}]{at})) > 0)"
    )


def build(d: Deployment) -> Heuristic:
    share, least, rise = 0.2, 5, 2.0
    window, baseline = "10m", "1h"
    probe = Probe(
        needs=("engine_log",),
        alert="EngineRequestsFailing",
        sql=probe_sql(__name__, share=num(share), least=least, window=sql_interval(window)),
        summary="{failed} of {requests} requests on {instance} ended badly within {window_minutes:g} minutes:"
        " {errors} answered with an error ({reasons}), {cancelled} cancelled by their client.",
        figures=("requests", "failed", "errors", "cancelled", "share", "reasons"),
    )
    return Heuristic(
        evidence=Evidence(
            control="hour before",
            text="Requests ended by an error or a cancel, against the hour before.",
            this="{failed} of {requests} requests failed or were cancelled",
            series="failed",
        ),
        id="H21",
        title="Requests failing or abandoned",
        incident="issue 37: HTTP 500s and a closed stream nobody counted",
        symptom=f"Over {spoken(window)}, more than {num(share * 100)}% of an instance's requests (at least {least})"
        " end in an error or a cancel, at least twice the share of the hour before.",
        wrong_guess="the clients' fault: retry and move on",
        check=Check(
            text="Which outcome and reason dominate (`spyglass requests --outcome error`), and what the engine said"
            " (`spyglass trace ID`): context_exceeded is the context (`-c`, divided by `-np`) against the prompts;"
            " a wave of cancels is clients giving up on slow answers (look at their wait, H5/H12).",
            promql=f"sum by (instance, outcome, reason) (increase({OUTCOMES}[{window}]))",
            sql="SELECT instance, outcome, error_reason, count(*) AS requests FROM engine_requests"
            " GROUP BY ALL ORDER BY requests DESC",
        ),
        knobs=(
            "-c (context size; each of -np slots gets -c / -np unless --kv-unified)",
            "-np (parallel slots)",
            "the clients' timeout and retry policy",
            "--context-shift (let a long generation shift instead of failing)",
        ),
        thresholds=(
            Threshold(
                name="failed_share", value=share, unit="ratio", meaning="share of requests ended by an error or cancel"
            ),
            Threshold(
                name="failed_least", value=least, unit="requests", meaning="failed or cancelled requests at least"
            ),
            Threshold(name="failed_rise", value=rise, unit="x", meaning="times the share of the hour before"),
        ),
        alerts=(
            Alert(
                name="EngineRequestsFailing",
                severity="warning",
                expr=f"(\n  {failed_share(window)}\n) > {num(share)}\n"
                f"  and on (host, instance) sum by (host, instance) (increase({OUTCOMES}{{{FAILED}}}[{window}]))"
                f" >= {least}\n"
                f"  unless on (host, instance) (\n  {failed_share(baseline, window)}\n  )"
                f" * {num(rise)} >= on (host, instance) (\n  {failed_share(window)}\n  )",
                for_="5m",
                summary=f"{INSTANCE} ends a rising share of its requests with an error or a cancel.",
                description=f"{PERCENT} of {INSTANCE}'s requests over {spoken(window)} ended with an error or were"
                f" cancelled by their client, more than {num(rise)}x the hour before: `spyglass requests --outcome"
                " error` names them and their reason.",
            ),
        ),
        probe=probe,
    )
