"""Every panel's query against real data: the emulated stack under supervisord, driven by incident
scenarios, read by the spyglass agent serving /metrics, scraped every 2 s by Debian's Prometheus
on 127.0.0.1 with spyglass's rule file. Each panel's expressions (variables substituted as Grafana
would) go through the HTTP API: none errors, and the panels the scenarios exercise are not empty.
The same data draws the wall preview."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
import time
import tomllib
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import wait_until

from spyglass.agent.runtime import Agent
from spyglass.config import parse_config
from spyglass.dashboards.model import GENERATED
from spyglass.dashboards.preview_page import draw
from spyglass.dashboards.preview_query import run_queries
from spyglass.engine.emulator.scenarios import SCENARIOS, run_scenario
from spyglass.engine.emulator.stack import Stack
from spyglass.ports import free_port, free_port_base

pytestmark = pytest.mark.usefixtures("spawns")  # starts processes: the e2e tier

ROOT = Path(__file__).resolve().parents[1]
SCRAPE = 2.0
# The troubles of `spyglass demo`: strata-b's cache too small for its snapshots, its serve build old.
ENGINES = {"strata-a": {"cache_mib": 65_536}, "strata-b": {"escape_fix": False, "serve_version": "2026.10.16"}}
DRIVE = ("healthy", "eviction-storm", "special-tokens", "token-count", "assembly-drop", "concurrency")

# Panels the scenarios above do not move, with why; every other panel must return data.
NOT_EXERCISED = {
    ("spyglass-wall", "What fires now"): "every alert but the Watchdog waits minutes (for:) or needs a fault",
    ("spyglass-early-stops", "Stops while reasoning (serve)"): "only a serve with the fix reports it, once one stopped",
    ("spyglass-early-stops", "Stops while reasoning, share of requests (1h)"): "the same counter: some runs have none",
    ("spyglass-early-stops", "Thinking-only responses, share (1h)"): "a thinking-only response comes in some runs only",
    (
        "spyglass-lifecycle",
        "FATAL, SIGKILL escalations, core dumps",
    ): "no crash in these scenarios (crash-loop has one)",
    ("spyglass-lifecycle", "Switches and operator restarts"): "the emulated stack has no switch log",
    ("spyglass-lifecycle", "Model checksum mismatches"): "the emulator's model always matches",
    ("spyglass-lifecycle", "Engine errors, by component"): "no error-level engine line",
    ("spyglass-cpu", "Throttled share of CFS periods"): "no CFS quota on the test machine's cgroup",
    ("spyglass-cpu", "Cgroup memory and OOM kills"): "no memory cgroup controller readable here",
    ("spyglass-lifecycle", "Exits, by cause"): "no program exits while the scenarios run",
    ("spyglass-agent", "Values refused"): "nothing forged or malformed in the emulator's lines",
    ("spyglass-agent", "File troubles"): "a rotation happens only in some runs",
    ("spyglass-agent", "Unmatched and unreadable share of lines (format drift)"): "every line of the stack parses",
    (
        "spyglass-agent",
        "Failed commits (retried, nothing dropped)",
    ): "the disk does not fill up here (tests/test_disk_full.py)",
    ("spyglass-lifecycle", "Model path (H15)"): "the emulated stack's config watches no model path",
    ("spyglass-lifecycle", "Model path changes"): "the emulated stack's config watches no model path",
    (
        "spyglass-latency",
        "Requests waiting for a slot (llama-server, polled each second)",
    ): "llama-server's poller only: the emulated stack is Strata's (tests/test_llama_wall.py runs the real one)",
    (
        "spyglass-latency",
        "KV cache full: splits, refusals, shifts (a minute)",
    ): "llama.cpp's KV lines only (tests/test_llama_outcomes_real.py fills a real KV cache)",
}


def _prometheus_config(folder: Path, agent: str, job: str) -> Path:
    """Spyglass's rules evaluated at the scrape interval (the scenarios last a minute, not hours)."""
    rules = yaml.safe_load((ROOT / "alerts" / "spyglass-rules.yml").read_text())
    for group in rules["groups"]:
        group["interval"] = f"{SCRAPE:g}s"
    (folder / "rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    config = {
        "global": {"scrape_interval": f"{SCRAPE:g}s", "evaluation_interval": f"{SCRAPE:g}s"},
        "rule_files": ["rules.yml"],
        "scrape_configs": [
            {
                "job_name": job,
                "honor_labels": True,
                "static_configs": [{"targets": [agent], "labels": {"host": "emulated"}}],
            }
        ],
    }
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


class Run:
    """The data every test here reads: Prometheus's URL and the window the scenarios ran in."""

    def __init__(self, url: str, start: float, end: float) -> None:
        self.url, self.start, self.end = url, start, end
        self.results: dict[str, dict] = {}

    def results_for(self, uid: str) -> dict:
        if uid not in self.results:
            board = json.loads((GENERATED / f"{uid}.json").read_text())
            self.results[uid] = run_queries(board, self.url, self.start, self.end, scrape_seconds=SCRAPE, points=120)
        return self.results[uid]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus not found: run scripts/setup --test (installs Debian's prometheus package)"
    folder = tmp_path_factory.mktemp("wall")
    stack = Stack(folder / "stack", free_port_base(), ENGINES, {"assembly_budget_chars": 20_000})
    listen = f"127.0.0.1:{free_port()}"
    toml = stack.spyglass_toml(folder / "spyglass").replace(
        "[exporters.prometheus]\nenabled = false", f'[exporters.prometheus]\nlisten = "{listen}"'
    )
    agent = Agent(parse_config(tomllib.loads(toml), "wall-test.toml"))
    job = agent.config.alerts.job
    port = free_port()
    log = (folder / "prometheus.log").open("w")
    prom = subprocess.Popen(
        [
            prometheus,
            f"--config.file={_prometheus_config(folder, listen, job)}",
            f"--storage.tsdb.path={folder / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    runner = threading.Thread(target=agent.serve, name="spyglass-agent")
    stack.start()
    try:
        stack.wait_ready()
        # The agent's inotify observer dies on a folder missing at its start (see the report); the
        # gateway makes its infer folder on its first record, so start the agent once all exist.
        folders = {Path(o.path).parent for o in agent.config.sources.values() if getattr(o, "path", None)}
        asyncio.run(run_scenario(SCENARIOS["plan-then-eos"], stack.url, deadline_seconds=30))
        stack.flush()
        wait_until(lambda: all(f.is_dir() for f in folders), 30, f"the source folders {sorted(map(str, folders))}")
        runner.start()
        wait_until(lambda: _value(url, f'up{{job="{job}"}}') == 1, 60, "Prometheus scraping the agent")
        start = time.time()
        for name in DRIVE:
            asyncio.run(run_scenario(SCENARIOS[name], stack.url, deadline_seconds=30))
        stack.flush()
        # Until Prometheus holds what the agent counted, and has evaluated rules on it.
        state = agent.pipeline.state
        answered = lambda: state.total("spyglass_gateway_requests_total")  # noqa: E731
        recorded = lambda: state.total("spyglass_infer_requests_total")  # noqa: E731
        wait_until(lambda: answered() > 0 and recorded() >= answered(), 60, "the infer store read to its end")
        wait_until(
            lambda: (
                _value(url, "sum(spyglass_infer_requests_total)") == recorded()
                and _value(url, "sum(spyglass_gateway_requests_total)") == answered()
            ),
            60,
            "the last requests scraped",
        )
        # Two more scrapes (a rate needs two samples of a new series), then a rule evaluation after them.
        synced = time.time() + 2 * SCRAPE
        wait_until(lambda: (_value(url, f'timestamp(up{{job="{job}"}})') or 0) > synced, 60, "two more scrapes")
        wait_until(lambda: _rules_evaluated_after(url, synced), 60, "the rules evaluated on them")
        yield Run(url, start - 30, time.time())
    finally:
        agent.stop.set()
        agent.wake.set()
        stack.stop()
        if runner.is_alive():
            runner.join(timeout=60)
        prom.terminate()
        prom.wait(timeout=30)
        log.close()


def _value(url: str, expr: str) -> float | None:
    try:
        result = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=5).json()["data"]["result"]
    except (httpx.HTTPError, KeyError, ValueError):
        return None
    return float(result[0]["value"][1]) if result else None


def _rules_evaluated_after(url: str, moment: float) -> bool:
    try:
        groups = httpx.get(f"{url}/api/v1/rules", timeout=5).json()["data"]["groups"]
    except (httpx.HTTPError, KeyError, ValueError):
        return False
    return bool(groups) and all(
        datetime.fromisoformat(g["lastEvaluation"][:26].rstrip("Z") + "+00:00").timestamp() > moment for g in groups
    )


def _boards() -> list[str]:
    return sorted(p.stem for p in GENERATED.glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("uid", _boards())
def test_every_panel_query_is_valid_and_returns_data(run, uid):
    results = run.results_for(uid)
    board = json.loads((GENERATED / f"{uid}.json").read_text())
    titles = {p["id"]: p["title"] for p in board["panels"]}
    errors = [(titles[pid], r.expr, r.error) for pid, rs in results.items() for r in rs if r.error]
    assert errors == []
    empty = sorted(titles[pid] for pid, rs in results.items() if not any(r.series for r in rs))
    expected_empty = sorted(t for (u, t) in NOT_EXERCISED if u == uid)
    assert [t for t in empty if (uid, t) not in NOT_EXERCISED] == [], "panels the scenarios exercise came back empty"
    assert set(expected_empty) <= set(titles.values()), "NOT_EXERCISED names a panel that does not exist"


@pytest.mark.slow
def test_annotations_and_variables_query_cleanly(run):
    from spyglass.dashboards.lint import expressions, substitute

    for uid in _boards():
        board = json.loads((GENERATED / f"{uid}.json").read_text())
        for e in expressions(board):
            expr = e.expr
            if not e.promql:  # label_values(series, label): Grafana asks /api/v1/series for the series
                expr = expr.removeprefix("label_values(").rsplit(",", 1)[0]
            expr = substitute(expr, step_seconds=2, scrape_seconds=SCRAPE, range_seconds=run.end - run.start)
            body = httpx.get(f"{run.url}/api/v1/query", params={"query": expr, "time": run.end}, timeout=10).json()
            assert body["status"] == "success", (uid, e.where, expr, body.get("error"))
        variables = {v["name"]: v for v in board["templating"]["list"]}
        host = variables["host"]["query"].removeprefix("label_values(").rsplit(",", 1)[0]
        hosts = httpx.get(f"{run.url}/api/v1/label/host/values", params={"match[]": host}, timeout=10).json()["data"]
        assert hosts == ["emulated"]


@pytest.mark.slow
def test_wall_preview_from_the_emulator_run(run, tmp_path):
    board = json.loads((GENERATED / "spyglass-wall.json").read_text())
    results = run.results_for("spyglass-wall")
    out = draw(board, results, run.start, run.end, tmp_path / "wall.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 60_000  # photographed by Chromium
    drawn = {p["id"] for p in board["panels"]}
    assert drawn == set(results), "every panel was queried"


@pytest.mark.slow
def test_the_preview_command_draws_any_dashboard(run, tmp_path):
    import sys

    out = tmp_path / "cache.png"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "spyglass.cli.preview_commands",
            "--prometheus",
            run.url,
            "--from",
            str(run.start),
            "--to",
            str(run.end),
            "--dashboard",
            "spyglass-cache",
            "--scrape-interval",
            str(SCRAPE),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "0 queries failed" in done.stdout and out.read_bytes()[:4] == b"\x89PNG"
