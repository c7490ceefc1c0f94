"""The baseline after a change (H18, `spyglass baseline`): the window after a deploy against the previous
steady state, in numbers rather than "no errors, so fine" (seed §5.3).

The previous steady state is the last hour of the latest earlier start of the instance that reached
ready (a start that died loading has no steady state); the window after is from the deploy's ready
(else its start) for an hour, or until the next start. Compared: TTFT p50 and p99, decode rate, the
engine's error share, prefill queue, graph rebuilds a minute, resident memory. A metric worse than
the heuristic's factor (decode: below 1/factor) is marked worse. The SQL runs through run.query.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from spyglass.config import Config
from spyglass.forensics.changes import Deploy, as_rows, deploys, deploys_query
from spyglass.forensics.run import Query, Window

HOUR = timedelta(hours=1)
METRICS_SQL = """
WITH side AS (SELECT 'before' AS side, $b_from AS lo, $b_to AS hi UNION ALL SELECT 'after', $a_from, $a_to),
r AS (SELECT s.side, e.* FROM engine_requests e JOIN side s ON e.ts_utc >= s.lo AND e.ts_utc < s.hi
      WHERE e.instance = $instance),
q AS (SELECT s.side, c.prefill_queue FROM cache_events c JOIN side s ON c.ts_utc >= s.lo AND c.ts_utc < s.hi
      WHERE c.instance = $instance AND c.event = 'stats'),
g AS (SELECT s.side, count(t.seq) AS n FROM side s LEFT JOIN timeline t ON t.ts_utc >= s.lo AND t.ts_utc < s.hi
      AND t.instance = $instance AND t.source_kind = 'engine_log' AND t.kind = 'graph_rebuild' GROUP BY s.side),
m AS (SELECT s.side, t.rss_bytes AS rss FROM host_samples t
      JOIN side s ON t.ts_utc >= s.lo AND t.ts_utc < s.hi
      WHERE t.instance = $instance AND t.event = 'process')
SELECT side, 'requests' AS metric, count(*)::DOUBLE AS value FROM r GROUP BY side
UNION ALL SELECT side, 'ttft_p50_ms', quantile_cont(ttft_ms, 0.5) FROM r GROUP BY side
UNION ALL SELECT side, 'ttft_p99_ms', quantile_cont(ttft_ms, 0.99) FROM r GROUP BY side
UNION ALL SELECT side, 'decode_tokens_per_second', avg(decode_tps) FROM r GROUP BY side
UNION ALL SELECT side, 'error_share', avg(CASE WHEN rejected_status IS NOT NULL THEN 1.0 ELSE 0.0 END) FROM r GROUP BY side
UNION ALL SELECT side, 'prefill_queue', avg(prefill_queue) FROM q GROUP BY side
UNION ALL SELECT g.side, 'rebuilds_per_minute', g.n / greatest(epoch(s.hi - s.lo) / 60, 1) FROM g JOIN side s USING (side)
UNION ALL SELECT side, 'resident_bytes_max', max(rss)::DOUBLE FROM m GROUP BY side"""
# metric -> (worse when higher?, additive slack below which a change is noise)
METRICS = {
    "ttft_p50_ms": (True, 5.0),
    "ttft_p99_ms": (True, 5.0),
    "decode_tokens_per_second": (False, 0.5),
    "error_share": (True, 0.01),
    "prefill_queue": (True, 1.0),
    "rebuilds_per_minute": (True, 0.5),
    "resident_bytes_max": (True, 2**30),
    "requests": (None, 0.0),
}


@dataclass(frozen=True)
class Windows:
    deploy: Deploy
    steady: Deploy | None
    before: Window
    after: Window


def windows(records: list[Deploy], n: int | None = None) -> Windows:
    """The deploy (number `n`, else the last) with its previous steady state; ValueError if there is no such deploy."""
    if not records:
        raise ValueError("no engine start is stored for this instance")
    chosen = records[-1] if n is None else next((d for d in records if d.n == n), None)
    if chosen is None:
        raise ValueError(f"no deploy {n}: the instance has deploys 1 to {records[-1].n}")
    later = [d for d in records if d.n > chosen.n]
    start = chosen.get("ready_utc") or chosen.at
    after = Window(start, min([start + HOUR, *([later[0].at] if later else [])]))
    steady = next((d for d in reversed(records) if d.n < chosen.n and d.get("ready_utc")), None)
    if steady is None:
        return Windows(chosen, None, Window(chosen.at, chosen.at), after)
    end = next((d.at for d in records if d.n > steady.n), chosen.at)
    return Windows(chosen, steady, Window(max(steady.get("ready_utc"), end - HOUR), end), after)


def metrics_query(w: Windows) -> Query:
    return Query(
        METRICS_SQL,
        {
            "from": w.before.start,
            "to": w.after.end,
            "b_from": w.before.start,
            "b_to": w.before.end,
            "a_from": w.after.start,
            "a_to": w.after.end,
            "instance": w.deploy.instance,
        },
    )


def compare(values: list[dict[str, Any]], factor: float) -> list[dict[str, Any]]:
    """One row a metric: before, after, their ratio, and whether after is worse by more than `factor`."""
    got = {(v["side"], v["metric"]): v["value"] for v in values}
    rows = []
    for metric, (higher_worse, slack) in METRICS.items():
        before, after = got.get(("before", metric)), got.get(("after", metric))
        verdict = ""
        if before is not None and after is not None and higher_worse is not None:
            if higher_worse:
                worse = (
                    after > factor * before + slack if metric != "resident_bytes_max" else after > 1.2 * before + slack
                )
            else:
                worse = after < before / factor - slack
            verdict = "worse" if worse else "ok"
        ratio = round(after / before, 3) if before and after is not None else None
        rows.append({"metric": metric, "before": before, "after": after, "ratio": ratio, "verdict": verdict})
    return rows


def factor_of(config: Config) -> float:
    from spyglass.alerting.heuristics import Deployment, catalogue

    return next(h for h in catalogue(Deployment.of(config)) if h.id == "H18").threshold("factor")


def baseline(config: Config, instance: str, n: int | None = None) -> tuple[Windows, list[dict[str, Any]]]:
    """The windows and the comparison for one deploy of `instance` (QueryError, ValueError)."""
    from spyglass.forensics.run import query

    rows = as_rows(*query(config, deploys_query(Window(), instance)))
    w = windows(deploys(rows, config.alerts.probe_budget_seconds), n)
    return w, compare(as_rows(*query(config, metrics_query(w))), factor_of(config))


def describe(w: Windows) -> str:
    def span(x: Window) -> str:
        return f"{x.start:%Y-%m-%d %H:%M}Z to {x.end:%H:%M}Z"

    head = f"{w.deploy.instance} deploy {w.deploy.n} (started {w.deploy.at:%Y-%m-%d %H:%M:%S}Z)"
    if w.steady is None:
        return f"{head}: no earlier start reached ready, so there is no steady state to compare with"
    return f"{head}: after {span(w.after)} against deploy {w.steady.n}'s steady state {span(w.before)}"
