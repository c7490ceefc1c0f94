"""The report page: one self-contained HTML file (inline CSS and SVG, nothing fetched) for a window.

It holds the window's findings (or a report's table), and charts of the signals around them:
engine TTFT, evictions, parked bytes against the budget, with restarts and deploys as markers and
findings as shaded spans, on a UTC axis labelled in the display zone's time too. The signal queries go
through spyglass.forensics.run.query like every other forensic query.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any

from spyglass.collectors.clock import display_zone, zone_label
from spyglass.config import Config
from spyglass.forensics.charts import Chart, Marker, Series, human, svg
from spyglass.forensics.output import records
from spyglass.forensics.run import Query, Window, query
from spyglass.forensics.times import local_text, utc_text
from spyglass.terminal.cells import cell

BUCKETS = 120
WIDE_COLUMNS = 8  # a report with more columns than this is turned on its side
BUCKET = "to_timestamp(floor(epoch(ts_utc) / $bucket) * $bucket)"
SIGNALS = {
    "ttft": f"SELECT {BUCKET} AS t, instance, quantile_cont(ttft_ms, 0.95) / 1000 AS v FROM engine_requests"
    " WHERE ttft_ms IS NOT NULL GROUP BY ALL ORDER BY t",
    "evictions": f"SELECT {BUCKET} AS t, instance, count(*) AS v FROM cache_events WHERE event = 'evict'"
    " GROUP BY ALL ORDER BY t",
    "parked": f"SELECT {BUCKET} AS t, instance, max(used_bytes) AS v, max(budget_bytes) AS budget FROM cache_events"
    " WHERE used_bytes IS NOT NULL GROUP BY ALL ORDER BY t",
    "markers": "SELECT ts_utc AS t, program AS instance, event || coalesce(' (' || cause || ')', '') AS label"
    " FROM process_events WHERE event IN ('spawned', 'exited', 'fatal', 'operator_restart', 'switch')"
    " UNION ALL SELECT ts_utc, instance, 'deploy ' || coalesce(version, '') FROM deploys"
    " ORDER BY t LIMIT 500",
}
BUDGET_COLOR = "#d62728"  # the limit, in red: never the colour of the bytes against it
MARKER_COLORS = {"spawned": "#2ca02c", "exited": "#d62728", "fatal": "#000", "deploy": "#9467bd"}
CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px 32px; color: #1d1d1f; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.window { color: #555; margin-bottom: 12px; } .verdict { font-weight: 600; padding: 6px 10px; display: inline-block;
  border-radius: 4px; } .ok { background: #e3f5e1; } .warning { background: #fff3cd; } .critical { background: #f8d7da; }
table { border-collapse: collapse; margin: 6px 0 12px; } th, td { border: 1px solid #ddd; padding: 3px 8px;
  text-align: left; vertical-align: top; } th { background: #f5f5f7; } td.nowrap { white-space: nowrap; } td.num { text-align: right;
  font-variant-numeric: tabular-nums; }
.sev { font-weight: 600; text-transform: uppercase; font-size: 12px; } .sev.critical { color: #a50e0e; }
.sev.warning { color: #8a6d00; } dl { display: grid; grid-template-columns: 10em 1fr; gap: 2px 12px; margin: 6px 0; }
dt { color: #555; } pre { background: #f7f7f9; padding: 8px; overflow-x: auto; font-size: 12px; }
.chart { display: block; margin: 6px 0 14px; max-width: 100%; height: auto; } .chart-title { font-weight: 600; font-size: 14px; }
.tick { font-size: 11px; fill: #555; } .tick.bj { fill: #999; } .legend, .marker { font-size: 11px; }
.marker { paint-order: stroke; stroke: #fff; stroke-width: 3px; }
.wide { overflow-x: auto; max-width: 100%; } .unit { font-size: 11px; fill: #777; } .empty { fill: #aaa; font-size: 13px; }
"""


def bounds(config: Config, w: Window, parquet: str | None = None) -> tuple[datetime, datetime]:
    """The window's ends, or those of the stored events when it is open."""
    if w.start and w.end:
        return w.start, w.end
    _, rows = query(
        config, Query("SELECT min(ts), max(ts) FROM ev WHERE ts >= $from AND ts < $to", w.params()), parquet
    )
    first, last = rows[0] if rows else (None, None)
    now = datetime.now(UTC)

    def aware(t: Any, fallback: datetime) -> datetime:
        if isinstance(t, str):
            t = datetime.fromisoformat(t)
        return (t if t.tzinfo else t.replace(tzinfo=UTC)) if isinstance(t, datetime) else fallback

    start = w.start or aware(first, now - timedelta(hours=1))
    return start, w.end or aware(last, start + timedelta(hours=1)) + timedelta(seconds=1)


def fetch_signals(config: Config, start: datetime, end: datetime, parquet: str | None = None) -> dict[str, list[dict]]:
    params = {"from": start, "to": end, "bucket": max((end - start).total_seconds() / BUCKETS, 1.0)}
    return {name: records(*query(config, Query(sql, params), parquet)) for name, sql in SIGNALS.items()}


def instant(value: Any) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else value


def by_instance(rows: list[dict], column: str = "v") -> list[Series]:
    out: dict[str, list] = {}
    for r in rows:
        if r.get(column) is not None:
            out.setdefault(r["instance"] or "?", []).append((instant(r["t"]), float(r[column])))
    return [Series(name, points) for name, points in sorted(out.items())]


def charts(signals: dict[str, list[dict]], spans: list[tuple[datetime, datetime, str]]) -> list[Chart]:
    markers = [
        Marker(
            instant(r["t"]),
            f"{r['instance'] or ''} {r['label']}".strip(),
            MARKER_COLORS.get(r["label"].split(" ")[0], "#555"),
        )
        for r in signals["markers"]
    ]
    budgets = {s.name: s for s in by_instance(signals["parked"], "budget")}
    parked = [
        Chart(
            f"Parked snapshot bytes against the budget, {s.name}",
            "bytes",
            [
                s,
                *(
                    [
                        Series(
                            f"budget {human(budgets[s.name].points[-1][1], 'bytes')}",
                            budgets[s.name].points,
                            dashed=True,
                            color=BUDGET_COLOR,
                        )
                    ]
                    if s.name in budgets
                    else []
                ),
            ],
            markers,
            spans,
        )
        for s in by_instance(signals["parked"])
    ]  # one chart an instance: each against its own budget
    return [
        Chart("Engine TTFT, p95 per bucket", "s", by_instance(signals["ttft"]), markers, spans),
        Chart(
            "Evictions per bucket",
            "evictions",
            [Series(s.name, s.points, bars=True) for s in by_instance(signals["evictions"])],
            markers,
            spans,
        ),
        *parked,
    ]


def both_clocks(t: datetime | None) -> str:
    return (
        f"{utc_text(t)[:19].replace('T', ' ')} UTC<br><small>{local_text(t)[:19].replace('T', ' ')}"
        f" {zone_label(display_zone(), t)}</small>"
        if t
        else ""
    )


def table_html(rows: list[dict]) -> str:
    """The rows as a table; one with more columns than fit a page is turned (a row a column), so no column
    hides off to the side. Numbers are right-aligned with thousands separators (spyglass.terminal.cells.cell)."""
    if not rows:
        return "<p>No rows.</p>"
    if len(rows[0]) > WIDE_COLUMNS and len(rows) <= WIDE_COLUMNS:
        head = "<th></th>" + "".join(f"<th>row {n}</th>" for n in range(1, len(rows) + 1))
        body = "".join(
            f"<tr><th>{escape(c)}</th>"
            + "".join(
                f'<td class="{"num" if isinstance(r[c], (int, float)) and not isinstance(r[c], bool) else ""}">'
                f"{escape(cell(r[c], c))}</td>"
                for r in rows
            )
            + "</tr>"
            for c in rows[0]
        )
        return f"<table><tr>{head}</tr>{body}</table>"
    head = "".join(f"<th>{escape(c)}</th>" for c in rows[0])
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{"num" if isinstance(v, (int, float)) and not isinstance(v, bool) else ""}">'
            f"{escape(cell(v, c))}</td>"
            for c, v in r.items()
        )
        + "</tr>"
        for r in rows
    )
    return f'<div class="wide"><table><tr>{head}</tr>{body}</table></div>'


def findings_html(diagnosis) -> tuple[str, str]:
    """The verdict and the findings table; and each finding's figures, check and evidence."""
    if not diagnosis.findings:
        return '<p class="verdict ok">No findings: every checked heuristic is quiet in this window.</p>', ""
    worst = diagnosis.findings[0].severity
    rows = "".join(
        f'<tr><td class="sev {f.severity}">{f.severity}</td><td>{f.heuristic}</td><td>{escape(f.alert)}</td>'
        f'<td class="nowrap">{escape(f.instance or (f"lane {f.lane}" if f.lane else ""))}</td>'
        f'<td class="nowrap">{both_clocks(f.start)}</td><td class="nowrap">{both_clocks(f.end)}</td>'
        f"<td>{escape(f.summary)}</td></tr>"
        for f in diagnosis.findings
    )
    out = [
        f'<p class="verdict {worst}">{len(diagnosis.findings)} findings, the worst {worst}</p>',
        "<table><tr><th>severity</th><th>heuristic</th><th>alert</th><th>where</th><th>start</th><th>end</th>"
        f"<th>summary</th></tr>{rows}</table>",
    ]
    details = []
    for f in diagnosis.findings:
        figures = "".join(
            f'<tr><td>{escape(k)}</td><td class="num">{v:,}</td></tr>'
            if isinstance(v, int)
            else f'<tr><td>{escape(k)}</td><td class="num">{v:g}</td></tr>'
            for k, v in f.figures.items()
        )
        details.append(
            f"<h3>{f.heuristic} {escape(f.title)} — {escape(f.instance or f.lane or 'window')}</h3>"
            f"<table><tr><th>figure</th><th>value</th></tr>{figures}</table>"
            f"<dl><dt>usually not</dt><dd>{escape(f.wrong_guess)}</dd><dt>check</dt><dd>{escape(f.check)}</dd>"
            f"<dt>knobs</dt><dd>{escape('; '.join(f.knobs))}</dd></dl>"
            f"<details><summary>evidence: the query</summary><pre>{escape(f.evidence)}</pre></details>"
        )
    return "\n".join(out), "<h2>Each finding</h2>\n" + "\n".join(details)


def page(title: str, start: datetime, end: datetime, body: str, chart_list: list[Chart], after: str = "") -> str:
    window = f"{utc_text(start)} to {utc_text(end)} (UTC) · {local_text(start)} to {local_text(end)} ({display_zone()})"
    drawn = "\n".join(svg(c, start, end) for c in chart_list)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f'<style>{CSS}</style></head><body>\n<h1>{escape(title)}</h1><div class="window">{escape(window)}</div>'
        f"\n{body}\n<h2>Signals around them</h2>\n{drawn}\n{after}\n"
        f"<p><small>Generated by spyglass. Shaded: the findings' spans; dashed lines: restarts and"
        f" deploys.</small></p></body></html>\n"
    )


def diagnosis_page(config: Config, diagnosis) -> str:
    start, end = bounds(config, diagnosis.window, diagnosis.parquet)
    spans = [(f.start, f.end, f"{f.heuristic} {f.summary}") for f in diagnosis.findings if f.start and f.end]
    verdict, details = findings_html(diagnosis)
    return page(
        "spyglass diagnosis",
        start,
        end,
        f"<h2>Findings</h2>\n{verdict}",
        charts(fetch_signals(config, start, end, diagnosis.parquet), spans),
        details,
    )


def report_page(
    config: Config, title: str, doc: str, w: Window, columns: list[str], rows: list[tuple], parquet: str | None = None
) -> str:
    start, end = bounds(config, w, parquet)
    body = f"<h2>{escape(title)}</h2><p>{escape(doc)}</p>\n{table_html(records(columns, rows))}"
    return page(f"spyglass report: {title}", start, end, body, charts(fetch_signals(config, start, end, parquet), []))
