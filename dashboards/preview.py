"""A picture of a dashboard from real data, without Grafana: every panel's queries (variables
substituted) run through Prometheus's HTTP API and are drawn in the dashboard's grid with their
titles, units and thresholds. The picture says it is a preview of the queries, not Grafana.

    python -m dashboards.preview --prometheus http://127.0.0.1:9090 --from now-1h --to now --out wall.png

Querying (`run_queries`) and drawing (`draw`) are separate: the tests check the first's results.
"""
from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from dashboards.lint import panels, substitute
from dashboards.model import GENERATED

NOTICE = "Preview of the dashboard's queries against Prometheus, drawn by dashboards.preview; not Grafana."
COLORS = {"green": "#56a64b", "orange": "#ff9830", "red": "#e02f44", "blue": "#3274d9", "text": "#ccccdc"}
BACKGROUND, PANEL, TEXT, MUTED = "#111217", "#181b1f", "#ccccdc", "#8e8e8e"
LINE_COLORS = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a"]


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
        response = client.get("/api/v1/query", params={"query": expr, "time": end})
    else:
        response = client.get("/api/v1/query_range", params={"query": expr, "start": start, "end": end, "step": step})
    body = response.json()
    if body.get("status") != "success":
        raise ValueError(body.get("error") or f"HTTP {response.status_code}")
    out = []
    for item in body["data"]["result"]:
        points = item.get("values") or ([item["value"]] if "value" in item else [])
        out.append(Series(item["metric"], [float(t) for t, _ in points], [float(v) for _, v in points]))
    return out


def run_queries(dashboard: dict[str, Any], prometheus: str, start: float, end: float, *, scrape_seconds: float = 15.0,
                points: int = 240, values: dict[str, str] | None = None) -> dict[int, list[Result]]:
    """Panel id -> each of its queries' results, the variables substituted as Grafana would."""
    step = max(1.0, math.ceil((end - start) / points))
    results: dict[int, list[Result]] = {}
    with httpx.Client(base_url=prometheus, timeout=30) as client:
        for panel in panels(dashboard):
            for target in panel.get("targets", []):
                expr = substitute(target["expr"], step_seconds=step, scrape_seconds=scrape_seconds,
                                  range_seconds=end - start, values=values)
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


def fmt(value: float, unit: str) -> str:
    if value is None or math.isnan(value):
        return "—"
    if math.isinf(value):
        return "∞"
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


def _steps(panel: dict[str, Any]) -> list[tuple[float, str]]:
    steps = panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps") or []
    return [(-math.inf if s.get("value") is None else s["value"], s.get("color", "green")) for s in steps]


def color_for(panel: dict[str, Any], value: float) -> str:
    color = "green"
    for bound, c in _steps(panel):
        if value >= bound:
            color = c
    return COLORS.get(color, color)


def mapped(panel: dict[str, Any], value: float) -> tuple[str, str] | None:
    for mapping in panel.get("fieldConfig", {}).get("defaults", {}).get("mappings") or []:
        for key, result in (mapping.get("options") or {}).items():
            if mapping.get("type") == "value" and _number(key) == value:
                return result.get("text", key), COLORS.get(result.get("color", ""), result.get("color", MUTED))
    return None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# Drawing.
# ---------------------------------------------------------------------------------------------

def _last(series: Series) -> float:
    finite = [v for v in series.values if not math.isnan(v)]
    return finite[-1] if finite else math.nan


def _draw_stat(ax, panel, results: list[Result]) -> None:
    unit = panel["fieldConfig"]["defaults"].get("unit", "")
    tiles = [(legend(r.legend, s.labels), _last(s)) for r in results for s in r.series]
    if not tiles:
        text = panel["fieldConfig"]["defaults"].get("noValue") or "No data"
        ax.add_patch(_rect(ax, 0, 0, 1, 1, COLORS["red"] if text != "No data" else PANEL))
        ax.text(0.5, 0.5, text, ha="center", va="center", color="white", fontsize=18, weight="bold")
        return
    cols = min(len(tiles), 4 if len(tiles) > 4 else len(tiles))
    rows = math.ceil(len(tiles) / cols)
    for i, (name, value) in enumerate(tiles):
        col, row = i % cols, i // cols
        x0, y0, w, h = col / cols, 1 - (row + 1) / rows, 1 / cols, 1 / rows
        hit = mapped(panel, value)
        text, color = hit if hit else (fmt(value, unit), color_for(panel, value))
        ax.add_patch(_rect(ax, x0 + 0.01, y0 + 0.02, w - 0.02, h - 0.04, color))
        size = max(8, min(26, 60 / max(cols, rows)))
        ax.text(x0 + w / 2, y0 + h * 0.55, text, ha="center", va="center", color="white", fontsize=size, weight="bold")
        if len(tiles) > 1 or name != "value":
            ax.text(x0 + w / 2, y0 + h * 0.18, name[:28], ha="center", va="center", color="white",
                    fontsize=max(6, size / 2.6))


def _rect(ax, x, y, w, h, color):
    from matplotlib.patches import FancyBboxPatch

    return FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0,rounding_size=0.02", transform=ax.transAxes,
                          facecolor=color, edgecolor="none")


def _draw_timeseries(ax, panel, results: list[Result], start: float, end: float) -> None:
    from matplotlib.ticker import FuncFormatter

    unit = panel["fieldConfig"]["defaults"].get("unit", "")
    i = 0
    for r in results:
        for s in r.series:
            ax.plot([t - end for t in s.times], s.values, lw=1.6, color=LINE_COLORS[i % len(LINE_COLORS)],
                    label=legend(r.legend, s.labels)[:32])
            i += 1
    for bound, color in _steps(panel):
        if not math.isinf(bound):
            ax.axhline(bound, color=COLORS.get(color, color), ls="--", lw=1.2)
    ax.set_xlim(start - end, 0)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v, unit)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: datetime.fromtimestamp(end + v).strftime("%H:%M:%S")))
    ax.tick_params(colors=MUTED, labelsize=7)
    ax.grid(color="#2c3235", lw=0.5)
    for spine in ax.spines.values():
        spine.set_visible(False)
    if i:
        ax.legend(loc="upper left", fontsize=6, frameon=False, labelcolor=TEXT, ncol=2 if i > 3 else 1)
    else:
        ax.text(0.5, 0.5, "No data", transform=ax.transAxes, ha="center", va="center", color=MUTED)


def _draw_heatmap(ax, panel, results: list[Result], start: float, end: float) -> None:
    series = [s for r in results for s in r.series if "le" in s.labels]
    if not series:
        ax.text(0.5, 0.5, "No data", transform=ax.transAxes, ha="center", va="center", color=MUTED)
        ax.axis("off")
        return
    bounds = sorted({float(s.labels["le"]) for s in series})
    times = sorted({t for s in series for t in s.times})
    index = {t: i for i, t in enumerate(times)}
    cumulative = [[0.0] * len(times) for _ in bounds]
    for s in series:
        row = bounds.index(float(s.labels["le"]))
        for t, v in zip(s.times, s.values):
            cumulative[row][index[t]] += v
    cells = [[cumulative[b][t] - (cumulative[b - 1][t] if b else 0) for t in range(len(times))] for b in range(len(bounds))]
    unit = panel["fieldConfig"]["defaults"].get("unit", "")
    ax.imshow(cells, aspect="auto", origin="lower", cmap="inferno", interpolation="nearest",
              extent=(times[0] - end, times[-1] - end, 0, len(bounds)))
    ticks = list(range(0, len(bounds), max(1, len(bounds) // 5)))
    ax.set_yticks([t + 0.5 for t in ticks], [fmt(bounds[t], unit) for t in ticks])
    ax.set_xlim(start - end, 0)
    ax.tick_params(colors=MUTED, labelsize=7)


def _draw_table(ax, panel, results: list[Result]) -> None:
    rows = []
    for r in results:
        for s in r.series:
            labels = "  ".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "__name__")
            rows.append(f"{labels}   {fmt(_last(s), panel['fieldConfig']['defaults'].get('unit', ''))}")
    if not rows:
        rows = [panel["fieldConfig"]["defaults"].get("noValue") or "No data"]
    for i, row in enumerate(rows[:12]):
        ax.text(0.02, 0.92 - i * 0.08, row[:110], transform=ax.transAxes, color=TEXT, fontsize=7, family="monospace")
    ax.axis("off")


def draw(dashboard: dict[str, Any], results: dict[int, list[Result]], start: float, end: float, out: Path,
         width_px: int = 1920, dpi: int = 100) -> Path:
    """The dashboard's panels in its grid (24 columns), each from its query results."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = list(panels(dashboard))
    height_units = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in drawn)
    header = 1.6  # grid units for the title and the notice
    unit_px = width_px / 24 * 0.55
    fig = plt.figure(figsize=(width_px / dpi, (height_units + header) * unit_px / dpi), dpi=dpi, facecolor=BACKGROUND)
    total = height_units + header
    fig.text(0.005, 1 - 0.5 / total, dashboard["title"], color=TEXT, fontsize=16, weight="bold", va="center")
    fig.text(0.995, 1 - 0.5 / total, NOTICE, color=COLORS["orange"], fontsize=10, ha="right", va="center")
    fig.text(0.005, 1 - 1.15 / total, f"{datetime.fromtimestamp(start):%Y-%m-%d %H:%M:%S} to "
             f"{datetime.fromtimestamp(end):%H:%M:%S}", color=MUTED, fontsize=9, va="center")
    for p in drawn:
        g = p["gridPos"]
        left, bottom = g["x"] / 24, 1 - (header + g["y"] + g["h"]) / total
        w, h = g["w"] / 24, g["h"] / total
        if p.get("type") == "row":
            fig.text(left + 0.004, bottom + h / 2, p.get("title", ""), color=TEXT, fontsize=11, weight="bold",
                     va="center")
            continue
        frame = fig.add_axes((left + 0.002, bottom + 0.004, w - 0.004, h - 0.008), facecolor=PANEL)
        frame.set_xticks([])
        frame.set_yticks([])
        for spine in frame.spines.values():
            spine.set_color("#2c3235")
        unit = p["fieldConfig"]["defaults"].get("unit", "")
        frame.text(0.01, 0.985, p.get("title", ""), transform=frame.transAxes, color=TEXT, fontsize=9,
                   weight="bold", va="top")
        frame.text(0.99, 0.985, f"unit: {unit}", transform=frame.transAxes, color=MUTED, fontsize=6, va="top",
                   ha="right")
        title_h = min(0.3, 0.9 / g["h"])
        pad = 0.16 if p["type"] in ("timeseries", "heatmap") else 0.03  # room for the y-axis labels
        inner = fig.add_axes((left + pad * w, bottom + 0.09 * h, w * (0.97 - pad), h * (1 - title_h) - 0.1 * h),
                             facecolor=PANEL)
        data = results.get(p["id"], [])
        errors = [r.error for r in data if r.error]
        if errors:
            inner.text(0.5, 0.5, "query error: " + errors[0][:80], transform=inner.transAxes, ha="center",
                       va="center", color=COLORS["red"], fontsize=7, wrap=True)
            inner.axis("off")
        elif p["type"] == "stat":
            inner.set_xlim(0, 1)
            inner.set_ylim(0, 1)
            inner.axis("off")
            _draw_stat(inner, p, data)
        elif p["type"] == "timeseries":
            _draw_timeseries(inner, p, data, start, end)
        elif p["type"] == "heatmap":
            _draw_heatmap(inner, p, data, start, end)
        else:
            _draw_table(inner, p, data)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, facecolor=BACKGROUND, dpi=dpi)
    plt.close(fig)
    return out


def load(dashboard: str) -> dict[str, Any]:
    path = Path(dashboard)
    if not path.exists():
        path = GENERATED / f"{dashboard}.json"
    return json.loads(path.read_text())


def main(prometheus: Annotated[str, typer.Option(help="Prometheus base URL")],
         out: Annotated[Path, typer.Option(help="PNG file to write")],
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
    draw(board, results, t0, t1, out)
    failed = sum(1 for rs in results.values() for r in rs if r.error)
    typer.echo(f"{out}: {len(results)} panels, {failed} queries failed")


if __name__ == "__main__":
    typer.run(main)
