"""An alert's evidence page (spyglass.forensics.evidence) as HTML, the report page's way (its CSS, every
value escaped, inline SVG, nothing fetched), and as text for the terminal. Pure: no I/O."""

from __future__ import annotations

import re
from html import escape
from urllib.parse import quote, urlencode

from spyglass.forensics.charts import svg
from spyglass.forensics.evidence import EvidencePage
from spyglass.forensics.page import CSS
from spyglass.forensics.times import beijing_text, utc_text

EXTRA_CSS = ".links a { margin-right: 10px; font-family: ui-monospace, monospace; } .none { color: #8a6d00; }"


def evidence_path(alertname: str, labels: dict[str, str]) -> str:
    """/evidence/NAME?label=value&...: the page's path, as the rules' evidence_url annotation builds it."""
    query = urlencode(sorted(labels.items()))
    return f"/evidence/{quote(alertname, safe='')}" + (f"?{query}" if query else "")


def both(t) -> str:
    return f"{utc_text(t)[:19].replace('T', ' ')} UTC ({beijing_text(t)[:19].replace('T', ' ')} BJT)"


def notified(page: EvidencePage) -> str:
    note = page.notification
    if note is None:
        return ""
    if note.status == "resolved" and note.ends:
        return f"fired {both(note.starts)}, resolved {both(note.ends)}"
    return f"firing since {both(note.starts)}"


def summary(page: EvidencePage) -> str:
    """The rule's summary with its `{{ $labels.X }}` filled from the page's labels (other templates dropped)."""
    filled = re.sub(
        r"\{\{\s*\$labels\.(\w+)\s*\}\}",
        lambda m: page.labels.get(m.group(1), f"(no {m.group(1)})"),
        page.alert.summary,
    )
    return re.sub(r"\{\{[^}]*\}\}", "…", filled)


def advice(page: EvidencePage) -> list[tuple[str, str]]:
    """The runbook's short advice in the instance's engine's words, or why the heuristic does not apply to it."""
    h = page.heuristic
    if why := page.why_not():
        return [("does not apply", why)]
    return [("usually not", h.wrong_guess), ("check", h.check.text), ("knobs", "; ".join(h.knobs))]


def verdict(page: EvidencePage) -> str:
    if page.findings:
        return (
            f"{len(page.findings)} finding{'s' if len(page.findings) > 1 else ''} of {page.heuristic.id} in the window"
        )
    if not page.events:
        return "Nothing is stored in this window"
    if page.why_not():
        return f"{page.alert.name} does not apply to this instance's engine"
    if page.heuristic.probe is None or page.heuristic.metrics_only(page.engine):
        return f"{page.heuristic.id} is checked by its metrics only"
    return f"No finding of {page.heuristic.id} for these labels in the window" + (
        f" ({page.others} for other labels)" if page.others else ""
    )


def html(page: EvidencePage, trace_base: str = "") -> str:
    """The page; trace links go to `trace_base`/trace/ID (the agent's own page when empty)."""
    a, h = page.alert, page.heuristic
    labels = ", ".join(f"{k}={v}" for k, v in page.labels.items()) or "no labels"
    note = page.notification
    fired = f"<dt>notification</dt><dd>{escape(notified(page))}</dd>" if note else ""
    figures = "".join(
        f"<h3>{escape(f.instance or (f'lane {f.lane}' if f.lane else 'window'))}</h3><p>{escape(f.summary)}</p>"
        "<table><tr><th>figure</th><th>value</th></tr>"
        + "".join(
            f'<tr><td>{escape(k)}</td><td class="num">{v:,}</td></tr>'
            if isinstance(v, int)
            else f'<tr><td>{escape(k)}</td><td class="num">{v:g}</td></tr>'
            for k, v in f.figures.items()
        )
        + "</table>"
        for f in page.findings
    )
    klass = a.severity if page.findings else "ok" if page.events else "warning"
    comparison = ""
    if h.evidence is not None:
        rows = "".join(f"<tr><th>{escape(what)}</th><td>{escape(value)}</td></tr>" for what, value in page.comparison)
        comparison = f"<h2>The comparison: {escape(h.evidence.control)}</h2><p>{escape(h.evidence.text)}</p>" + (
            f'<table class="comparison">{rows}</table>' if rows else ""
        )
    traces = "".join(
        f'<a href="{escape(trace_base)}/trace/{quote(r, safe="")}">{escape(r)}</a>' for r in page.request_ids
    )
    unchecked = "".join(f"<li>{escape(why)}</li>" for why in page.not_checked)
    unchecked = f'<ul class="none">{unchecked}</ul>' if unchecked else "<p>Everything above was checked.</p>"
    drawn = svg(page.chart, page.start, page.end) if page.chart else ""
    query = (
        f"<details><summary>the probe's query</summary><pre>{escape(page.evidence_sql)}</pre></details>"
        if page.evidence_sql
        else ""
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(a.name)}: evidence</title>'
        f"<style>{CSS}{EXTRA_CSS}</style></head><body>\n<h1>{escape(a.name)} <small>{escape(labels)}</small></h1>"
        f'<dl><dt>heuristic</dt><dd>{h.id} {escape(h.title)}</dd><dt>severity</dt><dd class="sev {a.severity}">'
        f"{a.severity}</dd><dt>window (UTC)</dt><dd>{escape(utc_text(page.start))} to {escape(utc_text(page.end))}</dd>"
        f"<dt>window (Beijing)</dt><dd>{escape(beijing_text(page.start))} to {escape(beijing_text(page.end))}</dd>"
        f"{fired}<dt>summary</dt><dd>{escape(summary(page))}</dd></dl>"
        f'<p class="verdict {klass}">{escape(verdict(page))}</p>\n'
        f"<h2>The figures</h2>{figures or '<p>No figures: see below what could not be checked.</p>'}\n"
        f"{comparison}\n<h2>The signal</h2>{drawn}\n"
        f'<h2>Requests behind the figures</h2><p class="links">{traces or "No request ids in this window."}</p>\n'
        f"<h2>Not checked</h2>{unchecked}"
        f'\n<h2>Runbook</h2><p><a href="{escape(page.runbook)}">{escape(page.runbook)}</a></p>'
        + "<dl>"
        + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in advice(page))
        + "</dl>"
        f"{query}<p><small>Generated by spyglass from its store, read-only.</small></p></body></html>\n"
    )


def text(page: EvidencePage) -> list[str]:
    """The page as lines for the terminal (printed as data: no markup read)."""
    a, h = page.alert, page.heuristic
    lines = [
        f"{a.name} {' '.join(f'{k}={v}' for k, v in page.labels.items())}".rstrip(),
        f"heuristic {h.id} {h.title} · severity {a.severity}",
        f"window {utc_text(page.start)} to {utc_text(page.end)} (UTC)",
        f"       {beijing_text(page.start)} to {beijing_text(page.end)} (Beijing)",
    ]
    if page.notification:
        lines.append(f"notification: {notified(page)}")
    lines.append(f"summary: {summary(page)}")
    lines += ["", verdict(page)]
    for f in page.findings:
        lines += ["", f"{f.instance or f.lane or 'window'}: {f.summary}"]
        lines += [f"  {k}: {v:,}" if isinstance(v, int) else f"  {k}: {v:g}" for k, v in f.figures.items()]
    if h.evidence is not None:
        lines += ["", f"comparison ({h.evidence.control}): {h.evidence.text}"]
        lines += [f"  {what}: {value}" for what, value in page.comparison]
    if page.chart:
        for s in page.chart.series:
            values = [v for _, v in s.points]
            if values:
                lines.append(
                    f"chart {s.name}: {len(values)} points, {min(values):g} to {max(values):g} {page.chart.unit}"
                )
    lines += ["", "requests behind the figures (spyglass trace ID):"] + [f"  {r}" for r in page.request_ids or ["none"]]
    lines += ["", "not checked:"] + [
        f"  {why}" for why in page.not_checked or ["nothing: everything above was checked"]
    ]
    lines += ["", f"runbook: {page.runbook}"] + [f"{k}: {v}" for k, v in advice(page)]
    return lines
