"""The preview's page and its photograph: the dashboard's panels laid out as one HTML page in the
dashboard's grid (`page`), photographed by headless Chromium (`screenshot`; Debian's `chromium`)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from spyglass.dashboards.lint import panels
from spyglass.dashboards.preview_format import BACKGROUND, BORDER, COLORS, MUTED, PANEL, TEXT, _field
from spyglass.dashboards.preview_panels import _esc, _heatmap, _stat, _table, _timeseries
from spyglass.dashboards.preview_query import Result

NOTICE = "Preview of the dashboard's queries against Prometheus, drawn by spyglass.cli.preview_commands; not Grafana."
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
