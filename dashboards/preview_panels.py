"""The preview's panels: each kind (stat, timeseries, heatmap, table) drawn as HTML and SVG from its
query results, in its box of the grid."""

from __future__ import annotations

import html
import math
from datetime import datetime
from typing import Any

from spyglass.dashboards.preview_format import (
    BORDER,
    LINE_COLORS,
    TEXT,
    _field,
    _steps,
    color,
    color_for,
    fmt,
    legend,
    mapped,
)
from spyglass.dashboards.preview_query import Result, Series


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _last(series: Series) -> float:
    finite = [v for v in series.values if not math.isnan(v)]
    return finite[-1] if finite else math.nan


def _sparkline(series: Series) -> str:
    values = [v for v in series.values if not math.isnan(v)]
    if len(values) < 2:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    points = " ".join(
        f"{i / (len(values) - 1) * 100:.2f},{100 - (v - low) / span * 90:.2f}" for i, v in enumerate(values)
    )
    return (
        f'<svg viewBox="0 0 100 100" preserveAspectRatio="none"><polyline points="{points}" fill="none" '
        f'stroke="{LINE_COLORS[2]}" stroke-opacity=".5" stroke-width="2" vector-effect="non-scaling-stroke"/></svg>'
    )


def _stat(panel: dict[str, Any], results: list[Result], box: tuple[int, int]) -> str:
    options = panel.get("options", {})
    mode = options.get("colorMode", "background")
    tiles = [(r.ref, legend(r.legend, s.labels), _last(s), s) for r in results for s in r.series]
    if not tiles:
        config = _field(panel)
        text = config.get("noValue") or "No data"
        background = color_for(config, math.inf * -1) if config.get("noValue") else "transparent"
        return (
            f'<div class="tiles" style="grid-template-columns: 1fr"><div class="tile" data-name="" data-value=""'
            f' data-text="{_esc(text)}" style="background:{background}"><div class="value" style="font-size:'
            f'{min(64, box[1] // 3)}px">{_esc(text)}</div></div></div>'
        )
    cols = len(tiles) if len(tiles) <= 4 else math.ceil(math.sqrt(len(tiles) * box[0] / max(box[1], 1)))
    cols = max(1, min(cols, len(tiles)))
    rows = math.ceil(len(tiles) / cols)
    tile_w, tile_h = box[0] / cols, box[1] / rows
    shown = []
    for ref, name, value, series in tiles:
        config = _field(panel, ref)
        hit = mapped(config, value)
        shown.append(
            (
                name,
                value,
                series,
                config,
                *(hit if hit else (fmt(value, config.get("unit", "")), color_for(config, value))),
            )
        )
    # As Grafana's auto size: as large as the tile allows for the longest text, the same on every tile.
    longest = max(3, *(len(text) for *_, text, _ in shown))
    size = int(max(14, min(tile_h * 0.45, (tile_w - 16) / (0.75 * longest), 150)))
    out = []
    for name, value, series, _config, text, background in shown:
        style = f"background:{background}" if mode != "none" else "color:" + TEXT
        show_name = options.get("textMode") == "value_and_name" or len(tiles) > 1
        spark = _sparkline(series) if options.get("graphMode") == "area" else ""
        out.append(
            f'<div class="tile" data-name="{_esc(name)}" data-value="{value}" data-text="{_esc(text)}"'
            f' style="{style}">{spark}<div class="value" style="font-size:{size}px">{_esc(text)}</div>'
            + (f'<div class="name" style="font-size:{max(12, size // 3)}px">{_esc(name)}</div>' if show_name else "")
            + "</div>"
        )
    return f'<div class="tiles" style="grid-template-columns: repeat({cols}, 1fr)">{"".join(out)}</div>'


def _nice_step(span: float, unit: str, ticks: int = 4) -> float:
    """A round tick step: 1, 2, 2.5 or 5 times a power of ten; for bytes a power of two (8 GiB, 16 GiB)."""
    raw = span / ticks
    if unit in ("bytes", "Bps"):
        return float(2 ** math.ceil(math.log2(raw)))
    if unit == "s" and raw >= 60:  # whole minutes, then whole hours
        return float(
            next(
                (m for m in (60, 120, 300, 600, 900, 1800, 3600) if m >= raw),
                3600 * 2 ** math.ceil(math.log2(raw / 3600)),
            )
        )
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)


def _lines(panel: dict[str, Any], results: list[Result]) -> list[tuple[str, Series, str, bool]]:
    """Each series drawn: its legend, itself, its colour (its query's fixed one, else the palette's next) and
    whether it is dashed."""
    lines: list[tuple[str, Series, str, bool]] = []
    for r in results:
        config = _field(panel, r.ref)
        fixed = (config.get("color") or {}).get("fixedColor")
        dash = (config.get("custom.lineStyle") or {}).get("fill") == "dash"
        for s in r.series:
            pick = color(fixed) if fixed else LINE_COLORS[len(lines) % len(LINE_COLORS)]
            lines.append((legend(r.legend, s.labels), s, pick, dash))
    return lines


def _y_axis(panel: dict[str, Any], values: list[float], unit: str) -> tuple[float, float, float]:
    """The value axis over `values`: its low and high ends and its tick step, the high end a whole step."""
    values = values or [0.0]  # series whose every point is NaN (0/0): drawn on an empty axis, as Grafana does
    low = min(0.0, min(values)) if _field(panel).get("min") is not None else min(values)
    high = max(values)
    high = high if high > low else low + 1.0
    step = _nice_step(high - low, unit)
    return low, math.ceil(high / step) * step, step


def _timeseries(panel: dict[str, Any], results: list[Result], box: tuple[int, int], start: float, end: float) -> str:
    unit = _field(panel).get("unit", "")
    lines = _lines(panel, results)
    thresholds = [(v, c) for v, c in _steps(_field(panel)) if not math.isinf(v)]
    values = [v for _, s, _, _ in lines for v in s.values if not math.isnan(v) and not math.isinf(v)]
    values += [v for v, _ in thresholds]
    if not lines:
        return '<div class="nodata">No data</div>'
    legend_rows = math.ceil(len(lines) / max(1, box[0] // 190))
    width, height = box[0], box[1] - 18 * legend_rows - 4
    left, bottom, top, right = 70, 18, 6, 8
    low, high, step = _y_axis(panel, values, unit)
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(t: float) -> float:
        return left + (t - start) / max(end - start, 1e-9) * plot_w

    def y(v: float) -> float:
        return top + (1 - (v - low) / (high - low)) * plot_h

    parts = [f'<svg class="chart" width="{width}" height="{height}" aria-label="{_esc(panel.get("title", ""))}">']
    tick = low
    while tick <= high + step / 2:
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="{BORDER}"/>'
            f'<text class="tick" x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">{_esc(fmt(tick, unit))}</text>'
        )
        tick += step
    for i in range(5):
        t = start + (end - start) * i / 4
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        parts.append(
            f'<text class="tick" x="{x(t):.1f}" y="{height - 3}" text-anchor="{anchor}">'
            f"{datetime.fromtimestamp(t):%H:%M:%S}</text>"
        )
    for value, c in thresholds:
        parts.append(
            f'<line class="threshold" data-value="{value}" x1="{left}" x2="{width - right}" y1="{y(value):.1f}"'
            f' y2="{y(value):.1f}" stroke="{color(c)}" stroke-opacity=".75" stroke-width="1.5" stroke-dasharray="6,5"/>'
        )
    for name, s, c, dash in lines:
        points = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(s.times, s.values) if not math.isnan(v))
        parts.append(
            f'<polyline class="series" data-name="{_esc(name)}" data-last="{_last(s)}" points="{points}"'
            f' fill="none" stroke="{c}" stroke-width="2"' + (' stroke-dasharray="8,6"' if dash else "") + "/>"
        )
    parts.append("</svg>")
    keys = "".join(
        f'<span class="{"dashed" if dash else ""}" style="--c:{c}">{_esc(name[:40])}</span>'
        for name, _, c, dash in lines
    )
    return "".join(parts) + f'<div class="legend">{keys}</div>'


def _heatmap(panel: dict[str, Any], results: list[Result], box: tuple[int, int], start: float, end: float) -> str:
    series = [s for r in results for s in r.series if "le" in s.labels]
    if not series:
        return '<div class="nodata">No data</div>'
    bounds = sorted({float(s.labels["le"]) for s in series})
    times = sorted({t for s in series for t in s.times})
    index = {t: i for i, t in enumerate(times)}
    cumulative = [[0.0] * len(times) for _ in bounds]
    for s in series:
        row = bounds.index(float(s.labels["le"]))
        for t, v in zip(s.times, s.values):
            cumulative[row][index[t]] += 0.0 if math.isnan(v) else v
    cells = [
        [cumulative[b][t] - (cumulative[b - 1][t] if b else 0) for t in range(len(times))] for b in range(len(bounds))
    ]
    peak = max((v for row in cells for v in row), default=0) or 1.0
    width, height = box[0], box[1]
    w, h = width / max(len(times), 1), height / len(bounds)
    rects = [
        f'<rect x="{i * w:.1f}" y="{height - (b + 1) * h:.1f}" width="{w + 0.5:.1f}" height="{h + 0.5:.1f}"'
        f' fill="#ff780a" fill-opacity="{min(1.0, v / peak):.2f}"/>'
        for b, row in enumerate(cells)
        for i, v in enumerate(row)
        if v > 0
    ]
    return f'<svg class="chart" width="{width}" height="{height}">{"".join(rects)}</svg>'


def _columns(panel: dict[str, Any], rows: list[dict[str, str | float]]) -> list[tuple[str, str]]:
    """(label, header) of each column the table shows, after its `organize` transformation."""
    names = sorted({k for row in rows for k in row if k not in ("__name__", "Value")}) + ["Value"]
    renamed: dict[str, str] = {}
    for transformation in panel.get("transformations", []):
        options = transformation.get("options", {})
        if transformation.get("id") == "filterFieldsByName":
            include = set((options.get("include") or {}).get("names") or names)
            names = [n for n in names if n in include]
        elif transformation.get("id") == "organize":
            index = options.get("indexByName") or {}
            names = [n for n in names if not (options.get("excludeByName") or {}).get(n)]
            names.sort(key=lambda n: index.get(n, len(index)))
            renamed = options.get("renameByName") or {}
    return [(n, renamed.get(n, n)) for n in names]


def _table(panel: dict[str, Any], results: list[Result], box: tuple[int, int], end: float) -> str:
    rows: list[dict[str, str | float]] = [{**s.labels, "Value": _last(s)} for r in results for s in r.series]
    if not rows:
        text = _field(panel).get("noValue") or "No data"
        return f'<div class="nodata" data-text="{_esc(text)}" style="font-size:28px">{_esc(text)}</div>'
    columns = _columns(panel, rows)
    for transformation in panel.get("transformations", []):
        if transformation.get("id") == "sortBy":
            by = transformation["options"]["sort"][0]["field"]
            label = next((n for n, header in columns if header == by), by)
            rows.sort(key=lambda row: str(row.get(label, "")))
    large = panel.get("options", {}).get("cellHeight") == "lg"
    size = 26 if large else 13
    head = "".join(f"<th>{_esc(header)}</th>" for _, header in columns)
    body = []
    for row in rows:
        cells = []
        for name, _ in columns:
            config = _field(panel, name=name)
            value = row.get(name, "")
            text = fmt(value, config.get("unit", ""), end) if isinstance(value, float) else str(value)
            hit = mapped(config, value)
            if hit and (config.get("custom.cellOptions") or {}).get("type") == "color-background":
                cells.append(
                    f'<td class="coloured" data-column="{_esc(name)}" style="background:{hit[1]}">{_esc(hit[0])}</td>'
                )
            else:
                wrap = ' style="white-space:normal"' if (config.get("custom.cellOptions") or {}).get("wrapText") else ""
                cells.append(f'<td data-column="{_esc(name)}"{wrap}>{_esc(hit[0] if hit else text)}</td>')
        body.append(f'<tr class="row">{"".join(cells)}</tr>')
    return (
        f'<table style="font-size:{size}px"><thead style="font-size:{max(12, size * 2 // 3)}px"><tr>{head}</tr>'
        f"</thead><tbody>{''.join(body)}</tbody></table>"
    )
