"""The report page in a real browser: headless Chromium (Debian's `chromium`) loads the file that
`spyglass diagnose --html` / `spyglass report --html` wrote, with the network off.

What renders is measured in the browser itself: a copy of the page gets a script that writes the
laid-out geometry (charts, tables, marks drawn) into the DOM, and `--dump-dom` returns it. The
screenshot is saved (next to the test's files) and checked to hold the page's colours.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from fixtures.incidents.replay import WINDOWS, write_all
from typer.testing import CliRunner

from spyglass.cli.app import app

CHROMIUM = shutil.which("chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,2000",
]
MEASURE = """<script>
const box = e => { const r = e.getBoundingClientRect(); return [Math.round(r.width), Math.round(r.height)]; };
document.body.setAttribute("data-layout", JSON.stringify({
  charts: [...document.querySelectorAll("svg.chart")].map(s => ({
    title: s.getAttribute("aria-label"), size: box(s), lines: s.querySelectorAll("polyline").length,
    bars: s.querySelectorAll("rect[fill]:not([fill='#fff'])").length,
    markers: s.querySelectorAll("line[stroke-dasharray='3,3']").length,
    plot: (b => [b.x, b.y, b.width, b.height])(s.querySelector("rect[fill='#fff']").getBBox()),
    labels: [...s.querySelectorAll("text.marker")].map(t => (b => [b.x, b.y, b.width, b.height])(t.getBBox())),
    budget: [...s.querySelectorAll("polyline[stroke-dasharray='6,4']")].map(l => l.getAttribute("stroke")),
    ticks: [...s.querySelectorAll("text.tick")].map(t => t.textContent)})),
  rows: [...document.querySelectorAll("table")].map(t => t.rows.length),
  cols: [...document.querySelectorAll("table")].map(t => t.rows[0].cells.length),
  verdict: document.querySelector(".verdict")?.textContent,
  verdictColour: document.querySelector(".verdict") && getComputedStyle(document.querySelector(".verdict")).backgroundColor,
  overflow: document.documentElement.scrollWidth > window.innerWidth,
  resources: performance.getEntriesByType("resource").length}));
</script></body>"""

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spawns")]  # starts processes: the e2e tier


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> str:
    config = write_all(tmp_path_factory.mktemp("incidents"))
    assert CliRunner().invoke(app, ["ingest", "--config", str(config)]).exit_code == 0
    return str(config)


def chromium(page: Path, profile: Path, *args: str) -> str:
    assert CHROMIUM, "Debian's chromium is not installed: run scripts/setup --test"
    done = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def rendered(page: Path, tmp_path: Path) -> dict:
    probe = tmp_path / f"measured-{page.name}"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", MEASURE), encoding="utf-8")
    dom = chromium(probe, tmp_path / "profile-dom", "--dump-dom")
    found = re.search(r'data-layout="([^"]*)"', dom)
    assert found, dom[:2000]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def png_pixels(path: Path) -> tuple[int, int, bytes]:
    """Width, height and the RGBA rows of an 8-bit RGBA PNG, as Chromium writes it (filters undone)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", chunk[:10])
            assert (depth, colour) in ((8, 6), (8, 2)), (depth, colour)
            channels = 4 if colour == 6 else 3
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw, stride, out, previous = zlib.decompress(idat), width * channels, bytearray(), bytearray(width * channels)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += line if channels == 3 else bytes(v for j, v in enumerate(line) if j % 4 != 3)  # RGB, alpha dropped
        previous = line
    return width, height, bytes(out)


def colours(pixels: bytes) -> set[tuple[int, int, int]]:
    return {tuple(pixels[i : i + 3]) for i in range(0, len(pixels), 3 * 7)}


def test_the_diagnosis_page_renders_findings_and_charts_in_chromium(replay, tmp_path):
    start, end = WINDOWS["incident2"]
    page = tmp_path / "diagnosis.html"
    result = CliRunner().invoke(
        app,
        [
            "diagnose",
            "--config",
            replay,
            "--from",
            f"{start:%Y-%m-%d %H:%M}",
            "--to",
            "2026-10-07 09:00",
            "--html",
            str(page),
        ],
    )
    assert result.exit_code == 2, result.output
    html = page.read_text(encoding="utf-8")
    assert not re.search(r"<(script|link|img|iframe)\b|\b(src|href)=", html), "the page must fetch nothing"
    layout = rendered(page, tmp_path)
    assert layout["resources"] == 0 and layout["overflow"] is False
    assert layout["verdict"].endswith("the worst critical") and layout["verdictColour"] == "rgb(248, 215, 218)"
    charts = {c["title"]: c for c in layout["charts"]}
    assert set(charts) == {
        "Engine TTFT, p95 per bucket",
        "Evictions per bucket",  # a parked chart an instance
        "Parked snapshot bytes against the budget, strata-b",
    }
    for chart in charts.values():
        assert chart["size"][0] >= 1200 and chart["size"][1] >= 240
        assert "07:00 UTC" in chart["ticks"] and "15:00 CST" in chart["ticks"]  # both clocks on every axis
    assert charts["Engine TTFT, p95 per bucket"]["lines"] == 1
    assert charts["Evictions per bucket"]["bars"] > 50
    parked = charts["Parked snapshot bytes against the budget, strata-b"]
    assert parked["lines"] == 2 and parked["budget"] == ["#d62728"]  # used bytes, and its own budget in red
    assert [t for t in parked["ticks"] if "iB" in t] == ["2 GiB", "4 GiB", "6 GiB", "8 GiB"]  # binary, round
    assert layout["rows"][0] == 1 + 3  # the findings table: header, H3, H5, H4
    text = re.sub(r"<[^>]+>", " ", chromium(page, tmp_path / "profile-text", "--dump-dom"))
    assert "EngineEvictionStorm" in text and "1,355" in text and "a prefill bug in the engine" in text
    shot = tmp_path / "diagnosis.png"
    chromium(page, tmp_path / "profile-shot", f"--screenshot={shot}")
    width, height, pixels = png_pixels(shot)
    assert (width, height) == (1400, 2000)
    seen = colours(pixels)
    assert (248, 215, 218) in seen  # the critical verdict and severity cells
    assert (31, 119, 180) in seen  # the first series' colour: a chart was drawn


def test_the_report_page_has_the_reports_table_and_restart_markers(replay, tmp_path):
    page = tmp_path / "restarts.html"
    result = CliRunner().invoke(
        app,
        [
            "report",
            "restarts",
            "--config",
            replay,
            "--from",
            "2026-10-19 05:00",
            "--to",
            "2026-10-19 09:00",
            "--html",
            str(page),
        ],
    )
    assert result.exit_code == 0, result.output
    layout = rendered(page, tmp_path)
    assert layout["resources"] == 0 and layout["cols"][0] == 1 + 2  # strata-b and rag-proxy, a row a column
    markers = {c["title"]: c["markers"] for c in layout["charts"]}
    assert set(markers.values()) == {15}  # on every chart: strata-b's 4 spawns, 4 exits, FATAL; rag-proxy's 3 + 3
    assert "wrote " in result.stderr and str(page.resolve()) in result.stderr
    for chart in layout["charts"]:  # 15 markers in 4 hours: the labels that fit, none over another or the axes
        x, y, w, h = chart["plot"]
        boxes = chart["labels"]
        assert boxes, chart["title"]
        assert all(x <= bx and bx + bw <= x + w and y <= by and by + bh <= y + h for bx, by, bw, bh in boxes)
        assert not any(
            a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]
            for i, a in enumerate(boxes)
            for b in boxes[i + 1 :]
        ), chart["title"]


def test_a_wide_report_is_turned_so_no_column_hides_and_numbers_are_separated(replay, tmp_path):
    page = tmp_path / "cache.html"
    result = CliRunner().invoke(app, ["report", "cache", "--config", replay, "--html", str(page)])
    assert result.exit_code == 0, result.output
    layout = rendered(page, tmp_path)
    assert layout["overflow"] is False
    text = re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8"))
    assert "largest_snapshot_bytes" in text and "8,589,934,592" in text  # a row a column, separated
