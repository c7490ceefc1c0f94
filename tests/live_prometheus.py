"""What the end-to-end tests with a live stack share (tests/test_pager_e2e.py, tests/test_wall_preview.py):
processes started in process groups of their own and ended with them, and Debian's Prometheus scraping the
agent every second, with the rules loaded only once it has scraped it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import httpx
import yaml
from conftest import wait_until


class ProcessGroups:
    """Processes started in their own process groups; `stop` ends each group (SIGTERM, then SIGKILL), the
    last started first."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, args: list[str], log: Path) -> subprocess.Popen:
        with log.open("ab") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)


def query(api: str, expr: str) -> list[dict]:
    """An instant query's result; [] while Prometheus does not answer (yet)."""
    try:
        return httpx.get(f"{api}/api/v1/query", params={"query": expr}, timeout=5).json()["data"]["result"]
    except (httpx.HTTPError, KeyError, ValueError):
        return []


def scraping(listen: str, job: str, *, labels: dict[str, str] | None = None, alertmanager: str = "") -> dict:
    """A Prometheus config that scrapes the agent on `listen` every second (its own labels kept) and
    evaluates every second, sending to `alertmanager` (host:port) when one is given."""
    target: dict = {"targets": [listen], **({"labels": labels} if labels else {})}
    config: dict = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": job, "honor_labels": True, "static_configs": [target]}],
    }
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    return config


def start_prometheus(
    group: ProcessGroups, folder: Path, config: dict, port: int, rules: Path, job: str, *args: str
) -> str:
    """Prometheus on 127.0.0.1:`port` with `config`, its data and log in `folder`; the `rules` file loaded
    (SIGHUP) once it has scraped the agent, since before the first scrape `absent(up)` holds and
    SpyglassTargetDown's scaled `for:` is over at once. Returns its URL once the Watchdog fires."""
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus not found: run scripts/setup --test (installs Debian's prometheus package)"
    path, api = folder / "prometheus.yml", f"http://127.0.0.1:{port}"
    path.write_text(yaml.safe_dump(config))
    proc = group.start(
        [
            prometheus,
            f"--config.file={path}",
            f"--storage.tsdb.path={folder / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            *args,
        ],
        folder / "prometheus.log",
    )
    wait_until(lambda: query(api, f'up{{job="{job}"}} == 1'), 90, "Prometheus scraping the agent")
    path.write_text(yaml.safe_dump({**config, "rule_files": [str(rules)]}))
    proc.send_signal(signal.SIGHUP)
    wait_until(lambda: query(api, 'ALERTS{alertname="Watchdog", alertstate="firing"}'), 60, "the Watchdog")
    return api
