"""A picture of a dashboard from real data, without Grafana: every panel's queries (variables
substituted) run through Prometheus's HTTP API, laid out as an HTML page in the dashboard's grid
(titles, units, thresholds, value mappings, per-query colours and the table's column transformations,
as the generated JSON says), and photographed by headless Chromium (Debian's `chromium`). The page
says it is a preview of the queries, not Grafana.

    python -m spyglass.dashboards.preview --prometheus http://127.0.0.1:9090 --from now-1h --to now --out wall.png

Querying (`run_queries`), laying out (`page`) and photographing (`screenshot`) are separate: the
tests check the first's results and read what the browser rendered of the second.
"""

from __future__ import annotations

import html
import json
import math
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from spyglass.dashboards.lint import panels, substitute
from spyglass.dashboards.model import GENERATED

NOTICE = "Preview of the dashboard's queries against Prometheus, drawn by dashboards.preview; not Grafana."
# Grafana's dark theme: its named colours, and the palette it gives series without one of their own.
COLORS = {
    "green": "#56a64b",
    "orange": "#ff9830",
    "red": "#e02f44",
    "blue": "#3274d9",
    "text": "#464c54",
    "purple": "#a352cc",
    "yellow": "#e0b400",
}
BACKGROUND, PANEL, TEXT, MUTED, BORDER = "#111217", "#181b1f", "#ccccdc", "#8e8e8e", "#2c3235"
LINE_COLORS = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a"]
UNIT_PX, HEADER_PX = 34, 44  # one grid unit (Grafana: 30 px and a gap); the page's title line
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
]


@dataclass
class Series:
    labels: dict[str, str]
    times: list[float]
    values: list[float]


@dataclass
class Result:
    """What one query of a panel returned: its series, or the error Prometheus gave."""

    ref: str
    expr: str
    legend: str
    series: list[Series] = field(default_factory=list)
    error: str = ""


def parse_time(text: str, now: float | None = None) -> float:
    """Unix seconds, ISO 8601, `now` or `now-30m` / `now-6h` / `now-2d`."""
    now = time.time() if now is None else now
    m = re.fullmatch(r"now(?:-(\d+)([smhd]))?", text.strip())
    if m:
        return now - (int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)] if m.group(1) else 0)
    try:
        return float(text)
    except ValueError:
        return datetime.fromisoformat(text).timestamp()


def _query(client: httpx.Client, expr: str, start: float, end: float, step: float, instant: bool) -> list[Series]:
    if instant:
        response = client.post("/api/v1/query", data={"query": expr, "time": end})
    else:
        response = client.post("/api/v1/query_range", data={"query": expr, "start": start, "end": end, "step": step})
    body = response.json()
    if body.get("status") != "success":
        raise ValueError(body.get("error") or f"HTTP {response.status_code}")
    out = []
    for item in body["data"]["result"]:
        points = item.get("values") or ([item["value"]] if "value" in item else [])
        out.append(Series(item["metric"], [float(t) for t, _ in points], [float(v) for _, v in points]))
    return out


def run_queries(
    dashboard: dict[str, Any],
    prometheus: str,
    start: float,
    end: float,
    *,
    scrape_seconds: float = 15.0,
    points: int = 240,
    values: dict[str, str] | None = None,
) -> dict[int, list[Result]]:
    """Panel id -> each of its queries' results, the variables substituted as Grafana would."""
    step = max(1.0, math.ceil((end - start) / points))
    results: dict[int, list[Result]] = {}
    with httpx.Client(base_url=prometheus, timeout=30) as client:
        for panel in panels(dashboard):
            for target in panel.get("targets", []):
                expr = substitute(
                    target["expr"],
                    step_seconds=step,
                    scrape_seconds=scrape_seconds,
                    range_seconds=end - start,
                    values=values,
                )
                result = Result(target.get("refId", ""), expr, target.get("legendFormat", ""))
                try:
                    result.series = _query(client, expr, start, end, step, bool(target.get("instant")))
                except (ValueError, httpx.HTTPError) as exc:
                    result.error = str(exc)
                results.setdefault(panel["id"], []).append(result)
    return results


# ---------------------------------------------------------------------------------------------
# Formatting as Grafana's units do (the few the dashboards use).
# ---------------------------------------------------------------------------------------------


def _si(value: float, base: float = 1000, units: tuple[str, ...] = ("", "k", "M", "G", "T", "P")) -> str:
    i = 0
    while abs(value) >= base and i < len(units) - 1:
        value, i = value / base, i + 1
    return f"{value:.3g}{units[i]}"


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def fmt(value: float, unit: str, now: float | None = None) -> str:
    """The value as Grafana's unit shows it; `dateTimeFromNow` reads epoch milliseconds against `now`."""
    if value is None or math.isnan(value):
        return "—"
    if math.isinf(value):
        return "∞"
    if unit == "dateTimeFromNow":
        return _ago(max(0.0, (time.time() if now is None else now) - value / 1000))
    if unit == "s":
        if abs(value) >= 3600:
            return f"{value / 3600:.3g} h"
        if abs(value) >= 60:
            return f"{value / 60:.3g} min"
        return f"{value * 1000:.3g} ms" if 0 < abs(value) < 1 else f"{value:.3g} s"
    if unit in ("bytes", "Bps"):
        text = _si(value, 1024, ("B", "KiB", "MiB", "GiB", "TiB", "PiB"))
        return text + ("/s" if unit == "Bps" else "")
    if unit == "percentunit":
        return f"{value * 100:.3g}%"
    if unit == "x":
        return f"{value:.3g}x"
    if unit == "reqps":
        return _si(value) + " req/s"
    if unit == "ops":
        return _si(value) + " ops/s"
    if unit.startswith("suffix:"):
        return _si(value) + unit.removeprefix("suffix:")
    return _si(value)


def legend(fmt_: str, labels: dict[str, str]) -> str:
    if not fmt_ or fmt_ == "__auto":
        return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt_)


def color(name: str) -> str:
    return COLORS.get(name, name)


def _field(panel: dict[str, Any], ref: str = "", name: str = "") -> dict[str, Any]:
    """The panel's field config for one query (`ref`) or one column (`name`): defaults and the
    overrides that match it, as Grafana merges them."""
    config = dict(panel.get("fieldConfig", {}).get("defaults", {}))
    for override in panel.get("fieldConfig", {}).get("overrides", []):
        matcher = override.get("matcher", {})
        if (matcher.get("id") == "byFrameRefID" and matcher.get("options") == ref and ref) or (
            matcher.get("id") == "byName" and matcher.get("options") == name and name
        ):
            for prop in override.get("properties", []):
                config[prop["id"]] = prop.get("value")
    return config


def _steps(config: dict[str, Any]) -> list[tuple[float, str]]:
    steps = (config.get("thresholds") or {}).get("steps") or []
    return [(-math.inf if s.get("value") is None else s["value"], s.get("color", "green")) for s in steps]


def color_for(config: dict[str, Any], value: float) -> str:
    chosen = "green"
    for bound, c in _steps(config):
        if not math.isnan(value) and value >= bound:
            chosen = c
    return color(chosen)


def mapped(config: dict[str, Any], value: float | str) -> tuple[str, str] | None:
    """(text, colour) of the value mapping that matches `value`, if one does."""
    for mapping in config.get("mappings") or []:
        for key, result in (mapping.get("options") or {}).items():
            hit = key == value if isinstance(value, str) else _number(key) == value
            if mapping.get("type") == "value" and hit:
                return result.get("text", key), color(result.get("color", MUTED))
    return None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# The page: each panel an absolutely placed box of the 24-column grid.
# ---------------------------------------------------------------------------------------------

CSS = f"""
* {{ box-sizing: border-box; margin: 0; padding: 0; }}
body {{ background: {BACKGROUND}; color: {TEXT}; font-family: "DejaVu Sans", Inter, Helvetica, Arial, sans-serif; }}
header {{ height: {HEADER_PX}px; display: flex; align-items: center; justify-content: space-between; padding: 0 10px; }}
header h1 {{ font-size: 20px; }} header .notice {{ color: {COLORS["orange"]}; font-size: 13px; }}
header .window {{ color: {MUTED}; font-size: 13px; margin-left: 14px; }}
.panel {{ position: absolute; background: {PANEL}; border: 1px solid {BORDER}; border-radius: 3px;
          display: flex; flex-direction: column; overflow: hidden; }}
.panel h2 {{ font-size: 15px; font-weight: 600; padding: 6px 8px 4px; white-space: nowrap; overflow: hidden;
             text-overflow: ellipsis; }}
.body {{ flex: 1; position: relative; min-height: 0; padding: 2px 6px 6px; }}
.tiles {{ display: grid; gap: 6px; height: 100%; }}
.tile {{ border-radius: 3px; display: flex; flex-direction: column; align-items: center; justify-content: center;
         position: relative; overflow: hidden; color: #fff; }}
.tile .value {{ font-weight: 700; line-height: 1.05; z-index: 1; }}
.tile .name {{ z-index: 1; opacity: .92; }}
.tile svg {{ position: absolute; left: 0; bottom: 0; width: 100%; height: 45%; }}
.nodata {{ color: {MUTED}; display: flex; align-items: center; justify-content: center; height: 100%; font-size: 18px; }}
.error {{ color: {COLORS["red"]}; font-size: 12px; padding: 8px; }}
table {{ border-collapse: collapse; width: 100%; }}
th {{ text-align: left; color: {MUTED}; font-weight: 600; border-bottom: 1px solid {BORDER}; padding: 4px 8px; }}
td {{ padding: 4px 8px; border-bottom: 1px solid {BORDER}; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }}
td.coloured {{ color: #fff; font-weight: 700; }}
.legend {{ display: flex; flex-wrap: wrap; gap: 2px 14px; font-size: 12px; padding: 2px 4px 0; }}
.legend span::before {{ content: ""; display: inline-block; width: 14px; height: 3px; margin-right: 5px;
                         vertical-align: middle; background: var(--c); }}
.legend span.dashed::before {{ background: repeating-linear-gradient(90deg, var(--c) 0 4px, transparent 4px 7px); }}
svg text {{ fill: {MUTED}; font-size: 11px; }}
"""


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


def _timeseries(panel: dict[str, Any], results: list[Result], box: tuple[int, int], start: float, end: float) -> str:
    unit = _field(panel).get("unit", "")
    lines: list[tuple[str, Series, str, bool]] = []
    for r in results:
        config = _field(panel, r.ref)
        fixed = (config.get("color") or {}).get("fixedColor")
        dash = (config.get("custom.lineStyle") or {}).get("fill") == "dash"
        for s in r.series:
            pick = color(fixed) if fixed else LINE_COLORS[len(lines) % len(LINE_COLORS)]
            lines.append((legend(r.legend, s.labels), s, pick, dash))
    thresholds = [(v, c) for v, c in _steps(_field(panel)) if not math.isinf(v)]
    values = [v for _, s, _, _ in lines for v in s.values if not math.isnan(v) and not math.isinf(v)]
    values += [v for v, _ in thresholds]
    if not lines:
        return '<div class="nodata">No data</div>'
    values = values or [0.0]  # series whose every point is NaN (0/0): drawn on an empty axis, as Grafana does
    legend_rows = math.ceil(len(lines) / max(1, box[0] // 190))
    width, height = box[0], box[1] - 18 * legend_rows - 4
    left, bottom, top, right = 70, 18, 6, 8
    low = min(0.0, min(values)) if _field(panel).get("min") is not None else min(values)
    high = max(values) if values else 1.0
    high = high if high > low else low + 1.0
    step = _nice_step(high - low, unit)
    high = math.ceil(high / step) * step
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


def page(
    dashboard: dict[str, Any], results: dict[int, list[Result]], start: float, end: float, width_px: int = 1920
) -> str:
    """The dashboard's panels as one HTML page (no script, nothing fetched), each in its grid place."""
    drawn = [p for p in panels(dashboard)]
    height_units = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in drawn)
    unit_w = width_px / 24
    boxes = []
    for p in drawn:
        g = p["gridPos"]
        left, top = round(g["x"] * unit_w) + 3, HEADER_PX + g["y"] * UNIT_PX + 3
        w, h = round(g["w"] * unit_w) - 6, g["h"] * UNIT_PX - 6
        if p.get("type") == "row":
            boxes.append(
                f'<div class="row" style="position:absolute;left:{left}px;top:{top}px">{_esc(p.get("title", ""))}</div>'
            )
            continue
        inner = (w - 14, h - 34)
        data = results.get(p["id"], [])
        errors = [r.error for r in data if r.error]
        if errors:
            content = f'<div class="error">query error: {_esc(errors[0][:300])}</div>'
        elif p["type"] == "stat":
            content = _stat(p, data, inner)
        elif p["type"] == "timeseries":
            content = _timeseries(p, data, inner, start, end)
        elif p["type"] == "heatmap":
            content = _heatmap(p, data, inner, start, end)
        else:
            content = _table(p, data, inner, end)
        unit = _field(p).get("unit", "")
        boxes.append(
            f'<section class="panel" data-id="{p["id"]}" data-type="{p["type"]}" data-title="{_esc(p.get("title", ""))}"'
            f' style="left:{left}px;top:{top}px;width:{w}px;height:{h}px">'
            f'<h2 title="unit: {_esc(unit)}">{_esc(p.get("title", ""))}</h2><div class="body">{content}</div></section>'
        )
    window = f"{datetime.fromtimestamp(start):%Y-%m-%d %H:%M:%S} to {datetime.fromtimestamp(end):%H:%M:%S}"
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{_esc(dashboard["title"])}</title>'
        f'<style>{CSS}</style></head><body><header><div><h1 style="display:inline">{_esc(dashboard["title"])}</h1>'
        f'<span class="window">{window}</span></div><span class="notice">{_esc(NOTICE)}</span></header>'
        + "".join(boxes)
        + f'<div style="height:{height_units * UNIT_PX}px"></div></body></html>'
    )


def size_of(dashboard: dict[str, Any], width_px: int = 1920) -> tuple[int, int]:
    """The window that shows the whole page: the grid's height in units, and the header."""
    units = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels(dashboard))
    return width_px, HEADER_PX + units * UNIT_PX + 4


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        raise FileNotFoundError(
            "chromium not found: the preview is photographed by headless Chromium "
            "(Debian's chromium package; scripts/setup --test installs it)"
        )
    return found


def browse(page_path: Path, size: tuple[int, int], *args: str, timeout: float = 180) -> str:
    """Run headless Chromium on a local page (a profile of its own, nothing fetched); its stdout."""
    with tempfile.TemporaryDirectory(prefix="spyglass-chromium-") as profile:
        done = subprocess.run(
            [
                chromium(),
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={size[0]},{size[1]}",
                *args,
                page_path.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    if done.returncode != 0:
        raise RuntimeError(f"chromium failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def screenshot(page_path: Path, out: Path, size: tuple[int, int]) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    browse(page_path, size, f"--screenshot={out.resolve()}")
    if not out.exists():
        raise RuntimeError(f"chromium wrote no screenshot to {out}")
    return out


def draw(
    dashboard: dict[str, Any],
    results: dict[int, list[Result]],
    start: float,
    end: float,
    out: Path,
    width_px: int = 1920,
) -> Path:
    """The dashboard drawn from its query results: `out` as a PNG photographed by Chromium, and the
    page it shows next to it (`out` with .html)."""
    html_path = out.with_suffix(".html")
    html_path.parent.mkdir(parents=True, exist_ok=True)
    html_path.write_text(page(dashboard, results, start, end, width_px), encoding="utf-8")
    return screenshot(html_path, out, size_of(dashboard, width_px))


def load(dashboard: str) -> dict[str, Any]:
    path = Path(dashboard)
    if not path.exists():
        path = GENERATED / f"{dashboard}.json"
    return json.loads(path.read_text())


def main(
    prometheus: Annotated[str, typer.Option(help="Prometheus base URL")],
    out: Annotated[Path, typer.Option(help="PNG file to write (the HTML page goes next to it)")],
    start: Annotated[str, typer.Option("--from", help="unix seconds, ISO 8601 or now-1h")] = "now-1h",
    end: Annotated[str, typer.Option("--to", help="unix seconds, ISO 8601 or now")] = "now",
    dashboard: Annotated[str, typer.Option(help="uid in dashboards/generated or a JSON file")] = "spyglass-wall",
    scrape_interval: Annotated[float, typer.Option(help="seconds; for $__rate_interval")] = 15.0,
    var: Annotated[list[str] | None, typer.Option(help="NAME=VALUE, a template variable (default All)")] = None,
) -> None:
    """Draw a dashboard from Prometheus data: a preview of its queries, not Grafana."""
    now = time.time()
    t0, t1 = parse_time(start, now), parse_time(end, now)
    if t1 <= t0:
        raise typer.BadParameter("--to must be after --from")
    values = dict(v.split("=", 1) for v in var or [])
    board = load(dashboard)
    results = run_queries(board, prometheus, t0, t1, scrape_seconds=scrape_interval, values=values)
    try:
        draw(board, results, t0, t1, out)
    except (FileNotFoundError, RuntimeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    failed = sum(1 for rs in results.values() for r in rs if r.error)
    typer.echo(f"{out}: {len(results)} panels, {failed} queries failed")


if __name__ == "__main__":
    typer.run(main)
