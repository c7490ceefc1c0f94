"""From the page to its evidence, for real: the eviction storm on the emulated stack under supervisord, the
agent (`spyglass run`) reading it, Debian's Prometheus evaluating the rules `spyglass rules` wrote for this
deployment, and Debian's Alertmanager with the committed alertmanager.yml sending to a webhook and to the
agent's /api/alerts (the deployment and helpers of tests/test_pager_e2e.py). The page's notification carries
`evidence_url`; headless Chromium opens it on the agent, and what it renders is checked: the alert, the
figures of the heuristic's probe, the comparison, the chart with its threshold, the trace links (one of them
followed, in Chromium too). The screenshot is docs/evidence.png (rewritten with --update-golden).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from html import unescape
from pathlib import Path

import httpx
import pytest
from conftest import wait_until
from live_prometheus import ProcessGroups, scraping, start_prometheus
from test_pager_e2e import DEFAULTS, Webhook, answers, pager_setup, pinned

from spyglass.collectors.clock import host_zone
from spyglass.engine.emulator.scenarios import SCENARIOS, run_scenario
from spyglass.engine.emulator.stack import Stack
from spyglass.ports import free_port_base

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("spawns")]  # starts processes: the e2e tier
ROOT = Path(__file__).resolve().parents[1]
SHOT = ROOT / "docs" / "evidence.png"
CHROMIUM = shutil.which("chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
]


def chromium(url: str, profile: Path, *args: str) -> str:
    assert CHROMIUM, "Debian's chromium is not installed: run scripts/setup --test"
    done = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, url], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def visible(dom: str) -> str:
    """The page's text, as a reader sees it (no style sheet)."""
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", re.sub(r"<style>.*?</style>", "", dom, flags=re.S))))


def evidence_urls(hook: Webhook, name: str) -> list[str]:
    with hook.lock:
        bodies = list(hook.received)
    return [
        a["annotations"]["evidence_url"]
        for path, body in bodies
        for a in body["alerts"]
        if a["labels"]["alertname"] == name and a["status"] == "firing" and path == "/pager"
    ]


def test_the_pages_evidence_url_opens_the_figures_in_chromium(tmp_path: Path, update_golden: bool) -> None:
    alertmanager = shutil.which("prometheus-alertmanager")
    assert alertmanager, "run scripts/setup --test (installs Debian's prometheus-alertmanager)"
    assert (os.cpu_count() or 1) >= 2, "the engines are pinned to CPUs of their own: this needs two"
    scenario = SCENARIOS["eviction-storm"]
    hook = Webhook()
    stack = Stack(
        tmp_path / "stack",
        free_port_base(),
        pinned(scenario.engine_patch),
        {"estimate_by_engine": True, "segment_records": 1, **scenario.gateway_patch},
        set(scenario.crash_loop),
    )
    listen, am_port, prom_port, config, rules = pager_setup(stack, tmp_path, hook.url)
    group = ProcessGroups()
    try:
        stack.start()
        stack.wait_ready(scenario.ready)
        stack.gateway.infer.mkdir(parents=True, exist_ok=True)
        group.start([sys.executable, "-m", "spyglass.cli.app", "run", "-c", str(config)], tmp_path / "agent.log")
        group.start(
            [
                alertmanager,
                f"--config.file={tmp_path / 'am.yml'}",
                f"--storage.path={tmp_path / 'am'}",
                f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",
            ],
            tmp_path / "am.log",
        )
        wait_until(
            lambda: answers(f"http://{listen}/health") and answers(f"http://127.0.0.1:{am_port}/-/ready"),
            60,
            "the agent and Alertmanager",
        )
        start_prometheus(
            group,
            tmp_path,
            scraping(listen, DEFAULTS.job, alertmanager=f"127.0.0.1:{am_port}"),
            prom_port,
            rules / "spyglass-rules.yml",
            DEFAULTS.job,
            "--rules.alert.resend-delay=1s",
        )
        asyncio.run(run_scenario(scenario, stack.url, deadline_seconds=60))
        stack.flush()
        urls = wait_until(lambda: evidence_urls(hook, "EngineEvictionStorm"), 120, "EngineEvictionStorm at the pager")
        url = urls[-1]
        assert url.startswith(f"http://{listen}/evidence/EngineEvictionStorm?") and "instance=strata-b" in url, url

        last: list[str] = []

        def page() -> str | None:  # the agent stores the notification Alertmanager sent it too: then the page answers
            answer = httpx.get(url, timeout=120)
            last[:] = [f"{answer.status_code} {answer.text[:500]}"]
            return answer.text if answer.status_code == 200 else None

        try:
            wait_until(page, 60, "the evidence page answering (the agent holding the notification)")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {url} answered {last}") from None
        dom = chromium(url, tmp_path / "profile-dom", "--dump-dom")
        (tmp_path / "evidence.html").write_text(dom)
        shown = visible(dom)
        assert "EngineEvictionStorm" in shown and "H3 Eviction storm" in shown and "severity critical" in shown, shown
        assert "window (UTC)" in shown and f"window ({host_zone()})" in shown, shown
        assert re.search("notification (firing since|fired) 20", shown), shown
        assert "summary strata-b is evicting conversation snapshots every minute." in shown, shown
        assert re.search(r"evictions [\d,]+ evictions_per_minute_peak [\d.]+", shown), shown[:3000]
        assert "The comparison: hour before" in shown and "the hour before" in shown
        assert 'aria-label="EngineEvictionStorm: Evictions a minute"' in dom and "<polyline" in dom
        assert "threshold 1" in shown  # the rule's floor of one eviction a minute, drawn
        traces = re.findall(r'href="(/trace/[^"]+)"', dom)
        assert traces, "no request behind the figures"
        trace = visible(chromium(f"http://{listen}{traces[0]}", tmp_path / "profile-trace", "--dump-dom"))
        assert f"Request {traces[0].removeprefix('/trace/')}" in trace, trace[:2000]
        shot = tmp_path / "evidence.png"
        chromium(url, tmp_path / "profile-shot", "--window-size=1300,1900", f"--screenshot={shot}")
        assert shot.stat().st_size > 20_000
        if update_golden:
            shutil.copyfile(shot, SHOT)
    finally:
        group.stop()
        stack.stop()
        hook.server.shutdown()
        hook.server.server_close()
