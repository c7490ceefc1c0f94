"""Issue 37, item 5: the wall drawn from a real llama-server run, as a llama.cpp operator sees it.

The project's llama-server build (`-np 2 --cache-ram 1 --metrics`, the docs' log flags) on the tiny model; the
spyglass agent (`spyglass run`) reading its log and polling its endpoints; Debian's Prometheus scraping the
agent every second with the rules `spyglass rules` writes for this deployment (`alerts.time_scale` 0.01, as the
other real-engine tests); a warm-up and then an eviction storm of eight conversations on two slots. The wall
generated for this deployment is drawn from Prometheus's answers and photographed by headless Chromium
(dashboards/preview*). Every indicator llama-server can give has a value for llama-a (requests, generated
tokens, running and waiting requests, the failed share, TTFT, the process state from /health), and llama-a's
eviction panel has its storm; the cache's use, which llama-server logs only at -lv 4, says so.
`SPYGLASS_LLAMA_WALL_PNG=docs/wall-llama.png` writes the picture beside docs/wall.png.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import tomli_w
from conftest import wait_until
from live_prometheus import ProcessGroups, query, scraping, start_prometheus

from spyglass.alerting.heuristics import Deployment
from spyglass.alerting.rules import write as write_rules
from spyglass.config import parse_config
from spyglass.dashboards.model import build_all
from spyglass.dashboards.preview_page import draw
from spyglass.dashboards.preview_query import run_queries
from spyglass.engine.llama.build import ensure_built
from spyglass.engine.llama.load import conversations
from spyglass.engine.llama.model import ensure_model
from spyglass.ports import free_port

pytestmark = pytest.mark.slow
JOB = "spyglass"
# The panels of this deployment's dashboards (`spyglass dashboards`: engine_log and llama_server sources) the run
# leaves empty, with why; every other panel must have a value. No Strata-only panel is among them: the boards
# leave out what llama.cpp cannot give (MetricSpec.engines, dashboards.model.panels_with_data).
NOT_EXERCISED = {
    ("spyglass-wall", "What fires now"): "nothing but the storm, whose alert waits its for: past the run",
    ("spyglass-wall", "Cache use of its budget · indicator"): "llama-server lists its cache's size at -lv 4 only",
    ("spyglass-cache", "Parked snapshots"): "the host cache's entries: its `- cache state:` listing, -lv 4 only",
    ("spyglass-cache", "Mean parked snapshot, share of the budget"): "the same listing, -lv 4 only",
    ("spyglass-latency", "KV cache full: splits, refusals, shifts (a minute)"): "the KV cache never fills here"
    " (tests/test_llama_outcomes_real.py fills it)",
    ("spyglass-latency", "TTFT SLO errors (share late), 5m and 1h"): "no request is late against a 60 s objective",
    ("spyglass-lifecycle", "Engine errors, by component"): "no error line in a healthy run",
    ("spyglass-agent", "Failed commits (retried, nothing dropped)"): "the disk does not fill up here",
    ("spyglass-agent", "Unmatched and unreadable share of lines (format drift)"): "every line of the build is read",
    ("spyglass-agent", "Values refused"): "nothing forged or malformed in a real build's lines",
}
INDICATORS = ("Requests/s", "Generated tokens/s", "Running requests", "Waiting requests", "Error share")


@pytest.fixture
def run(spawns: None, tmp_path: Path) -> Iterator[tuple[str, str, Deployment]]:
    build, model = ensure_built(), ensure_model()
    port, listen, prom_port = free_port(), f"127.0.0.1:{free_port()}", free_port()
    log = tmp_path / "llama-a.log"
    argv = [str(build.server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "4096"]
    argv += ["-np", "2", "--cache-ram", "1", "-t", "1", "--metrics", "--log-prefix", "--log-timestamps"]
    document = {
        "agent": {"state_dir": str(tmp_path / "state"), "host": "llama-box", "commit_interval_seconds": 0.5},
        "exporters": {"prometheus": {"listen": listen}, "store": {"enabled": True}},
        "alerts": {"time_scale": 0.01, "evaluation_interval_seconds": 1, "lanes": {"normal": {"ttft_seconds": 60.0}}},
        "sources": {
            "engine-llama-a": {
                "kind": "engine_log",
                "preset": "llama_server",
                "path": str(log),
                "instance": "llama-a",
                "lane": "normal",
            },
            "metrics-llama-a": {
                "kind": "llama_server",
                "url": f"http://127.0.0.1:{port}",
                "instance": "llama-a",
                "interval_seconds": 1.0,
            },
        },
    }
    config = tmp_path / "spyglass.toml"
    config.write_text(tomli_w.dumps(document))
    d = Deployment.of(parse_config(document, str(config)))
    write_rules(d, tmp_path / "alerts")
    env = {**os.environ, "LD_LIBRARY_PATH": str(build.bin_dir)}
    server = subprocess.Popen(
        [*argv, "--log-file", str(log)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    group = ProcessGroups()
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _healthy(url), 120, "llama-server's /health")
        group.start([sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)], tmp_path / "agent.log")
        api = start_prometheus(
            group,
            tmp_path,
            scraping(listen, JOB, labels={"host": "llama-box"}),
            prom_port,
            tmp_path / "alerts" / "spyglass-rules.yml",
            JOB,
        )
        yield url, api, d
    finally:
        group.stop()
        server.terminate()
        server.wait(timeout=30)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_wall_of_a_real_llama_run_shows_what_llama_server_gives(run, tmp_path: Path) -> None:
    url, api, d = run
    boards = build_all(d)
    board = boards["spyglass-wall"]
    start = time.time()
    assert set(asyncio.run(conversations(url, ["warm-0", "warm-1"], 3, 600))) == {200}
    assert set(asyncio.run(conversations(url, [f"conv-{i}" for i in range(8)], 3, 600))) == {200}
    wait_until(
        lambda: query(api, 'sum(spyglass_engine_evictions_total{instance="llama-a"}) > 8'), 60, "the evictions scraped"
    )
    for record in ("spyglass_engine_evictions:rate10m", "spyglass_engine_ttft_seconds:p95_rate5m"):
        recorded = f'instance_lane:{record}{{instance="llama-a"}} >= 0'
        wait_until(lambda recorded=recorded: query(api, recorded), 60, f"{record} recorded")
    # a counter that appeared with the burst (its finish label opens it) has a rate once scraped a few times
    wait_until(
        lambda: query(api, 'count_over_time(spyglass_engine_requests_finished_total{instance="llama-a"}[1m]) >= 5'),
        60,
        "the finished requests scraped five times",
    )
    titles = {p["id"]: p["title"] for p in board["panels"] if "id" in p}
    wanted = {f"{i} · indicator" for i in INDICATORS}
    wanted |= {"llama-a · evictions per minute", "TTFT p95 per lane against its objective", "Process state"}
    drawn: dict = {}

    def every_wanted_panel_valued() -> bool:
        # a rate needs two scrapes of its counter's newest label set: asked again until they are in (a loaded CI)
        drawn["end"] = end = time.time() + 1
        drawn["results"] = results = run_queries(board, api, start - 30, end, scrape_seconds=1.0, points=120)
        drawn["valued"] = {titles[i] for i, rs in results.items() if any(r.series for r in rs)}
        return wanted <= drawn["valued"]

    try:
        wait_until(every_wanted_panel_valued, 60, "every indicator of llama-server's wall with a value")
    except AssertionError:
        raise AssertionError(("without a value:", sorted(wanted - drawn["valued"]))) from None
    results, end = drawn["results"], drawn["end"]
    assert [(r.expr[:120], r.error) for rs in results.values() for r in rs if r.error] == []
    out = tmp_path / "wall-llama.png"
    png = draw(board, results, start - 30, end, out)
    assert png.stat().st_size > 10_000
    if os.environ.get("SPYGLASS_LLAMA_WALL_PNG"):
        shutil.copyfile(png, os.environ["SPYGLASS_LLAMA_WALL_PNG"])
    empty = {
        (uid, title)
        for uid, data in boards.items()
        for title in without_data(data, run_queries(data, api, start - 30, end, scrape_seconds=1.0, points=120))
    }
    assert sorted(empty - set(NOT_EXERCISED)) == [], "a panel of a llama-server's dashboards that llama.cpp can fill"
    assert {uid for uid, _ in NOT_EXERCISED} <= set(boards) and {t for _, t in NOT_EXERCISED} <= {
        p["title"] for data in boards.values() for p in data["panels"]
    }, "NOT_EXERCISED names a panel its dashboards do not have"


def without_data(board: dict, results: dict) -> list[str]:
    titles = {p["id"]: p["title"] for p in board["panels"] if "id" in p}
    return sorted(titles[i] for i, rs in results.items() if i in titles and not any(r.series for r in rs))
