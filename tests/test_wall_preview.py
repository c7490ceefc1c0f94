"""The wall as a person sees it, healthy and during an incident: the emulated stack under supervisord
(strata-b's 8 GiB cache, strata-a's 64 GiB, each engine pinned to a CPU of its own), the spyglass
agent (`spyglass run`) reading every source of it, Debian's Prometheus scraping the agent every
second and evaluating the rules `spyglass rules` writes for this deployment (on the emulator's clock,
`alerts.time_scale` 0.01, as tests/test_pager_e2e.py), and the wall generated for the same
deployment, its queries run through Prometheus's API and its page photographed by headless Chromium.

What the browser rendered is read back from the page (a script added to a copy of it writes every
tile's text and computed colour, every table cell and every chart's series and threshold lines into
the DOM, `--dump-dom` returns it), and the screenshot's pixels are counted for Grafana's red.

Healthy (the `healthy` scenario): no red anywhere, the critical count 0 and green, the list of what
fires is what Prometheus fires. During the eviction storm (the `eviction-storm` scenario, until
Prometheus fires EngineEvictionStorm): the count tile is critical and red, a red area a person sees,
the storm is in the list with strata-b, since when and its summary in letters readable across a room,
and strata-b's eviction panel is past its threshold line while strata-a's is not. The incident's
picture is docs/wall.png (`SPYGLASS_WALL_PNG=docs/wall.png` writes it there).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import tomli_w
from conftest import wait_until
from live_prometheus import ProcessGroups, query, scraping, start_prometheus

from spyglass.alerting.heuristics import Deployment
from spyglass.alerting.rules import write as write_rules
from spyglass.config import AlertsConfig, parse_config
from spyglass.dashboards.model import Board
from spyglass.dashboards.preview_page import browse, draw, size_of
from spyglass.dashboards.preview_query import run_queries
from spyglass.engine.emulator.scenarios import SCENARIOS, run_scenario
from spyglass.engine.emulator.stack import Stack
from spyglass.ports import free_port, free_port_base

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spawns")]  # starts processes: the e2e tier
ROOT = Path(__file__).resolve().parents[1]
JOB = AlertsConfig().job
# The pager test's deployment: the emulator's clock, and lanes whose objective suits book-length prompts.
ALERTS = {
    "time_scale": 0.01,
    "evaluation_interval_seconds": 1,
    "hung_minutes": 1,
    "lanes": {"fast": {"ttft_seconds": 640.0}, "normal": {"ttft_seconds": 640.0}},
}
# Each engine pinned to a CPU of its own: both on every CPU would be shared CPUs (H2) in every run.
PINNED = {"strata-a": {"affinity": [0]}, "strata-b": {"affinity": [(os.cpu_count() or 1) - 1]}}
RED = "rgb(224, 47, 68)"  # Grafana's red (#e02f44), the preview's critical colour
ORANGE = "rgb(255, 152, 48)"
MEASURE = """<script>
const px = e => parseFloat(getComputedStyle(e).fontSize);
const bg = e => getComputedStyle(e).backgroundColor;
document.body.setAttribute("data-seen", JSON.stringify([...document.querySelectorAll("section.panel")].map(p => ({
  title: p.dataset.title, type: p.dataset.type,
  tiles: [...p.querySelectorAll(".tile")].map(t => ({name: t.dataset.name, text: t.dataset.text,
    background: bg(t), size: t.querySelector(".value") ? px(t.querySelector(".value")) : 0})),
  rows: [...p.querySelectorAll("tr.row")].map(r => Object.fromEntries([...r.cells].map(c =>
    [c.dataset.column, {text: c.textContent, background: bg(c), size: px(c)}]))),
  nodata: p.querySelector(".nodata")?.textContent || "",
  series: [...p.querySelectorAll("polyline.series")].map(l => ({name: l.dataset.name, last: +l.dataset.last,
    points: l.getAttribute("points").split(" ").length})),
  thresholds: [...p.querySelectorAll("line.threshold")].map(l => +l.dataset.value),
  bottom: p.getBoundingClientRect().bottom}))));
</script></body>"""


@dataclass
class Seen:
    """What one rendering of the wall showed: per panel title, what the browser laid out."""

    panels: dict[str, dict]
    red_pixels: int
    pixels: int
    png: Path

    def tiles(self, title: str) -> dict[str, dict]:
        return {t["name"]: t for t in self.panels[title]["tiles"]}

    def reds(self) -> list[str]:
        found = [
            f"{p['title']}: tile {t['name']!r} {t['text']}"
            for p in self.panels.values()
            for t in p["tiles"]
            if t["background"] == RED
        ]
        return found + [
            f"{p['title']}: cell {c['text']}"
            for p in self.panels.values()
            for r in p["rows"]
            for c in r.values()
            if c["background"] == RED
        ]


def firing(api: str) -> set[tuple[str, str]]:
    alerts = httpx.get(f"{api}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    return {
        (a["labels"]["alertname"], a["labels"].get("instance", ""))
        for a in alerts
        if a["state"] == "firing" and a["labels"]["alertname"] != "Watchdog"
    }


class Wall:
    """The stack, the agent and Prometheus of this test, and the wall for their deployment."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.group = folder, ProcessGroups()
        storm = SCENARIOS["eviction-storm"]
        patch = {name: {**PINNED[name], **storm.engine_patch.get(name, {})} for name in PINNED}
        # The gateway counts with the engine's tokenizer (no standing estimate skew, H10) and publishes
        # each infer record at once (a counter first seen at its final value has no increase to see).
        self.stack = Stack(
            folder / "stack", free_port_base(), patch, {"estimate_by_engine": True, "segment_records": 1}
        )
        self.listen, self.port = f"127.0.0.1:{free_port()}", free_port()
        self.api = f"http://127.0.0.1:{self.port}"
        document = tomllib.loads(self.stack.spyglass_toml(folder / "state"))
        document["exporters"] = {"prometheus": {"listen": self.listen}}
        document["alerts"] = ALERTS
        for name in ("serve-a", "serve-b", "supervisord-api", "host", "infer"):
            document["sources"][name]["interval_seconds"] = 1.0
        self.config = folder / "spyglass.toml"
        self.config.write_text(tomli_w.dumps(document))
        d = Deployment.of(parse_config(document, str(self.config)))
        write_rules(d, folder / "alerts")
        self.board = Board("wall").json(d)

    def start(self) -> None:
        self.stack.start()
        self.stack.wait_ready()
        self.stack.gateway.infer.mkdir(parents=True, exist_ok=True)  # every source folder exists at the agent's start
        self.group.start(
            [sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(self.config)], self.folder / "agent.log"
        )
        start_prometheus(
            self.group,
            self.folder,
            scraping(self.listen, JOB, labels={"host": "emulated"}),
            self.port,
            self.folder / "alerts" / "spyglass-rules.yml",
            JOB,
        )

    def drive(self, scenario: str) -> None:
        """Run a scenario, then wait until Prometheus holds every request it made and has evaluated the
        rules on two more scrapes."""
        sent = len(asyncio.run(run_scenario(SCENARIOS[scenario], self.stack.url, deadline_seconds=90)).statuses)
        self.stack.flush()
        counted = lambda: sum(float(r["value"][1]) for r in query(self.api, "spyglass_gateway_requests_total"))  # noqa: E731
        self.sent = getattr(self, "sent", 0) + sent
        wait_until(lambda: counted() >= self.sent, 120, f"the gateway's {self.sent} requests scraped")
        synced = time.time() + 2
        wait_until(
            lambda: (
                all(float(r["value"][1]) > synced for r in query(self.api, f'timestamp(up{{job="{JOB}"}})'))
                and query(self.api, f'timestamp(up{{job="{JOB}"}})')
            ),
            60,
            "two more scrapes",
        )

    def render(self, start: float, out: Path) -> tuple[Seen, set[tuple[str, str]], set[tuple[str, str]]]:
        """The wall from `start` to now, photographed; and what Prometheus fired just before and after."""
        before = firing(self.api)
        end = time.time()
        results = run_queries(self.board, self.api, start, end, scrape_seconds=1.0, points=120)
        after = firing(self.api)
        errors = [(r.expr[:200], r.error) for rs in results.values() for r in rs if r.error]
        assert errors == []
        png = draw(self.board, results, start, end, out)
        probe = out.with_name(f"measured-{out.stem}.html")
        probe.write_text(
            out.with_suffix(".html").read_text(encoding="utf-8").replace("</body>", MEASURE), encoding="utf-8"
        )
        dom = browse(probe, size_of(self.board), "--dump-dom")
        found = re.search(r'data-seen="([^"]*)"', dom)
        assert found, dom[:2000]
        panels = json.loads(
            found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
        )
        red, total = red_pixels(png)
        return Seen({p["title"]: p for p in panels}, red, total, png), before, after

    def stop(self) -> None:
        self.group.stop()
        self.stack.stop()


def red_pixels(png: Path) -> tuple[int, int]:
    """Pixels of exactly Grafana's red in the screenshot, and all of them (Pillow, a test dependency)."""
    from PIL import Image

    with Image.open(png) as image:
        rgb = image.convert("RGB")
        colours = dict((c, n) for n, c in rgb.getcolors(maxcolors=1 << 24) or [])
        return colours.get((224, 47, 68), 0), rgb.width * rgb.height


@pytest.fixture(scope="module")
def wall(tmp_path_factory) -> Iterator[Wall]:
    wall = Wall(tmp_path_factory.mktemp("wall"))
    try:
        wall.start()
        yield wall
    finally:
        wall.stop()


def listed(seen: Seen) -> set[tuple[str, str]]:
    return {(r["alertname"]["text"], r["instance"]["text"]) for r in seen.panels["What fires now"]["rows"]}


def test_the_wall_healthy_then_in_an_eviction_storm(wall: Wall, tmp_path: Path) -> None:
    start = time.time()
    wall.drive("healthy")
    healthy, before, after = wall.render(start - 5, tmp_path / "healthy.png")
    print(f"healthy: firing {sorted(before | after)}; {healthy.png}")

    # Nothing red: no tile, no cell, no red area in the picture; the count says so in green.
    assert healthy.reds() == [] and healthy.red_pixels == 0, healthy.reds()
    counts = healthy.tiles("Alerts firing")
    assert counts["critical"]["text"] == "0" and counts["critical"]["background"] == "rgb(86, 166, 75)"
    assert before & after <= listed(healthy) <= before | after  # the list is what Prometheus fires
    if not before | after:
        assert healthy.panels["What fires now"]["nodata"] == "Nothing fires"
    width, height = size_of(wall.board)
    assert (width, height) == (1920, 1068) and max(p["bottom"] for p in healthy.panels.values()) <= height
    assert healthy.pixels == width * height, "the whole wall in one 1080p-wide picture"
    # Each instance's cache against its own budget: strata-a's 64 GiB and strata-b's 8 GiB both drawn.
    for instance, budget in (("strata-a", 64 << 30), ("strata-b", 8 << 30)):
        series = {s["name"]: s for s in healthy.panels[f"{instance} · cache against its budget"]["series"]}
        assert series["budget"]["last"] == budget and series["parked"]["points"] > 1
    sources = healthy.tiles("Sources")  # the quiet supervisord and gateway logs among them: OK, not silent
    assert {"supervisord", "gateway", "engine-a", "serve-b"} <= set(sources), sources
    assert all(t["text"] == "OK" for t in sources.values()), sources
    tiles = healthy.tiles("Requests/s · indicator")
    assert set(tiles) == {"strata-a", "strata-b"} and all(t["background"] == "rgba(0, 0, 0, 0)" for t in tiles.values())

    start = time.time()
    wall.drive("eviction-storm")
    wait_until(lambda: ("EngineEvictionStorm", "strata-b") in firing(wall.api), 120, "EngineEvictionStorm on strata-b")
    storm, before, after = wall.render(start - 30, tmp_path / "incident.png")
    print(f"incident: firing {sorted(before | after)}; {storm.png}")
    if os.environ.get("SPYGLASS_WALL_PNG"):
        shutil.copyfile(storm.png, os.environ["SPYGLASS_WALL_PNG"])

    counts = storm.tiles("Alerts firing")
    assert int(counts["critical"]["text"]) >= 1 and counts["critical"]["background"] == RED
    assert counts["critical"]["size"] >= 60, "the count is readable across a room"
    assert storm.red_pixels > 0.01 * storm.pixels, "a red area a person sees"
    assert before & after <= listed(storm) <= before | after
    rows = storm.panels["What fires now"]["rows"]
    for severity in ("critical", "warning"):  # the count tile and the list agree
        assert int(counts[severity]["text"]) == sum(r["severity"]["text"] == severity.upper() for r in rows), rows
    row = next(r for r in storm.panels["What fires now"]["rows"] if r["alertname"]["text"] == "EngineEvictionStorm")
    assert row["instance"]["text"] == "strata-b" and row["severity"]["text"] == "CRITICAL"
    assert row["severity"]["background"] == RED and row["alertname"]["size"] >= 24
    assert re.fullmatch(r"\d+ (s|min) ago", row["Value"]["text"]), row
    assert row["summary"]["text"] == "strata-b is evicting conversation snapshots every minute."
    # The affected instance's panel past its threshold, the other's not.
    for instance, past in (("strata-b", True), ("strata-a", False)):
        panel = storm.panels[f"{instance} · evictions per minute"]
        (line,) = panel["thresholds"]
        rate = next((s["last"] for s in panel["series"] if s["name"] == "evictions/min"), 0.0)
        assert (rate > line) is past, (instance, rate, line)
    assert not any(t["background"] == RED for t in storm.tiles("Sources").values())
